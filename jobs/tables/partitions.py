"""An earlier release's partition folders: their data files, and the partition swaps its rebuilds left half done,
finished before the folders are registered in their Iceberg table (stdlib only).

That release's rebuild wrote each new partition folder under <lake>/_staging/<run>/<table>/ and swapped it with the
live folder in one `renameat2(RENAME_EXCHANGE)` call, the old folder moved to <lake>/_replaced/<table>/<run>/. Each
new folder carries a marker, `_rebuild.json`, with the run id and its data files: the sweep counts those files as
committed (the sink log never listed them), and a crashed swap tells from it whether a partition was swapped.

The swaps were written down (<lake>/_checkpoints/rebuilds/<run>.json) before the first one: a journal found there is
finished (`recover`), partition by partition, each step idempotent, so a run killed in `recover` is finished by the
next. Staging folders with no journal were never visible and go. Needs renameat2 (Linux ext4, xfs, btrfs, tmpfs).
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jobs import storage
from jobs.lake import Lake
from jobs.storage import LakePath, read_record

log = logging.getLogger("partitions")

MARKER = "_rebuild.json"
# The marker's and the swap journal's formats (jobs/storage.py's `record_body`): 1 since they named one.
MARKER_FORMAT = 1
JOURNAL_FORMAT = 1
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_libc = ctypes.CDLL(None, use_errno=True)


def exchange(a: LakePath, b: LakePath) -> None:
    """Swap two folders in one step (Linux renameat2 RENAME_EXCHANGE)."""
    if _libc.renameat2(_AT_FDCWD, os.fsencode(storage.folder(a)), _AT_FDCWD, os.fsencode(storage.folder(b)), _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"cannot swap {a} and {b} atomically: {os.strerror(code)}")


def data_files(folder: LakePath) -> list[LakePath]:
    """A partition folder's data files (what every reader reads: no hidden or _-prefixed names)."""
    return sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(("_", "."))) if folder.is_dir() else []


# The name the ingest's writer gives its files (jobs/java/cloudtrail/TableWriter.java: part-<task>-<uuid>-b<batch>.c<n>):
# rows in arrival order, not yet laid out by a compaction.
_INGEST_WRITTEN = re.compile(r"^part-\d{5}-[0-9a-f-]{36}-b\d+\.c\d{3}\.")


def ingest_written(path: LakePath) -> bool:
    """Whether a data file is one the ingest wrote (its rows in arrival order), not a compaction's or a rebuild's."""
    return _INGEST_WRITTEN.match(path.name) is not None


def read_marker(folder: LakePath) -> dict[str, Any] | None:
    """A staged-then-swapped partition's marker (run_id, files); None for a folder no staging wrote."""
    marker = folder / MARKER
    return read_record(marker, MARKER_FORMAT) if marker.exists() else None


def marker_run(folder: LakePath) -> str | None:
    """The run that wrote this partition folder, if a rebuild did."""
    marker = read_marker(folder)
    return marker["run_id"] if marker else None


def marker_files(folder: LakePath) -> set[str] | None:
    """The data files the staging that wrote this folder wrote; None for a folder no staging wrote."""
    marker = read_marker(folder)
    return set(marker["files"]) if marker else None


def rebuilt_files(table: LakePath) -> set[LakePath]:
    """Data files that rebuilds wrote into the table's live partitions (committed, though no sink log lists them)."""
    found: set[LakePath] = set()
    for marker in table.glob(f"*/{MARKER}"):
        found.update(marker.parent / name for name in marker_files(marker.parent) or ())
    return found


@dataclass(frozen=True)
class Swap:
    """One partition to replace: `staged` holds the new version; None when the new version has no rows."""

    live: str
    staged: str | None
    aside: str


def _swap_one(swap: Swap, run_id: str) -> None:
    """Bring one partition to its new version; safe to repeat after a crash at any step."""
    live, aside = storage.folder(storage.at(swap.live)), storage.folder(storage.at(swap.aside))
    staged = storage.folder(storage.at(swap.staged)) if swap.staged else None
    aside.parent.mkdir(parents=True, exist_ok=True)
    if staged is None:  # no rows in the new version: the partition goes
        if live.exists():
            os.rename(live, aside)
        return
    if marker_run(live) != run_id:  # not swapped yet
        if live.exists():
            exchange(staged, live)  # staged now holds the old version
        else:
            live.parent.mkdir(parents=True, exist_ok=True)  # a table's first partition
            os.rename(staged, live)
    if staged.exists():
        os.rename(staged, aside)


def discard(lake: Lake, run_id: str) -> None:
    """Delete what a run staged (and the staging folder, once empty)."""
    staging = lake.staging(run_id)
    storage.remove_tree(staging)
    if staging.parent.is_dir() and not any(staging.parent.iterdir()):
        staging.parent.rmdir()


def recover(lake: Lake, then: Callable[[dict[str, Any]], None] | None = None) -> list[str]:
    """Finish every committed swap a dead run left, and what it left to do after it (`then` does that; without it, such
    a journal stays for a caller that can), and delete uncommitted staging folders; returns the runs finished."""
    finished = []
    for journal in storage.listed(lake.rebuilds, "*.json"):
        body = read_record(journal, JOURNAL_FORMAT)
        log.warning("finishing the partition swap of rebuild %s, which stopped half way", body["run_id"])
        for swap in body["swaps"]:
            _swap_one(Swap(**swap), body["run_id"])
        if body.get("then"):
            if then is None:
                continue
            then(body["then"])
        journal.unlink()
        finished.append(body["run_id"])
    staging = lake.staging_root
    if staging.is_dir():
        storage.remove_tree(staging)  # no journal: nothing in it was ever visible
    return finished
