"""The tables of a lake's embedded catalog (a SQLite file and a warehouse folder inside the lake) read without Spark:
where the catalog says a table's metadata is, and the table as that metadata holds it (pyiceberg's StaticTable).

Iceberg's metadata names every file by its absolute path, so a lake moved or copied to another path holds metadata
that names the old one: it is read with the old root mapped to the lake's (jobs/iceberg/moved_io.py), never through
the old path, which may be gone or may be another lake by now.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from jobs import object_store
from jobs.iceberg.catalog import EMBEDDED, NAMESPACE, open_catalog
from jobs.lake import Lake
from jobs.spark.logs import local_path

# Where a lake's embedded warehouse begins in a path its metadata names: what precedes it is the lake's root then.
WAREHOUSE_MARK = "/iceberg/warehouse/"
# The file IO settings naming a moved lake's old root and its root now (jobs/iceberg/moved_io.py).
MOVED_FROM, MOVED_TO = "cloudtrail.moved-from", "cloudtrail.moved-to"


@dataclass(frozen=True)
class Registered:
    """Where the embedded catalog says the table's metadata is, and the root it names when the lake has moved since."""

    metadata_location: str
    moved_from: str | None  # the lake's root as the metadata names it, when that is not the lake's root now

    def mapped(self, location: str, lake: Lake) -> str:
        """A path the metadata names (a local path or a file URI), where it is in `lake`."""
        return moved(location, self.moved_from, str(lake.root)) if self.moved_from else location


def moved(location: str, old_root: str, new_root: str) -> str:
    """`location` under `new_root` when it is under `old_root` (either a local path or a file URI), else as it is."""
    path, old = local_path(location), local_path(old_root)
    return new_root + path[len(old) :] if path == old or path.startswith(f"{old}/") else location


def registered(lake: Lake, name: str) -> Registered | None:
    """Table `name`'s entry in the lake's catalog (None before the table exists): the embedded one's read from its file;
    a named one's (a lake in S3) through pyiceberg."""
    if lake.catalog:
        return _registered_in(lake, name)
    if not lake.iceberg_catalog.exists():
        return None
    with sqlite3.connect(f"file:{lake.iceberg_catalog}?mode=ro", uri=True) as db:
        try:
            found = db.execute(
                "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?",
                (EMBEDDED, NAMESPACE, name),
            ).fetchone()
        except sqlite3.OperationalError:  # a catalog no table was created in yet
            return None
    if found is None or found[0] is None:
        return None
    location = str(found[0])
    root = location[: location.find(WAREHOUSE_MARK)] if WAREHOUSE_MARK in location else None
    here = lake.root.as_posix()
    moved = root is not None and local_path(root) != here
    return Registered(location, root if moved else None)


def _registered_in(lake: Lake, name: str) -> Registered | None:
    from pyiceberg.exceptions import NoSuchTableError

    try:
        found = open_catalog(lake, lake.catalog).load_table(f"{NAMESPACE}.{name}")
    except NoSuchTableError:
        return None
    return Registered(str(found.metadata_location), None)


def static_table(lake: Lake, entry: Registered) -> Any:
    """The table as its metadata in the lake holds it, read-only."""
    from pyiceberg.table import StaticTable

    if entry.moved_from is None:
        return StaticTable.from_metadata(entry.metadata_location, object_store.iceberg_properties({}))
    io = {"py-io-impl": "jobs.iceberg.moved_io.MovedFileIO", MOVED_FROM: entry.moved_from, MOVED_TO: str(lake.root)}
    return StaticTable.from_metadata(entry.mapped(entry.metadata_location, lake), io)
