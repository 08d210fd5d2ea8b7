"""Run parameters of cloudtrail_ingest: the "Trigger DAG w/ config" form, and their checks.

The JSON schema drives the form and is checked by Airflow when a run is created; `plan_run`
checks again what a schema cannot (paths inside the configured roots, date order) and
turns the parameters into the job's command-line arguments, before any Spark starts.
Defaults and value patterns are the job's own (jobs/options.py).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import Param

from cloudtrail_airflow.settings import Settings
from jobs import options, storage
from jobs.landing.bucket import is_bucket

log = logging.getLogger(__name__)


class InvalidRunParams(ValueError):
    """A run parameter is wrong; the message says which and why."""


def dag_params(settings: Settings) -> dict[str, Param]:
    return {
        "mode": Param(
            "incremental",
            enum=list(options.MODES),
            description="incremental: ingest what is new. rebuild: also rebuild the event dates of the run's data interval "
            "from the landing files, replacing their partitions atomically (a backfill over past dates repairs them).",
        ),  # fmt: skip
        "dry_run": Param(
            False, type="boolean", description="With mode=rebuild: list per date the files and bytes a rebuild would read; write nothing."
        ),
        "trigger": Param("availableNow", enum=["availableNow", "once"], description="availableNow: rate-limited batches; once: one batch."),
        "max_files_per_trigger": Param(None, type=["null", "integer"], minimum=1, description="Files per batch (large backlogs)."),
        "max_bytes_per_trigger": Param(
            options.MAX_BYTES_PER_TRIGGER,
            type=["null", "string"],
            pattern=options.SIZE_PATTERN,
            description=f"Compressed bytes per batch, e.g. {options.MAX_BYTES_PER_TRIGGER}.",
        ),  # fmt: skip
        "dedup_horizon": Param(
            options.DEDUP_HORIZON,
            type="string",
            pattern=options.DURATION_PATTERN,
            description="A copy of an event arriving within this time of the first is dropped (on arrival time).",
        ),  # fmt: skip
        "validate_from": Param(
            None,
            type=["null", "string"],
            format="date",
            description="First event date the quality gate checks, besides the run's data interval (YYYY-MM-DD).",
        ),  # fmt: skip
        "validate_to": Param(
            None,
            type=["null", "string"],
            format="date",
            description="Last event date the quality gate checks, besides the run's data interval (YYYY-MM-DD).",
        ),  # fmt: skip
        "replay_quarantine": Param(
            False,
            type="boolean",
            description="Also read again the quarantined files and records below (after a parser fix or a hand repair).",
        ),  # fmt: skip
        "replay_reason": Param(None, type=["null", "string"], description="Replay only rows quarantined for this reason."),
        "replay_from": Param(
            None, type=["null", "string"], format="date", description="Replay only files delivered on or after this date."
        ),
        "replay_to": Param(None, type=["null", "string"], format="date", description="Replay only files delivered on or before this date."),
        "landing": Param(settings.landing_url, type="string", description=f"Landing root, inside {settings.landing_url}."),
        "lake": _lake_param(settings),
        "quarantine_threshold": Param(
            options.QUARANTINE_THRESHOLD, type="number", minimum=0, maximum=1, description="Max share of quarantined records."
        ),
    }


def _inside(path: str, root: Path, name: str) -> str:
    resolved = Path(os.path.realpath(path))
    root_resolved = Path(os.path.realpath(root))
    if resolved != root_resolved and root_resolved not in resolved.parents:
        raise InvalidRunParams(f"param {name}={path!r} is outside the configured root {root}")
    return str(resolved)


def _landing(landing: str, settings: Settings) -> str:
    """The run's landing: inside the configured folder, or the configured bucket itself."""
    if is_bucket(settings.landing_url):
        if landing.rstrip("/") != settings.landing_url.rstrip("/"):
            raise InvalidRunParams(f"param landing={landing!r} is not the configured bucket {settings.landing_url}")
        return settings.landing_url
    return _inside(landing, settings.landing, "landing")


