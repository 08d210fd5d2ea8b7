"""What the file ledger holds (jobs/ledger/planner.py plans runs with it): every landing file taken, the manifests and what
Spark's log says of them, the restamps and the retired index (Ledger); the manifests it lets go of; and the files it
counts as read (read_files: a rebuild, a repair) or as taken (known_files: a reconciliation against the digests).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from jobs import storage
from jobs.lake import RESTAMPED, RETIRED
from jobs.landing.layout import day_folders, delivery_date, log_files_in, relative
from jobs.ledger.store import Entry, Manifest, RetiredIndex, read_manifests, read_restamps, write_restamps
from jobs.spark.checkpoint import CheckpointSnapshot
from jobs.spark.logs import CheckpointError, LogEntry, SourceLog, rewrite_compaction
from jobs.storage import LakePath


def _ctime_ns(path: str) -> int | None:
    """None for a file that is gone (deleted from the landing zone by a lifecycle rule, say)."""
    try:
        return os.stat(path).st_ctime_ns
    except FileNotFoundError:
        return None


@dataclass
class Ledger:
    """What the checkpoint's ledger holds when a run starts: every file it has taken, by its place in the landing
    zone (not its absolute path: a zone mounted elsewhere holds the same files)."""

    checkpoint: CheckpointSnapshot
    folder: LakePath
    manifests: list[Manifest]
    # Spark's log of the manifests batches read (and, in a checkpoint from before the ledger, of landing files).
    read_by_spark: dict[str, LogEntry]
    legacy: list[str]
    taken: dict[str, Entry]
    restamps: dict[str, Entry]
    retired: RetiredIndex

    @classmethod
    def read(cls, checkpoint: CheckpointSnapshot, folder: LakePath) -> Ledger:
        manifests = read_manifests(folder)
        legacy = [entry.path for entry in checkpoint.sources.entries if os.path.dirname(entry.path) != str(folder)]
        half_done = checkpoint.planned_offset if checkpoint.planned_batch_id != checkpoint.commit.batch_id else None
        if any(entry.batch_id == half_done for entry in checkpoint.sources.entries if entry.path in legacy):
            raise CheckpointError(
                f"{checkpoint.path} holds a batch the previous version planned and did not finish; this version reads "
                "manifests, not landing files. Run the previous version once to finish it, then upgrade."
            )
        taken = {relative(path): Entry(path, None, None) for path in legacy}
        taken.update((relative(entry.path), entry) for manifest in manifests for entry in manifest.entries)
        restamps = read_restamps(checkpoint.path / RESTAMPED)
        taken.update((key, entry) for key, entry in restamps.items() if key in taken)
        read_by_spark = {entry.path: entry for entry in checkpoint.sources.entries}
        return cls(checkpoint, folder, manifests, read_by_spark, legacy, taken, restamps, RetiredIndex(checkpoint.path / RETIRED))

    def floor_ms(self, floor: datetime | None) -> int:
        """The earliest arrival a file taken now may have: the checkpoint's floor, and every arrival already taken."""
        taken = [entry.arrival_ms for manifest in self.manifests for entry in manifest.entries if entry.arrival_ms is not None]
        return max([int(floor.timestamp() * 1000) if floor else 0, *taken])

    def done(self, retired_before: date | None) -> list[Manifest]:
        """The manifests to let go of: read by a committed batch, every file retired and passed by a successful run's check."""
        return [m for m in self.manifests if self._finished(str(m.path), [e.path for e in m.entries], retired_before)]

    def _finished(self, path: str, files: list[str], retired_before: date | None) -> bool:
        logged, committed = self.read_by_spark.get(path), self.checkpoint.committed_offset
        return (
            logged is not None
            and committed is not None
            and logged.batch_id <= committed
            and retired_before is not None
            and all(_retired(file, retired_before, self.checkpoint.last_success.checked_at_ns) for file in files)
        )

    def keep_restamps(self, restamped: dict[str, Entry], dropped: list[Manifest], files: list[Entry]) -> None:
        """The restamp record, before the manifests: a restamp never stands for a file this run takes again, or one no
        manifest holds. Most runs find none: the record is rewritten only when it changes."""
        kept = {relative(entry.path) for manifest in self.manifests if manifest not in dropped for entry in manifest.entries}
        kept -= {relative(entry.path) for entry in files}
        still = {key: entry for key, entry in {**self.restamps, **restamped}.items() if key in kept}
        if still != self.restamps:
            write_restamps(self.checkpoint.path / RESTAMPED, still)

    def let_go(self, dropped: list[Manifest], retired_before: date | None) -> None:
        """Delete the `dropped` manifests, their files written down in the retired index first, and have Spark's log of
        read files forget them (and a legacy checkpoint's retired landing files)."""
        retired_legacy = [path for path in self.legacy if self._finished(path, [path], retired_before)]
        self.retired.add([entry.path for manifest in dropped for entry in manifest.entries] + retired_legacy)  # before they go
        if self.retired.let_go() is None:  # a ledger from before this record: what is gone now was let go of
            folder = str(self.folder)
            self.retired.add_let_go(
                os.path.basename(p) for p in self.read_by_spark if os.path.dirname(p) == folder and not storage.at(p).exists()
            )
        if dropped:
            self.retired.add_let_go(manifest.path.name for manifest in dropped)
        for manifest in dropped:
            manifest.path.unlink()
        _forget(self.checkpoint.sources, {str(manifest.path) for manifest in dropped} | set(retired_legacy))

    def unread(self, written: tuple[Manifest, ...]) -> list[Manifest]:
        """Manifests no batch has read yet, this run's `written` included."""
        return [m for m in self.manifests if str(m.path) not in self.read_by_spark] + list(written)

    def uncommitted(self, written: tuple[Manifest, ...]) -> list[Manifest]:
        """Manifests no committed batch has read: those a planned batch reads (its run may have died) and the unread."""
        committed = self.checkpoint.committed_offset
        read = {path for path, entry in self.read_by_spark.items() if committed is not None and entry.batch_id <= committed}
        return [m for m in self.manifests if str(m.path) not in read] + list(written)


