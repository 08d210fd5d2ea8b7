"""What the lake holds and how fresh it is: the Airflow UI's lake page (plugins/cloudtrail_airflow/lake_view.py) and `make status` ask here
(and, for a file's fate, jobs/ledger/search.py; for a run's summary and the gates' verdicts, jobs/reporting/summary.py).

Read-only, no Spark: the run and gate reports are small JSON files (read as such), the
ledger's manifests, Spark's checkpoint logs and the tables are read in place, the tables with
DuckDB. Every path comes from jobs.lake and jobs.landing.layout.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from jobs import duck, storage
from jobs.derived.state import built_dates
from jobs.lake import EVENT_DATE, Derived, Lake
from jobs.landing.layout import day_folders, delivered_at, log_files_in, newest_deliveries, newest_of
from jobs.ledger.search import manifests
from jobs.ledger.store import MANIFESTS, verified_checkpoint
from jobs.reporting.report import read_report, read_reports
from jobs.reporting.tally import Tally
from jobs.spark.logs import CheckpointError, last_commit, state_folder
from jobs.storage import LakePath
from jobs.tables.events import date_files, date_rows, events_source
from jobs.tables.tables_of_record import held_batches

# Keys, files and notifications the page names: the first (or newest) this many.
SHOWN = 100


def problems(lake: Lake) -> list[str]:
    """What the ingest would refuse to start on (a damaged or outgrown checkpoint, a damaged manifest), each
    as the message the run gives: the page and `make status` show it where they would otherwise fail."""
    found = []
    try:
        verified_checkpoint(lake, held_batches(lake))
    except CheckpointError as exc:
        found.append(str(exc))
    try:
        manifests(lake)
    except CheckpointError as exc:
        found.append(str(exc))
    return found


def ingest_runs(lake: Lake, newest: int | None = None) -> list[dict[str, Any]]:
    """The ingest runs' reports (or the `newest` written), oldest first. What the page adds up over every run comes
    from their tally (jobs/reporting/tally.py): these grow with every run."""
    return read_reports(lake.ingest_reports, newest)


def ingest_run(lake: Lake, run_id: str | None) -> dict[str, Any] | None:
    """The report of `run_id` (the newest when None)."""
    if run_id is None:
        return next(iter(ingest_runs(lake, newest=1)), None)
    return read_report(lake.ingest_report(run_id))


def gate_runs(lake: Lake) -> list[dict[str, Any]]:
    """The events table's gate reports (the ingest's, a rebuild's), oldest first."""
    return read_reports(lake.gate_reports)


def derived_gate_runs(lake: Lake, job: str) -> list[dict[str, Any]]:
    """The gate reports of a derived job (a `Derived`'s job), oldest first."""
    return read_reports(lake.derived_gate_reports(job))


