"""The lake's committed, gated tables published as Apache Iceberg tables through a catalog (publish)."""

from jobs import exported

# What other packages may use (jobs/__init__.py, tests/test_layout.py).
__all__ = [
    "CatalogUnusable",
    "EMBEDDED",
    "NAMESPACE",
    "TABLE_NAMES",
    "open_catalog",
    "publish_tables",
    "reader_settings",
]


def __getattr__(name: str) -> object:
    return exported(__name__, name)
