"""Replace whole partitions of a table atomically for every reader (stdlib only).

A rebuild writes each new partition folder under <lake>/_staging/<run>/<table>/, where no
reader looks, then swaps it with the live folder in one `renameat2(RENAME_EXCHANGE)` call:
a reader that lists the partition lists either the old folder or the new one, never a mix
and never nothing. The old folder then moves to <lake>/_replaced/<table>/<run>/, whole.

Each new folder carries a marker, `_rebuild.json` (a name every reader skips), with the run
id and its data files: the sweep counts those files as committed (the stream's sink log
never listed them), a crashed swap tells from it whether a partition was swapped, and a
rollback tells the rebuilt version from the old one.

The swap is written down (<lake>/_checkpoints/rebuilds/<run>.json) after every new folder is
complete and checked, and before the first swap: that file is the commit point. A run that
dies before it leaves only staging folders, which the next run deletes; one that dies after
it is finished by the next run (`recover`), partition by partition, each step idempotent.
Needs a POSIX file system with renameat2 (Linux ext4, xfs, btrfs, tmpfs).
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import logging
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from jobs.files import read_record, write_record
from jobs.lake import Lake

log = logging.getLogger("partitions")

MARKER = "_rebuild.json"
# The marker's and the swap journal's formats (jobs/files.py's `record_body`): 1 since they named one.
MARKER_FORMAT = 1
JOURNAL_FORMAT = 1
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_libc = ctypes.CDLL(None, use_errno=True)


def exchange(a: Path, b: Path) -> None:
    """Swap two folders in one step (Linux renameat2 RENAME_EXCHANGE)."""
    if _libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"cannot swap {a} and {b} atomically: {os.strerror(code)}")


def data_files(folder: Path) -> list[Path]:
    """A partition folder's data files (what every reader reads: no hidden or _-prefixed names)."""
    return sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(("_", "."))) if folder.is_dir() else []


# The name the ingest's writer gives its files (jobs/java/cloudtrail/TableWriter.java: part-<task>-<uuid>-b<batch>.c<n>):
# rows in arrival order, not yet laid out by a compaction.
_INGEST_WRITTEN = re.compile(r"^part-\d{5}-[0-9a-f-]{36}-b\d+\.c\d{3}\.")


def ingest_written(path: Path) -> bool:
    """Whether a data file is one the ingest wrote (its rows in arrival order), not a compaction's or a rebuild's."""
    return _INGEST_WRITTEN.match(path.name) is not None


def fingerprint(folder: Path) -> str:
    """What a partition folder holds, by its data files' names and sizes: any write, swap or hand edit changes it."""
    files = sorted((f.name, f.stat().st_size) for f in folder.glob("*.parquet")) if folder.is_dir() else []
    return hashlib.sha256(json.dumps(files).encode()).hexdigest()


def write_marker(folder: Path, run_id: str) -> None:
    """Mark a staged partition as run `run_id`'s version, listing its data files."""
    write_record(folder / MARKER, MARKER_FORMAT, {"run_id": run_id, "files": [p.name for p in data_files(folder)]})


def read_marker(folder: Path) -> dict[str, Any] | None:
    """A staged-then-swapped partition's marker (run_id, files); None for a folder no staging wrote."""
    marker = folder / MARKER
    return read_record(marker, MARKER_FORMAT) if marker.exists() else None


def marker_run(folder: Path) -> str | None:
    """The run that wrote this partition folder, if a rebuild did."""
    marker = read_marker(folder)
    return marker["run_id"] if marker else None


def marker_files(folder: Path) -> set[str] | None:
    """The data files the staging that wrote this folder wrote; None for a folder no staging wrote."""
    marker = read_marker(folder)
    return set(marker["files"]) if marker else None


def rebuilt_files(table: Path) -> set[Path]:
    """Data files that rebuilds wrote into the table's live partitions (committed, though no sink log lists them)."""
    found: set[Path] = set()
    for marker in table.glob(f"*/{MARKER}"):
        found.update(marker.parent / name for name in marker_files(marker.parent) or ())
    return found


