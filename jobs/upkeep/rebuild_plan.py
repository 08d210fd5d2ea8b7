"""A rebuild's plan (jobs/upkeep/rebuild.py): its config, and per event date the landing files that date is rebuilt from,
read from metadata only (the ledger, folder listings, one column of the partition); an S3 landing's files fetched
again where their local copies are gone; a dry run's summary.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from jobs import options
from jobs.lake import EVENTS, Lake
from jobs.landing.bucket import BucketLanding
from jobs.landing.layout import day_folders, delivery_date, log_files_in, relative
from jobs.ledger.state import known_files, read_files
from jobs.ledger.store import Entry, late_files, verified_checkpoint
from jobs.records.dedup import Dedup
from jobs.reporting.report import written_batches
from jobs.spark.checkpoint import CheckpointSnapshot
from jobs.spark.logs import CheckpointError, local_path, source_file
from jobs.tables.events import date_files, lost_files
from jobs.tables.sources import landing_files
from jobs.tables.tables_of_record import held_batches

log = logging.getLogger("rebuild")

# Compressed landing bytes rebuilt per second, and the fixed cost of a run (JVM, GX import,
# quality suite): measured on the 2-core reference machine (docs/design.md, "Rebuilds").
BYTES_PER_SECOND = 800_000


FIXED_SECONDS = 30


@dataclass(frozen=True)
class RebuildConfig:
    landing: str
    lake: str
    dates: tuple[date, ...]
    run_id: str
    dedup: Dedup = Dedup()
    source_retention: timedelta = options.duration(options.SOURCE_RETENTION)
    keep_replaced: timedelta = options.duration(options.KEEP_REPLACED)
    lock_wait: float = options.LOCK_WAIT_SECONDS
    dry_run: bool = False
    # A date that held rows may be rebuilt with none (--allow-empty); else such a rebuild is refused.
    allow_empty: bool = False
    # The tag of a rebuild to undo instead (--rollback).
    rollback: str | None = None
    # An S3 landing (`landing` is then its cache in the lake): files whose local copies are gone are fetched again.
    bucket: BucketLanding | None = None
    # The catalog a lake in S3 keeps its tables of record in (None: a folder lake's embedded one).
    catalog: str | None = None

    @property
    def layout(self) -> Lake:
        return Lake.at(self.lake, self.catalog)


@dataclass(frozen=True)
class DateRebuild:
    """The landing files one event date is rebuilt from."""

    event_date: date
    files: tuple[Entry, ...]
    # Files whose rows the partition holds but which cannot be read again: their rows are kept.
    unreadable: tuple[str, ...]
    # The partition's data files the lake no longer holds: the date is rebuilt from the landing without them.
    lost: tuple[str, ...] = ()

    @property
    def bytes(self) -> int:
        return sum(entry.size or 0 for entry in self.files)


def unreadable_sources(plans: list[DateRebuild]) -> list[str]:
    """The files whose rows are kept from the old partitions, as the table's _source_file names them."""
    return sorted({source_file(path) for p in plans for path in p.unreadable})


def source_files(lake: Lake, day: date, lost: tuple[str, ...]) -> set[str]:
    """The landing files (local paths) a date's rows came from, as the data files the lake still holds (all but the
    `lost`) name them (the landing's delivery days and the late files' list name the others')."""
    return landing_files(EVENTS, [path for path in date_files(lake, day) if str(path) not in lost])


