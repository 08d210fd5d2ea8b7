"""How the CloudTrail DAGs submit a job of jobs/: one place for the spark-submit settings."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import get_current_context, task

from cloudtrail_airflow.settings import Settings
from jobs.options import JVM_OPTIONS, LOCAL_FILE_SYSTEM


def spark_job(settings: Settings, task_id: str, job: str, application_args: Any, **options: Any) -> SparkSubmitOperator:
    """spark-submit jobs/<job>.py through `spark_default`, shipping jobs.zip and the JVM helpers to the executors.

    The app name is the job's, so the cluster's UI and history list it as the job calls itself.
    """
    return SparkSubmitOperator(
        task_id=task_id,
        application=settings.job_app(job),
        py_files=settings.jobs_zip,
        jars=f"{settings.helpers_jar},{settings.dependency_jars}",
        driver_class_path=settings.helpers_jar,  # LOCAL_FILE_SYSTEM's class, looked up before --jars are added
        application_args=application_args,
        conf={
            "spark.pyspark.python": settings.python,
            "spark.pyspark.driver.python": settings.python,
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.defaultJavaOptions": JVM_OPTIONS,  # the executors take theirs from jobs/spark/session.py
            "spark.executor.extraClassPath": settings.helpers_jar,
            **LOCAL_FILE_SYSTEM,
        },
        driver_memory=settings.driver_memory,
        name=f"cloudtrail_{job.removeprefix('cloudtrail_')}",
        **options,
    )


def lake_job(settings: Settings, task_id: str, job: str, application_args: Any, **options: Any) -> SparkSubmitOperator:
    """A job that writes the lake: it queues for the lake pool's one slot, and a run that found the lake busy (exit 75)
    or failed is retried with backoff."""
    retries = {"retries": 2, "retry_delay": timedelta(minutes=1), "retry_exponential_backoff": True}
    return spark_job(settings, task_id, job, application_args, pool=settings.lake_pool, **{**retries, **options})


def publish_task(settings: Settings, lake: Any) -> Any:
    """The publish task, on the run's checked `lake` (an XCom)."""

    @task(task_id="publish", trigger_rule="none_failed_min_one_success")
    def publish(lake: str) -> dict[str, Any]:
        """Publish the lake's committed, gated tables to the Iceberg catalog (jobs/publishing/command.py; the catalog
        the settings name, else the embedded one). Per table: its snapshot, the files added and removed, the dates held
        back and why (XCom); a table that could not be published fails the task, named."""
        from dataclasses import asdict

        from jobs.publishing import command as publish
        from jobs.reporting.summary import publish_summary

        argv = [*settings.lake_args(lake), "--run-id", get_current_context()["run_id"]]
        report = publish.publish_tables(publish.parse_args(argv))
        print("\n".join(publish_summary(asdict(report))))
        if report.status == "failed":
            raise RuntimeError("; ".join(f"{t.table}: {t.error}" for t in report.tables if t.error))
        return {t.table: asdict(t) for t in report.tables}

    return publish(lake)
