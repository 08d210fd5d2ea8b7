"""The "CloudTrail lake" page and a DAG run's lake view: a FastAPI app the Airflow API server mounts.

    /cloudtrail/                      the lake: freshness, rows per event date, each derived job's rows
                                      (jobs/lake.py's DERIVED), file ledger (?file=), quarantine, gate
                                      verdicts, checkpoint health
    /cloudtrail/runs/{dag_id}/{run_id}  what one run did (the DAG run's "Lake" tab)
    /cloudtrail/status.json           the page's figures as JSON
    /cloudtrail/gates/...             the gates' pages (plugins/cloudtrail_airflow/gate_view.py)

Every route needs the same sign-in as the rest of the UI and read access to the ingest DAG
(Airflow's auth manager, through the session cookie or a bearer token). Nothing a request
carries becomes a path: a run id is looked up among the reports read.

Every value shown comes from the lake, and CloudTrail's fields are chosen by whoever calls an AWS
API or writes into the landing zone: each is escaped where it is put into the page, and every
response carries a Content-Security-Policy that lets a page load nothing from another origin and
run no script at all (the pages have none), so a value that slipped through could not run either.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from html import escape
from pathlib import Path
from typing import Any

from airflow.api_fastapi.core_api.security import requires_access_dag
from fastapi import Depends, FastAPI, Request, Response
from fastapi.responses import HTMLResponse

from cloudtrail_airflow import gate_view, pages
from cloudtrail_airflow.settings import INGEST_DAG_ID, Settings, load_settings
from jobs.lake import DERIVED, Derived, Lake
from jobs.ledger import search as ledger_search
from jobs.reporting import summary as run_summary
from jobs.reporting import tally
from jobs.reporting.report import read_report
from jobs.spark.logs import CheckpointError
from jobs.status import lake_status as status
from jobs.status import quarantined
from jobs.tables.events import events_source
from jobs.tables.quarantine_files import quarantine_source

app = FastAPI(title="CloudTrail lake", dependencies=[Depends(requires_access_dag("GET", param_dag_id=INGEST_DAG_ID))])

# Days of the quarantine's table by reason and day.
QUARANTINE_DAYS = 30


app.include_router(gate_view.router)


@app.middleware("http")
async def security_headers(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    response = await call_next(request)
    response.headers.update(pages.SECURITY_HEADERS)
    return response


def _readable(build: Callable[[], str]) -> str:
    """A part of the page, or why the lake's state behind it cannot be read (listed under Problems too)."""
    try:
        return build()
    except (CheckpointError, OSError, ValueError) as exc:
        return f"<p class='problem'>cannot be read: {escape(str(exc))}</p>"


def _problems(found: list[str]) -> str:
    if not found:
        return ""
    items = "".join(f"<li>{escape(problem)}</li>" for problem in found)
    return pages.section("problems", "Problems: the lake's state is damaged", f"<ul class='problem'>{items}</ul>")


def _chart(days: list[status.DayRows]) -> str:
    """Rows per event date as bars, the late share of each in orange at its foot."""
    if not days:
        return "<p>no rows yet</p>"
    width, height, top = 24, 120, max(day.rows for day in days)
    bars = []
    for i, day in enumerate(days):
        total = height * day.rows / top
        late = total * day.late_share
        title = f"{day.event_date}: {day.rows} rows, {day.late} late ({day.late_share:.1%})"
        bars.append(
            f"<g><title>{escape(title)}</title>"
            f"<rect class='bar' x='{i * width}' y='{height - total:.1f}' width='{width - 4}' height='{total:.1f}'/>"
            f"<rect class='late' x='{i * width}' y='{height - late:.1f}' width='{width - 4}' height='{late:.1f}'/></g>"
        )
    svg = f"<svg width='{len(days) * width}' height='{height}' role='img' aria-label='rows per event date'>{''.join(bars)}</svg>"
    rows = [[escape(d.event_date), f"{d.rows:,}", f"{d.late:,}", f"{d.late_share:.1%}", f"{d.files:,}"] for d in days]
    return svg + pages.table(["event date", "rows", "late events", "late share", "files"], rows, numeric=frozenset({1, 2, 3, 4}))


