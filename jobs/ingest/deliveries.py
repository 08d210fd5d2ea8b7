"""An S3 landing's step of a run, before the plan: which objects are new, fetched into the landing cache.

With a queue, in one direction: the messages received (jobs/landing/sqs.py: the queue's, the inbox's and those kept
as outside the landing, sorted out against it), the files a due reconciliation finds missing
(jobs/ledger/reconcile.py), both fetched (jobs/landing/bucket.py); only those files are planned (no walk). Without
one: a listing of the bucket from --since on, of objects not cached as they are; the cache is then walked as a
landing folder. After the plan has written the manifests, `Deliveries.done` deletes the messages: a run that dies
before that leaves them in the queue, and the ledger takes nothing twice.

The cache is this machine's scratch: the lake's manifests name files in the cache of the machine that planned them. So
before the stream reads them, the files of every manifest no committed batch has read whose copies are not in this
machine's cache are fetched again (`refetch_uncommitted`: another driver planned them, or this one lost its scratch),
and the stream reads each where this cache holds it (`where_read`), never a missing file quarantined as unreadable; or, on
a cluster whose executors share no disk with this driver, the object itself through S3A (`BucketLanding.from_store`).
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.ingest.config import IngestConfig
from jobs.landing.bucket import BucketLanding, Fetched, s3_client
from jobs.landing.bucket_listing import listed
from jobs.landing.layout import newest_of, relative
from jobs.landing.sqs import Received, receive, sqs_client
from jobs.ledger.planner import Plan
from jobs.ledger.reconcile import missing_files
from jobs.records.decode import READ_FROM
from jobs.spark.checkpoint import CheckpointSnapshot

log = logging.getLogger("cloudtrail_ingest")
PROBLEMS_SHOWN = 100


@dataclass
class Deliveries:
    """The objects one run fetched; `notified`: the cache files to plan instead of a walk (None: walk the cache)."""

    notified: list[str] | None
    fetched: Fetched
    received: Received | None = None
    sqs: Any = None
    summary: dict[str, Any] = field(default_factory=dict)

    def done(self, config: IngestConfig) -> None:
        """The plan has ledgered every fetched file: the messages that named them can go."""
        if config.bucket is not None:
            config.bucket.mark()
        if self.received is not None:
            self.received.done(self.sqs, config.queue_url, config.lake, self.fetched.problems)
            self.summary["messages"] = dict(self.received.counts)

    def release(self) -> None:
        if self.received is not None:
            self.received.release()


@contextmanager
def taken(config: IngestConfig, checkpoint: CheckpointSnapshot) -> Iterator[Deliveries | None]:
    """What is new in an S3 landing, fetched into its cache (None for a folder landing); the messages stay hidden
    until `done`, or until the block ends (then those not deleted come back after their visibility timeout)."""
    deliveries = take(config, checkpoint)
    try:
        yield deliveries
    finally:
        if deliveries is not None:
            deliveries.release()


def take(config: IngestConfig, checkpoint: CheckpointSnapshot) -> Deliveries | None:
    """Fetch what is new in an S3 landing into its cache; None for a folder landing."""
    landing = config.bucket
    if landing is None:
        return None
    s3 = s3_client()
    landing.claim(new_lake=not config.lake.manifests.exists())
    if config.queue_url is None:
        new = [key for key, size, mtime in listed(landing, s3, config.since) if not landing.is_cached(key, size, mtime)]
        fetched = landing.fetch(s3, new)
        deliveries = Deliveries(None, fetched, summary={"mode": "listing", "since": config.since and config.since.isoformat()})
    else:
        sqs = sqs_client()
        received = receive(sqs, config.queue_url, config.lake, landing, config.max_messages, config.visibility_seconds)
        try:
            deliveries = _fetch_notified(config, landing, checkpoint, s3, received)
        except BaseException:
            received.release()
            raise
        deliveries.sqs = sqs
    fetched = deliveries.fetched
    deliveries.summary.update(
        objects_fetched=fetched.downloaded,
        bytes_fetched=fetched.downloaded_bytes,
        objects_already_cached=len(fetched.files) - fetched.downloaded,
        problems=len(fetched.problems),
        problems_shown=[p.to_json() for p in fetched.problems[:PROBLEMS_SHOWN]],
    )
    for problem in fetched.problems[:10]:
        log.warning("s3://%s/%s not fetched: %s", problem.bucket, problem.key, problem.reason)
    return deliveries


def _fetch_notified(
    config: IngestConfig, landing: BucketLanding, checkpoint: CheckpointSnapshot, s3: Any, received: Received
) -> Deliveries:
    """The log files the messages name under the landing, and what a due reconciliation finds missing."""
    fetched = landing.fetch(s3, received.keys)
    taking = {str(Path(path).relative_to(landing.cache)) for path in fetched.files}
    missing = missing_files(s3, landing, config.lake, checkpoint, taking, config.run_id, config.reconcile_days,
                            config.reconcile_interval, config.reconcile)  # fmt: skip
    asked = set(received.keys)  # a key this run tried already (a forbidden one) is not asked for twice
    fetched.add(landing.fetch(s3, [key for key in missing if key not in asked]))
    summary = {"mode": "notifications", "messages": dict(received.counts),
               "oldest_message_age_seconds": received.oldest_age_seconds(datetime.now(tz=UTC))}  # when this run received it  # fmt: skip
    if received.outside:
        summary["outside_landing"] = outside_summary(landing, received)
    return Deliveries(fetched.files, fetched, received, summary=summary)


def refetch_uncommitted(config: IngestConfig, plan: Plan) -> dict[str, Any] | None:
    """An S3 landing: the files of the manifests no committed batch has read (a batch a dead run planned, the backlog)
    whose copies are not in this machine's cache, fetched again; what was fetched (None for a folder landing)."""
    if config.bucket is None:
        return None
    named = {relative(entry.path) for manifest in plan.uncommitted for entry in manifest.entries}
    fetched = config.bucket.fetch_missing(named, "their manifests name another cache: another machine's, or scratch lost")
    problems = [problem.to_json() for problem in fetched.problems[:PROBLEMS_SHOWN]]
    return {"files": len(fetched.files) + len(fetched.problems), "fetched": fetched.downloaded, "problems": problems}


