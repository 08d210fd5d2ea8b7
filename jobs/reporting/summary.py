"""Runs and gates as an operator reads them: an ingest run's summary (the end of `make run`, the run page), a
derived run's, and the newest gate verdict per event date."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobs.lake import DERIVED, Lake
from jobs.reporting.report import failure_line, failure_name, read_report, verdict_of

# Entries the landing walk passed over that a run summary lists (the run report holds up to 100).
SKIPPED_SHOWN = 10


@dataclass(frozen=True)
class Verdict:
    event_date: str
    verdict: str
    run_id: str
    validated_at: str
    failed: tuple[str, ...]


def _deliveries(deliveries: dict[str, Any]) -> list[str]:
    """An S3 landing's objects not fetched (refused, gone, forbidden) and the notifications outside its landing."""
    lines = []
    if deliveries.get("problems"):
        lines.append(f"  not fetched      {deliveries['problems']:>10}  objects:")
        lines.extend(f"    s3://{p['bucket']}/{p['key']}: {p['reason']}" for p in deliveries.get("problems_shown", [])[:SKIPPED_SHOWN])
    outside = deliveries.get("outside_landing")
    if outside:
        named = ", ".join(outside["named"])
        lines.append(f"  outside landing  {outside['files']:>10}  log files under {named}, not {outside['landing']}: kept")
    return lines


def gate_verdicts(gates: list[dict[str, Any]]) -> list[Verdict]:
    """Per event date, the newest gate verdict on it, newest date first."""
    newest: dict[str, Verdict] = {}
    for gate in gates:  # oldest first: a later gate's verdict replaces an earlier one
        failed = tuple(sorted({failure_name(f) for f in gate.get("failed_critical", [])}))
        for day in gate.get("event_dates", []):
            newest[str(day)] = Verdict(str(day), verdict_of(gate), str(gate.get("run_id", "")), gate.get("validated_at", ""), failed)
    return sorted(newest.values(), key=lambda v: v.event_date, reverse=True)


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
    if ledger.get("changed_files"):
        lines.append(f"  changed          {ledger['changed_files']:>10}  files read again, their content changed:")
        lines.extend(f"    {path}" for path in ledger.get("changed_shown", [])[:SKIPPED_SHOWN])
    lines += _deliveries(run.get("deliveries") or {})
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


def derived_summary(lake: Lake, run_id: str) -> list[str] | None:
    """What one derived DAG run built (each of jobs/lake.py's DERIVED, in order), as lines of text; None when it
    left no report."""
    lines: list[str] = []
    for derived in DERIVED:
        run = read_report(lake.derived_report(derived.job, run_id))
        if run is None:
            continue
        lines.append(f"{derived.job} run {run['run_id']}: {run['status']}" + (f" ({run['error']})" if run.get("error") else ""))
        lines.append(f"  event dates built  {len(run.get('dates', []))}  {', '.join(run.get('dates', [])[:10])}")
        for table, per_date in run.get("rows", {}).items():
            lines.append(f"  {table:<18} {sum(per_date.values()):>10} rows")
        for counted, by in run.get("counts", {}).items():
            top = sorted(by.items(), key=lambda item: (-item[1], item[0]))[:5]
            lines.append(f"  {counted:<18} " + (", ".join(f"{name} {count}" for name, count in top) or "none"))
        lines.append(f"  gate               {run.get('gate') or 'not run'}")
    if lines:
        lines += publish_summary(read_report(lake.publish_report(run_id)))
    return lines or None


def publish_summary(report: dict[str, Any] | None) -> list[str]:
    """What one publish to the Iceberg catalog did (jobs/publishing/command.py's report): per table its snapshot, the files it
    added and removed, and each date held back with why."""
    if report is None:
        return ["  publish          not run"]
    lines = [f"  publish          {report['status']:>10}  run {report['run_id']} to {report['catalog']}, namespace {report['namespace']}"]
    for table in report.get("tables", []):
        if table.get("error"):
            lines.append(f"    {table['table']:<18} ERROR {table['error']}")
            continue
        shown = f"snapshot {table['snapshot_id']}" if table.get("snapshot_id") else "no rows yet"
        lines.append(f"    {table['table']:<18} {shown}, +{table['added']} -{table['removed']} files, lag {table['lag_seconds']:.0f} s")
        lines.extend(f"      held back {day}: {why}" for day, why in table.get("held_back", {}).items())
    return lines


def gate_of(gates: list[dict[str, Any]], run_id: str) -> dict[str, Any] | None:
    return next((gate for gate in reversed(gates) if gate.get("run_id") == run_id), None)
