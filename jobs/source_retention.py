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
- A file that appears in a retired folder afterwards (a sync that lagged, history copied in)
  is still read. Its inode change time (ctime) is set when it lands, and no copy tool can
  preserve it. `checked_at` is taken before the stream lists anything and saved only when a
  run succeeds, so every file with an older ctime was listed by a successful run (or is still
  in the log). Retired folders whose ctime is newer are listed; their newer files that the log
  does not hold are added to this run's glob, by name, or as the whole folder when every file
  in it is new. Their entries stay in the log until a successful run has passed their ctime,
  so a replay after a crash does not read them twice.

The same listing tells whether anything is new at all: with nothing new, no batch half done
and no batch since the last clean finish, the job ends without starting Spark.

The log is a local file and ctime a POSIX notion: a landing zone on an object store keeps
Spark's behaviour (every file in the log).
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from urllib.parse import unquote

# What the last successful run left: its check time, and the last batch it committed.
STATE_FILE = "last_success.json"
FILE_PATTERN = "*_CloudTrail_*.json{,.gz}"
ALL_DATES = "[0-9][0-9][0-9][0-9]/[0-9][0-9]/[0-9][0-9]"
# Delivered layout, with or without an organization id level. The literal "CloudTrail"
# folder and "_CloudTrail_" file name keep Digest and Insights files out.
ACCOUNT_LEVELS = ("*", "*/*")
DAY_FOLDERS = tuple(f"{level}/CloudTrail/*/{ALL_DATES}" for level in ACCOUNT_LEVELS)  # pathlib has no {a,b}
LOG_FILE_NAME = re.compile(r".*_CloudTrail_.*\.json(\.gz)?")  # what FILE_PATTERN matches
DELIVERY_DATE = re.compile(r"/CloudTrail/[^/]+/(\d{4})/(\d{2})/(\d{2})(?:/[^/]+)?$")
# Timestamps on some file systems are coarse; a file is "new" if it changed this close to the check.
CLOCK_SLACK_NS = 60 * 10**9


def landing_glob(dates: str = ALL_DATES, late: tuple[str, ...] = ()) -> str:
    """The files under <landing>/ the stream lists: delivery folders matching `dates`, plus `late` (relative to AWSLogs/)."""
    levels = "{" + ",".join(ACCOUNT_LEVELS) + "}"
    return "AWSLogs/{" + ",".join((f"{levels}/CloudTrail/*/{dates}/{FILE_PATTERN}", *late)) + "}"


def dates_from(first: date) -> str:
    """A glob alternative matching the YYYY/MM/DD folders on or after `first`."""
    year, month = f"{first.year:04d}", f"{first.month:02d}"
    days = ",".join(f"{day:02d}" for day in range(first.day, 32))
    alternatives = [f"{year}/{month}/{{{days}}}"]
    if first.month < 12:
        alternatives.append(f"{year}/{{{','.join(f'{m:02d}' for m in range(first.month + 1, 13))}}}/[0-9][0-9]")
    # later years, digit by digit: 2026 -> 202[7-9], 20[3-9][0-9], 2[1-9][0-9][0-9]
    for position in range(3, -1, -1):
        digit = int(year[position])
        if digit < 9:
            alternatives.append(f"{year[:position]}[{digit + 1}-9]{'[0-9]' * (3 - position)}/[0-9][0-9]/[0-9][0-9]")
    return "{" + ",".join(alternatives) + "}"


def delivery_date(path: str) -> date | None:
    """The date of a delivery folder, or of the folder a file is in."""
    match = DELIVERY_DATE.search(path)
    if not match:
        return None
    try:
        return date(int(match[1]), int(match[2]), int(match[3]))
    except ValueError:
        return None


def local_path(logged: str) -> str:
    """A source-log entry's path ('file:///a%20b/x') as a local path ('/a b/x')."""
    return unquote(re.sub(r"^file:(//)?", "", logged))