def _parse_time(text: str) -> datetime:
    """An eventTime as the run report keeps it (jobs/reporting/report.py: ISO 8601, UTC, 'Z')."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _account_region(place: str) -> tuple[str, str]:
    """A place as the run report names it ("account/region")."""
    account, _, region = place.partition("/")
    return account, region


@dataclass(frozen=True)
class Freshness:
    account: str
    region: str
    newest_file: str | None
    delivered_at: datetime | None
    newest_event: datetime | None  # the newest plausible eventTime written: not after the check time plus the clock skew
    future_dated: int  # events written dated later than that: counted, never the newest event
    lag: timedelta | None  # the newest delivery less the newest event: how far the table is behind the landing zone
    stale: bool


def freshness(lake: Lake, landing: Path | None, threshold: timedelta, runs: Tally, now: datetime, skew: timedelta) -> list[Freshness]:
    """Per account and region at `now`: the newest delivery in the landing zone and the newest plausible eventTime the
    runs wrote (`runs`: their tally, jobs/reporting/tally.py).

    `landing`: the folder whose newest deliveries are listed; None for an S3 landing, whose newest deliveries are the
    newest files the runs took: its cache only grows, and what is not taken yet waits in the queue.

    Plausible: at or before `now` + `skew`. The ingest counts an event dated after its batch (plus the skew) as
    future-dated and never reports it as the newest (jobs/ingest/batch_writer.py); a report from before it did is
    filtered here the same way. So one forged event cannot hide that a place went quiet. STALE: no event written
    yet, or the newest delivery or the newest plausible event is older than `threshold` at `now`."""
    until = now + skew
    newest_event: dict[tuple[str, str], datetime] = {}
    future: Counter[tuple[str, str]] = Counter()
    for where, figures in runs["places"].items():
        key = _account_region(where)
        future[key] += figures.get("future_dated", 0)
        if "newest_event" in figures:
            moment = _parse_time(figures["newest_event"])
            if moment > until:
                future[key] += 1
            else:
                newest_event[key] = moment
    files: dict[tuple[str, str], str | None]
    if landing is not None:
        files = newest_deliveries(landing, until)
    else:
        files = dict(newest_of((f["newest_file"] for f in runs["places"].values() if "newest_file" in f), until))
    rows = []
    for account, region in sorted(files.keys() | newest_event.keys() | {key for key, count in future.items() if count}):
        file = files.get((account, region))
        delivered = delivered_at(file) if file else None
        event = newest_event.get((account, region))
        lag = delivered - event if delivered and event else None
        stale = event is None or any(now - moment > threshold for moment in (delivered, event) if moment)
        rows.append(Freshness(account, region, file, delivered, event, future[(account, region)], lag, stale))
    return rows


def format_time(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment else "none"


def format_lag(lag: timedelta | None) -> str:
    if lag is None:
        return "unknown"
    minutes = int(abs(lag.total_seconds()) // 60)
    text = f"{minutes // 60} h {minutes % 60:02d} min"
    return text if lag >= timedelta(0) else f"-{text} (events dated after their delivery)"


@dataclass(frozen=True)
class Backlog:
    files: int
    bytes: int
    oldest: str | None


def backlog(lake: Lake, landing: Path) -> Backlog:
    """Landing files no manifest names yet, in the delivery folders from the day before the ledger's newest one on.

    Older folders are retired or were listed by earlier runs (jobs/ledger/planner.py): a file there
    that no run took is a straggler the next run finds; it is not counted here."""
    ledgered = manifests(lake)
    newest = max((newest for _, _, newest in ledgered if newest), default=None)
    since = newest - timedelta(days=1) if newest else None
    taken = {path for _, entries, newest in ledgered if newest and since and newest >= since for path, _, _ in entries}
    waiting = [file for _, folder in day_folders(landing, since) for file in log_files_in(folder) if file.path not in taken]
    waiting.sort(key=lambda file: file.path)
    return Backlog(len(waiting), sum(file.stat().st_size for file in waiting), waiting[0].path if waiting else None)


@dataclass(frozen=True)
class DeliveryStatus:
    """An S3 landing's notifications: the queue now, what was kept as unreadable, the last reconciliation, and how long
    the last run's files took from delivery (LastModified) to committed rows."""

    queue: dict[str, int] | None
    queue_error: str | None
    inbox: int
    kept: int
    kept_reasons: list[str]
    reconciliation: dict[str, Any] | None
    delivery_lag: dict[str, Any] | None
    # The oldest message the newest run that took messages found, and how old it was then: SQS tells a message's age
    # only to its receiver (the queue's own figure is a CloudWatch metric).
    oldest_message: tuple[str, float] | None = None
    # When the newest run that took notifications started, and how many it took (through the queue or the inbox).
    notified: tuple[str, int] | None = None
    # Keys refused (bucket, key, reason): the lake's disk cannot hold them; the newest first (jobs/landing/sqs.py).
    refused: list[dict[str, str]] = field(default_factory=list)
    # What the newest run found notified outside its landing (jobs/ingest/deliveries.py), kept until taken back.
    outside: dict[str, Any] | None = None
    # Log files whose content differs from their digest in the last reconciliation, and why when it could not be read.
    mismatched: list[str] = field(default_factory=list)


def queue_depth(queue_url: str | None) -> tuple[dict[str, int] | None, str | None]:
    """The notification queue's depth asked now, or why there is none: no queue configured, or it cannot be asked."""
    from jobs.landing import sqs

    if not queue_url:
        return None, "no queue configured (--queue-url, $CLOUDTRAIL_QUEUE_URL)"
    try:
        return sqs.depth(sqs.sqs_client(timeout_seconds=2), queue_url), None
    except Exception as exc:  # noqa: BLE001 - the page shows why the queue cannot be asked, never fails on it
        return None, f"cannot be asked ({type(exc).__name__}: {exc})"[:300]


def deliveries(lake: Lake, queue_url: str | None, runs: Tally) -> DeliveryStatus:
    """The queue asked now; the rest from the lake (`runs`: the runs' tally, jobs/reporting/tally.py)."""
    from jobs.landing import kept_notifications
    from jobs.ledger import reconcile

    depth, error = queue_depth(queue_url)
    kept = kept_notifications.kept(lake)
    newest = reconcile.last(lake)
    lag, oldest, notified = runs.get("delivery_lag"), runs.get("oldest_message"), runs.get("notified")
    why = (newest or {}).get("unhashable") or {}
    mismatched = [f"{key} ({why[key]})" if key in why else key for key in (newest or {}).get("hash_mismatches", [])[:SHOWN]]
    return DeliveryStatus(
        depth,
        error,
        len(list(lake.inbox.glob("*.json"))) if lake.inbox.is_dir() else 0,
        len(kept),
        [f"{k.get('message_id')}: {k.get('reason')}" for k in kept[-5:]],
        {"checked_at": newest["checked_at"], **newest["summary"]} if newest else None,
        lag,
        (oldest[0], oldest[1]) if oldest else None,
        (notified[0], notified[1]) if notified else None,
        kept_notifications.refused(lake, SHOWN),
        runs.get("outside_landing"),
        mismatched,
    )


