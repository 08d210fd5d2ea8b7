"""Run parameters of cloudtrail_ingest: the "Trigger DAG w/ config" form, and their checks.

The JSON schema drives the form and is checked by Airflow when a run is created; `plan_run`
checks again what a schema cannot (paths inside the configured roots, date order) and
turns the parameters into the job's command-line arguments, before any Spark starts.
"""

from __future__ import annotations

import os
from datetime import date
from pathlib import Path
from typing import Any

from airflow.sdk import Param

from cloudtrail_airflow.settings import Settings

SIZE_PATTERN = r"^[0-9]+[kmgKMG]?$"
DURATION_PATTERN = r"^[0-9]+ (second|minute|hour|day|week)s?$"


class InvalidRunParams(ValueError):
    """A run parameter is wrong; the message says which and why."""


def dag_params(settings: Settings) -> dict[str, Param]:
    return {
        "trigger": Param("availableNow", enum=["availableNow", "once"], description="availableNow: rate-limited batches; once: one batch."),
        "max_files_per_trigger": Param(None, type=["null", "integer"], minimum=1, description="Files per batch (large backlogs)."),
        "max_bytes_per_trigger": Param(
            "32m", type=["null", "string"], pattern=SIZE_PATTERN, description="Compressed bytes per batch, e.g. 32m."
        ),
        "watermark": Param("2 days", type="string", pattern=DURATION_PATTERN, description="De-duplication horizon on arrival time."),
        "delivery_from": Param(
            None, type=["null", "string"], format="date", description="First delivery date that must be ingested (YYYY-MM-DD)."
        ),
        "delivery_to": Param(
            None, type=["null", "string"], format="date", description="Last delivery date that must be ingested (YYYY-MM-DD)."
        ),
        "landing": Param(str(settings.landing), type="string", description=f"Landing root, inside {settings.landing}."),
        "lake": Param(str(settings.lake), type="string", description=f"Lake root, inside {settings.lake}."),
        "quarantine_threshold": Param(0.01, type="number", minimum=0, maximum=1, description="Max share of quarantined records."),
    }


def _inside(path: str, root: Path, name: str) -> str:
    resolved = Path(os.path.realpath(path))
    root_resolved = Path(os.path.realpath(root))
    if resolved != root_resolved and root_resolved not in resolved.parents:
        raise InvalidRunParams(f"param {name}={path!r} is outside the configured root {root}")
    return str(resolved)


def _date(value: Any, name: str) -> date | None:
    if value in (None, ""):
        return None
    try:
        return date.fromisoformat(str(value))
    except ValueError:
        raise InvalidRunParams(f"param {name}={value!r} is not a date (YYYY-MM-DD)") from None


def plan_run(params: dict[str, Any], settings: Settings, run_id: str, interval_start: date, interval_end: date) -> dict[str, Any]:
    """Check the parameters and return the arguments of each Spark application of the run."""
    landing = _inside(params["landing"], settings.landing, "landing")
    lake = _inside(params["lake"], settings.lake, "lake")
    delivery_from, delivery_to = _date(params.get("delivery_from"), "delivery_from"), _date(params.get("delivery_to"), "delivery_to")
    if delivery_from and delivery_to and delivery_from > delivery_to:
        raise InvalidRunParams(f"delivery_from {delivery_from} is after delivery_to {delivery_to}")
    trigger = params.get("trigger", "availableNow")
    if trigger not in ("availableNow", "once"):
        raise InvalidRunParams(f"param trigger={trigger!r} must be availableNow or once")
    ingest = ["--landing", landing, "--lake", lake, "--run-id", run_id, "--trigger", trigger, "--watermark", params["watermark"]]
    if params.get("max_files_per_trigger"):
        ingest += ["--max-files-per-trigger", str(int(params["max_files_per_trigger"]))]
    elif params.get("max_bytes_per_trigger"):
        ingest += ["--max-bytes-per-trigger", str(params["max_bytes_per_trigger"])]
    # The gate checks what this run wrote plus the run's data interval (and the requested
    # delivery range, whose events are mostly dated on those days).
    first = min(d for d in (interval_start, delivery_from) if d)
    last = max(d for d in (interval_end, delivery_to) if d)
    validate = [
        "--lake", lake, "--run-id", run_id, "--from-date", first.isoformat(), "--to-date", last.isoformat(),
        "--quarantine-threshold", str(params.get("quarantine_threshold", 0.01)),
    ]  # fmt: skip
    return {"ingest_args": ingest, "validate_args": validate, "sweep_args": ["--lake", lake, "--wait-seconds", "900"], "lake": lake}
