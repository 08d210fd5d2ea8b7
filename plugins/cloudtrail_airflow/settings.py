"""Where things are, from the environment (read at parse time: cheap, no I/O)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import Asset

from jobs import options, storage
from jobs.lake import Lake
from jobs.landing.bucket import is_bucket
from jobs.storage import LakePath

INGEST_DAG_ID = "cloudtrail_ingest"
PROJECT_ROOT = Path(os.environ.get("CLOUDTRAIL_HOME", Path(__file__).resolve().parents[2]))


@dataclass(frozen=True)
class Settings:
    # The folder the lake page walks: the landing, or an S3 landing's cache in the lake.
    landing: Path
    # The lake: a folder, or an S3 prefix whose tables of record are in `catalog`.
    lake: LakePath
    schedule: str | None
    python: str
    driver_memory: str
    settle: str
    full_listing_interval: str = options.FULL_LISTING_INTERVAL
    freshness_threshold: timedelta = options.duration(options.FRESHNESS_THRESHOLD)
    clock_skew: timedelta = options.duration(options.CLOCK_SKEW)
    # One slot: the tasks that write the lake queue for it (scheduled, manual and backfill runs alike).
    lake_pool: str = "cloudtrail_lake"
    # What the ingest reads: `landing`, or s3://BUCKET/PREFIX; and that bucket's notification queue, if any.
    landing_url: str = ""
    queue_url: str | None = None
    aws_conn_id: str = "aws_default"
    # The pyiceberg catalog every job is handed (--catalog): an S3 lake's tables of record; beside a folder lake, where
    # the publish copies to and the derived jobs write. None: a folder lake's embedded one.
    catalog: str | None = None

    @property
    def in_object_storage(self) -> bool:
        return not storage.is_folder(self.lake)

    def lake_at(self, location: str | None = None) -> Lake:
        """The lake at `location` (a run's checked `lake` parameter; by default the configured one), its catalog this one."""
        return Lake.at(location or self.lake, self.catalog)

    def lake_args(self, location: str) -> list[str]:
        """What every job is handed to reach the lake at `location` (a run's checked `lake`) and its catalog."""
        return ["--lake", location, *(["--catalog", self.catalog] if self.catalog else [])]

    @property
    def bucket(self) -> bool:
        return is_bucket(self.landing_url)

    @property
    def walked(self) -> Path | None:
        """The landing folder the lake page lists for new deliveries; None for a bucket: its cache only grows, what is
        new waits in the queue, and the runs' reports say what they took."""
        return None if self.bucket else self.landing

    def job_app(self, job: str) -> str:
        return str(PROJECT_ROOT / "jobs" / f"{job}.py")

    @property
    def jobs_zip(self) -> str:
        """The job code spark-submit ships to executors: $CLOUDTRAIL_JOBS_ZIP, or what `make` builds."""
        return os.environ.get("CLOUDTRAIL_JOBS_ZIP", str(PROJECT_ROOT / "build" / "jobs.zip"))

    @property
    def helpers_jar(self) -> str:
        """The JVM helpers spark-submit puts on the driver's and executors' classpath: $CLOUDTRAIL_JAR, or what `make` builds."""
        return os.environ.get("CLOUDTRAIL_JAR", str(PROJECT_ROOT / "build" / "cloudtrail.jar"))

    @property
    def dependency_jars(self) -> str:
        """The JVM dependencies (S3A, Iceberg: tools/jars/pom.xml) spark-submit ships: a glob of $CLOUDTRAIL_JARS, or of
        what `make setup` fetches."""
        return f"{os.environ.get('CLOUDTRAIL_JARS', str(PROJECT_ROOT / 'build' / 'jars'))}/*.jar"

    @property
    def events_uri(self) -> str:
        return self.lake_at().events.as_uri()

    @property
    def derived_uri(self) -> str:
        return self.lake_at().table("activity_hourly").as_uri()

    @property
    def events_asset(self) -> Asset:
        """The events table as an Asset: the ingest DAG publishes it, the derived DAG is scheduled on it."""
        return Asset(name="cloudtrail_events", uri=self.events_uri)

    @property
    def deliveries_asset(self) -> Asset:
        """CloudTrail's deliveries, as the queue announces them: an asset event whenever the queue holds notifications
        no run has taken, raised by a watcher in the triggerer (no worker slot, no Spark while the queue is idle). The
        watcher leaves the messages in the queue: the ingest receives them (cloudtrail_airflow/triggers.py)."""
        from airflow.sdk import AssetWatcher

        from cloudtrail_airflow.triggers import NotificationsWaiting

        trigger = NotificationsWaiting(str(self.queue_url), self.aws_conn_id)
        return Asset(name="cloudtrail_deliveries", watchers=[AssetWatcher(name="cloudtrail_queue", trigger=trigger)])

    @property
    def ingest_schedule(self) -> Any:
        """The cron schedule; with a queue, also every delivery it announces (the cron stays as the fallback)."""
        if self.queue_url is None:
            return self.schedule
        from airflow.sdk.definitions.timetables.assets import AssetOrTimeSchedule
        from airflow.sdk.definitions.timetables.trigger import CronTriggerTimetable

        return AssetOrTimeSchedule(timetable=CronTriggerTimetable(self.schedule or "@daily", timezone="UTC"), assets=self.deliveries_asset)

    @property
    def derived_asset(self) -> Asset:
        return Asset(name="cloudtrail_derived", uri=self.derived_uri)


def load_settings() -> Settings:
    schedule = os.environ.get("CLOUDTRAIL_SCHEDULE", "@hourly")
    landing = os.environ.get("CLOUDTRAIL_LANDING", str(PROJECT_ROOT / "data" / "landing"))
    named = str(os.environ.get("CLOUDTRAIL_LAKE", PROJECT_ROOT / "data" / "lake"))
    lake, catalog = storage.at(named), os.environ.get("CLOUDTRAIL_CATALOG") or None
    if storage.is_folder(lake) and "://" in named and not named.startswith("file:"):  # else a relative folder named `gs:`
        raise ValueError(f"CLOUDTRAIL_LAKE={named}: a lake is a folder or s3://BUCKET/PREFIX")
    if not storage.is_folder(lake) and catalog is None:
        raise ValueError(f"CLOUDTRAIL_LAKE={named}: a lake in S3 names the catalog its tables are in (CLOUDTRAIL_CATALOG)")
    return Settings(
        landing=Lake.at(lake).landing_cache if is_bucket(landing) else Path(landing).absolute(),
        lake=lake,
        landing_url=landing if is_bucket(landing) else str(Path(landing).absolute()),
        queue_url=(os.environ.get("CLOUDTRAIL_QUEUE_URL") or None) if is_bucket(landing) else None,
        aws_conn_id=os.environ.get("CLOUDTRAIL_AWS_CONN_ID", "aws_default"),
        catalog=catalog,
        schedule=None if schedule.lower() in ("", "none") else schedule,
        python=os.environ.get("CLOUDTRAIL_SPARK_PYTHON", sys.executable),
        driver_memory=os.environ.get("CLOUDTRAIL_DRIVER_MEMORY", "2g"),
        settle=os.environ.get("CLOUDTRAIL_SETTLE", options.SETTLE),
        full_listing_interval=os.environ.get("CLOUDTRAIL_FULL_LISTING_INTERVAL", options.FULL_LISTING_INTERVAL),
        freshness_threshold=options.duration(os.environ.get("CLOUDTRAIL_FRESHNESS_THRESHOLD", options.FRESHNESS_THRESHOLD)),
        clock_skew=options.duration(os.environ.get("CLOUDTRAIL_CLOCK_SKEW", options.CLOCK_SKEW)),
    )
