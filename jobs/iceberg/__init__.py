"""The lake's Iceberg tables through a catalog: those Spark writes itself (the derived tables), and the events table
published from the lake's committed, gated files (publish)."""

from jobs import exported

# What other packages may use (jobs/__init__.py, tests/test_layout.py).
__all__ = [
    "CatalogUnusable",
    "EMBEDDED",
    "NAMESPACE",
    "TABLE_NAMES",
    "Staged",
    "existing_table",
    "open_catalog",
    "publish_tables",
    "reader_settings",
    "spark_name",
    "staged_overwrite",
    "use_catalog",
    "writable",
]


def __getattr__(name: str) -> object:
    return exported(__name__, name)