def _freshness(rows: list[status.Freshness], threshold: timedelta, skew: timedelta, now: datetime) -> str:
    cells = [
        [
            escape(r.account),
            escape(r.region),
            escape(Path(r.newest_file).name) if r.newest_file else "none",
            status.format_time(r.delivered_at),
            status.format_time(r.newest_event),
            status.format_lag(r.lag),
            f"{r.future_dated:,}" if r.future_dated else "",
        ]  # fmt: skip
        for r in rows
    ]
    note = (
        f"<p class='muted'>At {status.format_time(now)}. Highlighted (STALE): no event written yet, or the newest delivery or the "
        f"newest event is more than {status.format_lag(threshold)} old. Future-dated: events dated more than "
        f"{status.format_lag(skew)} after they were ingested (a forged or wrong clock); they are in the table, but never "
        "count as a place's newest event.</p>"
    )
    head = ["account", "region", "newest delivery file", "delivered", "newest eventTime in the table", "lag", "future-dated"]
    return pages.table(head, cells, ["stale" if r.stale else "" for r in rows], numeric=frozenset({6})) + note


def _ledger(query: str, hits: list[ledger_search.LedgerHit]) -> str:
    form = (
        "<form method='get'><input name='file' size='70' placeholder='path fragment, file id or delivery date YYYY-MM-DD' "
        f"value='{escape(query, quote=True)}'> <button>Search</button></form>"
    )
    if not query:
        return form
    rows = [
        [
            escape(h.path),
            escape(h.status),
            escape(", ".join(h.runs)),
            "" if h.source_batch is None else str(h.source_batch),
            f"{h.rows_written:,}",
            "" if h.duplicates_dropped is None else f"{h.duplicates_dropped:,}",
            escape(", ".join(f"{reason} {count}" for reason, count in h.quarantined.items())),
            escape("; ".join(h.details)[:300]),
        ]  # fmt: skip
        for h in hits
    ]
    head = ["file", "status", "runs", "source batch", "rows written", "duplicates dropped", "quarantined", "detail"]
    found = pages.table(head, rows, numeric=frozenset({3, 4, 5})) if hits else "<p>no landing file matches</p>"
    note = (
        "<p class='muted'>A quarantined file is read again by itself when it changes in the landing zone "
        "(re-delivered or repaired), or by a replay (below).</p>"
    )
    return form + found + note


def _search(lake: Lake, landing: Path, file: str) -> list[ledger_search.LedgerHit]:
    return ledger_search.search_ledger(lake, landing, file, functools.partial(events_source, lake), quarantine_source(lake)) if file else []


def _quarantine(found: quarantined.Quarantined) -> str:
    if not found.by_reason_and_day:
        return "<p>nothing quarantined</p>"
    reasons = sorted({reason for reason, _, _ in found.by_reason_and_day})
    days = sorted({day for _, day, _ in found.by_reason_and_day}, reverse=True)[:QUARANTINE_DAYS]
    counts = {(reason, day): count for reason, day, count in found.by_reason_and_day}
    by_day = [[escape(day), *(f"{counts.get((reason, day), 0):,}" for reason in reasons)] for day in days]
    heading = f"<p class='muted'>Rows quarantined by the day they arrived, the newest {QUARANTINE_DAYS} days with any.</p>"
    parts = [heading + pages.table(["arrived", *reasons], by_day, numeric=frozenset(range(1, len(reasons) + 1)))]
    for reason in sorted({s.reason for s in found.samples}):
        samples = [s for s in found.samples if s.reason == reason]
        rows = [
            [
                escape(s.source_file),
                "whole file" if s.record_index is None else str(s.record_index),
                escape(s.detail or ""),
                f"<code>{escape(s.record or '')}</code>" + (" ..." if (s.record_chars or 0) > quarantined.SAMPLE_CHARS else ""),
            ]  # fmt: skip
            for s in samples
        ]
        parts.append(f"<h3>{escape(reason)}</h3>" + pages.table(["file", "record", "detail", "record text"], rows))
        parts.append(f"<p>Read again after a fix: <code>{escape(quarantined.replay_command(reason))}</code></p>")
    return "".join(parts)


def _gates(request: Request, verdicts: list[run_summary.Verdict]) -> str:
    if not verdicts:
        return "<p>no gate has run</p>"
    rows = [
        [
            escape(v.event_date),
            escape(v.verdict),
            escape(v.run_id),
            escape(v.validated_at),
            escape("; ".join(v.failed)),
            f"<a href='{pages.href(request, 'gates', 'events', v.run_id)}'>results</a>",
        ]  # fmt: skip
        for v in verdicts[:60]
    ]
    head = ["event date", "verdict", "run", "validated", "critical failures", ""]
    link = f"<p><a href='{pages.href(request, 'gates', '')}'>Every gate run</a></p>"
    return pages.table(head, rows, ["failed" if v.verdict == "failed" else "" for v in verdicts[:60]]) + link


