"""Task callbacks shared by the CloudTrail DAGs."""

from __future__ import annotations

import logging
from typing import Any

from cloudtrail_airflow.settings import load_settings

log = logging.getLogger(__name__)


def log_failure(context: dict[str, Any]) -> None:
    """One line that says what failed, where, and where the run's report is."""

    ti = context["ti"]
    params = context.get("params") or {}
    report = load_settings().lake_at(params.get("lake")).ingest_report(context["run_id"])
    error = str(context.get("exception") or "unknown error").splitlines()[0][:300]
    log.error(
        "cloudtrail: %s run %s failed at task %s (try %s): %s | ingest report: %s",
        ti.dag_id, context["run_id"], ti.task_id, ti.try_number, error, report,
    )  # fmt: skip
