"""
### CloudTrail compaction

Every ingest run adds a file to each event date it writes: after a day of hourly runs a date holds
dozens of small files, and every reader opens each. Once a date is older than the de-duplication
horizon it is closed, and this DAG rewrites it into files near 128 MB (sorted by `eventTime`, in
today's Parquet format), swapping each date's partition in atomically: a reader sees the old files
or the new, never both. Dates already compact are left alone, so a daily run costs what is new.

| task | what it does |
| --- | --- |
| `plan` | checks the lake parameter and takes the day dates close on from the run's data interval |
| `compact` | `spark-submit jobs/compact.py`: each closed date with more files than its size needs, rewritten and swapped in |

Daily; by hand ("Trigger DAG w/ config") for another lake. The old files are kept under
`<lake>/_replaced/events/<run id>/`. For a date range, run `python -m jobs.compact` (README).
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, get_current_context, task

from cloudtrail_airflow.callbacks import log_failure
from cloudtrail_airflow.operators import lake_job
from cloudtrail_airflow.params import compact_params, plan_compact
from cloudtrail_airflow.settings import load_settings

settings = load_settings()

with DAG(
    dag_id="cloudtrail_compact",
    schedule="@daily",
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    params=compact_params(settings),
    doc_md=__doc__,
    tags=["cloudtrail", "maintenance"],
    default_args={"retries": 0, "on_failure_callback": log_failure},
) as dag:

    @task
    def plan() -> list[str]:
        """The job's arguments, from the run's data interval, or a clear error before Spark starts."""
        context = get_current_context()
        return plan_compact(context["params"], settings, context["run_id"], context["data_interval_end"])

    lake_job(settings, "compact", "compact", plan())
