"""The "CloudTrail lake" page and a DAG run's lake view: a FastAPI app the Airflow API server mounts.

    /cloudtrail/                      the lake: freshness, rows per event date, each derived job's rows
                                      (jobs/lake.py's DERIVED), file ledger (?file=), quarantine, gate
                                      verdicts, checkpoint health
    /cloudtrail/runs/{dag_id}/{run_id}  what one run did (the DAG run's "Lake" tab)
    /cloudtrail/status.json           the page's figures as JSON
    /cloudtrail/gates/                every gate's verdict, newest first
    /cloudtrail/gates/{table}/{run_id}  one gate's results: each suite's expectations, counts and offending values

Every route needs the same sign-in as the rest of the UI and read access to the ingest DAG
(Airflow's auth manager, through the session cookie or a bearer token). Nothing a request
carries becomes a path: a run id is looked up among the reports read.

Every value shown comes from the lake, and CloudTrail's fields are chosen by whoever calls an AWS
API or writes into the landing zone: each is escaped where it is put into the page, and every
response carries a Content-Security-Policy that lets a page load nothing from another origin and
run no script at all (the pages have none), so a value that slipped through could not run either.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import quote

from airflow.api_fastapi.core_api.security import requires_access_dag
from fastapi import Depends, FastAPI, Request, Response
from fastapi.responses import HTMLResponse

from cloudtrail_airflow.settings import INGEST_DAG_ID, Settings, load_settings
from jobs import lake_status as status
from jobs import ledger_search, run_summary, tally
from jobs.lake import DERIVED, Derived, Lake
from jobs.report import verdict_of
from jobs.spark_logs import CheckpointError

app = FastAPI(title="CloudTrail lake", dependencies=[Depends(requires_access_dag("GET", param_dag_id=INGEST_DAG_ID))])

# Days of the quarantine's table by reason and day.
QUARANTINE_DAYS = 30

STYLE = """
body { font-family: system-ui, sans-serif; margin: 16px; color: #1a202c; font-size: 14px; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 6px 0; } td, th { padding: 3px 10px; border-bottom: 1px solid #eee; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; } tr.stale td, tr.failed td { background: #fde8e8; }
code, pre { font-size: 12px; background: #f5f5f5; padding: 1px 4px; } pre { white-space: pre-wrap; max-width: 1100px; }
.muted { color: #718096; } .bar { fill: #4a90d9; } .late { fill: #e07b39; } .problem { background: #fde8e8; padding: 6px; }
"""
# The one inline style is allowed by its hash; nothing else inline, nothing from another origin, no script.
_STYLE_HASH = base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        f"default-src 'self'; script-src 'none'; style-src 'sha256-{_STYLE_HASH}'; object-src 'none'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


@app.middleware("http")
async def security_headers(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    response = await call_next(request)
    response.headers.update(SECURITY_HEADERS)
    return response


def _href(request: Request, *parts: str) -> str:
    """A link to one of this app's pages, each part of its path percent-encoded, ready for an attribute."""
    path = "/".join(quote(part, safe="") for part in parts)
    return escape(f"{request.scope.get('root_path', '')}/{path}", quote=True)


def _page(title: str, body: str, started: float, status_code: int = 200) -> HTMLResponse:
    took = (time.perf_counter() - started) * 1000
    return HTMLResponse(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title><style>{STYLE}</style></head>"
        f"<body><h1>{escape(title)}</h1>{body}<p class='muted' id='took'>rendered in {took:.0f} ms</p></body></html>",
        status_code=status_code,
    )


def _section(anchor: str, title: str, body: str) -> str:
    return f"<section id='{anchor}'><h2>{escape(title)}</h2>{body}</section>"


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
    return _section("problems", "Problems: the lake's state is damaged", f"<ul class='problem'>{items}</ul>")


def _table(head: list[str], rows: list[list[str]], classes: list[str] | None = None, numeric: frozenset[int] = frozenset()) -> str:
    header = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join(
        f"<tr class='{(classes or [''] * len(rows))[i]}'>"
        + "".join(f"<td class='n'>{cell}</td>" if j in numeric else f"<td>{cell}</td>" for j, cell in enumerate(row))
        + "</tr>"
        for i, row in enumerate(rows)
    )
    return f"<table><tr>{header}</tr>{body}</table>"


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
    return svg + _table(["event date", "rows", "late events", "late share", "files"], rows, numeric=frozenset({1, 2, 3, 4}))


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
    return _table(head, cells, ["stale" if r.stale else "" for r in rows], numeric=frozenset({6})) + note


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
    found = _table(head, rows, numeric=frozenset({3, 4, 5})) if hits else "<p>no landing file matches</p>"
    note = (
        "<p class='muted'>A quarantined file is read again by itself when it changes in the landing zone "
        "(re-delivered or repaired), or by a replay (below).</p>"
    )
    return form + found + note


def _quarantine(found: status.Quarantined) -> str:
    if not found.by_reason_and_day:
        return "<p>nothing quarantined</p>"
    reasons = sorted({reason for reason, _, _ in found.by_reason_and_day})
    days = sorted({day for _, day, _ in found.by_reason_and_day}, reverse=True)[:QUARANTINE_DAYS]
    counts = {(reason, day): count for reason, day, count in found.by_reason_and_day}
    by_day = [[escape(day), *(f"{counts.get((reason, day), 0):,}" for reason in reasons)] for day in days]
    heading = f"<p class='muted'>Rows quarantined by the day they arrived, the newest {QUARANTINE_DAYS} days with any.</p>"
    parts = [heading + _table(["arrived", *reasons], by_day, numeric=frozenset(range(1, len(reasons) + 1)))]
    for reason in sorted({s.reason for s in found.samples}):
        samples = [s for s in found.samples if s.reason == reason]
        rows = [
            [
                escape(s.source_file),
                "whole file" if s.record_index is None else str(s.record_index),
                escape(s.detail or ""),
                f"<code>{escape(s.record or '')}</code>" + (" ..." if (s.record_chars or 0) > status.SAMPLE_CHARS else ""),
            ]  # fmt: skip
            for s in samples
        ]
        parts.append(f"<h3>{escape(reason)}</h3>" + _table(["file", "record", "detail", "record text"], rows))
        parts.append(f"<p>Read again after a fix: <code>{escape(status.replay_command(reason))}</code></p>")
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
            f"<a href='{_href(request, 'gates', 'events', v.run_id)}'>results</a>",
        ]  # fmt: skip
        for v in verdicts[:60]
    ]
    head = ["event date", "verdict", "run", "validated", "critical failures", ""]
    link = f"<p><a href='{_href(request, 'gates', '')}'>Every gate run</a></p>"
    return _table(head, rows, ["failed" if v.verdict == "failed" else "" for v in verdicts[:60]]) + link


def _values(values: list[Any]) -> str:
    """Offending values as the gate sampled them, each as JSON text in its own box."""
    return " ".join(f"<code>{escape(json.dumps(value, default=str))}</code>" for value in values)


def _suite(name: str, suite: dict[str, Any]) -> str:
    """One suite's expectations: verdict, unexpected count and share, up to 5 offending values, the observed value."""
    rows, classes = [], []
    for check in suite.get("checks", []):
        kwargs = {k: v for k, v in (check.get("kwargs") or {}).items() if k != "batch_id"}
        count, share = check.get("unexpected_count"), check.get("unexpected_percent")
        observed = check.get("observed_value")
        rows.append([
            escape(str(check.get("expectation"))),
            escape(json.dumps(kwargs, default=str)),
            "passed" if check.get("success") else "failed",
            "" if count is None else f"{count:,}",
            "" if share is None else f"{share:.3g}%",
            _values(check.get("sample_unexpected") or []),
            "" if observed is None else f"<code>{escape(json.dumps(observed, default=str))}</code>",
        ])  # fmt: skip
        classes.append("" if check.get("success") else "failed")
    kind = "critical: a failure fails the gate" if suite.get("critical") else "warning: reported only"
    verdict = "passed" if suite.get("success") else "failed"
    head = ["expectation", "arguments", "verdict", "unexpected", "unexpected share", "sample of unexpected values", "observed"]
    return _section(name, f"{name}: {verdict}", f"<p class='muted'>{kind}</p>" + _table(head, rows, classes, numeric=frozenset({3, 4})))


def _checkpoint(health: status.CheckpointHealth) -> str:
    rows = [
        ["committed batch", "none" if health.committed_batch is None else str(health.committed_batch)],
        ["de-duplication watermark", status.format_time(health.watermark)],
        ["state store", f"{health.state_bytes / 1e6:.1f} MB"],
        ["source log", f"{health.source_log_bytes / 1e3:.0f} KB in {health.source_log_files} files"],
        *[[f"{table} sink log", f"{size / 1e3:.0f} KB"] for table, size in health.sink_log_bytes.items()],
        ["ledger manifests", str(health.manifests)],
    ]
    return _table(["", ""], rows)


def _derived(derived: Derived, lake: Lake) -> str:
    """A derived job's rows per table and event date, and for a table with folders inside its dates, those folders."""
    days = status.derived_rows(lake, derived)
    if not days:
        return (
            "<p>no rows yet: the <code>cloudtrail_activity</code> DAG builds them after each ingest run, once it is unpaused "
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
    return note + _table(head, rows, numeric=frozenset(range(1, len(head))))


def _settings() -> tuple[Settings, Lake]:
    settings = load_settings()
    return settings, Lake.at(settings.lake)


def _deliveries(found: status.Deliveries) -> str:
    queue = found.queue
    lines = [
        f"Queue: {queue['waiting']:,} notifications waiting, {queue['in_flight']:,} being taken, {queue['delayed']:,} delayed."
        if queue is not None
        else f"Queue: cannot be asked ({escape(found.queue_error or 'no queue configured')}).",
        f"Inbox: {found.inbox:,} asset events' notifications not yet ledgered.",
        f"Oldest notification of the newest run that took any (it started {escape(found.oldest_message[0])}): "
        f"{found.oldest_message[1]:,.0f} s old then."
        if found.oldest_message
        else "No run has taken a notification yet.",
        f"Kept as unreadable: {found.kept:,} notifications (under notifications/kept/ in the lake).",
    ]
    lines += [f"&nbsp;&nbsp;{escape(reason)}" for reason in found.kept_reasons]
    if found.reconciliation:
        r = found.reconciliation
        lines.append(
            f"Last reconciliation against CloudTrail's digests, {escape(str(r['checked_at']))}: {r['hours']:,} hours, "
            f"{r['delivered']:,} files delivered, {r['ingested']:,} ingested, {r['missing']:,} missing (taken then), "
            f"{r['hash_mismatches']:,} whose content hash differs."
        )
    else:
        lines.append("No reconciliation yet: the first run on the queue makes one (then every --reconcile-interval).")
    if found.delivery_lag and found.delivery_lag.get("files"):
        lag = found.delivery_lag
        lines.append(f"Delivery to queryable, last run: p50 {lag['p50_seconds']} s, p95 {lag['p95_seconds']} s ({lag['files']} files)")
    return "".join(f"<p>{line}</p>" for line in lines)


def _backlog(waiting: status.Backlog) -> str:
    return f"<p>Backlog: {waiting.files:,} landing files ({waiting.bytes / 1e6:.1f} MB) not taken by a run yet.</p>"


@app.get("/", response_class=HTMLResponse)
def lake_page(request: Request, file: str = "") -> HTMLResponse:
    started = time.perf_counter()
    settings, lake = _settings()
    last, gates, tallied = status.ingest_run(lake, None), status.gate_runs(lake), tally.read(lake)
    summary = "\n".join(run_summary.run_summary(last, run_summary.gate_of(gates, last["run_id"]))) if last else "no run yet"
    threshold, skew, now = settings.freshness_threshold, settings.clock_skew, datetime.now(tz=UTC)
    places = status.freshness(lake, settings.walked, threshold, tallied, now, skew)

    def delivered() -> status.Deliveries:
        return status.deliveries(lake, settings.queue_url, tallied)

    sections = [
        f"<p class='muted'>lake {escape(str(lake.root))}, landing {escape(settings.landing_url)}</p>",
        _problems(status.problems(lake)),
        *([] if settings.bucket else [_readable(lambda: _backlog(status.backlog(lake, settings.landing)))]),
        _section("run", "Last run", f"<pre>{escape(summary)}</pre>"),
        *([_section("deliveries", "Deliveries (S3 notifications)", _readable(lambda: _deliveries(delivered())))]
          if settings.bucket else []),
        _section("freshness", "Freshness", _freshness(places, threshold, skew, now)),
        _section("rows", "Rows per event date (last 30 dates)", _chart(status.daily_rows(lake, tallied))),
        *[_section(derived.job, f"{derived.title}: rows per event date (last 30 dates)",
                   _readable(functools.partial(_derived, derived, lake))) for derived in DERIVED],
        _section("ledger", "File ledger",
                 _readable(lambda: _ledger(file, ledger_search.search(lake, settings.landing, file) if file else []))),
        _section("quarantine", "Quarantine", _quarantine(status.quarantine(lake))),
        _section("gate", "Gate verdicts", _gates(request, run_summary.gate_verdicts(gates))),
        _section("checkpoint", "Checkpoint", _readable(lambda: _checkpoint(status.checkpoint_health(lake)))),
    ]  # fmt: skip
    return _page("CloudTrail lake", "".join(sections), started)


@app.get("/runs/{dag_id}/{run_id:path}", response_class=HTMLResponse)
def run_page(dag_id: str, run_id: str) -> HTMLResponse:
    started = time.perf_counter()
    _, lake = _settings()
    run = status.ingest_run(lake, run_id)
    if run is None:
        built = run_summary.derived_summary(lake, run_id)
        if built is not None:
            return _page("CloudTrail lake: downstream run", f"<pre>{escape(chr(10).join(built))}</pre>", started)
        body = f"<p>No report in the lake for {escape(dag_id)} run {escape(run_id)}: it has not reached its Spark job yet.</p>"
        return _page("CloudTrail lake: run", body, started)
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
        f"<pre>{escape(chr(10).join(run_summary.run_summary(run, gate)))}</pre><h2>Batches</h2>"
        + _table(head, batches, numeric=frozenset({1, 2, 3, 4, 5}))
        + f"<p class='muted'>{escape(dag_id)} · started {escape(run['started_at'])} · finished {escape(str(run.get('finished_at')))}</p>"
    )
    return _page("CloudTrail lake: run", body, started)


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
    }