@dataclass(frozen=True)
class SourcePlan:
    """What one run lists, and what it dropped from the log."""

    glob: str
    retired_before: date | None = None
    late_files: int = 0
    entries_dropped: int = 0
    checked_at_ns: int = 0
    # Landing files the log does not hold (late ones included); None when that is not known.
    new_files: int | None = None

    def summary(self) -> dict[str, object]:
        return {
            "retired_before": self.retired_before.isoformat() if self.retired_before else None,
            "late_files": self.late_files,
            "entries_dropped": self.entries_dropped,
        }


def _log_files(source_log: Path) -> tuple[Path | None, list[Path]]:
    """The newest compaction and the batch files after it: what Spark restores the log from."""
    batches = []
    for path in source_log.iterdir() if source_log.is_dir() else []:
        stem = path.name.removesuffix(".compact")
        if stem.isdigit():
            batches.append((int(stem), path))
    batches.sort()
    compacted = [batch for batch in batches if batch[1].name.endswith(".compact")]
    if not compacted:
        return None, [path for _, path in batches]
    last_compacted, compact = compacted[-1]
    return compact, [path for batch_id, path in batches if batch_id > last_compacted]


@dataclass(frozen=True)
class LogEntry:
    line: str  # as Spark wrote it
    path: str  # the file it names, as a local path


def _read_log(path: Path) -> tuple[str, list[LogEntry]]:
    """A log file's format version line and its entries."""
    version, *lines = path.read_text().splitlines()
    return version, [LogEntry(line, local_path(json.loads(line)["path"])) for line in lines if line.strip()]


def _ctime_ns(path: str) -> int | None:
    """None for a file that is gone (deleted from the landing zone by a lifecycle rule, say)."""
    try:
        return os.stat(path).st_ctime_ns
    except FileNotFoundError:
        return None


def _day_folders(aws_logs: Path) -> list[tuple[date, Path]]:
    folders = []
    for pattern in DAY_FOLDERS:
        for folder in aws_logs.glob(pattern):
            folder_date = delivery_date(folder.as_posix())
            if folder_date is not None:
                folders.append((folder_date, folder))
    return sorted(folders)


def _log_files_in(folder: Path) -> list[os.DirEntry]:
    """The files Spark lists there: CloudTrail log names, not hidden (Spark skips '.' and '_' names)."""
    return [e for e in os.scandir(folder) if e.is_file() and not e.name.startswith((".", "_")) and LOG_FILE_NAME.fullmatch(e.name)]


def _unlogged_active_dates(folders: list[tuple[date, Path]], retired_before: date, logged: set[str]) -> list[date]:
    """The delivery date of every file in an active folder that the log does not hold."""
    return [day for day, folder in folders if day >= retired_before for entry in _log_files_in(folder) if entry.path not in logged]


def _late_files(
    aws_logs: Path, folders: list[tuple[date, Path]], retired_before: date, logged: set[str], checked_at_ns: int
) -> tuple[list[str], int]:
    """Globs (relative to AWSLogs/) for the files in retired folders that no successful run has listed, and their number."""
    late: list[str] = []
    count = 0
    for day, folder in folders:
        if day >= retired_before or folder.stat().st_ctime_ns <= checked_at_ns:
            continue
        files = _log_files_in(folder)
        new = [entry for entry in files if entry.stat().st_ctime_ns > checked_at_ns and entry.path not in logged]
        relative = folder.relative_to(aws_logs).as_posix()
        count += len(new)
        if new and len(new) == len(files):
            late.append(f"{relative}/{FILE_PATTERN}")
        else:
            late.extend(f"{relative}/{entry.name}" for entry in sorted(new, key=lambda e: e.name))
    return late, count


