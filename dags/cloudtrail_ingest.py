"""
### CloudTrail ingest

Turns the CloudTrail files that landed since the last run into rows of the event-date
partitioned Parquet table, then checks the table before anyone downstream uses it.

| task | what it does |
| --- | --- |
| `plan` | checks the run parameters (fails before Spark starts when one is wrong); keeps the notifications that woke it |
| `rebuild_dry_run` | with `dry_run`: lists per date the files and bytes a rebuild would read (XCom); writes nothing |
| `ingest` | `spark-submit jobs/cloudtrail_ingest.py`: new files, exactly once; then the gate on them, same application |
| `rebuild` | with `mode=rebuild`: `spark-submit jobs/rebuild.py`, the interval's event dates from the landing files, swapped in whole |
| `rebuild_summary` | per rebuilt partition: rows before and after, files read, duplicates dropped, quarantined (XCom) |
| `choose_gate` | the ingest's gate passed: announce and publish (failed: the run fails); nothing changed: publish only, a report says why |
| `dq_gate` | `spark-submit jobs/validate_events.py`: GX suites on the run's dates, when the ingest did not gate them |
| `announce` | updates the `cloudtrail_events` Asset, so derived DAGs can schedule on it |
| `publish` | `jobs/publishing/command.py`: the dates whose gate passed into the Iceberg catalog (a snapshot a table); held-back named |

The ingest commits each batch to the tables of record (a crashed attempt's files are no rows
of them), and starts no Spark when nothing is new. One run at a time (`max_active_runs=1`); the tasks that write the
lake (`ingest`, `rebuild`) take the one slot of the `cloudtrail_lake` pool, so a scheduled run
waits for a backfill's writer instead of failing on the lake lock (kept for other writers).
A run with `replay_quarantine` checked also reads the quarantined files and records of
`replay_reason` and `replay_from`..`replay_to` again (after a parser fix or a hand repair).
Scheduled runs, manual runs ("Trigger DAG w/ config") and backfills all ingest every file
not yet ingested. With `mode=incremental` (the default) a backfill over past dates makes
sure the files delivered then are in the table and re-validates those dates' partitions;
with `mode=rebuild` (Backfill dialog -> Run Parameters) each run also rebuilds the event
dates its data interval ends (a daily backfill: one date per run), to repair a damaged
partition or apply a parser fix. A rebuild that fails the gate leaves the old partitions.
With `CLOUDTRAIL_LANDING=s3://...` and `CLOUDTRAIL_QUEUE_URL` the DAG also runs whenever the queue
announces deliveries (an `AssetWatcher` in the triggerer; the cron schedule stays as the fallback),
and the ingest takes the new objects from the notifications instead of listing anything.
Reports: `<lake>/reports/`. See README.md for configuration.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, get_current_context, task

from cloudtrail_airflow.callbacks import log_failure
from cloudtrail_airflow.operators import lake_job, publish_task, spark_job
from cloudtrail_airflow.params import dag_params, plan_run, run_interval
from cloudtrail_airflow.settings import INGEST_DAG_ID, load_settings

settings = load_settings()
events_asset = settings.events_asset

with DAG(
    dag_id=INGEST_DAG_ID,
    schedule=settings.ingest_schedule,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    params=dag_params(settings),
    doc_md=__doc__,
    tags=["cloudtrail", "ingest", "security"],
    default_args={"retries": 0, "on_failure_callback": log_failure},
) as dag:

    @task.branch
    def plan() -> str:
        """Check the run parameters, hand each Spark application its arguments (an XCom per key), and
        start: a dry run only lists; every other run ingests first, so a rebuild sees a settled ledger."""
        context = get_current_context()
        planned = plan_run(context["params"], settings, context["run_id"], *run_interval(context))
        if settings.queue_url:  # woken by deliveries: their notifications, kept in the lake before anything can fail
            from jobs.landing import kept_notifications

            kept = kept_notifications.keep_asset_events(settings.lake_at(planned["lake"]), context["triggering_asset_events"])
            print(f"notifications kept in the lake's inbox for this run: {kept}")
        for key, value in planned.items():
            context["ti"].xcom_push(key=key, value=value)
        return "rebuild_dry_run" if planned["dry_run"] else "ingest"

    run_plan = plan()

    @task
    def rebuild_dry_run(rebuild_args: list[str]) -> dict:
        """What a rebuild of this run's dates would read, per date, and how long it would take."""
        from dataclasses import asdict

        from jobs.upkeep import rebuild

        if not rebuild_args:
            return {"dates": {}, "note": "mode is not rebuild, or no event date ends in this data interval"}
        return asdict(rebuild.run(rebuild.parse_args([*rebuild_args, "--dry-run"]), None))

    @task.branch
    def choose_mode(rebuild_args: list[str]) -> str:
        return "rebuild" if rebuild_args else "choose_gate"

    @task.branch(trigger_rule="none_failed_min_one_success")
    def choose_gate(lake: str, dates: list[str]) -> str | list[str]:
        """The two paths meet here (after the rebuild, or with it skipped); `plan` skips it in a dry run."""
        from jobs.quality import gate

        run_id, layout = get_current_context()["run_id"], settings.lake_at(lake)
        verdict = gate.verdict(layout, run_id)  # the ingest gated what it wrote in its own application
        if verdict == "passed":
            return ["announce", "publish"]
        if verdict == "failed":
            raise gate.failed(layout, run_id)  # names each failed expectation
        reason = gate.skip_reason(layout, run_id, dates)
        if reason is None:
            return "dq_gate"
        print(f"gate skipped: {reason}; report {gate.record_skip(layout, run_id, dates, reason)}")
        return ["publish"]  # nothing new to announce; a publish an earlier run could not finish is finished

    @task
    def rebuild_summary(lake: str) -> dict:
        """The rebuild's report, per partition, as this task's XCom."""
        from jobs.reporting.report import read_report

        reports = settings.lake_at(lake).rebuild_reports(get_current_context()["run_id"])
        return read_report(reports[-1]) or {}

    ingest = lake_job(settings, "ingest", "cloudtrail_ingest", run_plan["ingest_args"], max_retry_delay=timedelta(minutes=15))
    rebuild = spark_job(settings, "rebuild", "rebuild", run_plan["rebuild_args"], pool=settings.lake_pool)
    dq_gate = spark_job(settings, "dq_gate", "validate_events", run_plan["validate_args"])

    @task(outlets=[events_asset], trigger_rule="none_failed_min_one_success")
    def announce() -> str:
        """Mark the events table as updated and checked."""
        return settings.events_uri

    run_plan >> [rebuild_dry_run(run_plan["rebuild_args"]), ingest]
    mode = choose_mode(run_plan["rebuild_args"])
    gate = choose_gate(run_plan["lake"], run_plan["gate_dates"])
    summary = rebuild_summary(run_plan["lake"])
    # choose_mode is upstream of the summary too, so the branch skips both at once and the gate
    # can start on the next scheduler loop, not after a second one skips the summary.
    ingest >> mode >> [rebuild, summary, gate]
    checked = [announce(), publish_task(settings, run_plan["lake"])]
    rebuild >> summary >> gate >> [dq_gate, *checked]
    dq_gate >> checked
