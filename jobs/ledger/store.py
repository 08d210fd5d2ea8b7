"""The ledger's records on disk (jobs/ledger/planner.py plans runs with them), each written whole by a rename:

    <checkpoint>/manifests/<time>-<n>.jsonl   a batch's landing files, a JSON line each (Entry); Spark's text source
                                              reads one manifest per batch, so a replayed batch reads the same files
    <checkpoint>/restamped.jsonl              files taken before whose times changed since, content unchanged
    <checkpoint>/retired/<date>.txt, let_go   retired delivery folders' files, and the manifests let go of (RetiredIndex)
    <checkpoint>/late_files/<batch>.json      which files held late events of which event dates

and the check every command that writes the lake starts with: the checkpoint against the tables and the manifests
(`verified_checkpoint`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from typing import Any

from jobs import storage
from jobs.lake import LET_GO, RETIRED, Lake
from jobs.landing.layout import delivery_date, relative
from jobs.spark.checkpoint import CheckpointSnapshot
from jobs.spark.logs import CheckpointError
from jobs.storage import FORMAT, LakePath, lines_of, read_record, read_whole, record_body, under, write_record, write_whole

# A manifest's (and the restamps') entries name their format each (jobs/storage.py's `record_body`), the late files
# theirs: 2 since issue #68 (format 1: the hash under `fingerprint`; the late files the dates object alone).
ENTRY_FORMAT = 2
LATE_FILES_FORMAT = 2
# The complete manifests' names in their folder (a partial one is hidden).
MANIFESTS = "[0-9]*.jsonl"
MANIFEST_DDL = "path string, size long, mtime_ms long, arrival_ms long, only_records array<long>, supersedes boolean"


@dataclass(frozen=True)
class Entry:
    """One landing file as a manifest names it."""

    path: str
    size: int | None
    mtime_ms: int | None
    # When the file counts as arrived, for de-duplication: its mtime, raised to the newest arrival
    # taken before it, so arrivals never go back from batch to batch (docs/design.md).
    arrival_ms: int | None = None
    # Only these record positions are taken (a replay of quarantined records); None: all of them.
    only_records: list[int] | None = None
    # This read replaces the quarantine rows of earlier reads of the file (of `only_records` only, if set).
    supersedes: bool = False
    # The SHA-256 of the file's bytes when the ledger took it (None in manifests older than the hash; manifests before
    # issue #68 named it `fingerprint`, which now names a partition's, jobs/tables/partitions.py).
    sha256: str | None = None

    @classmethod
    def of(cls, path: str, only_records: list[int] | None = None, supersedes: bool = False, stat: os.stat_result | None = None) -> Entry:
        """The file at `path` as it is now (`stat`, when the caller has it already)."""
        stat = stat or os.stat(path)
        return cls(path, stat.st_size, stat.st_mtime_ns // 1_000_000, None, only_records, supersedes)

    def line(self) -> str:
        return json.dumps({FORMAT: ENTRY_FORMAT, **dataclasses.asdict(self)})

    @classmethod
    def read(cls, line: str) -> Entry:
        """An entry of a manifest or of the restamps, of any format (format 1 named the hash `fingerprint`)."""
        return cls(**record_body(json.loads(line), ENTRY_FORMAT, {1: _hash_named_sha256}, "a manifest's entry"))


def _hash_named_sha256(body: dict[str, Any]) -> dict[str, Any]:
    if "fingerprint" in body:
        body["sha256"] = body.pop("fingerprint")
    return body


def sha256_of(path: str) -> str:
    """The SHA-256 of a file's bytes (raises OSError when it cannot be read)."""
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


@dataclass(frozen=True)
class Manifest:
    path: LakePath
    entries: tuple[Entry, ...]