def _fields(build: Callable[[], Any]) -> dict[str, Any]:
    """A dataclass's fields, or why the lake's state behind it cannot be read (the same as in "problems")."""
    try:
        return dataclasses.asdict(build())
    except (CheckpointError, OSError, ValueError) as exc:
        return {"unreadable": str(exc)}


def _gate_reports(lake: Lake) -> dict[str, list[dict[str, Any]]]:
    """The gates' reports by the tables they checked: the events table (ingest and rebuild), the downstream tables, the OCSF table."""
    return {"events": status.gate_runs(lake)} | {d.job: status.derived_gate_runs(lake, d.job) for d in DERIVED}


@app.get("/gates/", response_class=HTMLResponse)
def gates_page(request: Request) -> HTMLResponse:
    started = time.perf_counter()
    _, lake = _settings()
    found = [(table, gate) for table, gates in _gate_reports(lake).items() for gate in gates]
    found.sort(key=lambda pair: str(pair[1].get("validated_at", "")), reverse=True)
    rows = [
        [
            escape(str(gate.get("validated_at", ""))),
            table,
            escape(str(gate.get("run_id"))),
            escape(verdict_of(gate)),
            escape(", ".join(map(str, gate.get("event_dates", [])))[:200]),
            f"{len(gate.get('failed_critical', [])):,}",
            f"{len(gate.get('warnings', [])):,}",
            f"<a href='{_href(request, 'gates', table, str(gate.get('run_id')))}'>results</a>" if gate.get("suites") else "",
        ]  # fmt: skip
        for table, gate in found
    ]
    head = ["validated", "tables", "run", "verdict", "event dates", "critical failures", "warnings", ""]
    classes = ["failed" if verdict_of(gate) == "failed" else "" for _, gate in found]
    body = _table(head, rows, classes, numeric=frozenset({5, 6})) if rows else "<p>no gate has run</p>"
    return _page("CloudTrail lake: gate runs", body, started)


@app.get("/gates/{table}/{run_id:path}", response_class=HTMLResponse)
def gate_page(table: str, run_id: str) -> HTMLResponse:
    started = time.perf_counter()
    _, lake = _settings()
    gate = run_summary.gate_of(_gate_reports(lake).get(table, []), run_id)
    if gate is None:
        return _page("CloudTrail lake: gate", f"<p>No {escape(table)} gate report for run {escape(run_id)}.</p>", started, status_code=404)
    summary = (
        f"<p>Run <code>{escape(run_id)}</code>: {escape(verdict_of(gate))}, validated {escape(str(gate.get('validated_at')))}"
        f" on event dates {escape(', '.join(map(str, gate.get('event_dates', []))))}"
        + (f", {gate['rows_validated']:,} rows" if isinstance(gate.get("rows_validated"), int) else "")
        + (f". {escape(str(gate['reason']))}" if gate.get("reason") else "") + ".</p>"
    )  # fmt: skip
    suites = "".join(_suite(name, suite) for name, suite in gate.get("suites", {}).items())
    return _page("CloudTrail lake: gate", summary + suites, started)