def _checkpoint(health: status.CheckpointHealth) -> str:
    rows = [
        ["committed batch", "none" if health.committed_batch is None else str(health.committed_batch)],
        ["de-duplication watermark", status.format_time(health.watermark)],
        ["state store", f"{health.state_bytes / 1e6:.1f} MB"],
        ["source log", f"{health.source_log_bytes / 1e3:.0f} KB in {health.source_log_files} files"],
        ["ledger manifests", str(health.manifests)],
    ]
    return pages.table(["", ""], rows)


def _derived(derived: Derived, lake: Lake) -> str:
    """A derived job's rows per table and event date, and for a table with folders inside its dates, those folders."""
    days = status.derived_rows(lake, derived)
    if not days:
        return (
            "<p>no rows yet: the <code>cloudtrail_derived</code> DAG builds them after each ingest run, once it is unpaused "
            f"(every DAG starts paused), or <code>python -m jobs.{escape(derived.job)}</code></p>"
        )
    nested = [name for name, columns in derived.tables.items() if len(columns) > 1]
    head = ["event date", *(f"{name} rows" for name in derived.tables), *(f"{name} folders" for name in nested)]
    rows = [
        [escape(d.event_date), *(f"{d.rows.get(n, 0):,}" for n in derived.tables), *(f"{d.folders.get(n, 0):,}" for n in nested)]
        for d in days
    ]
    layout = ", ".join("/".join([name, *(f"{column}=" for column in columns)]) for name, columns in derived.tables.items())
    note = f"<p class='muted'><code>{escape(layout)}</code>, one file per folder; as the runs that built each date counted them</p>"
    return note + pages.table(head, rows, numeric=frozenset(range(1, len(head))))


def _published(lake: Lake) -> str:
    """Per Iceberg table: its snapshot, the local commit it reflects, the lag, the dates held back, the last error."""
    catalog, tables = status.publications(lake)
    if catalog is None:
        return "<p>not published yet: the DAGs' <code>publish</code> task, or <code>python -m jobs.publish</code></p>"
    head = ["table", "snapshot", "local commit", "committed locally", "lag", "held back", "last publish error"]
    rows = [
        [escape(t.table), escape(str(t.snapshot_id or "no rows yet")), escape(t.local_commit or ""), escape(t.local_commit_time or ""),
         f"{t.lag_seconds:.0f} s", "<br>".join(f"{escape(day)}: {escape(why)}" for day, why in t.held_back.items()) or "none",
         escape(t.last_error or "none")]
        for t in tables
    ]  # fmt: skip
    when = escape(tables[0].published_at) if tables else ""
    note = f"<p class='muted'>catalog {escape(catalog)}, as the newest publish ({when}) left it</p>"
    return note + pages.table(head, rows, ["failed" if t.last_error or t.held_back else "" for t in tables])


def _settings() -> tuple[Settings, Lake]:
    settings = load_settings()
    return settings, settings.lake_at()


def _deliveries(found: status.DeliveryStatus) -> str:
    queue = found.queue
    lines = [
        f"Queue: {queue['waiting']:,} notifications waiting, {queue['in_flight']:,} being taken, {queue['delayed']:,} delayed."
        if queue is not None
        else f"Queue: {escape(found.queue_error or '')}.",
        f"Inbox: {found.inbox:,} asset events' notifications not yet ledgered.",
        _notified(found),
        f"Kept as unreadable: {found.kept:,} notifications (under notifications/kept/ in the lake).",
    ]
    lines += [f"&nbsp;&nbsp;{escape(reason)}" for reason in found.kept_reasons]
    if found.outside:
        out = found.outside
        lines.append(
            f"<strong>Outside the landing:</strong> {out['files']:,} log files in {out['messages']:,} notifications name "
            f"{escape(', '.join(out['named']))}, not the landing {escape(out['landing'])}: kept under notifications/outside/ "
            "in the lake, and taken by the first run whose --landing (CLOUDTRAIL_LANDING) holds them."
        )
        lines += [f"&nbsp;&nbsp;{escape(key)}" for key in out.get("files_shown", [])]
    if found.refused:
        lines.append(f"Refused keys (the newest {len(found.refused)}; the lake's disk cannot hold them, their messages deleted):")
        lines += [f"&nbsp;&nbsp;s3://{escape(p['bucket'])}/{escape(p['key'])}: {escape(p['reason'])}" for p in found.refused]
    if found.reconciliation:
        r = found.reconciliation
        lines.append(
            f"Last reconciliation against CloudTrail's digests, {escape(str(r['checked_at']))}: {r['hours']:,} hours, "
            f"{r['delivered']:,} files delivered, {r['ingested']:,} ingested, {r['missing']:,} missing (taken then), "
            f"{r['hash_mismatches']:,} whose content hash differs."
        )
    else:
        lines.append("No reconciliation yet: the first run on the queue makes one (then every --reconcile-interval).")
    if found.mismatched:
        lines.append("Log files whose content differs from CloudTrail's digest:")
        lines += [f"&nbsp;&nbsp;{escape(key)}" for key in found.mismatched]
    if found.delivery_lag and found.delivery_lag.get("files"):
        lag = found.delivery_lag
        lines.append(f"Delivery to queryable, last run: p50 {lag['p50_seconds']} s, p95 {lag['p95_seconds']} s ({lag['files']} files)")
    return "".join(f"<p>{line}</p>" for line in lines)