def plan_rebuild(config: RebuildConfig) -> list[DateRebuild]:
    """Which files each date is rebuilt from (reads metadata only: the ledger, folder listings, one column)."""
    lake = config.layout
    checkpoint = verified_checkpoint(lake, held_batches(lake))
    if checkpoint.commit.batch_id is not None and not checkpoint.settled:
        raise CheckpointError(
            f"an ingest run on {lake.root} has not finished (batch {checkpoint.planned_batch_id} is planned, not settled): "
            "run an incremental ingest first, so the rebuild knows which files the stream has read"
        )
    horizon_days = math.ceil(config.dedup.horizon / timedelta(days=1))
    lost = {day: tuple(sorted(map(str, lost_files(lake, day)))) for day in config.dates}  # each a look at every data file
    if config.bucket is not None:
        config.bucket.claim(new_lake=not lake.manifests.exists())
        if not config.dry_run:
            refetch(config, config.bucket, checkpoint, horizon_days, lost)
    read = read_files(checkpoint, lake.manifests, config.landing, config.source_retention)
    folders: dict[date, list[str]] = {}  # every account's and region's folders of a delivery date
    for delivered_on, folder in day_folders(config.landing):
        folders.setdefault(delivered_on, []).append(folder)
    late = late_files(lake.late_files)
    plans = []
    for day in config.dates:
        named = source_files(lake, day, lost[day])
        delivery_days = options.date_range(day, day + timedelta(days=horizon_days))
        delivered = {f.path for d in delivery_days for folder in folders.get(d, []) for f in log_files_in(folder)}
        wanted = {relative(path) for path in named | delivered | {local_path(path) for path in late.get(day, ())}}
        files = tuple(sorted((read[key] for key in wanted if key in read), key=lambda e: e.path))
        unreadable = tuple(sorted(path for path in named if relative(path) not in read))
        if lost[day]:
            log.warning("%s: %d of its data files are gone from the lake (%s): rebuilt from the landing without them", day,
                        len(lost[day]), ", ".join(lost[day][:3]))  # fmt: skip
        plans.append(DateRebuild(day, files, unreadable, lost[day]))
    return plans


def refetch(
    config: RebuildConfig, bucket: BucketLanding, checkpoint: CheckpointSnapshot, horizon_days: int, lost: dict[date, tuple[str, ...]]
) -> None:
    """An S3 landing: fetch again the files of the dates' delivery days the ledger took, and those the partitions name,
    whose copies in the cache are gone (cleaned, or a lake restored without it)."""
    lake = config.layout
    days = {d for day in config.dates for d in options.date_range(day - timedelta(days=1), day + timedelta(days=horizon_days))}
    wanted = {key for key in known_files(checkpoint, lake.manifests, sorted(days)) if delivery_date(key) in days}
    late = late_files(lake.late_files)
    for day in config.dates:
        wanted |= {relative(path) for path in source_files(lake, day, lost[day]) | {local_path(p) for p in late.get(day, ())}}
    bucket.fetch_missing(wanted, "the rebuilt dates' files: their local copies were gone")


def dry_run_summary(plans: list[DateRebuild]) -> dict[str, Any]:
    """Per date: files and bytes a rebuild would read, and an estimate of its time on this machine."""
    total = len({entry.path for p in plans for entry in p.files})
    size = sum({entry.path: entry.size or 0 for p in plans for entry in p.files}.values())
    return {
        "dates": {
            p.event_date.isoformat(): {
                "files": len(p.files),
                "bytes": p.bytes,
                "files_kept_from_old_partition": len(p.unreadable),
                "data_files_lost": len(p.lost),
                "estimated_seconds": round(p.bytes / BYTES_PER_SECOND),
            }
            for p in plans
        },
        "files": total,
        "bytes": size,
        "estimated_seconds": round(FIXED_SECONDS + size / BYTES_PER_SECOND),
    }


class EmptiedDates(RuntimeError):
    """Dates that held rows would be rebuilt with none: their landing files were not found, and nothing was committed."""


def rows_ingested(lake: Lake) -> Counter[str]:
    """Per event date, the rows the ingest runs wrote into it (their reports): what a date held, its partition lost or not."""
    written: Counter[str] = Counter()
    for _, batch in written_batches(lake):
        written.update(batch.get("rows_written_per_event_date") or {})
    return written


def emptied_dates(lake: Lake, before: dict[str, int], after: dict[str, int], dates: list[str]) -> list[str]:
    """The dates that held rows (in their partition now, or written by an ingest run) and would hold none."""
    ingested = rows_ingested(lake) if any(not after.get(day) for day in dates) else Counter()
    return [day for day in dates if not after.get(day) and (before.get(day) or ingested[day])]
