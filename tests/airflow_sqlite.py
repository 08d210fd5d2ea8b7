"""SQLite connect arguments for the full-stack Airflow test: four processes share one SQLite
file, so a writer waits up to a minute for the lock instead of failing at once."""

CONNECT_ARGS = {"timeout": 60}