@dataclass(frozen=True)
class DayRows:
    event_date: str
    rows: int
    late: int
    files: int  # data files: a date written by many runs holds many, until it is compacted (jobs/upkeep/compact.py)

    @property
    def late_share(self) -> float:
        return self.late / self.rows if self.rows else 0.0


def daily_rows(lake: Lake, runs: Tally, days: int = 30) -> list[DayRows]:
    """Rows per event date in the table for its newest `days` dates, and the late events the runs wrote for each
    (`runs`: their tally, jobs/reporting/tally.py)."""
    late: dict[str, int] = runs["late_per_event_date"]
    if not storage.is_folder(lake.root):  # DuckDB reads no object store here: the table's manifests count the rows
        counts = sorted(date_rows(lake).items())[-days:] if days else []
        return [DayRows(day, rows, late.get(day, 0), len(date_files(lake, day))) for day, rows in counts]
    source = events_source(lake, newest=days)
    if source is None:
        return []
    counts = duck.connect().execute(f"select cast({EVENT_DATE} as varchar), count(*) from {source} group by 1 order by 1").fetchall()
    return [DayRows(day, rows, late.get(day, 0), len(date_files(lake, day))) for day, rows in counts]


@dataclass(frozen=True)
class DerivedDay:
    event_date: str
    rows: dict[str, int]  # per table
    folders: dict[str, int]  # per table: the partition folders those rows fill, one file each


def derived_rows(lake: Lake, derived: Derived, days: int = 30) -> list[DerivedDay]:
    """A derived job's rows per table and event date, its newest `days` dates that hold any, as the runs that swapped
    them in counted them (the job's state, jobs/derived/state.py): the tables' footers would cost a read per folder,
    and the job's reports grow with every derived run."""
    built = built_dates(lake, derived)
    shown = sorted(day for day, b in built.items() if any(b.rows.values()))[-days:] if days else []
    return [DerivedDay(day, built[day].rows, built[day].folders) for day in shown]


@dataclass(frozen=True)
class CheckpointHealth:
    committed_batch: int | None
    watermark: datetime | None
    state_bytes: int
    source_log_bytes: int
    source_log_files: int
    manifests: int


def _size(folder: LakePath) -> tuple[int, int]:
    """Bytes and files under a folder."""
    if not storage.is_folder(folder):
        found = folder.fs.find(folder.path, detail=True)
        return sum(int(info["size"]) for info in found.values()), len(found)
    total = count = 0
    for root, _, files in os.walk(folder):
        for name in files:
            total += os.path.getsize(os.path.join(root, name))
            count += 1
    return total, count


@dataclass(frozen=True)
class Publication:
    """One Iceberg table as the newest publish left it (jobs/publishing/command.py's report), and the newest error a publish of it
    met, with its run."""

    table: str
    snapshot_id: int | None
    local_commit: str | None
    local_commit_time: str | None
    lag_seconds: float
    held_back: dict[str, str]
    published_at: str
    last_error: str | None


def publications(lake: Lake, looked_back: int = 50) -> tuple[str | None, list[Publication]]:
    """The catalog the newest publish wrote to, and each table as it left it (the newest `looked_back` reports are
    searched for each table's last error)."""
    reports = read_reports(lake.publish_reports, newest=looked_back)
    if not reports:
        return None, []
    errors: dict[str, str] = {}
    for report in reports:
        for table in report.get("tables", []):
            if table.get("error"):
                errors[table["table"]] = f"{table['error']} (run {report['run_id']}, {report['started_at']})"
    newest = reports[-1]
    found = [
        Publication(t["table"], t.get("snapshot_id"), t.get("local_commit"), t.get("local_commit_time"), t.get("lag_seconds", 0.0),
                    t.get("held_back", {}), newest["started_at"], errors.get(t["table"]))
        for t in newest.get("tables", [])
    ]  # fmt: skip
    return newest.get("catalog"), found


def checkpoint_health(lake: Lake) -> CheckpointHealth:
    commit = last_commit(lake.checkpoint) if lake.checkpoint.is_dir() else None
    source_bytes, source_files = _size(lake.checkpoint / "sources")
    return CheckpointHealth(
        commit.batch_id if commit else None,
        commit.watermark if commit else None,
        _size(state_folder(lake.checkpoint))[0],
        source_bytes,
        source_files,
        len(list(lake.manifests.glob(MANIFESTS))),
    )