def plan_sources(checkpoint: Path, landing: str, retention: timedelta) -> SourcePlan:
    """Drop retired folders' entries from the newest compaction and say what this run lists.

    Call it under the lake lock, before the stream starts."""
    previous_check_ns = read_last_success(checkpoint).checked_at_ns
    # Never backwards (a clock stepped back): files up to the previous check were listed by then.
    checked_at_ns = max(time.time_ns() - CLOCK_SLACK_NS, previous_check_ns)
    if "://" in landing:
        return SourcePlan(glob=landing_glob(), checked_at_ns=checked_at_ns)
    source_log = checkpoint / "sources" / "0"
    compact, after = _log_files(source_log)
    version, compacted = _read_log(compact) if compact else ("", [])
    entries = compacted + [entry for path in after for entry in _read_log(path)[1]]
    dates = [d for d in (delivery_date(e.path) for e in entries) if d is not None]
    if not dates:
        return SourcePlan(glob=landing_glob(), checked_at_ns=checked_at_ns)
    # A folder dated in the future (a skewed clock) must not retire today's folders.
    newest = min(max(dates), datetime.now(tz=UTC).date() + timedelta(days=1))
    retired_before = newest - timedelta(days=retention.days)
    logged = {e.path for e in entries}
    aws_logs = Path(landing) / "AWSLogs"
    folders = _day_folders(aws_logs)
    late, late_count = _late_files(aws_logs, folders, retired_before, logged, previous_check_ns)
    new_dates = _unlogged_active_dates(folders, retired_before, logged)
    new_files = len(new_dates) + late_count
    if not (checkpoint / STATE_FILE).exists():
        # Written before the first entry is dropped, so a checkpoint without it has never lost one.
        _write_state(checkpoint, LastSuccess(previous_check_ns, None))
    dropped = _drop_retired(compact, version, compacted, retired_before, previous_check_ns) if compact else 0
    # Spark lists every file its glob matches, to infer partitions and again each batch: only the
    # days from the oldest one holding a new file (a file landing meanwhile in an older active
    # folder is counted by the next run's listing, or found by ctime once its folder retires).
    glob = landing_glob(dates_from(min(new_dates, default=newest)), tuple(late))
    return SourcePlan(glob, retired_before, late_count, dropped, checked_at_ns, new_files)


def _drop_retired(compact: Path, version: str, entries: list[LogEntry], retired_before: date, checked_at_ns: int) -> int:
    """Rewrite the compaction without the entries of retired folders' files that a successful run has passed."""
    kept = []
    for entry in entries:
        folder_date = delivery_date(entry.path)
        if folder_date is not None and folder_date < retired_before and (_ctime_ns(entry.path) or 0) <= checked_at_ns:
            continue
        kept.append(entry.line)
    dropped = len(entries) - len(kept)
    if dropped:
        partial = compact.with_name(f".{compact.name}.rewrite")
        partial.write_text("\n".join([version, *kept]))  # as Spark writes it: no final newline
        # Hadoop's local file system checks a file against its .crc when one exists; the old one no longer matches.
        compact.with_name(f".{compact.name}.crc").unlink(missing_ok=True)
        os.replace(partial, compact)
    return dropped


@dataclass(frozen=True)
class LastSuccess:
    checked_at_ns: int  # every file that changed before this was listed by a successful run
    batch_id: int | None  # the last batch committed when that run finished, swept


def read_last_success(checkpoint: Path) -> LastSuccess:
    path = checkpoint / STATE_FILE
    if not path.exists():
        return LastSuccess(0, None)
    body = json.loads(path.read_text())
    return LastSuccess(int(body["checked_at_ns"]), body.get("batch_id"))


def record_success(checkpoint: Path, plan: SourcePlan, batch_id: int | None) -> None:
    """After a successful run, swept: `plan.checked_at_ns` becomes the check time, `batch_id` the last clean batch."""
    _write_state(checkpoint, LastSuccess(plan.checked_at_ns, batch_id))


def _write_state(checkpoint: Path, state: LastSuccess) -> None:
    path = checkpoint / STATE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{STATE_FILE}.partial")
    partial.write_text(json.dumps({"checked_at_ns": state.checked_at_ns, "batch_id": state.batch_id}) + "\n")
    os.replace(partial, path)
