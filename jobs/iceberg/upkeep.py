"""An Iceberg table kept small: old snapshots expired, and files no snapshot references deleted, never a file that a
commit in flight has written and not yet committed.

Orphans are deleted only once older than ORPHAN_FLOOR, whatever grace is asked for: a commit's files are written before
the commit that references them, so a grace shorter than the longest commit deleted an in-flight commit's files, and
the table it then committed could not be read while every later run reported success.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from jobs.spark.logs import local_path
from jobs.storage import LakePath, read_record, under, write_record

log = logging.getLogger("iceberg")

# Longer than any commit takes (a publish of a year's backfill; an ingest's batch, retried): Iceberg's own orphan
# removal keeps 3 days by default and warns that a shorter interval can corrupt a table.
ORPHAN_FLOOR = timedelta(days=1)


# publish.json's format (jobs/storage.py's `record_body`): 2 = {"cleaned_at": {location: time}}; format 1 was that object alone.
STATE_FORMAT = 2


def _cleaned_at(state: LakePath) -> dict[str, str]:
    if not state.exists():
        return {}
    cleaned: dict[str, str] = read_record(state, STATE_FORMAT, {1: under("cleaned_at")})["cleaned_at"]
    return cleaned


def cleaning_due(state: LakePath, location: str, now: datetime) -> bool:
    """Unreferenced files are looked for at most once a day: every manifest is read, the location listed."""
    last = _cleaned_at(state).get(location)
    return last is None or now - datetime.fromisoformat(last) >= timedelta(days=1)


def cleaned(state: LakePath, location: str, now: datetime) -> None:
    write_record(state, STATE_FORMAT, {"cleaned_at": _cleaned_at(state) | {location: now.isoformat()}}, indent=1)


def expire(table: Any, before: datetime) -> int:
    """Expire the snapshots older than `before`, each branch's head kept (main's, and `ingest`'s of a table of record,
    which a quiet lake's publishes leave behind: pyiceberg refuses to expire a head); how many."""
    heads = {ref.snapshot_id for ref in table.metadata.refs.values()}
    old = [s.snapshot_id for s in table.metadata.snapshots if s.timestamp_ms < before.timestamp() * 1000 and s.snapshot_id not in heads]
    if old:
        table.maintenance.expire_snapshots().by_ids(old).commit()
    return len(old)


def referenced(table: Any) -> set[str]:
    """Every file the table's metadata reaches: metadata files, manifest lists, manifests, data files."""
    found = {table.metadata_location, *(entry.metadata_file for entry in table.metadata.metadata_log)}
    for snapshot in table.metadata.snapshots:
        found.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            found.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                found.add(entry.data_file.file_path)
    if table.metadata.statistics:
        found.update(s.statistics_path for s in table.metadata.statistics)
    return found


def delete_orphans(table: Any, before: datetime, now: datetime, registered_in: LakePath | None = None) -> int:
    """Delete the files under the table's location that nothing references and that are older than `before`, and
    older than ORPHAN_FLOOR before `now` whatever `before` says; with `registered_in`, a folder whose data files were
    registered in place (an earlier release's events folder), its data files too (and their checksums), not its logs."""
    from pyarrow import fs
    from pyiceberg.io.pyarrow import PyArrowFileIO

    before = min(before, now - ORPHAN_FLOOR)
    scheme, netloc, rest = PyArrowFileIO.parse_location(table.location())  # a URI, or a plain path (the embedded catalog's)
    filesystem = table.io.fs_by_scheme(scheme, netloc)  # the catalog's own settings (an endpoint, keys)
    keep = {_without_scheme(path) for path in referenced(table)}
    roots = [(rest, False), *([(_without_scheme(str(registered_in)), True)] if registered_in is not None else [])]
    orphans: list[tuple[str, bool]] = []
    for root, data_only in roots:
        for info in filesystem.get_file_info(fs.FileSelector(root, recursive=True, allow_not_found=True)):
            if data_only and (Path(info.path).suffix != ".parquet" or "/_" in info.path[len(root) :] or "/." in info.path[len(root) :]):
                continue
            if info.type == fs.FileType.File and info.path not in keep and info.mtime is not None and info.mtime < before:
                orphans.append((info.path, data_only))
    for path, data_only in orphans:
        filesystem.delete_file(path)
        if data_only and "://" not in table.location():  # Hadoop's checksum beside a local data file, which its listing passed over
            Path(path).with_name(f".{Path(path).name}.crc").unlink(missing_ok=True)
    if orphans:
        log.info("%d files no snapshot references deleted from %s", len(orphans), table.location())
    return len(orphans)


def _without_scheme(path: str) -> str:
    """A referenced path as the file system lists it: a local file's (`file:/a`, `file:///a`, `/a`) as a plain path,
    an object's as `bucket/key`."""
    if path.startswith("file:") or "://" not in path:
        return local_path(path)
    return path.split("://", 1)[1]
