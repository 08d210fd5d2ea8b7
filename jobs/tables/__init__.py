"""The lake's tables: the events' dates, files and rows as the jobs read them (events), an Iceberg table of record the
ingest commits to (events_table, record_table, tables_of_record), a run's rows staged (staging), an earlier release's
folders made whole before they are registered (partitions, sweep), the quarantine (an
Iceberg table of record the ingest commits to: quarantine_table; read without Spark: quarantine_files; rolled back:
quarantine_repair; its replay: quarantine), and which landing files rows came from (sources).
"""

from jobs import exported

# What other packages may use (jobs/__init__.py, tests/test_layout.py).
__all__ = [
    "EventsTable",
    "INGEST",
    "QuarantineRollback",
    "QuarantineTable",
    "REBUILD",
    "RECORD_FORMAT",
    "ROLLBACK",
    "RUN_COLUMN",
    "RecordTable",
    "RecordTables",
    "Replay",
    "RollbackRefused",
    "STAGED",
    "STAGED_QUARANTINE",
    "Staging",
    "all_files",
    "batch_entries",
    "data_files",
    "date_files",
    "date_rows",
    "date_fingerprint",
    "entries_to_replay",
    "event_dates",
    "events_batch",
    "events_of_dates",
    "events_source",
    "finish_rebuild",
    "held_batches",
    "ingest_written",
    "landing_files",
    "lost_files",
    "publish_staged",
    "quarantine_batch",
    "quarantine_data_files",
    "quarantine_location",
    "quarantine_source",
    "rebuild_tags",
    "recover",
    "replaced_rows",
    "sweep_table",
    "table_files",
    "tables_moved",
]


def __getattr__(name: str) -> object:
    return exported(__name__, name)
