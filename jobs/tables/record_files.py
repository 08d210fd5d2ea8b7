"""The tables of record as they stand, read without Spark (the lake page, `make status`, the gate's fingerprints, a
replay's plan, a repair's ledger): a table's current data files on its branch, and the newest ingest batch it holds,
from its own metadata in the lake (jobs/iceberg/embedded.py: a moved lake's metadata read with its old root mapped).

A table's files are read once per version of its metadata: a command that asks for many dates reads its manifests
once.
"""

from __future__ import annotations

import functools
import json
from datetime import date, timedelta
from typing import Any

from jobs import storage
from jobs.iceberg.catalog import NAMESPACE, OWNER, owned_by_another
from jobs.iceberg.embedded import Registered, registered, static_table
from jobs.lake import Lake
from jobs.spark.logs import CheckpointError
from jobs.storage import LakePath

# The table property holding the newest ingest batch the table holds (written with each batch's commit).
INGEST_BATCH = "cloudtrail.ingest-batch"
EPOCH = date(1970, 1, 1)


def record_location(lake: Lake, table: str) -> str:
    """Where a table of record lives in the lake: its folder in the embedded catalog's warehouse."""
    return str(lake.iceberg_warehouse / NAMESPACE / table)


def record_files(lake: Lake, table: str, branch: str | None = None) -> dict[str, list[LakePath]]:
    """Per partition value, the local data files a table of record holds on `branch` (None: main); empty before it exists."""
    return {value: [path for path, _ in files] for value, files in _data_files(lake, table, branch).items()}


def record_counts(lake: Lake, table: str, branch: str | None = None) -> dict[str, int]:
    """Per partition value, the rows a table of record holds on `branch` (None: main), as its manifests count them."""
    return {value: sum(rows for _, rows in files) for value, files in _data_files(lake, table, branch).items()}


def _data_files(lake: Lake, table: str, branch: str | None) -> dict[str, list[tuple[LakePath, int]]]:
    entry = registered(lake, table)
    return {} if entry is None else _files(entry, str(lake.root), branch)


@functools.lru_cache(maxsize=8)
def _files(entry: Registered, root: str, branch: str | None) -> dict[str, list[tuple[LakePath, int]]]:
    lake = Lake.at(root)
    read = static_table(lake, entry)
    head = read.metadata.snapshot_by_name(branch) if branch else read.current_snapshot()
    if head is None:
        return {}
    from pyiceberg.types import DateType

    column = read.schema().find_field(read.spec().fields[0].source_id)
    dated = isinstance(column.field_type, DateType)  # pyiceberg gives a date partition's value as days since 1970
    found: dict[str, list[tuple[LakePath, int]]] = {}
    for task in read.scan(snapshot_id=head.snapshot_id).plan_files():
        path = storage.at(entry.mapped(task.file.file_path, lake))
        value = task.file.partition[0]
        found.setdefault(str(EPOCH + timedelta(days=value)) if dated else str(value), []).append((path, task.file.record_count))
    return {value: sorted(files, key=lambda file: tuple(file[0].parts)) for value, files in sorted(found.items())}


def table_metadata(lake: Lake, table: str) -> dict[str, Any]:
    """A table of record's current metadata file (JSON, Iceberg's spec: its refs, snapshots and properties), read as it
    is: a run with nothing new imports no pyiceberg (and, through it, no pyarrow). Empty before the table exists; a file
    that is gone or damaged is refused (CheckpointError), never read as a table without batches."""
    entry = registered(lake, table)
    if entry is None:
        return {}
    path = storage.at(entry.mapped(entry.metadata_location, lake))
    try:
        stat = path.stat()
        found = _parsed(str(path), stat.st_mtime_ns, stat.st_size)
    except (OSError, ValueError) as exc:
        raise CheckpointError(
            f"{path}, the current metadata of the table {table}, cannot be read ({type(exc).__name__}): which batches the table "
            f"holds is unknown. Refusing to start. Restore the whole lake from one backup (README, 'Recovering a checkpoint')."
        ) from None
    if not isinstance(found, dict):
        raise CheckpointError(f"{path}, the current metadata of the table {table}, is no Iceberg metadata. Refusing to start.")
    owner = found.get("properties", {}).get(OWNER)
    # A named catalog's table may be another lake's (an embedded one's is the lake's own, wherever it was copied): said
    # before its batches are held against this lake's checkpoint, which would refuse it as ahead or behind.
    if lake.catalog and owner not in (None, lake.location) and not lake.migration.exists():  # a migration registers it
        raise owned_by_another(f"{NAMESPACE}.{table}", str(owner), lake)
    return found


@functools.lru_cache(maxsize=8)
def _parsed(path: str, mtime_ns: int, size: int) -> Any:
    """A metadata file parsed once per version of it (Iceberg writes each version once; a damaged one changes its size
    or time): the lake page asks for every date of a lake whose earlier release's folder still has its log."""
    return json.loads(storage.read_whole(storage.at(path)))


def table_batch(lake: Lake, table: str) -> int | None:
    """The newest ingest batch a table of record holds (None: none or no table)."""
    value = table_metadata(lake, table).get("properties", {}).get(INGEST_BATCH)
    return None if value is None else int(value)
