"""Whether a run's data-quality gate passed, or has nothing new to check (stdlib only: the DAG asks before any Spark).

A passing gate records, per event date it validated, the partition's fingerprint (its data
files' names and sizes, taken before it read them) in `<lake>/reports/dq/_validated.json`. A run
that wrote nothing, quarantined nothing and whose partitions all still have the recorded
fingerprints would check the very files a gate already passed: it is skipped, with a report
that says so. Any change to a partition (a new batch, a rebuild's swap, a hand edit) changes
its fingerprint, so the gate runs again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobs.lake import Lake
from jobs.reporting.report import failure_line, read_report, skipped_gate_report, verdict_of, write_json
from jobs.storage import LakePath, read_record, under, write_record
from jobs.tables.events import date_fingerprint


class GateFailed(RuntimeError):
    """A critical expectation failed: the run must not publish."""


def fingerprints(lake: Lake, dates: list[str]) -> dict[str, str]:
    return {day: date_fingerprint(lake, day) for day in dates}


# _validated.json's format (jobs/storage.py's `record_body`): 2 = {"dates": {date: {"fingerprint", "run_id"}}}; format 1
# was the dates object alone.
VALIDATED_FORMAT = 2


def validated(lake: Lake) -> dict[str, dict[str, str]]:
    """Per event date, the fingerprint of the partition a gate last passed and that gate's run."""
    if not lake.validated.exists():
        return {}
    body = read_record(lake.validated, VALIDATED_FORMAT, {1: under("dates")})
    dates: dict[str, dict[str, str]] = body["dates"]
    return dates


def record_validated(lake: Lake, prints: dict[str, str], run_id: str | None) -> None:
    """Written whole (rename); two gates racing can lose an entry, which only costs a later gate run."""
    index = validated(lake) | {day: {"fingerprint": value, "run_id": str(run_id)} for day, value in prints.items()}
    write_record(lake.validated, VALIDATED_FORMAT, {"dates": dict(sorted(index.items()))}, indent=1)


def wrote_anything(figures: Mapping[str, Any]) -> bool:
    """A run that wrote or quarantined rows changed what a gate checks (figures: the run report's totals)."""
    return bool(figures.get("rows_written", 0) or figures.get("quarantined", 0))


def verdict(lake: Lake, run_id: str) -> str | None:
    """The verdict of this run's gate so far: passed, failed, skipped, or None when none ran."""
    report = read_report(lake.gate_report(run_id))
    return verdict_of(report) if report is not None else None


def failed(lake: Lake, run_id: str) -> GateFailed:
    """What a run whose gate failed ends with: each failed expectation (its unexpected count and samples), then the report."""
    report = read_report(lake.gate_report(run_id)) or {}
    failures = "; ".join(failure_line(check) for check in report.get("failed_critical", []))
    return GateFailed(f"the quality gate failed: {failures or 'see the report'} (report {lake.gate_report(run_id)})")


def skip_reason(lake: Lake, run_id: str, dates: list[str]) -> str | None:
    """Why this run's gate would check nothing new, or None when it must run."""
    report = read_report(lake.ingest_report(run_id))
    if report is None:
        return None
    if report.get("status") != "succeeded" or wrote_anything(report):
        return None
    index = validated(lake)
    if not dates or any(index.get(day, {}).get("fingerprint") != value for day, value in fingerprints(lake, dates).items()):
        return None
    runs = sorted({index[day]["run_id"] for day in dates})
    return f"the run wrote nothing and partitions {', '.join(dates)} are unchanged since gate runs {', '.join(runs)} passed them"


def record_skip(lake: Lake, run_id: str, dates: list[str], reason: str) -> LakePath:
    return write_json(lake.gate_report(run_id), skipped_gate_report(run_id, dates, reason))
