"""The "CloudTrail lake" page and a DAG run's lake view: a FastAPI app the Airflow API server mounts.

    /cloudtrail/                      the lake: freshness, rows per event date, file ledger (?file=),
                                      quarantine, gate verdicts, checkpoint health
    /cloudtrail/runs/{dag_id}/{run_id}  what one run did (the DAG run's "Lake" tab)
    /cloudtrail/status.json           the page's figures as JSON
    /cloudtrail/docs/{path}           the lake's Great Expectations Data Docs

Every route needs the same sign-in as the rest of the UI and read access to the ingest DAG
(Airflow's auth manager, through the session cookie or a bearer token). Nothing a request
carries becomes a path, except a Data Docs page name, which must resolve inside the Data Docs folder.
"""

from __future__ import annotations

import dataclasses
import time
from datetime import timedelta
from html import escape
from pathlib import Path
from typing import Any

from airflow.api_fastapi.core_api.security import requires_access_dag
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse

from cloudtrail_airflow.settings import INGEST_DAG_ID, Settings, load_settings
from jobs import lake_status as status
from jobs.lake import Lake

app = FastAPI(title="CloudTrail lake", dependencies=[Depends(requires_access_dag("GET", param_dag_id=INGEST_DAG_ID))])

# Days of the quarantine's table by reason and day.
QUARANTINE_DAYS = 30

STYLE = """
body { font-family: system-ui, sans-serif; margin: 16px; color: #1a202c; font-size: 14px; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 6px 0; } td, th { padding: 3px 10px; border-bottom: 1px solid #eee; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; } tr.stale td, tr.failed td { background: #fde8e8; }
code, pre { font-size: 12px; background: #f5f5f5; padding: 1px 4px; } pre { white-space: pre-wrap; max-width: 1100px; }
.muted { color: #718096; } .bar { fill: #4a90d9; } .late { fill: #e07b39; }
"""


def _page(title: str, body: str, started: float) -> HTMLResponse:
    took = (time.perf_counter() - started) * 1000
    return HTMLResponse(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title><style>{STYLE}</style></head>"
        f"<body><h1>{escape(title)}</h1>{body}<p class='muted' id='took'>rendered in {took:.0f} ms</p></body></html>"
    )


def _section(anchor: str, title: str, body: str) -> str:
    return f"<section id='{anchor}'><h2>{escape(title)}</h2>{body}</section>"


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
    rows = [[escape(d.event_date), f"{d.rows:,}", f"{d.late:,}", f"{d.late_share:.1%}"] for d in days]
    return svg + _table(["event date", "rows", "late events", "late share"], rows, numeric=frozenset({1, 2, 3}))


def _freshness(rows: list[status.Freshness], threshold: timedelta) -> str:
    cells = [
        [
            escape(r.account),
            escape(r.region),
            escape(Path(r.newest_file).name) if r.newest_file else "none",
            status.format_time(r.delivered_at),
            status.format_time(r.newest_event),
            status.format_lag(r.lag),
        ]  # fmt: skip
        for r in rows
    ]
    note = (
        f"<p class='muted'>Highlighted: no event written yet, or the newest event is more than {threshold} "
        "older than the newest delivery.</p>"
    )
    head = ["account", "region", "newest delivery file", "delivered", "newest eventTime in the table", "lag"]
    return _table(head, cells, ["stale" if r.stale else "" for r in rows]) + note


def _ledger(query: str, hits: list[status.LedgerHit]) -> str:
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
    for reason in sorted({s["reason"] for s in found.samples}):
        samples = [s for s in found.samples if s["reason"] == reason]
        rows = [
            [
                escape(s["source_file"]),
                "whole file" if s["record_index"] is None else str(s["record_index"]),
                escape(s["detail"] or ""),
                f"<code>{escape(s['record'] or '')}</code>" + (" ..." if (s["record_chars"] or 0) > status.SAMPLE_CHARS else ""),
            ]  # fmt: skip
            for s in samples
        ]
        parts.append(f"<h3>{escape(reason)}</h3>" + _table(["file", "record", "detail", "record text"], rows))
        parts.append(f"<p>Read again after a fix: <code>{escape(status.replay_command(reason))}</code></p>")
    return "".join(parts)