def read_manifest(path: LakePath) -> Manifest:
    entries = []
    for number, line in enumerate(read_whole(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            entries.append(Entry.read(line))
        except (ValueError, TypeError) as exc:
            raise CheckpointError(
                f"the ledger's manifest {path} is damaged at line {number} ({exc}): manifests are written whole, so it was "
                "cut or edited afterwards. Repair: delete it, then run python -m jobs.repair --lake LAKE --landing LANDING, "
                "which finds the files a batch read from it again from the tables (README, 'Recovering a checkpoint')."
            ) from None
    return Manifest(path, tuple(entries))


def read_manifests(folder: LakePath) -> list[Manifest]:
    """Every complete manifest, oldest first (a partial one is hidden, and Spark skips it too)."""
    return [read_manifest(path) for path in storage.listed(folder, MANIFESTS)]


def write_manifests(folder: LakePath, batches: Iterable[list[Entry]], stamp_ns: int) -> tuple[Manifest, ...]:
    """One manifest per batch, each written whole (hidden until renamed), mtimes 1 ms apart in batch order:
    Spark's file source takes new files oldest first."""
    written = []
    for index, batch in enumerate(batches):
        path = folder / f"{stamp_ns}-{index:05d}.jsonl"
        write_whole(path, "".join(f"{entry.line()}\n" for entry in batch), mtime_ns=stamp_ns + index * 1_000_000)
        written.append(Manifest(path, tuple(batch)))
    return tuple(written)


def missing_manifests(checkpoint: CheckpointSnapshot, folder: LakePath) -> list[str]:
    """Manifests Spark's log says a batch read that are gone, though the ledger never let go of them (deleted by
    hand, a partial restore): their files would be taken again. Nothing is known missing in a ledger older than the
    record of what it let go of: the first run of this version starts that record."""
    let_go = RetiredIndex(checkpoint.path / RETIRED).let_go()
    if let_go is None:
        return []
    logged = {entry.path for entry in checkpoint.sources.entries if os.path.dirname(entry.path) == str(folder)}
    return sorted(path for path in logged if os.path.basename(path) not in let_go and not storage.at(path).exists())


def verified_checkpoint(lake: Lake, held: dict[str, int | None]) -> CheckpointSnapshot:
    """The checkpoint, checked against the newest batch each table holds (`held`, by where it is) and the ledger: every
    command that writes the lake starts here, and the lake page shows what it refuses. CheckpointError names what
    disagrees and the mend."""
    checkpoint = CheckpointSnapshot.verified(lake, held)
    check_manifests(checkpoint, lake.manifests)
    return checkpoint


def check_manifests(checkpoint: CheckpointSnapshot, folder: LakePath) -> None:
    missing = missing_manifests(checkpoint, folder)
    if missing:
        raise CheckpointError(
            f"{len(missing)} manifests of the ledger that batches read are gone ({', '.join(missing[:3])}"
            f"{', ...' if len(missing) > 3 else ''}): their landing files would be taken again. Refusing to start. Repair: "
            "python -m jobs.repair --lake LAKE --landing LANDING finds them again from the tables (README, 'Recovering a checkpoint')."
        )


def read_restamps(path: LakePath) -> dict[str, Entry]:
    """The ledger's restamp record: files taken before whose times changed since, content unchanged, as they are now."""
    return {relative(entry.path): entry for entry in read_manifest(path).entries} if path.exists() else {}


def write_restamps(path: LakePath, restamps: dict[str, Entry]) -> None:
    write_whole(path, "".join(f"{restamps[key].line()}\n" for key in sorted(restamps)))


class RetiredIndex:
    """The landing files of retired delivery folders, by their place in the landing zone: one text file per delivery
    date, a line per file. A manifest's files go here before it is let go, so a file whose ctime moved (a chmod, a
    copy, a zone mounted elsewhere) is still known as taken; only a file not here is a straggler. Beside them, the
    names of the manifests let go of: a manifest Spark's log names that is gone and not among them was lost."""

    def __init__(self, folder: LakePath) -> None:
        self.folder = folder
        self._days: dict[date, set[str]] = {}

    @property
    def _manifests(self) -> LakePath:
        return self.folder / LET_GO

    def let_go(self) -> set[str] | None:
        """The names of the manifests the ledger let go of; None for a ledger older than this record."""
        return lines_of(self._manifests)

    def add_let_go(self, names: Iterable[str]) -> None:
        known = self.let_go() or set()
        self._write(self._manifests, known | set(names))

    def _write(self, path: LakePath, lines: set[str]) -> None:
        write_whole(path, "".join(f"{line}\n" for line in sorted(lines)))

    def _path(self, day: date) -> LakePath:
        return self.folder / f"{day.isoformat()}.txt"

    def on(self, day: date) -> set[str]:
        if day not in self._days:
            path = self._path(day)
            self._days[day] = lines_of(path) or set()
        return self._days[day]

    def add(self, paths: Iterable[str]) -> None:
        by_day: dict[date, set[str]] = {}
        for path in paths:
            day = delivery_date(path)
            if day is not None:
                by_day.setdefault(day, set()).add(relative(path))
        for day, keys in by_day.items():
            known = self.on(day)
            if keys <= known:
                continue
            known |= keys
            self._write(self._path(day), known)


def record_late_files(folder: LakePath, batch_id: int, late: dict[str, list[str]]) -> None:
    """Write down which landing files held late events of which event dates (one file per batch, rewritten on replay):
    a late file sits in a delivery folder long after its events' dates, where a rebuild of those dates would not look."""
    if not late:
        return
    write_record(folder / f"{batch_id}.json", LATE_FILES_FORMAT, {"dates": {day: sorted(files) for day, files in sorted(late.items())}})


def late_files(folder: LakePath) -> dict[date, set[str]]:
    """Every landing file that held late events, by event date (paths as the table's _source_file names them)."""
    found: dict[date, set[str]] = {}
    for path in folder.glob("[0-9]*.json") if folder.is_dir() else []:
        dates = read_record(path, LATE_FILES_FORMAT, {1: under("dates")})["dates"]
        for day, files in dates.items():
            found.setdefault(date.fromisoformat(day), set()).update(files)
    return found
