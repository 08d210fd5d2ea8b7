"""The quarantine table as it stands, read without Spark (the lake page, `make status`, a replay's plan, a repair's
ledger): its current data files and the newest ingest batch it holds, from the table's own metadata in the lake.

Iceberg's metadata names every file by its absolute path, so a lake moved or copied to another path holds metadata
that names the old one: it is read with the old root mapped to the lake's (jobs/iceberg/moved_io.py), never through the old path,
which may be gone or may be another lake by now. jobs/iceberg/quarantine.py registers such a table anew, in place.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs import duck
from jobs.iceberg.catalog import EMBEDDED, NAMESPACE
from jobs.lake import QUARANTINE, REASON, Lake
from jobs.spark.logs import local_path, sink_batch

# The table property holding the newest ingest batch the table holds (written with each batch's commit).
INGEST_BATCH = "cloudtrail.ingest-batch"
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


def quarantine_location(lake: Lake) -> str:
    """Where the quarantine table lives in the lake."""
    return str(lake.iceberg_warehouse / NAMESPACE / QUARANTINE)


def registered(lake: Lake) -> Registered | None:
    """The quarantine table's entry in the lake's embedded catalog (None before the table exists)."""
    if not lake.iceberg_catalog.exists():
        return None
    with sqlite3.connect(f"file:{lake.iceberg_catalog}?mode=ro", uri=True) as db:
        try:
            found = db.execute(
                "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?",
                (EMBEDDED, NAMESPACE, QUARANTINE),
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


def static_table(lake: Lake, entry: Registered) -> Any:
    """The table as its metadata in the lake holds it, read-only."""
    from pyiceberg.table import StaticTable

    if entry.moved_from is None:
        return StaticTable.from_metadata(entry.metadata_location)
    io = {"py-io-impl": "jobs.iceberg.moved_io.MovedFileIO", MOVED_FROM: entry.moved_from, MOVED_TO: str(lake.root)}
    return StaticTable.from_metadata(entry.mapped(entry.metadata_location, lake), io)


def quarantine_data_files(lake: Lake) -> list[Path]:
    """The local data files holding the quarantine's rows now: the table's current ones, and the files of an earlier
    release's quarantine folder until a command moves it in."""
    entry = registered(lake)
    files = []
    if entry is not None:
        table = static_table(lake, entry)
        if table.current_snapshot() is not None:
            files = [Path(local_path(entry.mapped(task.file.file_path, lake))) for task in table.scan().plan_files()]
    if lake.quarantine.is_dir():
        files += sorted(p for p in lake.quarantine.glob(f"{REASON}=*/*.parquet") if not p.name.startswith(("_", ".")))
    return files


def quarantine_source(lake: Lake) -> str | None:
    """The quarantine's rows as a DuckDB table function (jobs/duck.py), None when it holds none."""
    return duck.files(quarantine_data_files(lake))


def quarantine_batch(lake: Lake) -> int | None:
    """The newest ingest batch the quarantine holds (None: none): the table's, or its folder's while an earlier release's
    is there to move in."""
    entry = registered(lake)
    # The table's metadata file (JSON, Iceberg's spec) holds its properties: read as it is, a run with nothing new
    # imports no pyiceberg (and, through it, no pyarrow).
    metadata = json.loads(Path(local_path(entry.mapped(entry.metadata_location, lake))).read_text()) if entry else {}
    value = metadata.get("properties", {}).get(INGEST_BATCH)
    if value is None and lake.quarantine.is_dir():
        return sink_batch(lake.quarantine)
    return None if value is None else int(value)
