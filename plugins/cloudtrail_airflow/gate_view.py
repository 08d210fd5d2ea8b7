"""The gates' pages of the lake's app (mounted by plugins/cloudtrail_airflow/lake_view.py, behind its sign-in):

    /cloudtrail/gates/                  every gate's verdict, newest first
    /cloudtrail/gates/{table}/{run_id}  one gate's results: each suite's expectations, counts and offending values

`table` is `events` (the ingest's and a rebuild's gates) or a derived job (jobs/lake.py's DERIVED).
"""

from __future__ import annotations

import json
import time
from html import escape
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from cloudtrail_airflow import pages
from cloudtrail_airflow.settings import load_settings
from jobs.lake import DERIVED, Lake
from jobs.reporting import summary as run_summary
from jobs.reporting.report import verdict_of
from jobs.status import lake_status as status

router = APIRouter()


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
    checks = pages.table(head, rows, classes, numeric=frozenset({3, 4}))
    return pages.section(name, f"{name}: {verdict}", f"<p class='muted'>{kind}</p>{checks}")


def _gate_reports(lake: Lake) -> dict[str, list[dict[str, Any]]]:
    """The gates' reports by the tables they checked: the events table (ingest and rebuild), the derived tables, the OCSF table."""
    return {"events": status.gate_runs(lake)} | {d.job: status.derived_gate_runs(lake, d.job) for d in DERIVED}


@router.get("/gates/", response_class=HTMLResponse)
def gates_page(request: Request) -> HTMLResponse:
    started = time.perf_counter()
    lake = load_settings().lake_at()
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
            f"<a href='{pages.href(request, 'gates', table, str(gate.get('run_id')))}'>results</a>" if gate.get("suites") else "",
        ]  # fmt: skip
        for table, gate in found
    ]
    head = ["validated", "tables", "run", "verdict", "event dates", "critical failures", "warnings", ""]
    classes = ["failed" if verdict_of(gate) == "failed" else "" for _, gate in found]
    body = pages.table(head, rows, classes, numeric=frozenset({5, 6})) if rows else "<p>no gate has run</p>"
    return pages.page("CloudTrail lake: gate runs", body, started)


@router.get("/gates/{table}/{run_id:path}", response_class=HTMLResponse)
def gate_page(table: str, run_id: str) -> HTMLResponse:
    started = time.perf_counter()
    lake = load_settings().lake_at()
    gate = run_summary.gate_of(_gate_reports(lake).get(table, []), run_id)
    if gate is None:
        missing = f"<p>No {escape(table)} gate report for run {escape(run_id)}.</p>"
        return pages.page("CloudTrail lake: gate", missing, started, status_code=404)
    summary = (
        f"<p>Run <code>{escape(run_id)}</code>: {escape(verdict_of(gate))}, validated {escape(str(gate.get('validated_at')))}"
        f" on event dates {escape(', '.join(map(str, gate.get('event_dates', []))))}"
        + (f", {gate['rows_validated']:,} rows" if isinstance(gate.get("rows_validated"), int) else "")
        + (f". {escape(str(gate['reason']))}" if gate.get("reason") else "") + ".</p>"
    )  # fmt: skip
    suites = "".join(_suite(name, suite) for name, suite in gate.get("suites", {}).items())
    return pages.page("CloudTrail lake: gate", summary + suites, started)