def _gates(request: Request, verdicts: list[status.Verdict]) -> str:
    if not verdicts:
        return "<p>no gate has run</p>"
    rows = [
        [
            escape(v.event_date),
            escape(v.verdict),
            escape(v.run_id),
            escape(v.validated_at),
            escape("; ".join(v.failed)),
            f"<a href='{request.url_for('data_docs', path=v.data_docs)}'>Data Docs</a>" if v.data_docs else "",
        ]  # fmt: skip
        for v in verdicts[:60]
    ]
    head = ["event date", "verdict", "run", "validated", "critical failures", ""]
    return _table(head, rows, ["failed" if v.verdict == "failed" else "" for v in verdicts[:60]])


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


def _settings() -> tuple[Settings, Lake]:
    settings = load_settings()
    return settings, Lake.at(settings.lake)


@app.get("/", response_class=HTMLResponse)
def lake_page(request: Request, file: str = "") -> HTMLResponse:
    started = time.perf_counter()
    settings, lake = _settings()
    runs, gates = status.ingest_runs(lake), status.gate_runs(lake)
    waiting = status.backlog(lake, settings.landing)
    last = status.find_run(runs, None)
    summary = "\n".join(status.run_summary(last, status.gate_of(gates, last["run_id"]))) if last else "no run yet"
    threshold = settings.freshness_threshold
    sections = [
        f"<p class='muted'>lake {escape(str(lake.root))}, landing {escape(str(settings.landing))}</p>",
        f"<p>Backlog: {waiting.files:,} landing files ({waiting.bytes / 1e6:.1f} MB) not taken by a run yet.</p>",
        _section("run", "Last run", f"<pre>{escape(summary)}</pre>"),
        _section("freshness", "Freshness", _freshness(status.freshness(lake, settings.landing, threshold, runs), threshold)),
        _section("rows", "Rows per event date (last 30 dates)", _chart(status.daily_rows(lake, runs))),
        _section("ledger", "File ledger", _ledger(file, status.ledger(lake, settings.landing, file) if file else [])),
        _section("quarantine", "Quarantine", _quarantine(status.quarantine(lake))),
        _section("gate", "Gate verdicts", _gates(request, status.gate_verdicts(lake, gates))),
        _section("checkpoint", "Checkpoint", _checkpoint(status.checkpoint_health(lake))),
    ]  # fmt: skip
    return _page("CloudTrail lake", "".join(sections), started)


@app.get("/runs/{dag_id}/{run_id}", response_class=HTMLResponse)
def run_page(dag_id: str, run_id: str) -> HTMLResponse:
    started = time.perf_counter()
    _, lake = _settings()
    run = status.find_run(status.ingest_runs(lake), run_id)
    if run is None:
        built = status.activity_summary(lake, run_id)
        if built is not None:
            return _page("CloudTrail lake: downstream run", f"<pre>{escape(chr(10).join(built))}</pre>", started)
        body = f"<p>No report in the lake for {escape(dag_id)} run {escape(run_id)}: it has not reached its Spark job yet.</p>"
        return _page("CloudTrail lake: run", body, started)
    gate = status.gate_of(status.gate_runs(lake), run_id)
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
        f"<pre>{escape(chr(10).join(status.run_summary(run, gate)))}</pre><h2>Batches</h2>"
        + _table(head, batches, numeric=frozenset({1, 2, 3, 4, 5}))
        + f"<p class='muted'>{escape(dag_id)} · started {escape(run['started_at'])} · finished {escape(str(run.get('finished_at')))}</p>"
    )
    return _page("CloudTrail lake: run", body, started)


@app.get("/status.json")
def status_json() -> dict[str, Any]:
    settings, lake = _settings()
    runs = status.ingest_runs(lake)
    return {
        "backlog": dataclasses.asdict(status.backlog(lake, settings.landing)),
        "freshness": [dataclasses.asdict(row) for row in status.freshness(lake, settings.landing, settings.freshness_threshold, runs)],
        "rows_per_event_date": [dataclasses.asdict(row) for row in status.daily_rows(lake, runs)],
        "gate_verdicts": [dataclasses.asdict(v) for v in status.gate_verdicts(lake, status.gate_runs(lake))],
        "checkpoint": dataclasses.asdict(status.checkpoint_health(lake)),
    }


@app.get("/docs/{path:path}", name="data_docs")
def data_docs(path: str) -> FileResponse:
    _, lake = _settings()
    root = lake.data_docs.resolve()
    target = (root / path).resolve()
    if not target.is_relative_to(root) or not target.is_file():
        raise HTTPException(status_code=404, detail="no such Data Docs page")
    return FileResponse(target)