def _notified(found: status.DeliveryStatus) -> str:
    if found.notified is None:
        return "No run has taken a notification yet."
    line = f"The newest run that took notifications started {escape(found.notified[0])} and took {found.notified[1]:,}"
    if found.oldest_message and found.oldest_message[0] == found.notified[0]:
        return f"{line}; the oldest was {found.oldest_message[1]:,.0f} s old then."
    return f"{line} (through the watcher's inbox: their age is not known)."


def _backlog(waiting: status.Backlog) -> str:
    return f"<p>Backlog: {waiting.files:,} landing files ({waiting.bytes / 1e6:.1f} MB) not taken by a run yet.</p>"


def dag_run_outcome(run_id: str) -> tuple[str, list[str]] | None:
    """The ingest DAG's run `run_id` as Airflow ended it: its state and the tasks that failed (None: no such DAG run,
    a run by hand, or no Airflow metadata DB to ask: the page rendered outside the API server)."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select
    from sqlalchemy.exc import OperationalError

    ended = (TaskInstance.dag_id == INGEST_DAG_ID, TaskInstance.run_id == run_id, TaskInstance.state.in_(("failed", "upstream_failed")))
    try:
        with create_session() as session:
            state = session.scalar(select(DagRun.state).where(DagRun.dag_id == INGEST_DAG_ID, DagRun.run_id == run_id))
            failed = session.scalars(select(TaskInstance.task_id).where(*ended)).all() if state is not None else []
    except OperationalError:
        return None
    return None if state is None else (str(state), sorted(failed))


def _as_the_dag_run_ended(lines: list[str], run: dict[str, Any]) -> list[str]:
    """The run's summary headed by the DAG run's verdict: an ingest that succeeded in a DAG run Airflow marked failed
    (its publish failed, say) is a failed run."""
    outcome = dag_run_outcome(run["run_id"])
    if outcome is None or outcome[0] in ("success", "running", "queued"):
        return lines
    state, failed = outcome
    tasks = f": {', '.join(failed)} failed" if failed else ""
    return [f"run {run['run_id']}: {state} (the DAG run{tasks}; its ingest job {run['status']})", *lines[1:]]


@app.get("/", response_class=HTMLResponse)
def lake_page(request: Request, file: str = "") -> HTMLResponse:
    started = time.perf_counter()
    settings, lake = _settings()
    last, gates, tallied = status.ingest_run(lake, None), status.gate_runs(lake), tally.read(lake)
    summary = (
        "\n".join(
            _as_the_dag_run_ended(run_summary.run_summary(last, run_summary.gate_of(gates, last["run_id"])), last)
            + run_summary.publish_summary(read_report(lake.publish_report(last["run_id"])))
        )
        if last
        else "no run yet"
    )
    threshold, skew, now = settings.freshness_threshold, settings.clock_skew, datetime.now(tz=UTC)
    places = status.freshness(lake, settings.walked, threshold, tallied, now, skew)

    def delivered() -> status.DeliveryStatus:
        return status.deliveries(lake, settings.queue_url, tallied)

    sections = [
        f"<p class='muted'>lake {escape(str(lake.root))}, landing {escape(settings.landing_url)}</p>",
        _problems(status.problems(lake)),
        *([] if settings.bucket else [_readable(lambda: _backlog(status.backlog(lake, settings.landing)))]),
        pages.section("run", "Last run", f"<pre>{escape(summary)}</pre>"),
        *([pages.section("deliveries", "Deliveries (S3 notifications)", _readable(lambda: _deliveries(delivered())))]
          if settings.bucket else []),
        pages.section("freshness", "Freshness", _freshness(places, threshold, skew, now)),
        pages.section("rows", "Rows per event date (last 30 dates)", _chart(status.daily_rows(lake, tallied))),
        *[pages.section(derived.job, f"{derived.title}: rows per event date (last 30 dates)",
                   _readable(functools.partial(_derived, derived, lake))) for derived in DERIVED],
        pages.section("published", "Published Iceberg tables", _readable(lambda: _published(lake))),
        pages.section("ledger", "File ledger", _readable(lambda: _ledger(file, _search(lake, settings.landing, file)))),
        pages.section("quarantine", "Quarantine", _quarantine(quarantined.quarantine(lake))),
        pages.section("gate", "Gate verdicts", _gates(request, run_summary.gate_verdicts(gates))),
        pages.section("checkpoint", "Checkpoint", _readable(lambda: _checkpoint(status.checkpoint_health(lake)))),
    ]  # fmt: skip
    return pages.page("CloudTrail lake", "".join(sections), started)


@app.get("/runs/{dag_id}/{run_id:path}", response_class=HTMLResponse)
def run_page(dag_id: str, run_id: str) -> HTMLResponse:
    started = time.perf_counter()
    _, lake = _settings()
    run = status.ingest_run(lake, run_id)
    if run is None:
        built = run_summary.derived_summary(lake, run_id)
        if built is not None:
            return pages.page("CloudTrail lake: derived run", f"<pre>{escape(chr(10).join(built))}</pre>", started)
        body = f"<p>No report in the lake for {escape(dag_id)} run {escape(run_id)}: it has not reached its Spark job yet.</p>"
        return pages.page("CloudTrail lake: run", body, started)
    gate = run_summary.gate_of(status.gate_runs(lake), run_id)
    batches = [
        [
            str(b["batch_id"]),
            f"{b['files_read']:,}",
            f"{b['records_read']:,}",
            f"{sum(b['rows_written_per_event_date'].values()):,}",
            f"{sum(b['quarantined_by_reason'].values()):,}",
            f"{b.get('records_per_second', 0):,.0f}",
            f"{b.get('backlog_files', 0):,} files ({b.get('backlog_bytes', 0) / 1e6:.1f} MB)",
            f"{(b['duration_ms'] or 0) / 1000:.1f} s",
        ]  # fmt: skip
        for b in run.get("batches", [])
    ]
    head = ["batch", "files", "records", "rows written", "quarantined", "records/s", "backlog after", "took"]
    body = (
        f"<pre>{escape(chr(10).join(_as_the_dag_run_ended(run_summary.run_summary(run, gate), run)))}</pre><h2>Batches</h2>"
        + pages.table(head, batches, numeric=frozenset({1, 2, 3, 4, 5}))
        + f"<p class='muted'>{escape(dag_id)} · started {escape(run['started_at'])} · finished {escape(str(run.get('finished_at')))}</p>"
    )
    return pages.page("CloudTrail lake: run", body, started)


@app.get("/status.json")
def status_json() -> dict[str, Any]:
    settings, lake = _settings()
    tallied = tally.read(lake)
    places = status.freshness(lake, settings.walked, settings.freshness_threshold, tallied, datetime.now(tz=UTC), settings.clock_skew)
    if settings.bucket:
        waiting = {"deliveries": _fields(lambda: status.deliveries(lake, settings.queue_url, tallied))}
    else:
        waiting = {"backlog": _fields(lambda: status.backlog(lake, settings.landing))}
    return {
        "problems": status.problems(lake),
        **waiting,
        "freshness": [dataclasses.asdict(row) for row in places],
        "rows_per_event_date": [dataclasses.asdict(row) for row in status.daily_rows(lake, tallied)],
        "derived_rows_per_event_date": {d.job: [dataclasses.asdict(row) for row in status.derived_rows(lake, d)] for d in DERIVED},
        "gate_verdicts": [dataclasses.asdict(v) for v in run_summary.gate_verdicts(status.gate_runs(lake))],
        "checkpoint": _fields(lambda: status.checkpoint_health(lake)),
        "published": [dataclasses.asdict(t) for t in status.publications(lake)[1]],
    }


def _fields(build: Callable[[], Any]) -> dict[str, Any]:
    """A dataclass's fields, or why the lake's state behind it cannot be read (the same as in "problems")."""
    try:
        return dataclasses.asdict(build())
    except (CheckpointError, OSError, ValueError) as exc:
        return {"unreadable": str(exc)}