@dataclass(frozen=True)
class Swap:
    """One partition to replace: `staged` holds the new version; None when the new version has no rows."""

    live: str
    staged: str | None
    aside: str


def _commit(lake: Lake, run_id: str, swaps: list[Swap], then: dict[str, Any] | None) -> None:
    journal = lake.rebuild_journal(run_id)
    body = {"run_id": run_id, "swaps": [asdict(s) for s in swaps]} | ({"then": then} if then else {})
    write_record(journal, JOURNAL_FORMAT, body, indent=1)


def _swap_one(swap: Swap, run_id: str) -> None:
    """Bring one partition to its new version; safe to repeat after a crash at any step."""
    live, aside = Path(swap.live), Path(swap.aside)
    staged = Path(swap.staged) if swap.staged else None
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


def replace(lake: Lake, run_id: str, swaps: list[Swap], then: dict[str, Any] | None = None) -> None:
    """Swap every staged partition in (each atomically), keeping the old versions aside. `then`: what is left to do
    once they are (a rebuild's quarantine, jobs/tables/quarantine_table.py), written in the journal, which stays until the
    caller has done it (`close`); a run that dies first leaves it to the next one's `recover`."""
    _commit(lake, run_id, swaps, then)
    for swap in swaps:
        _swap_one(swap, run_id)
        log.debug("partition %s replaced; the old version is in %s", swap.live, swap.aside)
    if swaps:  # one line a run: an organization's OCSF date is thousands of region and account folders
        log.info("%d partitions replaced (the first %s); the old versions are under %s", len(swaps), swaps[0].live,
                 os.path.commonpath([swap.aside for swap in swaps]))  # fmt: skip
    if not then:
        close(lake, run_id)


def close(lake: Lake, run_id: str) -> None:
    """A run's swap is done, and what it left to do after it: its journal and what it staged go."""
    lake.rebuild_journal(run_id).unlink(missing_ok=True)
    discard(lake, run_id)


def discard(lake: Lake, run_id: str) -> None:
    """Delete what a run staged (and the staging folder, once empty)."""
    staging = lake.staging(run_id)
    shutil.rmtree(staging, ignore_errors=True)
    if staging.parent.is_dir() and not any(staging.parent.iterdir()):
        staging.parent.rmdir()


def recover(lake: Lake, then: Callable[[dict[str, Any]], None] | None = None) -> list[str]:
    """Finish every committed swap a dead run left, and what it left to do after it (`then` does that; without it, such
    a journal stays for a caller that can), and delete uncommitted staging folders; returns the runs finished."""
    finished = []
    for journal in sorted(lake.rebuilds.glob("*.json")) if lake.rebuilds.is_dir() else []:
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
        shutil.rmtree(staging)  # no journal: nothing in it was ever visible
    return finished


def rollback(lake: Lake, run_id: str, tables: list[Path]) -> list[str]:
    """Put back the partitions rebuild `run_id` replaced; its versions move to _replaced/<table>/rollback-<run>/.

    Files the stream added to a rebuilt partition afterwards move with the old version, so
    they stay in the table. Safe to repeat after a crash."""
    restored = []
    for table in tables:
        kept = lake.replaced_by_run(table, run_id)
        undone = lake.replaced_by_run(table, f"rollback-{run_id}")
        for old in sorted(kept.iterdir()) if kept.is_dir() else []:
            live, target = table / old.name, undone / old.name
            target.parent.mkdir(parents=True, exist_ok=True)
            if marker_run(old) == run_id:  # swapped back already, by a rollback that stopped here
                os.rename(old, target)
                continue
            if marker_run(live) == run_id:
                listed = marker_files(live) or set()
                for later in (p for p in data_files(live) if p.name not in listed):
                    os.rename(later, old / later.name)
                exchange(old, live)
                os.rename(old, target)
            elif not live.exists():  # the rebuild found no rows for it
                os.rename(old, live)
            else:
                raise OSError(errno.EEXIST, f"{live} is not the version rebuild {run_id} wrote; not rolled back")
            restored.append(str(live))
            log.info("partition %s rolled back to its version before %s", live, run_id)
    return restored
