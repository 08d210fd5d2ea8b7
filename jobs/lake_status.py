"""What the lake holds and how fresh it is: the Airflow UI's lake page (plugins/cloudtrail_airflow/lake_view.py) and `make status` ask here.

Read-only, no Spark: the run and gate reports are small JSON files (read as such), the
ledger's manifests, Spark's checkpoint logs and the tables are read in place, the tables with
DuckDB. Every path comes from jobs.lake and jobs.landing.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import zlib
from collections import Counter
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from jobs.lake import ACTIVITY_JOB, DERIVED_JOBS, EVENT_DATE, OCSF_API_ACTIVITY, OCSF_JOB, REASON, Lake, partition
from jobs.landing import day_folders, delivered_at, delivery_date, log_files_in, newest_deliveries, newest_of
from jobs.ledger_files import late_files, read_manifest, verified_checkpoint
from jobs.partitions import data_files
from jobs.report import failure_line, failure_name, read_report, read_reports, verdict_of
from jobs.spark_logs import CheckpointError, last_commit, local_path, read_source_log, sink_log, source_file, source_offset, state_folder
from jobs.tally import Tally

# Text of a quarantined record shown on the page; the table holds all of it.
SAMPLE_CHARS = 200
# Hits a ledger search shows (each one costs a look into the tables and the file itself).
LEDGER_HITS = 20
# Entries the landing walk passed over that a run summary lists (the run report holds up to 100).
SKIPPED_SHOWN = 10
# The ledger counts a file's records (for its duplicates) up to this size: CloudTrail's files are a few MB.
COUNT_RECORDS_UP_TO = 64 * 2**20


def _parquet(folders: list[Path]) -> str | None:
    """A DuckDB table function over the Parquet files of these partition folders; None when there are none."""
    globs = [f"{folder}/*.parquet" for folder in folders if any(folder.glob("*.parquet"))]
    return f"read_parquet({globs!r}, hive_partitioning = true, union_by_name = true)" if globs else None


def _partitions(table: Path, newest: int | None = None) -> str | None:
    """A DuckDB table function over a table's partitions (its newest `newest` of them); None when it has no data files."""
    folders = sorted(p for p in table.glob("*=*") if p.is_dir())
    return _parquet(folders[-newest:] if newest else folders)


def _duckdb() -> Any:
    import duckdb  # imported on first use: the plugin module loads in every Airflow process

    db = duckdb.connect()
    db.execute("SET enable_progress_bar = false")  # a slow query's bar would go into the server's log
    return db


def problems(lake: Lake) -> list[str]:
    """What the ingest would refuse to start on (a damaged or outgrown checkpoint, a damaged manifest), each
    as the message the run gives: the page and `make status` show it where they would otherwise fail."""
    found = []
    try:
        verified_checkpoint(lake)
    except CheckpointError as exc:
        found.append(str(exc))
    try:
        _manifests(lake)
    except CheckpointError as exc:
        found.append(str(exc))
    return found


def ingest_runs(lake: Lake, newest: int | None = None) -> list[dict[str, Any]]:
    """The ingest runs' reports (or the `newest` written), oldest first. What the page adds up over every run comes
    from their tally (jobs/tally.py): these grow with every run."""
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
    """The gate reports of a job that derives tables from the events table (jobs/activity.py, jobs/ocsf.py), oldest first."""
    return read_reports(lake.derived_gate_reports(job))