def where_read(files: DataFrame, landing: BucketLanding, from_store: bool) -> DataFrame:
    """Manifest rows (`path`, ...) naming each landing file where this machine's cache holds it: a manifest names the
    cache of the machine that planned it, and a file's place from AWSLogs/ on (`layout.relative`) is its identity
    wherever a cache is (a path with no such place is kept as it is). With `from_store` (`landing.from_store`), the
    executors read each object itself (`READ_FROM`: its s3a:// URI), not this cache, which they may not share."""
    place = F.coalesce(*[F.nullif(F.regexp_extract("path", rf"(AWSLogs(?:/[^/]+){{{parts}}})$", 1), F.lit("")) for parts in (7, 8)])
    cached = files.withColumn("path", F.coalesce(F.concat(F.lit(f"{landing.cache}/"), place), F.col("path")))
    if not from_store:
        return cached
    return cached.withColumn(READ_FROM, F.coalesce(F.concat(F.lit(landing.object_uri("")), place), F.col("path")))


def outside_summary(landing: BucketLanding, received: Received) -> dict[str, Any]:
    """What the notifications name outside the landing: the landing configured, the places they name instead (bucket
    and the prefix before AWSLogs/), the first keys."""
    named = [d for outside in received.outside.values() for d in outside]
    places = sorted({f"s3://{d.bucket}/{d.key.split('AWSLogs/', 1)[0]}" for d in named})
    return {
        "landing": landing.url,
        "named": places[:PROBLEMS_SHOWN],
        "messages": len(received.outside),
        "files": len(named),
        "files_shown": [f"s3://{d.bucket}/{d.key}" for d in named[:PROBLEMS_SHOWN]],
    }


def prune(config: IngestConfig, plan: Plan, now: datetime) -> dict[str, Any] | None:
    """After a successful run on the queue: the landing cache's delivery folders that the ledger has retired and the
    reconciliation's window has passed, deleted (a listing landing keeps its cache: it tells the listing what is
    fetched)."""
    if config.bucket is None or config.queue_url is None or plan.retired_before is None:
        return None
    before = min(plan.retired_before, now.date() - timedelta(days=config.reconcile_days))
    return config.bucket.prune(before)


def newest_file_per_place(plan: Plan, until: datetime) -> dict[str, str]:
    """Per "account/region", the newest file this run took (delivered by `until`): the lake page's freshness for a
    bucket, whose cache it does not walk."""
    newest = newest_of((e.path for m in plan.written for e in m.entries), until)
    return {f"{account}/{region}": path for (account, region), path in sorted(newest.items())}


def delivery_lags(plan: Plan, finished: datetime) -> dict[str, float | None]:
    """From each taken object's LastModified (its cache file's mtime) to the end of the run that committed its rows."""
    lags = sorted((finished.timestamp() * 1000 - (e.mtime_ms or 0)) / 1000 for m in plan.written for e in m.entries)
    if not lags:
        return {"files": 0, "p50_seconds": None, "p95_seconds": None}
    p95 = statistics.quantiles(lags, n=20)[-1] if len(lags) > 1 else lags[0]
    return {"files": len(lags), "p50_seconds": round(statistics.median(lags), 1), "p95_seconds": round(p95, 1)}
