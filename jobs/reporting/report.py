"""Every report the lake keeps: their shapes, the one writer (`write_json`: whole, by a rename) and the one
reader (`read_report`, `read_reports`), which the lake page, `make status`, the DAGs and the jobs all use.

    <lake>/reports/ingest/<run id>.json     RunReport: what one ingest run read, wrote, dropped and quarantined
    <lake>/reports/rebuild/<tag>.json       RebuildReport: per rebuilt partition, rows before and after
    <lake>/reports/<job>/<run id>.json      DerivedReport: what one run of a derived job (jobs/lake.py's DERIVED) built
    <lake>/reports/dq/<run id>.json         a gate's report (gate_report, skipped_gate_report): always a verdict,
    <lake>/reports/dq/<job>/<run id>.json   passed, failed or skipped, and each suite's checks
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from jobs.lake import ACTIVITY, VALIDATED, Lake
from jobs.storage import LakePath, read_record, write_record

log = logging.getLogger("cloudtrail_ingest")


@dataclass
class BatchStats:
    batch_id: int
    rows_written_per_event_date: dict[str, int]
    quarantined_by_reason: dict[str, int]
    already_committed: bool = False
    duration_ms: int | None = None
    files_read: int = 0
    bytes_read: int = 0
    records_read: int = 0
    late_events: int = 0
    implausible_event_times: int = 0
    rows_dropped_by_watermark: int = 0
    watermark: str | None = None
    # Late events per event date; per "account/region" the newest eventTime written not after the batch's time
    # plus the clock skew allowance (freshness), and how many events were dated after that (future-dated).
    late_per_event_date: dict[str, int] = field(default_factory=dict)
    newest_event_times: dict[str, str] = field(default_factory=dict)
    future_dated_events: dict[str, int] = field(default_factory=dict)
    # What the run had left to read after this batch (its planned manifests' files).
    backlog_files: int = 0
    backlog_bytes: int = 0

    @property
    def records_per_second(self) -> float:
        return self.records_read / (self.duration_ms / 1000) if self.duration_ms else 0.0


@dataclass
class RunReport:
    run_id: str
    landing: str
    lake: str
    trigger: str
    started_at: str
    watermark_before: str | None
    dedup_horizon: str
    finished_at: str | None = None
    status: str = "running"
    error: str | None = None
    watermark_after: str | None = None
    ledger: dict[str, object] = field(default_factory=dict)
    # An S3 landing: the notifications taken, objects fetched, what could not be (bucket and key), delivery lag.
    deliveries: dict[str, Any] = field(default_factory=dict)
    batches: list[BatchStats] = field(default_factory=list)

    def totals(self) -> dict[str, Any]:
        written: Counter[str] = Counter()
        quarantined: Counter[str] = Counter()
        late: Counter[str] = Counter()
        future: Counter[str] = Counter()
        for batch in self.batches:
            if not batch.already_committed:
                written.update(batch.rows_written_per_event_date)
                quarantined.update(batch.quarantined_by_reason)
                late.update(batch.late_per_event_date)
                future.update(batch.future_dated_events)
        records_read = sum(b.records_read for b in self.batches)
        rows_out = sum(sum(b.rows_written_per_event_date.values()) + sum(b.quarantined_by_reason.values()) for b in self.batches)
        return {
            "files_read": sum(b.files_read for b in self.batches),
            "bytes_read": sum(b.bytes_read for b in self.batches),
            "records_read": records_read,
            "rows_written": sum(written.values()),
            "rows_written_per_event_date": dict(sorted(written.items())),
            "duplicates_dropped": records_read - rows_out,
            "late_events": {
                "count": sum(b.late_events for b in self.batches),
                "per_event_date": dict(sorted(late.items())),
                "what_happened": "written to the table, de-duplicated like any other event: the de-duplication "
                "watermark runs on arrival time, not event time (docs/design.md)",
            },
            "implausible_event_times": {
                "count": sum(b.implausible_event_times for b in self.batches),
                "what_happened": "written to the table as evidence: event times before CloudTrail existed (2013-11-13) "
                "or more than a day after the record arrived; the warning suite reports them",
            },
            "rows_dropped_by_watermark": sum(b.rows_dropped_by_watermark for b in self.batches),
            "quarantined_by_reason": dict(sorted(quarantined.items())),
            "quarantined": sum(quarantined.values()),
            "newest_event_times": newest_event_per_place(b.newest_event_times for b in self.batches),
            "future_dated_events": dict(sorted(future.items())),
        }

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        for batch, stats in zip(self.batches, body["batches"], strict=True):
            stats["records_per_second"] = round(batch.records_per_second, 1)
        body.update(self.totals())
        return body

    def write(self) -> tuple[LakePath, dict[str, Any]]:
        """The report written (to_json, totals included, computed once): its path and body."""
        body = self.to_json()
        return write_json(Lake.at(self.lake).ingest_report(self.run_id), body), body


@dataclass
class DerivedReport:
    run_id: str
    started_at: str
    dates: list[str] = field(default_factory=list)
    status: str = "running"
    # Per table, per event date: the rows the new partition holds (0: the partition was removed).
    rows: dict[str, dict[str, int]] = field(default_factory=dict)
    # What else the job counted, by what it counts (activity: "findings by rule"), then by what (a rule id).
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    # The job's suites' verdict on the staged partitions (reports/dq/<job>/<run id>.json); failed: nothing swapped.
    gate: str | None = None
    seconds: float | None = None
    error: str | None = None
    # The derived job that built the tables (a `Derived`'s job: activity, ocsf).
    job: str = ACTIVITY.job
    # Per table, per event date: the partition folders those rows fill, one file each (jobs/tables/staging.py).
    folders: dict[str, dict[str, int]] = field(default_factory=dict)

    def write(self, lake: Lake) -> LakePath:
        return write_json(lake.derived_report(self.job, self.run_id), asdict(self))


@dataclass
class PartitionStats:
    rows_before: int = 0
    rows_after: int = 0
    files_read: int = 0
    duplicates_dropped: int = 0
    quarantined: int = 0
    rows_kept_from_unreadable_files: int = 0
    data_files_lost: int = 0  # the partition's files the lake no longer held: it was rebuilt without them


@dataclass
class RebuildReport:
    run_id: str
    tag: str
    started_at: str
    dates: list[str]
    status: str = "running"
    dry_run: bool = False
    partitions: dict[str, Any] = field(default_factory=dict)
    quarantine_partitions_replaced: list[str] = field(default_factory=list)
    gate: str | None = None
    seconds: float | None = None
    error: str | None = None

    def write(self, lake: Lake) -> LakePath:
        return write_json(lake.rebuild_report(self.tag), asdict(self))


# The reports' format (jobs/storage.py's `record_body`): 1 since reports named one; none of their shapes changed since.
REPORT_FORMAT = 1


def write_json(path: LakePath, body: Mapping[str, Any]) -> LakePath:
    """A report written whole (a rename): a reader finds the old version or the new one, never half of one."""
    return write_record(path, REPORT_FORMAT, body, indent=2)


def read_report(path: LakePath) -> dict[str, Any] | None:
    """A report as written; None when there is none (or it cannot be read: reports are replaced whole, so only a
    damaged one cannot, and the page shows the others)."""
    try:
        return read_record(path, REPORT_FORMAT)
    except (OSError, ValueError):  # a newer format too: the page shows the others
        return None


def written_batches(lake: Lake) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every batch an ingest run wrote (not one it found committed already), with the run's id: the runs' reports are
    the record of which run wrote which batch and which rows, for a rebuild and a repair alike."""
    for body in read_reports(lake.ingest_reports):
        for batch in body.get("batches") or []:
            if not batch.get("already_committed"):
                yield body["run_id"], batch