def newest_delivery(paths: Iterable[str]) -> date | None:
    """The newest delivery folder the ledger names."""
    dates = [d for d in (delivery_date(path) for path in paths) if d is not None]
    # A folder dated in the future (a skewed clock) must not retire today's folders.
    return min(max(dates), datetime.now(tz=UTC).date() + timedelta(days=1)) if dates else None


def retired_before_of(newest: date | None, retention: timedelta) -> date | None:
    """Delivery folders before this date are retired: `retention` before the newest one the ledger names."""
    return newest - timedelta(days=retention.days) if newest else None


def read_files(checkpoint: CheckpointSnapshot, folder: LakePath, landing: str, retention: timedelta) -> dict[str, Entry]:
    """Every landing file a committed batch has read, as it was read (newest read), by its place in the landing
    zone (`landing.relative`), with its path in the zone as it is mounted now.

    A file in a retired folder that a successful run has passed, or that the ledger let go of, counts as read (its
    manifest may be gone). A file that changed since its read, and a new one, are not here: the stream reads them
    next. Call it under the lake lock, on a settled checkpoint."""
    committed = checkpoint.committed_offset
    logged = {e.path for e in checkpoint.sources.entries if committed is not None and e.batch_id <= committed}
    read = {relative(path): Entry(path, None, None) for path in logged if os.path.dirname(path) != str(folder)}
    for manifest in read_manifests(folder):
        if str(manifest.path) in logged:
            read.update((relative(entry.path), entry) for entry in manifest.entries if entry.only_records is None)
    read.update((key, entry) for key, entry in read_restamps(checkpoint.path / RESTAMPED).items() if key in read)
    retired_before = retired_before_of(newest_delivery(read), retention)
    retired_files = RetiredIndex(checkpoint.path / RETIRED)
    checked_at_ns = checkpoint.last_success.checked_at_ns
    found: dict[str, Entry] = {}  # not one deleted from the landing zone
    for day, day_folder in day_folders(landing):
        for file in log_files_in(day_folder):
            key, stat = relative(file.path), file.stat()
            known = read.get(key)
            if known is None:
                if (
                    retired_before is not None
                    and day < retired_before
                    and (stat.st_ctime_ns <= checked_at_ns or key in retired_files.on(day))
                ):
                    found[key] = Entry.of(file.path, stat=stat)
            elif known.size is None or (known.size, known.mtime_ms) == (stat.st_size, stat.st_mtime_ns // 1_000_000):
                found[key] = dataclasses.replace(known, path=file.path)
            # else changed: the stream reads it again
    return found


def _retired(path: str, retired_before: date, checked_at_ns: int) -> bool:
    folder_date = delivery_date(path)
    return folder_date is not None and folder_date < retired_before and (_ctime_ns(path) or 0) <= checked_at_ns


def _forget(log: SourceLog, gone: set[str]) -> None:
    """Rewrite Spark's newest compaction of read files without the entries of `gone`: files it can never list again."""
    kept = [entry for entry in log.compacted if entry.path not in gone]
    if log.compact is not None and len(kept) < len(log.compacted):
        rewrite_compaction(log, kept)


def known_files(checkpoint: CheckpointSnapshot, folder: LakePath, days: Iterable[date]) -> dict[str, Entry]:
    """Every landing file the ledger has taken, by its place in the landing zone: those its manifests name, and those
    of retired delivery folders on `days` (their manifests let go of). What a reconciliation checks deliveries against."""
    ledger = Ledger.read(checkpoint, folder)
    known = dict(ledger.taken)
    for day in days:
        known.update((key, Entry(key, None, None)) for key in ledger.retired.on(day) if key not in known)
    return known
