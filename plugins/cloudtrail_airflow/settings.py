"""Where things are, from the environment (read at parse time: cheap, no I/O)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from airflow.sdk import Asset

from jobs import options
from jobs.lake import Lake

INGEST_DAG_ID = "cloudtrail_ingest"
PROJECT_ROOT = Path(os.environ.get("CLOUDTRAIL_HOME", Path(__file__).resolve().parents[2]))


@dataclass(frozen=True)
class Settings:
    landing: Path
    lake: Path
    schedule: str | None
    python: str
    driver_memory: str
    settle: str
    full_listing_interval: str = options.FULL_LISTING_INTERVAL
    freshness_threshold: timedelta = options.duration(options.FRESHNESS_THRESHOLD)
    clock_skew: timedelta = options.duration(options.CLOCK_SKEW)
    # One slot: the tasks that write the lake queue for it (scheduled, manual and backfill runs alike).
    lake_pool: str = "cloudtrail_lake"

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
    def events_uri(self) -> str:
        return Lake(self.lake).events.as_uri()

    @property
    def activity_uri(self) -> str:
        return Lake(self.lake).table("activity_hourly").as_uri()

    @property
    def events_asset(self) -> Asset:
        """The events table as an Asset: the ingest DAG publishes it, the activity DAG is scheduled on it."""
        return Asset(name="cloudtrail_events", uri=self.events_uri)

    @property
    def activity_asset(self) -> Asset:
        return Asset(name="cloudtrail_activity", uri=self.activity_uri)


def load_settings() -> Settings:
    schedule = os.environ.get("CLOUDTRAIL_SCHEDULE", "@hourly")
    return Settings(
        landing=Path(os.environ.get("CLOUDTRAIL_LANDING", PROJECT_ROOT / "data" / "landing")).absolute(),
        lake=Path(os.environ.get("CLOUDTRAIL_LAKE", PROJECT_ROOT / "data" / "lake")).absolute(),
        schedule=None if schedule.lower() in ("", "none") else schedule,
        python=os.environ.get("CLOUDTRAIL_SPARK_PYTHON", sys.executable),
        driver_memory=os.environ.get("CLOUDTRAIL_DRIVER_MEMORY", "2g"),
        settle=os.environ.get("CLOUDTRAIL_SETTLE", options.SETTLE),
        full_listing_interval=os.environ.get("CLOUDTRAIL_FULL_LISTING_INTERVAL", options.FULL_LISTING_INTERVAL),
        freshness_threshold=options.duration(os.environ.get("CLOUDTRAIL_FRESHNESS_THRESHOLD", options.FRESHNESS_THRESHOLD)),
        clock_skew=options.duration(os.environ.get("CLOUDTRAIL_CLOCK_SKEW", options.CLOCK_SKEW)),
    )
