"""Spark as the jobs use it: the session (session), Spark's own logs and state read and mended where Spark has no API
(logs, state), the tables" sinks (sinks), and the ingest checkpoint (checkpoint).
"""

# The modules other packages import; the rest are this package's own (tests/test_layout.py).
__all__ = ["checkpoint", "logs", "session", "sinks", "state"]
