"""What one ingest run is asked to do, parsed once from its command line (jobs/ingest/command.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

from jobs import options
from jobs.lake import Lake
from jobs.landing.bucket import BucketLanding
from jobs.ledger.planner import LedgerOptions
from jobs.records.dedup import Dedup
from jobs.tables.quarantine import Replay


@dataclass(frozen=True)
class IngestConfig:
    landing: Path
    lake: Lake
    run_id: str
    trigger: str = "availableNow"  # or "once": one batch
    # Seconds to wait for another writer to let go of the lake.
    lock_wait: float = options.LOCK_WAIT_SECONDS
    dedup: Dedup = Dedup()
    ledger: LedgerOptions = LedgerOptions()
    # The de-duplication state's partitions: fixed by a lake's first run.
    state_partitions: int = options.STATE_PARTITIONS
    # Spark's file source option: manifests older than the newest by more than this are not read.
    max_file_age: str = options.MAX_FILE_AGE
    # How long the tables' commit logs list a file.
    # An event dated later than its batch by more than this is future-dated.
    clock_skew: timedelta = options.duration(options.CLOCK_SKEW)
    # Quarantined files and records to read again in this run; None: none.
    replay: Replay | None = None
    # Event dates the quality gate checks in this application after the batches; None: no gate here.
    gate_dates: tuple[date, ...] | None = None
    quarantine_threshold: float = options.QUARANTINE_THRESHOLD
    # An S3 landing (`landing` is then its cache in the lake), and the queue of its delivery notifications.
    bucket: BucketLanding | None = None
    queue_url: str | None = None
    max_messages: int = options.MAX_MESSAGES
    visibility_seconds: int = options.VISIBILITY_SECONDS
    # Without a queue: the first delivery date a listing of the bucket fetches (None: every one).
    since: date | None = None
    dry_run: bool = False
    # Reconcile against CloudTrail's digests this run (else when --reconcile-interval has passed since the last).
    reconcile: bool = False
    reconcile_interval: timedelta = options.duration(options.RECONCILE_INTERVAL)
    reconcile_days: int = options.RECONCILE_DAYS