def read_reports(folder: LakePath, newest: int | None = None) -> list[dict[str, Any]]:
    """Every report in a reports folder (or the `newest` written), oldest first (the gates' index sits beside their
    reports)."""
    paths = [p for p in folder.glob("*.json") if p.name != VALIDATED] if folder.is_dir() else []
    written = []
    for path in paths:
        try:
            written.append((path.stat().st_mtime_ns, path))
        except OSError:
            continue  # replaced as we listed: shown next time
    written.sort()
    chosen = written if newest is None else written[len(written) - newest :] if newest > 0 else []
    bodies = (read_report(path) for _, path in chosen)
    return [body for body in bodies if body is not None]


def skipped_gate_report(run_id: str, dates: Iterable[object], reason: str) -> dict[str, Any]:
    """The report of a gate that had nothing new to check (jobs/quality/gate.py)."""
    return {"run_id": run_id, "validated_at": now_iso(), "event_dates": [str(day) for day in dates], "verdict": "skipped", "reason": reason}


def gate_report(run_id: str | None, dates: Iterable[object], outcome: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    """A gate's report, whoever ran it (the ingest's gate, a rebuild's, the derived tables'): always a verdict.

    `outcome`: jobs/validate_events.validate's suites, failed_critical and warnings."""
    verdict = "failed" if outcome.get("failed_critical") else "passed"
    body = {"run_id": run_id, "validated_at": now_iso(), "event_dates": [str(day) for day in dates], "verdict": verdict}
    return {**body, **extra, **outcome}


def verdict_of(gate: dict[str, Any]) -> str:
    """passed, failed or skipped (a rebuild's report before jobs/reporting/report.py's gate_report had none: its failures say)."""
    return str(gate.get("verdict") or ("failed" if gate.get("failed_critical") else "passed"))


def failure_name(check: dict[str, Any]) -> str:
    """A failed expectation as the gate names it: suite, expectation, column."""
    kwargs = check.get("kwargs") or {}
    column = kwargs.get("column") or kwargs.get("column_A")
    return f"{check.get('suite')}: {check.get('expectation')}" + (f" on {column}" if column else "")


def failure_line(check: dict[str, Any]) -> str:
    """A failed expectation with its unexpected count and up to 5 offending values, as JSON (a terminal shows no control character raw)."""
    count, observed = check.get("unexpected_count"), check.get("observed_value")
    samples = ", ".join(json.dumps(value, default=str)[:80] for value in (check.get("sample_unexpected") or [])[:5])
    line = failure_name(check) + (f", {count} unexpected" if count is not None else "")
    if samples:
        return f"{line}; sample: {samples}"
    return f"{line}; observed: {json.dumps(observed, default=str)[:200]}" if observed is not None else line


def newest_event_per_place(times: Iterable[dict[str, str]]) -> dict[str, str]:
    """Per "account/region", the newest of these eventTimes (ISO 8601 UTC text, which sorts as time does)."""
    newest: dict[str, str] = {}
    for per_place in times:
        for place, moment in per_place.items():
            newest[place] = max(moment, newest.get(place, moment))
    return dict(sorted(newest.items()))


def now_iso() -> str:
    return datetime.now(tz=UTC).isoformat(timespec="seconds")


def apply_progress(report: RunReport, progress: dict[str, Any]) -> BatchStats | None:
    """Fold one StreamingQueryProgress (as JSON) into the batch it describes."""
    batch = next((b for b in report.batches if b.batch_id == progress["batchId"]), None)
    if batch is None:
        return None
    observed = progress.get("observedMetrics", {})
    files = observed.get("files", {})
    records = observed.get("records", {})
    batch.duration_ms = progress.get("durationMs", {}).get("triggerExecution")
    batch.files_read = int(files.get("files") or 0)
    batch.bytes_read = int(files.get("bytes") or 0)
    batch.records_read = int(records.get("records") or 0)
    batch.rows_dropped_by_watermark = sum(int(op.get("numRowsDroppedByWatermark", 0)) for op in progress.get("stateOperators", []))
    batch.watermark = progress.get("eventTime", {}).get("watermark")
    # Left to read: the plan's backlog less what the batches so far read (progress comes in batch order).
    planned = cast(dict[str, int], report.ledger)
    batch.backlog_files = max(0, planned.get("backlog_files", 0) - sum(b.files_read for b in report.batches))
    batch.backlog_bytes = max(0, planned.get("backlog_bytes", 0) - sum(b.bytes_read for b in report.batches))
    return batch


def log_batch(batch: BatchStats) -> None:
    written = sum(batch.rows_written_per_event_date.values())
    quarantined = sum(batch.quarantined_by_reason.values())
    log.info(
        "batch %d: %d files (%.1f MB), %d records -> %d rows into %d event dates, %d duplicates dropped, "
        "%d quarantined, %d late events kept, %.1f s, %.0f records/s; backlog %d files (%.1f MB)%s",
        batch.batch_id,
        batch.files_read,
        batch.bytes_read / 1e6,
        batch.records_read,
        written,
        len(batch.rows_written_per_event_date),
        batch.records_read - written - quarantined,
        quarantined,
        batch.late_events,
        (batch.duration_ms or 0) / 1000,
        batch.records_per_second,
        batch.backlog_files,
        batch.backlog_bytes / 1e6,
        " (already committed by an earlier attempt: not written again)" if batch.already_committed else "",
    )
