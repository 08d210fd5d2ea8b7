"""The events published where they are: with the lake's embedded catalog, `cloudtrail.events` is the table of record
(jobs/tables/events_table.py), and publishing a gated date makes the main branch, which every reader of the catalog
reads, hold the very files the branch `ingest` holds for it. One snapshot, metadata only: no file is copied, no row is
kept twice. A date held back keeps the files main had."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from jobs.iceberg.catalog import NAMESPACE, commit_files
from jobs.lake import EVENTS, Lake
from jobs.publishing.gated import Published
from jobs.spark.logs import local_path
from jobs.storage import LakePath
from jobs.tables.events import INGEST

log = logging.getLogger("publish")


def in_place(lake: Lake, catalog: str | None, namespace: str) -> bool:
    """Whether the events are published where they are: the catalog is the lake's own (the embedded one, or the one
    a lake in S3 names), which holds its tables of record."""
    return catalog == lake.catalog and namespace == NAMESPACE


def _files(table: Any, snapshot_id: int | None) -> dict[str, Any]:
    """The data files a snapshot holds, by local path (none for no snapshot)."""
    if snapshot_id is None:
        return {}
    return {local_path(task.file.file_path): task.file for task in table.scan(snapshot_id=snapshot_id).plan_files()}


def publish_in_place(table: Any, found: Published, properties: dict[str, str]) -> tuple[int, int]:
    """Main made to hold, per date, `found`'s files (the gated dates' files on `ingest`) and, for a date held back, its
    own; in one snapshot stating `properties` when anything changes. The files added and removed."""
    ingest = table.metadata.snapshot_by_name(INGEST)
    record = _files(table, ingest.snapshot_id if ingest else None)
    current = table.current_snapshot()
    main = _files(table, current.snapshot_id if current else None)
    wanted = {str(file.path) for files in found.files.values() for file in files}
    added = [record[path] for path in sorted(wanted) if path not in main and path in record]
    removed = [data_file for path, data_file in main.items() if path not in wanted and Path(path).parent.name not in found.kept]
    if not added and not removed:
        return 0, 0
    commit_files(table, removed, added, properties)
    return len(added), len(removed)


def registered_folder(table: Any, lake: Lake) -> LakePath | None:
    """The earlier release's events folder whose files the events table registered in place, for the orphan removal:
    a file of it no snapshot names any more (compacted, rebuilt) is deleted like the table's own. None for another
    table, and before the registration (the folder's files are then no snapshot's yet, and must stay)."""
    if table.name()[-1] != EVENTS or INGEST not in table.metadata.refs or not lake.events.is_dir():
        return None
    return lake.events