def _lake(lake: str, settings: Settings) -> str:
    """The run's lake: inside the configured folder, or the configured lake in S3 itself (its catalog is the setting's)."""
    if settings.in_object_storage:
        if lake.rstrip("/") != str(settings.lake).rstrip("/"):
            raise InvalidRunParams(f"param lake={lake!r} is not the configured lake {settings.lake}")
        return str(settings.lake)
    return _inside(lake, storage.folder(settings.lake), "lake")


def _lake_param(settings: Settings) -> Param:
    where = "the configured lake" if settings.in_object_storage else f"inside {settings.lake}"
    return Param(str(settings.lake), type="string", description=f"Lake root, {where}.")


def _date(value: Any, name: str) -> date | None:
    if value in (None, ""):
        return None
    try:
        return date.fromisoformat(str(value))
    except ValueError:
        raise InvalidRunParams(f"param {name}={value!r} is not a date (YYYY-MM-DD)") from None


def _dedup_horizon(params: dict[str, Any]) -> str:
    """The horizon, from `dedup_horizon` or the deprecated `watermark` a stored trigger config may still send."""
    horizon = params.get("dedup_horizon") or options.DEDUP_HORIZON
    if params.get("watermark"):
        log.warning("run parameter 'watermark' is deprecated: use 'dedup_horizon'")
        horizon = params["watermark"]
    try:
        options.duration(str(horizon))
    except ValueError as exc:
        raise InvalidRunParams(f"param dedup_horizon: {exc}") from None
    return str(horizon)


def _replay(params: dict[str, Any]) -> list[str]:
    """The ingest job's replay arguments, when the run asks for a replay of the quarantine."""
    if not params.get("replay_quarantine"):
        return []
    first, last = _date(params.get("replay_from"), "replay_from"), _date(params.get("replay_to"), "replay_to")
    if first and last and first > last:
        raise InvalidRunParams(f"replay_from {first} is after replay_to {last}")
    reason = params.get("replay_reason")
    return [
        "--replay-quarantine",
        *([f"--replay-reason={reason}"] if reason else []),
        *([f"--replay-from={first}"] if first else []),
        *([f"--replay-to={last}"] if last else []),
    ]


def rebuild_dates(start: datetime, end: datetime) -> list[date]:
    """The event dates a rebuild run owns: those whose last instant lies in its data interval
    (a daily run: its day; an hourly run: the day it ends, if it ends one; a zero-length
    interval, a manual run's: the day it starts)."""
    if start >= end:
        return [start.date()]
    first, last = start.date(), end.date() - timedelta(days=1)
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


def _rebuild(params: dict[str, Any], landing: str, lake: list[str], run_id: str, dates: list[date], horizon: str) -> list[str] | None:
    """The rebuild job's arguments; None when the run is incremental or no event date ends in its interval."""
    mode = params.get("mode") or "incremental"
    if mode not in options.MODES:
        raise InvalidRunParams(f"param mode={mode!r} must be one of {', '.join(options.MODES)}")
    if mode != "rebuild" or not dates:
        return None
    return [
        "--landing", landing, *lake, "--run-id", run_id, "--from-date", dates[0].isoformat(),
        "--to-date", dates[-1].isoformat(), "--dedup-horizon", horizon, "--lock-wait", str(options.LOCK_WAIT_SECONDS),
    ]  # fmt: skip


def run_interval(context: Mapping[str, Any]) -> tuple[datetime, datetime]:
    """The run's data interval; a run triggered without a logical date (the REST API allows
    `"logical_date": null`) has none, and stands for the moment it was due to run."""
    if context.get("data_interval_start") is None:
        moment = context["dag_run"].run_after
        return moment, moment
    return context["data_interval_start"], context["data_interval_end"]


