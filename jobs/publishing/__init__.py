"""Publishing: the events' committed, gated files published as an Apache Iceberg table through a catalog, and every
table of the catalog kept small (command); which of the events' files its readers may see, per date (gated).

`python -m jobs.publish` runs command.main.
"""

from jobs import exported

# What other packages may use (jobs/__init__.py, tests/test_layout.py).
__all__ = [
    "publish_tables",
]


def __getattr__(name: str) -> object:
    return exported(__name__, name)
