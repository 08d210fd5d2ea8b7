"""
### CloudTrail ingest

Turns the CloudTrail files that landed since the last run into rows of the event-date
partitioned Parquet table, then checks the table before anyone downstream uses it.

| task | what it does |
| --- | --- |
| `plan` | checks the run parameters (fails before Spark starts when one is wrong) |
| `ingest` | `spark-submit jobs/cloudtrail_ingest.py`: Trigger.AvailableNow over new files, exactly once |
| `sweep` | moves aside data files no committed batch lists (left by crashed attempts) |
| `dq_gate` | Great Expectations suite on the partitions this run wrote and its data interval |
| `publish` | updates the `cloudtrail_events` Asset, so downstream DAGs can schedule on it |

One run at a time (`max_active_runs=1`); backfill runs, which Airflow counts apart, never
ingest at the same time as another run (`max_active_tis_per_dag=1` on the writing tasks,
and the job itself refuses a second writer).
A run with `replay_quarantine` checked also reads the quarantined files and records of
`replay_reason` and `replay_from`..`replay_to` again (after a parser fix or a hand repair).
Scheduled runs, manual runs ("Trigger DAG w/ config") and backfills all run the same
tasks: each ingests every file not yet ingested, so a backfill over past dates makes sure
the files delivered then are in the table, and re-validates those dates' partitions.
Reports: `<lake>/reports/`. See README.md for configuration.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Asset, get_current_context, task

from cloudtrail_airflow.callbacks import log_failure
from cloudtrail_airflow.operators import spark_job
from cloudtrail_airflow.params import dag_params, plan_run
from cloudtrail_airflow.settings import load_settings

settings = load_settings()
events_asset = Asset(name="cloudtrail_events", uri=settings.events_uri)

with DAG(
    dag_id="cloudtrail_ingest",
    schedule=settings.schedule,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    params=dag_params(settings),
    doc_md=__doc__,
    tags=["cloudtrail", "ingest", "security"],
    default_args={"retries": 0, "on_failure_callback": log_failure},
) as dag:

    @task(multiple_outputs=True)
    def plan() -> dict:
        """Check the run parameters; return each Spark application's arguments."""
        context = get_current_context()
        start, end = context["data_interval_start"], context["data_interval_end"]
        return plan_run(context["params"], settings, context["run_id"], start.date(), end.date())

    run_plan = plan()

    ingest = spark_job(
        settings,
        "ingest",
        "cloudtrail_ingest",
        run_plan["ingest_args"],
        # One ingest at a time across scheduled, manual and backfill runs: Airflow 3 counts
        # backfill runs apart from max_active_runs, and the job would refuse a second writer.
        max_active_tis_per_dag=1,
        retries=2,
        retry_delay=timedelta(minutes=1),
        retry_exponential_backoff=True,
        max_retry_delay=timedelta(minutes=15),
    )
    sweep = spark_job(settings, "sweep", "sweep", run_plan["sweep_args"], max_active_tis_per_dag=1)
    dq_gate = spark_job(settings, "dq_gate", "validate_events", run_plan["validate_args"])

    @task(outlets=[events_asset])
    def publish() -> str:
        """Mark the events table as updated and checked."""
        return settings.events_uri

    run_plan >> ingest >> sweep >> dq_gate >> publish()
