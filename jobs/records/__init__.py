"""A landed file -> typed rows, as pure DataFrame steps: the record schema (schema), the JVM decode (decode), the
parse and the quarantine reasons (transforms), de-duplication (dedup), the tables" row (rows), the events' layout in their files (layout).
"""

from jobs import exported

# What other packages may use (jobs/__init__.py, tests/test_layout.py).
__all__ = [
    "DERIVED_FIELDS",
    "Dedup",
    "EVENTS_DATA_SCHEMA",
    "EVENTS_SCHEMA",
    "JVM_EXPRESSIONS",
    "JVM_FUNCTIONS",
    "QUARANTINE_SCHEMA",
    "READ_FROM",
    "SESSION_CONTEXT",
    "SORT_COLUMNS",
    "USER_IDENTITY",
    "deduplicate",
    "drop_copies",
    "first_in_table",
    "implausible_event_time",
    "keep_first_copy",
    "event_rows",
    "kept_rows",
    "mark_late",
    "ordered",
    "pyarrow_options",
    "read_records",
    "spark_conf",
    "split_quarantine",
    "stamp_ingest_time",
    "table_rows",
]


def __getattr__(name: str) -> object:
    return exported(__name__, name)
