"""The questions analysts ask of CloudTrail, shipped as SQL (queries/), and answered over the Iceberg tables (command)."""

from jobs import exported

# What other packages may use (jobs/__init__.py, tests/test_layout.py).
__all__ = [
    "sql_literal",
]


def __getattr__(name: str) -> object:
    return exported(__name__, name)