def _parse_time(text: str) -> datetime:
    """An eventTime as the run report keeps it (jobs/report.py: ISO 8601, UTC, 'Z')."""
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
    runs wrote (`runs`: their tally, jobs/tally.py).

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

    Older folders are retired or were listed by earlier runs (jobs/ledger.py): a file there
    that no run took is a straggler the next run finds; it is not counted here."""
    manifests = _manifests(lake)
    newest = max((newest for _, _, newest in manifests if newest), default=None)
    since = newest - timedelta(days=1) if newest else None
    taken = {path for _, entries, newest in manifests if newest and since and newest >= since for path, _, _ in entries}
    waiting = [file for _, folder in day_folders(landing, since) for file in log_files_in(folder) if file.path not in taken]
    waiting.sort(key=lambda file: file.path)
    return Backlog(len(waiting), sum(file.stat().st_size for file in waiting), waiting[0].path if waiting else None)


@dataclass(frozen=True)
class Deliveries:
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


def deliveries(lake: Lake, queue_url: str | None, runs: Tally) -> Deliveries:
    """The queue asked now; the rest from the lake (`runs`: the runs' tally, jobs/tally.py)."""
    from jobs import reconcile, sqs

    depth, error = None, None
    if queue_url:
        try:
            depth = sqs.depth(sqs.sqs_client(timeout_seconds=2), queue_url)
        except Exception as exc:  # noqa: BLE001 - the page shows why the queue cannot be asked, never fails on it
            error = f"{type(exc).__name__}: {exc}"[:300]
    kept = sqs.kept(lake)
    newest = reconcile.last(lake)
    lag, oldest = runs.get("delivery_lag"), runs.get("oldest_message")
    return Deliveries(
        depth,
        error,
        len(list(lake.inbox.glob("*.json"))) if lake.inbox.is_dir() else 0,
        len(kept),
        [f"{k.get('message_id')}: {k.get('reason')}" for k in kept[-5:]],
        {"checked_at": newest["checked_at"], **newest["summary"]} if newest else None,
        lag,
        (oldest[0], oldest[1]) if oldest else None,
    )


@dataclass(frozen=True)
class DayRows:
    event_date: str
    rows: int
    late: int
    files: int  # data files: a date written by many runs holds many, until it is compacted (jobs/compact.py)

    @property
    def late_share(self) -> float:
        return self.late / self.rows if self.rows else 0.0


def daily_rows(lake: Lake, runs: Tally, days: int = 30) -> list[DayRows]:
    """Rows per event date in the table for its newest `days` dates, and the late events the runs wrote for each
    (`runs`: their tally, jobs/tally.py)."""
    source = _partitions(lake.events, newest=days)
    if source is None:
        return []
    counts = _duckdb().execute(f"select cast({EVENT_DATE} as varchar), count(*) from {source} group by 1 order by 1").fetchall()
    late: dict[str, int] = runs["late_per_event_date"]
    return [DayRows(day, rows, late.get(day, 0), len(data_files(partition(lake.events, day)))) for day, rows in counts]


@dataclass(frozen=True)
class OcsfDay:
    event_day: str  # YYYYMMDD, as the table's folders name it
    rows: int
    places: int  # region and account folders, one file each


def ocsf_rows(lake: Lake, days: int = 30) -> list[OcsfDay]:
    """Rows of the OCSF table (jobs/ocsf.py) per event day, its newest `days` days, as the runs that swapped each day's
    partitions in counted them (their reports): reading the table's footers instead costs a file per region, account
    and day."""
    built: dict[str, tuple[int, int]] = {}
    for run in read_reports(lake.derived_reports(OCSF_JOB)):  # oldest first: a later build of a date replaces it
        if run.get("status") == "succeeded":
            rows, folders = run.get("rows", {}).get(OCSF_API_ACTIVITY, {}), run.get("folders", {}).get(OCSF_API_ACTIVITY, {})
            built.update({day: (count, folders.get(day, 0)) for day, count in rows.items()})
    shown = sorted((day.replace("-", ""), *figures) for day, figures in built.items() if figures[0])[-days:] if days else []
    return [OcsfDay(*row) for row in shown]


@dataclass(frozen=True)
class Verdict:
    event_date: str
    verdict: str
    run_id: str
    validated_at: str
    failed: tuple[str, ...]


def gate_verdicts(gates: list[dict[str, Any]]) -> list[Verdict]:
    """Per event date, the newest gate verdict on it, newest date first."""
    newest: dict[str, Verdict] = {}
    for gate in gates:  # oldest first: a later gate's verdict replaces an earlier one
        failed = tuple(sorted({failure_name(f) for f in gate.get("failed_critical", [])}))
        for day in gate.get("event_dates", []):
            newest[str(day)] = Verdict(str(day), verdict_of(gate), str(gate.get("run_id", "")), gate.get("validated_at", ""), failed)
    return sorted(newest.values(), key=lambda v: v.event_date, reverse=True)


@dataclass(frozen=True)
class QuarantinedRow:
    """One quarantined row as the page shows it: its text cut at SAMPLE_CHARS."""

    reason: str
    source_file: str  # a local path
    record_index: int | None  # None: the whole file
    record: str | None
    record_chars: int | None
    detail: str | None
    run_id: str
    ingested_at: str


@dataclass(frozen=True)
class Quarantined:
    by_reason_and_day: list[tuple[str, str, int]]  # reason, ingest date, rows
    samples: list[QuarantinedRow]


def quarantine(lake: Lake, samples_per_reason: int = 3) -> Quarantined:
    """What is in quarantine, by reason and the day it arrived, with the newest few rows of each reason."""
    source = _partitions(lake.quarantine)
    if source is None:
        return Quarantined([], [])
    db = _duckdb()
    counts = db.execute(
        f"select {REASON}, cast(cast(_ingest_time as date) as varchar) d, count(*) from {source} group by 1, 2 order by 2 desc, 1"
    ).fetchall()
    rows = db.execute(
        f"""select {REASON}, source_file, record_index, left(record, {SAMPLE_CHARS}), length(record), detail,
                   _ingest_run_id, cast(_ingest_time as varchar)
            from {source} qualify row_number() over (partition by {REASON} order by _ingest_time desc, source_file, record_index) <= ?
            order by {REASON}, _ingest_time desc""",
        [samples_per_reason],
    ).fetchall()
    samples = [QuarantinedRow(reason, local_path(path), *rest) for reason, path, *rest in rows]
    return Quarantined([tuple(row) for row in counts], samples)


def replay_command(reason: str) -> str:
    """How to read a reason's quarantined rows again (after a parser fix or a repair of the files)."""
    conf = json.dumps({"replay_quarantine": True, "replay_reason": reason})
    return f"airflow dags trigger cloudtrail_ingest --conf '{conf}'"


@dataclass(frozen=True)
class LedgerHit:
    path: str
    status: str  # ingested, quarantined, ingested and quarantined, taken (not committed yet), not seen
    size: int | None
    source_batch: int | None  # the source log's offset that read its manifest
    runs: tuple[str, ...]
    rows_written: int
    quarantined: dict[str, int]
    details: tuple[str, ...]
    records_in_file: int | None
    duplicates_dropped: int | None


@functools.lru_cache(maxsize=100_000)
def _manifest(path: str, mtime_ns: int) -> tuple[tuple[tuple[str, int | None, bool], ...], date | None]:
    """A manifest's files (path, size, taken whole) and their newest delivery date.

    A manifest is written whole and never changed (jobs/ledger.py): a long-lived process (the
    API server) reads each one once; a week of them names tens of thousands of files."""
    entries = tuple((e.path, e.size, e.only_records is None) for e in read_manifest(Path(path)).entries)
    return entries, max((d for d in (delivery_date(p) for p, _, _ in entries) if d), default=None)


def _manifests(lake: Lake) -> list[tuple[str, tuple[tuple[str, int | None, bool], ...], date | None]]:
    """Every manifest of the ledger, oldest first: its path, files and newest delivery date."""
    found = []
    for path in sorted(lake.manifests.glob("[0-9]*.jsonl")):
        try:
            found.append((str(path), *_manifest(str(path), path.stat().st_mtime_ns)))
        except FileNotFoundError:
            continue  # let go by a run as we listed (jobs/ledger.py): its files are retired
    return found


def _records_in(path: str) -> int | None:
    """How many records the file holds, if it reads as CloudTrail JSON (None when it does not: it is in quarantine)."""
    try:
        if os.path.getsize(path) > COUNT_RECORDS_UP_TO:
            return None
        raw = Path(path).read_bytes()
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        records = json.loads(text).get("Records")
    except (OSError, ValueError, EOFError, AttributeError, zlib.error):
        return None
    return len(records) if isinstance(records, list) else None


def ledger(lake: Lake, landing: Path, query: str) -> list[LedgerHit]:
    """Landing files whose path holds `query` (or, for a YYYY-MM-DD query, that were delivered that day), with what became of each."""
    query = query.strip()
    try:
        day: date | None = date.fromisoformat(query)
    except ValueError:
        day = None
    offsets = {entry.path: entry.batch_id for entry in read_source_log(lake.checkpoint, lake.manifests).entries}
    committed = source_offset(lake.checkpoint, last_commit(lake.checkpoint).batch_id)
    taken: dict[str, tuple[int | None, int | None]] = {}
    for manifest, entries, _ in _manifests(lake):  # oldest first: the newest read of a file wins
        for path, size, whole in entries:
            if whole or path not in taken:
                taken[path] = (size, offsets.get(manifest))
    in_landing = [
        file.path for d, folder in day_folders(landing, day) if day is None or d == day for file in log_files_in(folder)
    ] if day is not None or query else []  # fmt: skip
    paths = sorted({p for p in [*taken, *in_landing] if (day is not None and delivery_date(p) == day) or (day is None and query in p)})
    paths = paths[:LEDGER_HITS]
    written, quarantined, runs, details = _table_rows(lake, paths)
    hits = []
    for path in paths:
        size, source_batch = taken.get(path, (None, None))
        rows, held = written.get(path, 0), quarantined.get(path, {})
        if path not in taken and not rows and not held:
            status = "not seen"
        elif source_batch is None or committed is None or source_batch > committed:
            status = "taken, not committed yet" if not rows and not held else "ingested"
        else:
            status = " and ".join(s for s, n in (("ingested", rows), ("quarantined", held)) if n) or "ingested (only duplicates)"
        records = _records_in(path) if os.path.exists(path) else None
        duplicates = records - rows - sum(held.values()) if records is not None and status != "not seen" else None
        hits.append(
            LedgerHit(
                path,
                status,
                size,
                source_batch,
                tuple(sorted(runs.get(path, ()))),
                rows,
                held,
                tuple(details.get(path, ())),
                records,
                duplicates,
            )  # fmt: skip
        )
    return hits


def _table_rows(
    lake: Lake, paths: list[str]
) -> tuple[dict[str, int], dict[str, dict[str, int]], dict[str, set[str]], dict[str, list[str]]]:
    """Rows of these files in the events table and the quarantine, and the runs that wrote them.

    The events table is read only where a file's events can be: up to two days before its
    delivery date, and the dates its late events went to (jobs/ledger.py's late files)."""
    written: dict[str, int] = {}
    quarantined: dict[str, dict[str, int]] = {}
    runs: dict[str, set[str]] = {}
    details: dict[str, list[str]] = {}
    if not paths:
        return written, quarantined, runs, details
    db = _duckdb()
    days = {d - timedelta(days=back) for d in (delivery_date(p) for p in paths) if d is not None for back in range(3)}
    named = [source_file(path) for path in paths]
    days |= {d for d, files in late_files(lake.late_files).items() if files & set(named)}
    events = _parquet([partition(lake.events, d) for d in sorted(days)])
    if events is not None:
        query = f"select _source_file, _ingest_run_id, count(*) from {events} where _source_file in (select unnest(?)) group by 1, 2"
        for name, run, count in db.execute(query, [named]).fetchall():
            path = local_path(name)
            written[path] = written.get(path, 0) + count
            runs.setdefault(path, set()).add(run)
    held = _partitions(lake.quarantine)
    if held is not None:
        query = (f"select source_file, {REASON}, _ingest_run_id, count(*), min(detail) from {held} "
                 "where source_file in (select unnest(?)) group by 1, 2, 3")  # fmt: skip
        for name, reason, run, count, detail in db.execute(query, [named]).fetchall():
            path = local_path(name)
            quarantined.setdefault(path, {})[reason] = quarantined.get(path, {}).get(reason, 0) + count
            runs.setdefault(path, set()).add(run)
            details.setdefault(path, []).append(f"{reason}: {detail}")
    return written, quarantined, runs, details


@dataclass(frozen=True)
class CheckpointHealth:
    committed_batch: int | None
    watermark: datetime | None
    state_bytes: int
    source_log_bytes: int
    source_log_files: int
    sink_log_bytes: dict[str, int]
    manifests: int


def _size(folder: Path) -> tuple[int, int]:
    """Bytes and files under a folder."""
    total = count = 0
    for root, _, files in os.walk(folder):
        for name in files:
            total += os.path.getsize(os.path.join(root, name))
            count += 1
    return total, count


def checkpoint_health(lake: Lake) -> CheckpointHealth:
    commit = last_commit(lake.checkpoint) if lake.checkpoint.is_dir() else None
    source_bytes, source_files = _size(lake.checkpoint / "sources")
    sinks = {table.name: _size(sink_log(table))[0] for table in (lake.events, lake.quarantine)}
    return CheckpointHealth(
        commit.batch_id if commit else None,
        commit.watermark if commit else None,
        _size(state_folder(lake.checkpoint))[0],
        source_bytes,
        source_files,
        sinks,
        len(list(lake.manifests.glob("[0-9]*.jsonl"))),
    )


def run_summary(run: dict[str, Any], gate: dict[str, Any] | None) -> list[str]:
    """What one ingest run did, as lines of text (the end of `make run`, the run view's heading)."""
    lines = [
        f"run {run['run_id']}: {run['status']}" + (f" ({run['error']})" if run.get("error") else ""),
        f"  files read       {run.get('files_read', 0):>10}  ({run.get('bytes_read', 0) / 1e6:.1f} MB)",
        f"  records read     {run.get('records_read', 0):>10}",
        f"  rows written     {run.get('rows_written', 0):>10}  in {len(run.get('rows_written_per_event_date', {}))} event dates",
        f"  duplicates       {run.get('duplicates_dropped', 0):>10}  dropped",
        f"  quarantined      {run.get('quarantined', 0):>10}  "
        + ", ".join(f"{reason} {count}" for reason, count in run.get("quarantined_by_reason", {}).items()),
        f"  late events      {run.get('late_events', {}).get('count', 0):>10}  written (delivered more than the "
        f"de-duplication horizon, {run.get('dedup_horizon')}, after they happened)",
    ]
    ledger = run.get("ledger") or {}
    if ledger.get("settling_files"):
        due = ledger.get("settling_due")
        lines.append(f"  settling         {ledger['settling_files']:>10}  files left for a later run, the first due at {due}")
    if ledger.get("skipped_entries"):
        lines.append(f"  landing skipped  {ledger['skipped_entries']:>10}  entries the landing walk passed over:")
        lines.extend(f"    {entry.get('path')}: {entry.get('reason')}" for entry in ledger.get("skipped", [])[:SKIPPED_SHOWN])
    if gate is None:
        lines.append("  gate             not run")
    elif verdict_of(gate) == "skipped":
        lines.append(f"  gate         {'skipped':>14}  {gate.get('reason', '')}")
    else:
        failed = gate.get("failed_critical", [])
        lines.append(
            f"  gate             {verdict_of(gate):>10}  {len(failed)} critical failures, {len(gate.get('warnings', []))} warnings"
        )
        lines.extend(f"    {failure_line(check)}" for check in failed)
    return lines


def activity_summary(lake: Lake, run_id: str) -> list[str] | None:
    """What one downstream DAG run built (jobs/activity.py, then jobs/ocsf.py), as lines of text; None when it left no report."""
    lines: list[str] = []
    for job in DERIVED_JOBS:
        run = read_report(lake.derived_report(job, run_id))
        if run is None:
            continue
        lines.append(f"{job} run {run['run_id']}: {run['status']}" + (f" ({run['error']})" if run.get("error") else ""))
        lines.append(f"  event dates built  {len(run.get('dates', []))}  {', '.join(run.get('dates', [])[:10])}")
        for table, per_date in run.get("rows", {}).items():
            lines.append(f"  {table:<18} {sum(per_date.values()):>10} rows")
        if job == ACTIVITY_JOB:
            top = sorted(run.get("findings_by_rule", {}).items(), key=lambda item: (-item[1], item[0]))[:5]
            lines.append("  findings by rule   " + (", ".join(f"{rule} {count}" for rule, count in top) or "none"))
        lines.append(f"  gate               {run.get('gate') or 'not run'}")
    return lines or None


def gate_of(gates: list[dict[str, Any]], run_id: str) -> dict[str, Any] | None:
    return next((gate for gate in reversed(gates) if gate.get("run_id") == run_id), None)
