"""The lake's Iceberg tables through a catalog: the quarantine, a table of record the ingest commits to (quarantine,
read without Spark by quarantine_files), those Spark writes itself (the derived tables), and the events table published
from the lake's committed, gated files (publish)."""

from jobs import exported

# What other packages may use (jobs/__init__.py, tests/test_layout.py).
__all__ = [
    "CatalogUnusable",
    "EMBEDDED",
    "NAMESPACE",
    "QuarantineRollback",
    "QuarantineTable",
    "STAGED",
    "TABLE_NAMES",
    "Staged",
    "existing_table",
    "open_catalog",
    "publish_staged",
    "publish_tables",
    "quarantine_batch",
    "quarantine_data_files",
    "quarantine_location",
    "quarantine_source",
    "reader_settings",
    "registered",
    "spark_name",
    "staged_overwrite",
    "use_catalog",
    "writable",
]


def __getattr__(name: str) -> object:
    return exported(__name__, name)