def plan_run(params: dict[str, Any], settings: Settings, run_id: str, interval_start: datetime, interval_end: datetime) -> dict[str, Any]:
    """Check the parameters and return the arguments of each Spark application of the run."""
    landing = _landing(params["landing"], settings)
    lake = _lake(params["lake"], settings)
    validate_from, validate_to = _date(params.get("validate_from"), "validate_from"), _date(params.get("validate_to"), "validate_to")
    if validate_from and validate_to and validate_from > validate_to:
        raise InvalidRunParams(f"validate_from {validate_from} is after validate_to {validate_to}")
    trigger = params.get("trigger", "availableNow")
    if trigger not in ("availableNow", "once"):
        raise InvalidRunParams(f"param trigger={trigger!r} must be availableNow or once")
    horizon = _dedup_horizon(params)
    at = settings.lake_args(lake)
    ingest = ["--landing", landing, *at, "--run-id", run_id, "--trigger", trigger, "--dedup-horizon", horizon]
    ingest += ["--settle", settings.settle, "--full-listing-interval", settings.full_listing_interval]
    ingest += ["--clock-skew", f"{int(settings.clock_skew.total_seconds())} seconds", *_replay(params)]
    ingest += ["--queue-url", settings.queue_url] if settings.queue_url else []
    if params.get("max_files_per_trigger"):
        ingest += ["--max-files-per-trigger", str(int(params["max_files_per_trigger"]))]
    elif params.get("max_bytes_per_trigger"):
        ingest += ["--max-bytes-per-trigger", str(params["max_bytes_per_trigger"])]
    rebuild = _rebuild(params, landing, at, run_id, rebuild_dates(interval_start, interval_end), horizon)
    if params.get("mode") == "rebuild" and rebuild is None:
        log.info("no event date ends in this run's data interval %s..%s: nothing to rebuild", interval_start, interval_end)
    # The gate checks what this run wrote, the run's data interval, and the dates asked for.
    first = min(d for d in (interval_start.date(), validate_from) if d)
    last = max(d for d in (interval_end.date(), validate_to) if d)
    threshold = str(params.get("quarantine_threshold", options.QUARANTINE_THRESHOLD))
    if rebuild is None:  # the ingest gates what it wrote in its own application; a rebuild's run gates after the rebuild
        ingest += ["--gate-from", first.isoformat(), "--gate-to", last.isoformat(), "--quarantine-threshold", threshold]
    validate = [
        *at, "--run-id", run_id, "--from-date", first.isoformat(), "--to-date", last.isoformat(),
        "--quarantine-threshold", threshold,
    ]  # fmt: skip
    return {
        "ingest_args": ingest,
        "validate_args": validate,
        "gate_dates": [day.isoformat() for day in options.date_range(first, last)],
        "rebuild_args": rebuild or [],  # an XCom each: a None one would read as missing
        "dry_run": bool(params.get("dry_run")),
        "lake": lake,
    }


def derived_params(settings: Settings) -> dict[str, Param]:
    """cloudtrail_derived's form: without dates, what changed upstream; with them, those event dates."""
    return {
        "from_date": Param(None, type=["null", "string"], format="date", description="First event date to rebuild (YYYY-MM-DD)."),
        "to_date": Param(None, type=["null", "string"], format="date", description="Last event date to rebuild (YYYY-MM-DD)."),
        "lake": _lake_param(settings),
    }


def compact_params(settings: Settings) -> dict[str, Param]:
    """cloudtrail_compact's form: the lake (the dates follow from the run's data interval)."""
    return {"lake": _lake_param(settings)}


def plan_compact(params: dict[str, Any], settings: Settings, run_id: str, interval_end: datetime) -> list[str]:
    """jobs.compact's arguments: the event dates closed at the end of the run's data interval."""
    lake = _lake(params["lake"], settings)
    closed_at = interval_end.astimezone(UTC).date().isoformat()
    return [*settings.lake_args(lake), "--run-id", run_id, "--closed-at", closed_at, "--lock-wait", str(options.LOCK_WAIT_SECONDS)]


def plan_derived(params: dict[str, Any], settings: Settings, run_id: str) -> list[str]:
    """Check cloudtrail_derived's parameters and return the arguments of each derived job (jobs/derived/derivation.py's)."""
    lake = _lake(params["lake"], settings)
    first, last = _date(params.get("from_date"), "from_date"), _date(params.get("to_date"), "to_date")
    if (first is None) != (last is None) or (first and last and first > last):
        raise InvalidRunParams(f"from_date {first} and to_date {last} go together, the first not after the second")
    dates = ["--from-date", first.isoformat(), "--to-date", last.isoformat()] if first and last else []
    return [*settings.lake_args(lake), "--run-id", run_id, *dates, "--lock-wait", str(options.LOCK_WAIT_SECONDS)]
