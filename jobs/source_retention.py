"""Bounded file-source bookkeeping: Spark tracks files one by one only in recent delivery folders.

Spark's file source remembers every file it has read, in <checkpoint>/sources/0, and every
10th batch rewrites that whole list into one compaction (about 200 bytes a file, for ever;
Spark 4 has no retention for it). CloudTrail writes each file into the folder of its
delivery date, so this bounds the list by that date:

- Folders more than `retention` before the newest delivery date read are *retired*: the
  stream's glob no longer lists them, and their entries leave the newest compaction.
- Of the active folders, the stream lists only those from the oldest delivery date that holds
  a file the log does not: Spark lists everything its glob matches, and a run then lists the
  days with new files, not the whole retention window.
- A *straggler*, a file that appears in a retired folder afterwards (a sync that lagged,
  history copied in), is still read. Its inode change time (ctime) is set when it lands, and
  no copy tool can preserve it. `checked_at` is taken before the stream lists anything and
  saved only when a run succeeds, so every file with an older ctime was listed by a
  successful run (or is still in the log). Retired folders whose ctime is newer are listed;
  their newer files that the log does not hold are added to this run's glob, by name, or as
  the whole folder when every file in it is new. Their entries stay in the log until a
  successful run has passed their ctime, so a replay after a crash does not read them twice.

The same listing tells whether anything is new at all: with nothing new, no batch half done
and no batch since the last clean finish, the job ends without starting Spark.

The log is a local file and ctime a POSIX notion: a landing zone on an object store keeps
Spark's behaviour (every file in the log).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from jobs.checkpoint import STATE_FILE, CheckpointSnapshot, LastSuccess, write_last_success
from jobs.landing import FILE_PATTERN, aws_logs, dates_from, day_folders, delivery_date, landing_glob, log_files_in
from jobs.spark_logs import LogEntry, SourceLog, rewrite_compaction

# Timestamps on some file systems are coarse; a file is "new" if it changed this close to the check.
CLOCK_SLACK_NS = 60 * 10**9


@dataclass(frozen=True)
class SourcePlan:
    """What one run lists, and what it dropped from the log."""

    glob: str
    retired_before: date | None = None
    stragglers: int = 0
    entries_dropped: int = 0
    checked_at_ns: int = 0
    # Landing files the log does not hold (stragglers included); None when that is not known.
    new_files: int | None = None

    def summary(self) -> dict[str, object]:
        return {
            "retired_before": self.retired_before.isoformat() if self.retired_before else None,
            "stragglers": self.stragglers,
            "entries_dropped": self.entries_dropped,
        }


def _ctime_ns(path: str) -> int | None:
    """None for a file that is gone (deleted from the landing zone by a lifecycle rule, say)."""
    try:
        return os.stat(path).st_ctime_ns
    except FileNotFoundError:
        return None


def _unlogged_active_dates(folders: list[tuple[date, Path]], retired_before: date, logged: set[str]) -> list[date]:
    """The delivery date of every file in an active folder that the log does not hold."""
    return [day for day, folder in folders if day >= retired_before for entry in log_files_in(folder) if entry.path not in logged]


def _stragglers(
    landing: str, folders: list[tuple[date, Path]], retired_before: date, logged: set[str], checked_at_ns: int
) -> tuple[list[str], int]:
    """Globs (relative to AWSLogs/) for the files in retired folders that no successful run has listed, and their number."""
    globs: list[str] = []
    count = 0
    for day, folder in folders:
        if day >= retired_before or folder.stat().st_ctime_ns <= checked_at_ns:
            continue
        files = log_files_in(folder)
        new = [entry for entry in files if entry.stat().st_ctime_ns > checked_at_ns and entry.path not in logged]
        relative = folder.relative_to(aws_logs(landing)).as_posix()
        count += len(new)
        if new and len(new) == len(files):
            globs.append(f"{relative}/{FILE_PATTERN}")
        else:
            globs.extend(f"{relative}/{entry.name}" for entry in sorted(new, key=lambda e: e.name))
    return globs, count


def plan_sources(checkpoint: CheckpointSnapshot, landing: str, retention: timedelta) -> SourcePlan:
    """Drop retired folders' entries from the newest compaction and say what this run lists.

    Call it under the lake lock, before the stream starts."""
    previous_check_ns = checkpoint.last_success.checked_at_ns
    # Never backwards (a clock stepped back): files up to the previous check were listed by then.
    checked_at_ns = max(time.time_ns() - CLOCK_SLACK_NS, previous_check_ns)
    entries = checkpoint.sources.entries
    dates = [d for d in (delivery_date(e.path) for e in entries) if d is not None]
    if "://" in landing or not dates:
        return SourcePlan(glob=landing_glob(), checked_at_ns=checked_at_ns)
    # A folder dated in the future (a skewed clock) must not retire today's folders.
    newest = min(max(dates), datetime.now(tz=UTC).date() + timedelta(days=1))
    retired_before = newest - timedelta(days=retention.days)
    logged = {e.path for e in entries}
    folders = day_folders(landing)
    stragglers, straggler_count = _stragglers(landing, folders, retired_before, logged, previous_check_ns)
    new_dates = _unlogged_active_dates(folders, retired_before, logged)
    if not (checkpoint.path / STATE_FILE).exists():
        # Written before the first entry is dropped, so a checkpoint without it has never lost one.
        write_last_success(checkpoint.path, LastSuccess(previous_check_ns, None))
    dropped = _drop_retired(checkpoint.sources, retired_before, previous_check_ns)
    # Spark lists every file its glob matches, to infer partitions and again each batch: only the
    # days from the oldest one holding a new file (a file landing meanwhile in an older active
    # folder is counted by the next run's listing, or found by ctime once its folder retires).
    glob = landing_glob(dates_from(min(new_dates, default=newest)), tuple(stragglers))
    return SourcePlan(glob, retired_before, straggler_count, dropped, checked_at_ns, len(new_dates) + straggler_count)


def _drop_retired(log: SourceLog, retired_before: date, checked_at_ns: int) -> int:
    """Rewrite the compaction without the entries of retired folders' files that a successful run has passed."""
    if log.compact is None:
        return 0

    def retired(entry: LogEntry) -> bool:
        folder_date = delivery_date(entry.path)
        return folder_date is not None and folder_date < retired_before and (_ctime_ns(entry.path) or 0) <= checked_at_ns

    kept = [entry for entry in log.compacted if not retired(entry)]
    if len(kept) < len(log.compacted):
        rewrite_compaction(log, kept)
    return len(log.compacted) - len(kept)


def record_success(checkpoint: Path, plan: SourcePlan, batch_id: int | None) -> None:
    """After a successful run, swept: `plan.checked_at_ns` becomes the check time, `batch_id` the last clean batch."""
    write_last_success(checkpoint, LastSuccess(plan.checked_at_ns, batch_id))
