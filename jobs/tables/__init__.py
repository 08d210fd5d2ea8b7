"""The lake's tables: the events' dates, files and rows as the jobs read them (events), whole partitions swapped atomically
(partitions), staged before their gate (staging), files no commit lists moved aside (sweep), the quarantine (an
Iceberg table of record the ingest commits to: quarantine_table; read without Spark: quarantine_files; rolled back:
quarantine_repair; its replay: quarantine), and which landing files rows came from (sources).
"""

from jobs import exported

# What other packages may use (jobs/__init__.py, tests/test_layout.py).
__all__ = [
    "QuarantineRollback",
    "QuarantineTable",
    "RECORD_FORMAT",
    "RUN_COLUMN",
    "Replay",
    "STAGED",
    "Staging",
    "batch_entries",
    "close",
    "all_files",
    "data_files",
    "date_files",
    "date_fingerprint",
    "event_dates",
    "entries_to_replay",
    "events_of_dates",
    "events_source",
    "fingerprint",
    "ingest_written",
    "landing_files",
    "publish_staged",
    "quarantine_batch",
    "quarantine_data_files",
    "quarantine_location",
    "quarantine_source",
    "recover",
    "replaced_rows",
    "rollback",
    "sweep_lake",
    "sweep_table",
    "table_files",
]


def __getattr__(name: str) -> object:
    return exported(__name__, name)
