"""The queue under random interleavings (hypothesis's stateful testing), on moto's S3 + SQS server: deliveries with
notifications re-sent and reordered, hostile keys, visibility timeouts running out, runs that die mid-fetch or
mid-delete, and clean runs. After every clean run the table equals the oracle (every notified log file the lake
can hold, each event once, through Spark's commit log and DuckDB), nothing waits in the queue, and every hostile
key is named; after any step no event is in the table twice and nothing outside the oracle is.

`make test` runs $QUEUE_EXAMPLES (3) sequences of $QUEUE_STEPS (8) steps; `make fuzz-queue` runs 50 of 12.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from jobs.lake import Lake
from jobs.landing import kept_notifications, sqs
from jobs.landing.bucket import BucketLanding
from tests.aws import Trail, cloudtrail_sns, log_key, s3_event
from tests.helpers import duckdb_rows, events_of, ingest, table_rows

EXAMPLES = int(os.environ.get("QUEUE_EXAMPLES", "3"))
STEPS = int(os.environ.get("QUEUE_STEPS", "8"))
VISIBILITY = 2  # seconds: short, so that the runs see messages come back
NOW = datetime.now(tz=UTC).replace(microsecond=0)


class Died(BaseException):
    """A run that stops where it stands (not an Exception: nothing in the job catches it)."""


class QueueSequences(RuleBasedStateMachine):
    spark = None
    root = Path(tempfile.gettempdir())

    def __init__(self) -> None:
        super().__init__()
        self.trail = Trail.create()
        self.lake = self.root / uuid.uuid4().hex[:8] / "lake"
        self.notified: dict[str, frozenset[str]] = {}  # log key -> its eventIDs, once notified
        self.hostile: set[str] = set()
        self.count = 0

    def _deliver(self, hostile: bool) -> str:
        self.count += 1
        records = events_of(2, NOW - timedelta(hours=1), f"q{self.count}")
        name = f"q{self.count}" + ("x" * 300 if hostile else "")
        key = log_key(self.trail.prefix, NOW - timedelta(minutes=self.count), name)
        self.trail.s3.put_object(Bucket=self.trail.bucket, Key=key, Body=gzip.compress(json.dumps({"Records": records}).encode()))
        if hostile:
            self.hostile.add(key)
        else:
            self.notified[key] = frozenset(r["eventID"] for r in records)
        return key

    @rule(files=st.integers(1, 3), hostile=st.booleans(), shape=st.sampled_from(["sns", "s3"]), resent=st.booleans())
    def deliver(self, files: int, hostile: bool, shape: str, resent: bool) -> None:
        keys = [self._deliver(hostile and n == 0) for n in range(files)]
        bodies = [cloudtrail_sns(self.trail.bucket, [key]) if shape == "sns" else s3_event(self.trail.bucket, [key]) for key in keys]
        if resent:
            bodies += bodies[:1]
        self.trail.notify_many(list(reversed(bodies)))

    @rule(pick=st.integers(0, 100))
    def resend(self, pick: int) -> None:
        if self.notified:
            key = sorted(self.notified)[pick % len(self.notified)]
            self.trail.notify(cloudtrail_sns(self.trail.bucket, [key]))

    @rule()
    def visibility_runs_out(self) -> None:
        time.sleep(VISIBILITY + 0.5)

    @rule(after=st.integers(0, 3), phase=st.sampled_from(["fetching", "deleting"]))
    def run_dies(self, after: int, phase: str) -> None:
        fetch_one, done = BucketLanding._fetch_one, sqs.Received.done
        fetched = [0]

        def dying_fetch(landing, s3, key):  # type: ignore[no-untyped-def]
            fetched[0] += 1
            if phase == "fetching" and fetched[0] > after:
                raise Died(f"died after {after} fetches")
            return fetch_one(landing, s3, key)

        def dying_done(received, *args):  # type: ignore[no-untyped-def]
            received.held = dict(list(received.held.items())[:after])
            done(received, *args)
            raise Died(f"died after deleting {after} messages")

        BucketLanding._fetch_one, sqs.Received.done = dying_fetch, dying_done  # type: ignore[method-assign]
        try:
            self._run()
        except Died:
            pass
        finally:
            BucketLanding._fetch_one, sqs.Received.done = fetch_one, done  # type: ignore[method-assign]

    @rule()
    def clean_run(self) -> None:
        """Runs until the queue is empty: a message a dead run held comes back after its visibility timeout."""
        for _ in range(4):
            self._run()
            if not self.trail.waiting():
                break
            time.sleep(VISIBILITY + 0.5)
        assert self.trail.waiting() == 0, "nothing left in the queue"
        oracle = sorted(i for ids in self.notified.values() for i in ids)
        assert sorted(i for i, _ in table_rows(self.spark, self.lake)) == oracle
        assert sorted(i for i, _ in duckdb_rows(self.lake)) == oracle
        assert self.hostile <= {entry["key"] for entry in kept_notifications.refused(Lake.at(self.lake), 10_000)}, "every hostile key named"

    def _run(self) -> None:
        ingest(self.spark, self.trail.url, self.lake, queue_url=self.trail.queue_url, visibility_timeout=VISIBILITY,
               reconcile_interval="3650 days")  # fmt: skip

    def teardown(self) -> None:
        self.clean_run()  # every sequence ends with the table equal to the oracle

    @invariant()
    def no_event_twice_and_nothing_unknown(self) -> None:
        rows = [i for i, _ in table_rows(self.spark, self.lake)]
        assert len(rows) == len(set(rows)), "an event twice"
        assert set(rows) <= {i for ids in self.notified.values() for i in ids}


def test_random_queue_sequences_lose_no_notification_and_take_nothing_twice(spark, aws, tmp_path, caplog):
    caplog.set_level(logging.CRITICAL)
    QueueSequences.spark, QueueSequences.root = spark, tmp_path
    run_state_machine_as_test(
        QueueSequences,
        settings=settings(
            max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, database=None, suppress_health_check=list(HealthCheck)
        ),
    )
