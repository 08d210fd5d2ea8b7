"""The file ledger: which landing files the job has taken, kept as the manifests the stream reads.

The job lists the landing zone itself, in Python, where a file name is data: Hadoop cannot
list a folder holding a name with a ':', and its globs read '[', '{', '*' and '?' as syntax.
The files a batch takes go into a manifest, <checkpoint>/manifests/<time>-<n>.jsonl, one JSON
line per file (path, size, mtime); the stream reads the manifests with Spark's text source,
one per batch, and the decode step reads each file by its path. Spark's checkpoint fixes
which manifest a batch holds, so a replayed batch reads the same files, and the manifests are
the ledger: a file a manifest names is taken.

- New: a file of an active delivery folder that no manifest names.
- Changed: a file whose content differs from its newest manifest entry (a copy tool that wrote
  in place, a hand repair) is read again; its events are de-duplicated as usual, and the
  quarantine rows of the earlier read say which read they came from. Size and modification
  time say a file may have changed; its content's SHA-256, taken when the ledger takes it,
  says whether it did: a copy that did not keep modification times changes none, and its new
  times go into the ledger's restamp record, so the file is not read to check it again.
- Unreadable: a file that cannot be read (no permission, an I/O error) is not taken; the run
  report names it, and every later run tries it again.
- Settling: a file modified less than `settle` ago may still be being written; it is left
  for a later run.
- Retention: delivery folders more than `retention` before the newest one the ledger holds
  are *retired*. A manifest is deleted once every file it names is in a retired folder, a
  committed batch has read it, and a successful run has passed its files' inode change
  time (ctime); Spark's log of read manifests forgets it too.
- Stragglers: a file that lands in a retired folder later (a sync that lagged, history copied
  in) has a ctime newer than the last successful run's check, set when it lands and kept by
  no copy tool: retired folders whose ctime is newer are listed, and their new files taken.
  A new folder changes its parent's ctime, so a run finds new retired folders through the year
  and month folders (landing.Older); a file added to an existing retired folder changes only
  that folder, so the run that tests every retired folder, once per `full_listing_interval`,
  finds it. Between those runs, the retained folders older than the de-duplication horizon are
  listed only when their ctime moved: a file rewritten in place there waits for that run too.
  A file a crashed run took stays in its manifest until a successful run has passed its ctime,
  so the next run does not take it again.

Checkpoints written before the ledger list landing files in Spark's source log directly;
those entries count as taken until they retire.

This module plans a run (plan_files); what the ledger holds, and the files it counts as read or taken for the other
commands, is jobs/ledger/state.py; its records on disk are jobs/ledger/store.py.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from jobs import options
from jobs.landing.layout import Older, Skipped, day_folders, delivery_date, log_files_in, relative
from jobs.ledger.state import Ledger, newest_delivery, retired_before_of
from jobs.ledger.store import Entry, Manifest, sha256_of, write_manifests
from jobs.records.dedup import Dedup
from jobs.spark.checkpoint import CheckpointSnapshot, LastSuccess
from jobs.storage import LakePath

# Timestamps on some file systems are coarse; a file is "new" if it changed this close to the check.
CLOCK_SLACK_NS = 60 * 10**9
# What a run report lists of the entries the landing walk passed over (all are counted).
SKIPPED_SHOWN = 100


@dataclass(frozen=True)
class LedgerOptions:
    """How the ledger plans a run: retention of delivery folders, settle time, and batch size."""

    # Delivery folders this long before the newest one read are no longer tracked file by file.
    retention: timedelta = options.duration(options.SOURCE_RETENTION)
    # A file written to more recently is left for a later run.
    settle: timedelta = options.duration(options.SETTLE)
    # A batch's files: at most this many, or about this many compressed bytes (one limit: files win).
    max_files: int | None = None
    max_bytes: int | None = options.size(options.MAX_BYTES_PER_TRIGGER)
    # How often a run lists every delivery folder; the others list the retained ones and new folders (landing.Older).
    full_listing_interval: timedelta = options.duration(options.FULL_LISTING_INTERVAL)


@dataclass(frozen=True)
class Plan:
    """What one run takes, and what it let go of."""

    written: tuple[Manifest, ...] = ()
    # The manifests no committed batch has read, this run's included: what the stream reads next.
    uncommitted: tuple[Manifest, ...] = ()
    new_files: int = 0
    changed_files: int = 0
    # The files whose content changed since their read, by path (the first SKIPPED_SHOWN in the report).
    changed: tuple[str, ...] = ()
    stragglers: int = 0
    replayed_files: int = 0
    settling_files: int = 0
    # Taken files whose mtime is older than an arrival already taken: they arrive at that one instead.
    raised_arrivals: int = 0
    # Taken files modified after the listing (a wrong clock, a touch): they arrive at the listing's time instead.
    future_mtimes: int = 0
    # Files whose times changed but whose content did not (a copy that did not keep times): not read again.
    restamped_files: int = 0
    # When the first settling file is due (epoch ns), if any settles.
    settling_due_ns: int | None = None
    # What the landing walk passed over (folders it cannot list, odd entries), with the reason.
    skipped: tuple[Skipped, ...] = ()
    retired_before: date | None = None
    manifests_dropped: int = 0
    # Whether this run listed every delivery folder.
    full_listing: bool = True
    # What a successful run records (jobs/checkpoint.record_success, which adds the batch): this listing's check
    # time, the check time of the newest run that listed every folder, and the day folders the next run lists
    # whatever their times (a file there was settling or could not be read, and neither changes its folder when it
    # is done: a between-listings run would not look there).
    check_times: LastSuccess = LastSuccess()
    # Manifests no batch has read yet, this run's included, and the files and bytes they name.
    pending: int = 0
    backlog_files: int = 0
    backlog_bytes: int = 0

    @property
    def settling_due(self) -> str | None:
        return _iso(self.settling_due_ns)

    def summary(self) -> dict[str, object]:
        return {
            "new_files": self.new_files,
            "changed_files": self.changed_files,
            "changed_shown": list(self.changed[:SKIPPED_SHOWN]),
            "stragglers": self.stragglers,
            "replayed_files": self.replayed_files,
            "settling_files": self.settling_files,
            "raised_arrivals": self.raised_arrivals,
            "future_mtimes": self.future_mtimes,
            "restamped_files": self.restamped_files,
            "settling_due": self.settling_due,
            "skipped_entries": len(self.skipped),
            "skipped": [{"path": s.path, "reason": s.reason} for s in self.skipped[:SKIPPED_SHOWN]],
            "retired_before": self.retired_before.isoformat() if self.retired_before else None,
            "manifests_written": len(self.written),
            "checked_at_ns": self.check_times.checked_at_ns,
            "full_listing": self.full_listing,
            "listed_all_at_ns": self.check_times.listed_all_at_ns,
            "recheck": list(self.check_times.recheck),
            "manifests_dropped": self.manifests_dropped,
            "backlog_files": self.backlog_files,
            "backlog_bytes": self.backlog_bytes,
        }


def _iso(ns: int | None) -> str | None:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).isoformat(timespec="seconds") if ns is not None else None


def _arrivals(files: list[Entry], floor_ms: int, listed_ms: int) -> list[Entry]:
    """Files oldest first, each arriving at its mtime or at `floor_ms`, the newest arrival taken before, if later;
    a file modified after `listed_ms` (a wrong clock) arrives then: one such file must not move the watermark ahead."""
    ordered = sorted(files, key=lambda e: (min(e.mtime_ms or 0, listed_ms), e.path))
    return [dataclasses.replace(e, arrival_ms=max(min(e.mtime_ms or 0, listed_ms), floor_ms)) for e in ordered]


def _batches(files: list[Entry], max_files: int | None, max_bytes: int | None) -> list[list[Entry]]:
    """Files in order, cut into batches of at most `max_files` files or about `max_bytes` bytes (at least one file).
    A last batch under a quarter of `max_bytes` joins the one before, within `max_files`: each batch costs a second or so whatever it
    holds (planning, the state store's commit; BENCHMARKS.md), which a tail of a few files would double."""
    batches: list[list[Entry]] = []
    size = 0
    for entry in files:
        if not batches or (max_files and len(batches[-1]) >= max_files) or (max_bytes and size + (entry.size or 0) > max_bytes):
            batches.append([])
            size = 0
        batches[-1].append(entry)
        size += entry.size or 0
    if max_bytes and len(batches) > 1 and size < max_bytes / 4 and not (max_files and len(batches[-2]) + len(batches[-1]) > max_files):
        tail = batches.pop()
        batches[-1] += tail
    return batches


@dataclass(frozen=True)
class _Scope:
    """Which delivery folders a run lists, and the check times it works with."""

    # Whether this run lists every delivery folder (due once per full_listing_interval).
    full: bool
    since: date | None
    older: Older
    retired_before: date | None
    # Files whose ctime is newer than this changed since the check that a retired folder is tested against.
    changed_after_ns: int
    # This run's check time: every file that changed before it was listed by this run, or left settling.
    checked_at_ns: int
    listed_all_at_ns: int
    # The run's clock, and how long a file must have been left alone to be taken.
    now_ns: int
    settle_ns: int

    @classmethod
    def of(cls, ledger: Ledger, ledger_options: LedgerOptions, dedup: Dedup, now_ns: int) -> _Scope:
        """Most runs list the delivery folders within the de-duplication horizon, the other retained ones that changed
        since the last check, and new folders (landing.Older). A full listing, when due, lists every retained folder
        and tests every retired one against the previous full listing: it finds a file added to an existing retired
        folder, and one rewritten in place."""
        previous_check_ns, listed_all_ns = ledger.checkpoint.last_success.checked_at_ns, ledger.checkpoint.last_success.listed_all_at_ns
        settle_ns = int(ledger_options.settle.total_seconds() * 1e9)
        # Never backwards (a clock stepped back): files up to the previous check were listed then.
        checked_at_ns = max(now_ns - max(CLOCK_SLACK_NS, settle_ns), previous_check_ns)
        newest = newest_delivery(ledger.taken)
        retired_before = retired_before_of(newest, ledger_options.retention)
        full = newest is None or now_ns - listed_all_ns >= ledger_options.full_listing_interval.total_seconds() * 1e9
        changed_after_ns = listed_all_ns if full else previous_check_ns
        since, older = retired_before, Older(changed_after_ns)
        if not full and newest is not None and retired_before is not None:
            since = max(newest - timedelta(days=math.ceil(dedup.horizon / timedelta(days=1))), retired_before)
            older = Older(changed_after_ns, every_day=False, tested_from=retired_before)
        listed_all_at_ns = checked_at_ns if full else listed_all_ns
        return cls(full, since, older, retired_before, changed_after_ns, checked_at_ns, listed_all_at_ns, now_ns, settle_ns)


@dataclass
class _Listing:
    """One listing of the delivery folders in `scope` against the ledger, and what it found."""

    ledger: Ledger
    scope: _Scope
    new: list[Entry] = dataclasses.field(default_factory=list)
    changed: list[Entry] = dataclasses.field(default_factory=list)
    stragglers: list[Entry] = dataclasses.field(default_factory=list)
    settling: list[int] = dataclasses.field(default_factory=list)  # when each settling file is due
    restamped: dict[str, Entry] = dataclasses.field(default_factory=dict)
    skipped: list[Skipped] = dataclasses.field(default_factory=list)
    recheck: set[str] = dataclasses.field(default_factory=set)

    def taken(self) -> list[Entry]:
        return self.new + self.changed + self.stragglers

    def walk(self, landing: str | Path, recheck: Sequence[str], replayed: set[str]) -> None:
        """The folders in scope, and those in `recheck` whatever their times: a file there was settling or could not be read."""
        walked = day_folders(landing, self.scope.since, self.skipped, self.scope.older)
        listed = {folder for _, folder in walked}
        again = [(d, f) for f in recheck if f not in listed and (d := delivery_date(f)) and os.path.isdir(f)]
        for day, day_folder in walked + again:
            for file in log_files_in(day_folder, self.skipped):
                if not replayed or relative(file.path) not in replayed:
                    self.sort(file.path, file.stat, day, day_folder)  # one stat a file, cached by the directory listing

    def take(self, paths: Sequence[str], replayed: set[str]) -> None:
        """The files a notification named, instead of a walk: nothing else is listed."""
        for path in dict.fromkeys(paths):
            day = delivery_date(path)
            if day is not None and (not replayed or relative(path) not in replayed):
                self.sort(path, functools.partial(os.stat, path), day, os.path.dirname(path))

    def sort(self, path: str, stat_of: Callable[[], os.stat_result], day: date, day_folder: str) -> None:
        """Put one listed log file where it belongs, or nowhere when the ledger has it as it is."""
        try:
            stat = stat_of()
        except FileNotFoundError:
            return  # deleted since the folder was listed
        except OSError as exc:
            self.skipped.append(Skipped(path, f"cannot be read: {exc.strerror or exc}"))
            self.recheck.add(day_folder)
            return
        retired = self.scope.retired_before is not None and day < self.scope.retired_before
        if retired and stat.st_ctime_ns <= self.scope.changed_after_ns:
            return
        key, entry = relative(path), Entry.of(path, stat=stat)
        known = self.ledger.taken.get(key)
        if known is None and retired and key in self.ledger.retired.on(day):
            return  # taken before its folder retired: a chmod, a copy or a move changed its ctime, not its content
        if known is not None and (known.size is None or (known.size, known.mtime_ms) == (entry.size, entry.mtime_ms)):
            return
        if stat.st_ctime_ns > self.scope.now_ns - self.scope.settle_ns:  # ctime moves with every write, and no clock skew puts it ahead
            self.settling.append(stat.st_ctime_ns + self.scope.settle_ns)
            self.recheck.add(day_folder)
            return
        try:
            entry = dataclasses.replace(entry, sha256=sha256_of(path))
        except FileNotFoundError:
            return
        except OSError as exc:
            self.skipped.append(Skipped(path, f"cannot be read: {exc.strerror or exc}; tried again next run"))
            self.recheck.add(day_folder)
            return
        if known is not None and known.sha256 == entry.sha256:
            self.restamped[key] = entry  # the same bytes with new times
            return
        if known is not None:
            entry = dataclasses.replace(entry, supersedes=True)
        (self.stragglers if retired else self.changed if known else self.new).append(entry)


def plan_files(
    checkpoint: CheckpointSnapshot,
    folder: LakePath,
    landing: str | Path,
    ledger_options: LedgerOptions,
    dedup: Dedup,
    replay: Sequence[Entry] = (),
    notified: Sequence[str] | None = None,
) -> Plan:
    """List the landing zone against the ledger (the manifests in `folder`), write this run's manifests, and let go of retired ones.

    No file taken now arrives before the newest arrival the checkpoint has committed (Dedup.arrival_floor),
    or before any file already taken. `replay` files (or records) are taken again, whatever the ledger
    says. Call it under the lake lock, before the stream starts."""
    now_ns = time.time_ns()
    ledger = Ledger.read(checkpoint, folder)
    scope = _Scope.of(ledger, ledger_options, dedup, now_ns)
    listing = _Listing(ledger, scope)
    # A replay's files are taken as it asks, whatever the listing finds.
    replayed = {relative(entry.path) for entry in replay}
    if notified is None:
        listing.walk(landing, checkpoint.last_success.recheck, replayed)
    else:
        listing.take(notified, replayed)
    files = _arrivals(listing.taken() + list(replay), ledger.floor_ms(dedup.arrival_floor(checkpoint.watermark)), now_ns // 1_000_000)
    dropped = ledger.done(scope.retired_before)
    ledger.keep_restamps(listing.restamped, dropped, files)
    written = write_manifests(folder, _batches(files, ledger_options.max_files, ledger_options.max_bytes), now_ns)
    ledger.let_go(dropped, scope.retired_before)
    unread = ledger.unread(written)
    backlog = [entry for manifest in unread for entry in manifest.entries]
    return Plan(
        written=written,
        uncommitted=tuple(ledger.uncommitted(written)),
        new_files=len(listing.new),
        changed_files=len(listing.changed),
        changed=tuple(entry.path for entry in listing.changed),
        stragglers=len(listing.stragglers),
        replayed_files=len(replay),
        settling_files=len(listing.settling),
        raised_arrivals=sum(1 for entry in files if (entry.arrival_ms or 0) > (entry.mtime_ms or 0)),
        future_mtimes=sum(1 for entry in files if (entry.mtime_ms or 0) > now_ns // 1_000_000),
        restamped_files=len(listing.restamped),
        settling_due_ns=min(listing.settling, default=None),
        skipped=tuple(listing.skipped),
        retired_before=scope.retired_before,
        manifests_dropped=len(dropped),
        full_listing=scope.full,
        check_times=LastSuccess(scope.checked_at_ns, None, scope.listed_all_at_ns, tuple(sorted(listing.recheck))),
        pending=len(unread),
        backlog_files=len(backlog),
        backlog_bytes=sum(e.size or 0 for e in backlog),
    )
