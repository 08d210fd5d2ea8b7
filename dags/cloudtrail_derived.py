"""
### CloudTrail activity, findings and the OCSF view

Keeps the tables derived from the events table exact as it changes: `activity_hourly` (event
counts per hour, account, region, call, principal and error), `findings` (events the CIS
AWS Foundations monitoring rules in `jobs/derived/rules/` match) and `ocsf_api_activity` (every event
as OCSF 1.1.0 API Activity, partitioned as Amazon Security Lake lays out its sources): Iceberg tables the
jobs write through the lake's catalog (`CLOUDTRAIL_CATALOG`), each run's dates gated before readers see them.

| task | what it does |
| --- | --- |
| `plan` | checks the run parameters and builds each job's arguments |
| `activity` | `spark-submit jobs/activity.py`: event dates whose events changed (or `from_date`..`to_date`), recomputed, gated, published |
| `ocsf` | `spark-submit jobs/ocsf.py`: the same dates of the OCSF table |
| `announce` | updates the `cloudtrail_derived` Asset |
| `publish` | `jobs/publishing/command.py`: the events' gated dates into their Iceberg table; every table's old snapshots expired |

One task per derived job, in the order `jobs/lake.py`'s `DERIVED` lists them.

Runs whenever `cloudtrail_ingest` publishes the `cloudtrail_events` Asset, and by hand
("Trigger DAG w/ config") for a date range. It finds what changed from the events table
itself, each partition's data files against those it was last built from, so a run that
follows several ingest runs, a rebuild or a rollback catches up on all of them.
Reports: `<lake>/reports/<job>/` (`activity`, `ocsf`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG, chain, get_current_context, task

from cloudtrail_airflow.callbacks import log_failure
from cloudtrail_airflow.operators import lake_job, publish_task
from cloudtrail_airflow.params import derived_params, plan_derived
from cloudtrail_airflow.settings import load_settings
from jobs.lake import DERIVED

settings = load_settings()
events_asset = settings.events_asset
derived_asset = settings.derived_asset

with DAG(
    dag_id="cloudtrail_derived",
    schedule=[events_asset],
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    params=derived_params(settings),
    doc_md=__doc__,
    tags=["cloudtrail", "activity", "security"],
    default_args={"retries": 0, "on_failure_callback": log_failure},
) as dag:

    @task(multiple_outputs=True)
    def plan() -> dict[str, Any]:
        """Each job's arguments (and the lake, checked with them), or a clear error before Spark starts."""
        context = get_current_context()
        params, run_id = context["params"], context["run_id"]
        return {derived.job: plan_derived(params, settings, run_id) for derived in DERIVED} | {"lake": params["lake"]}

    planned = plan()
    jobs = [lake_job(settings, derived.job, derived.job, planned[derived.job]) for derived in DERIVED]

    @task(outlets=[derived_asset])
    def announce() -> str:
        """Mark the derived tables as updated."""
        return settings.derived_uri

    chain(*jobs, [announce(), publish_task(settings, planned["lake"])])
