"""Apache Iceberg as the lake uses it: the catalog and its settings (catalog), Spark's catalog and the tables Spark
writes itself (spark_tables), the lake's embedded catalog read without Spark (embedded, moved_io), columns conformed to
a table's types (columns), snapshots expired and orphans removed (upkeep)."""

from jobs import exported

# What other packages may use (jobs/__init__.py, tests/test_layout.py).
__all__ = [
    "CatalogUnusable",
    "EMBEDDED",
    "NAMESPACE",
    "OWNER",
    "Registered",
    "Staged",
    "TABLE_NAMES",
    "TABLE_PROPERTIES",
    "calling",
    "claim",
    "cleaned",
    "cleaning_due",
    "conformed",
    "commit_files",
    "current_files",
    "delete_orphans",
    "existing_table",
    "expire",
    "open_catalog",
    "open_table",
    "owned_by_another",
    "reader_settings",
    "registered",
    "spark_name",
    "staged_by",
    "staged_overwrite",
    "moved",
    "static_table",
    "use_catalog",
    "with_partition_columns",
    "writable",
]


def __getattr__(name: str) -> object:
    return exported(__name__, name)
