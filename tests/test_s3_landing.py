"""An S3 landing read through its delivery notifications, against a real S3 + SQS API on loopback (moto's server).

After each scenario the events table equals the oracle computed from the bucket's objects, read through Spark's
commit log and through a directory reader (DuckDB), each event once.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cloudtrail_airflow.lake_view import _deliveries
from jobs.lake import Lake
from jobs.landing import kept_notifications, notifications, sqs
from jobs.landing.bucket import BucketLanding
from jobs.reporting import tally
from jobs.status import lake_status
from tests.aws import ACCOUNT, REGION, S3_TEST_EVENT, cloudtrail_sns, eventbridge, log_key, reach_from, s3_event
from tests.helpers import command, duckdb_rows, events_of, ingest, quarantine_rows, run_command, succeeded, table_rows

NOW = datetime.now(tz=UTC).replace(microsecond=0)


def ids(rows: list[tuple[str, str]]) -> list[str]:
    return [event_id for event_id, _ in rows]


def assert_table_is_oracle(spark, lake, trail) -> None:
    oracle = trail.oracle()
    assert ids(table_rows(spark, lake)) == oracle
    assert ids(duckdb_rows(lake)) == oracle


@pytest.mark.unit
@pytest.mark.parametrize(
    "body, keys, ignored",
    [
        (cloudtrail_sns("b", ["AWSLogs/1/CloudTrail/r/2024/03/01/1_CloudTrail_r_20240301T0000Z_a.json.gz"]), 1, 0),
        (cloudtrail_sns("b", ["AWSLogs/1/CloudTrail/r/2024/03/01/1_CloudTrail_r_20240301T0000Z_a.json.gz"], wrapped=False), 1, 0),
        (s3_event("b", ["AWSLogs/1/CloudTrail/r/2024/03/01/1_CloudTrail_r_20240301T0000Z_a b+c%é.json.gz"]), 1, 0),
        (s3_event("b", ["AWSLogs/1/CloudTrail/r/2024/03/01/1_CloudTrail_r_20240301T0000Z_a.json.gz"], wrapped=True), 1, 0),
        (eventbridge("b", "AWSLogs/1/CloudTrail/r/2024/03/01/1_CloudTrail_r_20240301T0000Z_a b.json.gz"), 1, 0),
        (cloudtrail_sns("b", ["AWSLogs/1/CloudTrail-Digest/r/2024/03/01/1_CloudTrail-Digest_r_t_r_20240301T010000Z.json.gz"]), 0, 1),
        (s3_event("b", ["AWSLogs/1/elasticloadbalancing/r/2024/03/01/x.log.gz"]), 0, 1),
        (S3_TEST_EVENT, 0, 0),
    ],
    ids=["sns-wrapped", "sns-raw", "s3-event-encoded", "s3-event-via-sns", "eventbridge", "digest", "other-service", "test-event"],
)
def test_each_notification_shape_names_its_log_files(body, keys, ignored):
    parsed = notifications.parse(body)
    assert parsed.reason is None
    assert (len(parsed.deliveries), parsed.ignored) == (keys, ignored)


@pytest.mark.unit
def test_an_encoded_key_is_decoded_and_a_raw_one_is_not():
    key = "AWSLogs/1/CloudTrail/r/2024/03/01/1_CloudTrail_r_20240301T0000Z_a b+c%25é.json.gz"
    assert notifications.parse(s3_event("b", [key])).deliveries[0].key == key
    assert notifications.parse(eventbridge("b", key)).deliveries[0].key == key
    assert notifications.parse(cloudtrail_sns("b", [key])).deliveries[0].key == key


@pytest.mark.unit
@pytest.mark.parametrize("body", ["", "not json", "[1, 2]", '{"s3Bucket": 7, "s3ObjectKey": ["k"]}', '{"Records": [{"s3": {}}]}', "{}"])
def test_a_body_that_cannot_be_read_gets_a_reason(body):
    parsed = notifications.parse(body)
    assert parsed.reason and not parsed.deliveries


@pytest.mark.unit
@pytest.mark.parametrize(
    "key",
    [
        "trail/AWSLogs/../../etc/1_CloudTrail_r_20240301T0000Z_a.json.gz",
        "trail/AWSLogs/1/CloudTrail/r/2024/03/01/../../../../../../x_CloudTrail_y.json.gz",
        "trail/AWSLogs//1/CloudTrail/r/2024/03/01/1_CloudTrail_r_20240301T0000Z_a.json.gz",
        "other/AWSLogs/1/CloudTrail/r/2024/03/01/1_CloudTrail_r_20240301T0000Z_a.json.gz",
        "trail/AWSLogs/1/CloudTrail/r/2024/03/01/1_CloudTrail-Digest_r_t_r_20240301T010000Z.json.gz",
    ],
)
def test_a_key_outside_the_landing_never_reaches_the_cache(tmp_path, key):
    landing = BucketLanding.at("s3://bucket/trail", tmp_path)
    assert landing.relative_key(key) is None
    with pytest.raises(ValueError):
        landing.cached(key)


@pytest.mark.unit
def test_the_cache_keeps_only_copies_of_the_landing_a_lake_reads_and_its_ledger_took(tmp_path):
    """A walk of the cache plans what it holds: another landing's copies, or those an earlier lake at the same location
    took, are deleted; a lake's own (a first run's, fetched before it died; an earlier release's, unmarked) are kept."""
    copy = tmp_path / "AWSLogs" / "1" / "CloudTrail" / "r" / "2024" / "03" / "01" / "1_CloudTrail_r_20240301T0000Z_a.json.gz"
    first = BucketLanding.at("s3://first/trail", tmp_path)

    def kept(landing: BucketLanding, new_lake: bool) -> bool:
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(b"{}")
        landing.claim(new_lake)
        return copy.exists()

    assert kept(first, new_lake=True) and kept(first, new_lake=False)  # no lake's ledger took them yet
    first.mark()
    assert (tmp_path / ".landing").read_text() == "s3://first/trail/\n"
    assert kept(BucketLanding.at("s3://first/trail/", tmp_path), new_lake=False)
    assert not kept(first, new_lake=True), "an earlier lake here took them"
    first.mark()
    assert not kept(BucketLanding.at("s3://second/trail", tmp_path), new_lake=False), "another landing's"
    assert not (tmp_path / ".landing").exists() and (tmp_path / "AWSLogs").is_dir()


def test_notifications_of_every_shape_duplicated_and_out_of_order_give_each_event_once(spark, trail, lake):
    odd = ["a b", "c+d", "e%20f", "ünï"]
    keys = [trail.deliver(events_of(5, NOW - timedelta(hours=1), f"e{n}"), NOW, f"{n}-{name}") for n, name in enumerate(odd)]
    keys.append(trail.deliver(events_of(5, NOW - timedelta(hours=1), "e4"), NOW - timedelta(minutes=20), "4"))
    gone = log_key(trail.prefix, NOW, "gone")
    trail.notify_many(
        [
            s3_event(trail.bucket, [keys[0]]),
            cloudtrail_sns(trail.bucket, [keys[1], keys[2]]),
            eventbridge(trail.bucket, keys[3]),
            cloudtrail_sns(trail.bucket, [keys[4]], wrapped=False),
            s3_event(trail.bucket, [keys[0]], wrapped=True),  # a re-delivery, and keys[4] notified last though oldest
            cloudtrail_sns(trail.bucket, [gone]),
            S3_TEST_EVENT,
            "{not json",
            cloudtrail_sns(trail.bucket, [keys[0].replace("CloudTrail/", "CloudTrail-Digest/")]),
        ]
    )
    report = ingest(spark, trail.url, lake, queue_url=trail.queue_url)
    assert_table_is_oracle(spark, lake, trail)
    messages = report.deliveries["messages"]
    assert messages["messages"] == 9 and messages["deleted"] == 9 and messages["kept_unparseable"] == 1
    assert report.deliveries["objects_fetched"] == 5
    (problem,) = report.deliveries["problems_shown"]
    assert problem == {"bucket": trail.bucket, "key": gone, "reason": "gone (404): deleted before it was fetched"}
    assert report.deliveries["delivery_lag"]["files"] == 5
    assert 0 <= report.deliveries["oldest_message_age_seconds"] < 120, "the messages were sent just before the run"
    assert trail.waiting() == 0
    (kept,) = kept_notifications.kept(Lake.at(lake))
    assert kept["body"] == "{not json" and kept["reason"].startswith("not JSON")
    # The lake page's read model and section: the queue now, what was kept, the delivery lag.
    found = lake_status.deliveries(Lake.at(lake), trail.queue_url, tally.read(Lake.at(lake)))
    assert found.queue == {"waiting": 0, "in_flight": 0, "delayed": 0} and found.kept == 1 and found.delivery_lag["files"] == 5
    section = _deliveries(found)
    assert "0 notifications waiting" in section and "Kept as unreadable: 1 notifications" in section and "p95" in section
    assert found.oldest_message == (report.started_at, report.deliveries["oldest_message_age_seconds"])
    assert f"The newest run that took notifications started {report.started_at} and took 9; the oldest was" in section
    # Freshness without walking the cache: the newest file per place the runs took, as a walk of the cache finds it.
    runs, threshold, skew = tally.read(Lake.at(lake)), timedelta(hours=2), timedelta(minutes=15)
    from_reports = lake_status.freshness(Lake.at(lake), None, threshold, runs, NOW, skew)
    walked = lake_status.freshness(Lake.at(lake), Lake.at(lake).landing_cache, threshold, runs, NOW, skew)
    assert from_reports == walked and [f.newest_file.rsplit("/", 1)[1] for f in from_reports] == [max(keys[:4]).rsplit("/", 1)[1]]

    # Every message again, later: nothing is read twice.
    trail.notify_many([s3_event(trail.bucket, keys), cloudtrail_sns(trail.bucket, keys)])
    again = ingest(spark, trail.url, lake, queue_url=trail.queue_url)
    assert again.ledger["new_files"] == 0 and not again.batches
    assert_table_is_oracle(spark, lake, trail)


def test_a_run_that_dies_before_deleting_its_messages_takes_nothing_twice(spark, trail, lake, monkeypatch):
    keys = [trail.deliver(events_of(3, NOW - timedelta(hours=2), f"k{n}"), NOW, str(n)) for n in range(3)]
    trail.notify_many([s3_event(trail.bucket, [key]) for key in keys])

    def killed(self, *args):
        raise KeyboardInterrupt("killed while deleting messages")

    monkeypatch.setattr(sqs.Received, "done", killed)
    with pytest.raises(KeyboardInterrupt):
        ingest(spark, trail.url, lake, queue_url=trail.queue_url, visibility_timeout=1)  # the messages come back at once
    monkeypatch.undo()
    assert trail.waiting() == 3
    time.sleep(1.5)  # their visibility runs out
    report = ingest(spark, trail.url, lake, queue_url=trail.queue_url)
    assert report.deliveries["messages"]["deleted"] == 3
    assert trail.waiting() == 0
    assert_table_is_oracle(spark, lake, trail)


def test_a_lost_notification_is_found_by_the_reconciliation(spark, trail, lake):
    notified = trail.deliver(events_of(4, NOW - timedelta(hours=1), "n"), NOW, "notified")
    lost = trail.deliver(events_of(4, NOW - timedelta(hours=1), "lost"), NOW, "lost")
    trail.digest([notified, lost], NOW)
    trail.notify(cloudtrail_sns(trail.bucket, [notified]))
    report = ingest(spark, trail.url, lake, queue_url=trail.queue_url, reconcile_interval="10 days")  # due: none yet
    assert_table_is_oracle(spark, lake, trail)
    (path,) = Lake.at(lake).reconcile_reports.glob("*.json")
    found = json.loads(path.read_text())
    assert found["missing"] == [lost] and found["summary"]["delivered"] == 2 and found["summary"]["hash_mismatches"] == 0
    assert report.ledger["new_files"] == 2

    # The next reconciliation reads the first digest again (it was not proven) and a new one: every file is ingested,
    # every hash equal; the one after that reads no digest (both proven).
    trail.digest([notified, lost], NOW + timedelta(minutes=1))
    for digests_read, delivered in ((2, 4), (0, 0)):
        ingest(spark, trail.url, lake, queue_url=trail.queue_url, reconcile=True)
        newest = max(Lake.at(lake).reconcile_reports.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
        summary = json.loads(newest.read_text())["summary"]
        assert summary["digests_read"] == digests_read
        assert (summary["delivered"], summary["ingested"], summary["missing"], summary["hash_mismatches"]) == (delivered, delivered, 0, 0)
    assert_table_is_oracle(spark, lake, trail)

    # Digests are data from outside: one that is not JSON, one whose logFiles is no list, one listing junk with a file.
    folder = trail.digest([notified], NOW + timedelta(minutes=2)).rsplit("/", 1)[0]
    name = f"{ACCOUNT}_CloudTrail-Digest_{REGION}_trail_{REGION}_{NOW:%Y%m%dT%H}%s00Z.json.gz"
    junk = {"awsAccountId": ACCOUNT, "digestEndTime": f"{NOW:%Y-%m-%dT%H}:59:00Z", "logFiles": 5}
    listed = {**junk, "logFiles": ["x", 7, {"s3Bucket": trail.bucket, "s3Object": lost, "hashValue": "0" * 64}]}
    for minute, body in (("57", b"{cut"), ("58", json.dumps(junk).encode()), ("59", json.dumps(listed).encode())):
        trail.s3.put_object(Bucket=trail.bucket, Key=f"{folder}/{name % minute}", Body=gzip.compress(body))
    ingest(spark, trail.url, lake, queue_url=trail.queue_url, reconcile=True)
    newest = json.loads(max(Lake.at(lake).reconcile_reports.glob("*.json"), key=lambda p: p.stat().st_mtime_ns).read_text())
    assert len(newest["unreadable_digests"]) == 2 and newest["hash_mismatches"] == [lost], "named, never raised"
    assert_table_is_oracle(spark, lake, trail)


def test_without_digests_the_reconciliation_lists_the_places_delivery_folders_of_its_window(spark, trail, lake):
    notified = trail.deliver(events_of(2, NOW - timedelta(hours=1), "u"), NOW, "notified")
    lost = trail.deliver(events_of(2, NOW - timedelta(hours=1), "ulost"), NOW, "lost")
    trail.notify(cloudtrail_sns(trail.bucket, [notified]))
    ingest(spark, trail.url, lake, queue_url=trail.queue_url, reconcile=True)
    assert_table_is_oracle(spark, lake, trail)
    (path,) = Lake.at(lake).reconcile_reports.glob("*.json")
    found = json.loads(path.read_text())
    assert found["missing"] == [lost] and found["summary"]["undigested_places"] == 1 and found["summary"]["digests_read"] == 0


def test_a_first_run_lists_the_bucket_from_a_delivery_date_and_a_dry_run_estimates_it(spark, trail, lake):
    old = NOW - timedelta(days=10)
    trail.deliver(events_of(2, old, "old"), old, "old")
    trail.deliver(events_of(3, NOW - timedelta(hours=1), "new"), NOW, "new")
    since = (NOW - timedelta(days=1)).date().isoformat()
    dry_run = command("jobs.cloudtrail_ingest", "--landing", trail.url, "--lake", lake, "--since", since, "--dry-run")
    estimate = json.loads(succeeded_stdout(dry_run))
    assert estimate["total"]["files"] == 1 and not Lake.at(lake).events.exists()
    report = ingest(spark, trail.url, lake, since=since)
    assert report.deliveries["objects_fetched"] == 1
    assert ids(table_rows(spark, lake)) == [f"new-{i}" for i in range(3)]


def succeeded_stdout(result) -> str:
    succeeded(result)
    return result.stdout


def test_the_watcher_fires_once_per_delivery_and_leaves_the_notifications_in_the_queue(trail):
    from cloudtrail_airflow.triggers import NotificationsWaiting

    key = "AWSLogs/1/CloudTrail/r/2024/03/01/1_CloudTrail_r_20240301T0000Z_a.json.gz"
    trigger = NotificationsWaiting(trail.queue_url, aws_conn_id=None, poll_seconds=0.1, refire_seconds=3)

    async def watch() -> list[tuple[str, object]]:
        """What the watcher raises while the queue goes through a delivery's life, step by step."""
        seen: list[tuple[str, object]] = []
        raised: asyncio.Queue = asyncio.Queue()

        async def pump() -> None:  # as the triggerer runs it: one generator, every event it yields
            async for event in trigger.run():
                raised.put_nowait(event.payload)

        watcher = asyncio.create_task(pump())

        async def within(seconds: float) -> object:
            try:
                return await asyncio.wait_for(raised.get(), seconds)
            except TimeoutError:
                return None

        seen.append(("empty queue", await within(0.5)))
        trail.notify(cloudtrail_sns(trail.bucket, [key]))
        seen.append(("a delivery", await within(5)))
        seen.append(("the same message, not taken yet", await within(1)))
        seen.append(("still waiting after refire_seconds", await within(5)))
        held = trail.sqs.receive_message(QueueUrl=trail.queue_url, VisibilityTimeout=30, AttributeNames=["ApproximateReceiveCount"])
        seen.append(("receive count", held["Messages"][0]["Attributes"]["ApproximateReceiveCount"]))
        seen.append(("a run holds it", await within(4)))
        trail.notify(cloudtrail_sns(trail.bucket, [key]))
        seen.append(("a delivery while a run holds one", await within(5)))
        watcher.cancel()
        return seen

    one = {"queue": trail.queue_url, "waiting": 1}
    assert asyncio.run(watch()) == [
        ("empty queue", None),
        ("a delivery", one),
        ("the same message, not taken yet", None),
        ("still waiting after refire_seconds", one),
        ("receive count", "1"),  # the watcher received nothing: the message is the run's
        ("a run holds it", None),
        ("a delivery while a run holds one", one),
    ]


def test_an_asset_event_of_airflows_sqs_watcher_reaches_a_run_through_the_inbox(spark, trail, lake):
    """Airflow's SQS trigger (the watcher of earlier releases) deletes what it receives: its asset events, still
    queued when this release starts, carry the only copy of their notifications. The run takes the keys from them,
    kept in the lake until their files are ledgered, so a run that fails loses none."""
    from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger

    key = trail.deliver(events_of(3, NOW - timedelta(hours=1), "w"), NOW, "watched")
    trail.notify(cloudtrail_sns(trail.bucket, [key]))
    trigger = MessageQueueTrigger(scheme="sqs", sqs_queue=trail.queue_url, aws_conn_id=None, wait_time_seconds=0, waiter_delay=1)

    async def first_event():
        async for event in trigger.trigger.run():
            return event

    event = asyncio.run(asyncio.wait_for(first_event(), 30))
    assert trail.waiting() == 0  # the watcher deleted it
    bodies = kept_notifications.bodies_of([{"extra": {"from_trigger": True, "payload": event.payload}}])
    kept_notifications.write_inbox(Lake.at(lake), "asset-event-1", bodies)
    report = ingest(spark, trail.url, lake, queue_url=trail.queue_url)
    assert report.deliveries["objects_fetched"] == 1
    assert not list(Lake.at(lake).inbox.glob("*.json"))
    assert_table_is_oracle(spark, lake, trail)


@pytest.mark.harness  # an ingest and a rebuild in its own process (about a minute): `make test-harness`
def test_a_rebuild_whose_local_copies_are_gone_reads_the_objects_again(spark, trail, lake):
    keys = [trail.deliver(events_of(4, NOW - timedelta(hours=3), f"r{n}"), NOW, f"r{n}") for n in range(3)]
    trail.notify(cloudtrail_sns(trail.bucket, keys))
    ingest(spark, trail.url, lake, queue_url=trail.queue_url)
    shutil.rmtree(Lake.at(lake).landing_cache)
    day = (NOW - timedelta(hours=3)).date().isoformat()
    end = (NOW - timedelta(hours=3) + timedelta(minutes=3)).date().isoformat()
    succeeded(command("jobs.rebuild", "--landing", trail.url, "--lake", lake, "--from-date", day, "--to-date", end))
    assert ids(duckdb_rows(lake)) == trail.oracle()  # a rebuild swaps partitions under the commit log: directory readers
    assert len(list(Lake.at(lake).landing_cache.rglob("*.json.gz"))) == 3
    (report,) = Lake.at(lake).reports.glob("rebuild/*.json")
    rebuilt = json.loads(report.read_text())["partitions"]
    assert sum(p["files_read"] for p in rebuilt.values()) == 3 and sum(p["rows_kept_from_unreadable_files"] for p in rebuilt.values()) == 0


def test_where_the_executors_share_no_disk_with_the_driver_they_read_the_objects_not_its_copies(spark, trail, lake, monkeypatch):
    """CLOUDTRAIL_LANDING_READS=store, as a cluster is by default: the executors read each object through S3A. The
    driver's copies, spoiled here once it has fetched them (the same sizes and times: the plan is as before), are not
    what is read: the ingest and a rebuild take every event of the objects and quarantine nothing."""
    from jobs.ingest import deliveries
    from jobs.landing.bucket import READS

    reach_from(spark)
    monkeypatch.setenv(READS, "store")
    keys = [trail.deliver(events_of(6, NOW - timedelta(hours=2), f"s{n}"), NOW, f"s{n}") for n in range(3)]
    trail.notify(cloudtrail_sns(trail.bucket, keys))
    cache = Lake.at(lake).landing_cache

    def spoil_the_copies() -> None:
        for path in cache.rglob("*.json.gz"):
            found = path.stat()
            path.write_bytes(b"\0" * found.st_size)
            os.utime(path, ns=(found.st_atime_ns, found.st_mtime_ns))

    fetch = deliveries.take
    monkeypatch.setattr(deliveries, "take", lambda *args: (fetch(*args), spoil_the_copies())[0])
    ingest(spark, trail.url, lake, queue_url=trail.queue_url)
    assert_table_is_oracle(spark, lake, trail)
    assert quarantine_rows(spark, lake) == [], "no copy was read"

    day = (NOW - timedelta(hours=2)).date().isoformat()
    end = (NOW - timedelta(hours=2) + timedelta(minutes=6)).date().isoformat()
    assert run_command(spark, "rebuild", ["--landing", trail.url, "--lake", str(lake), "--from-date", day, "--to-date", end]) == 0
    assert_table_is_oracle(spark, lake, trail)
    assert quarantine_rows(spark, lake) == [], "the rebuild read the objects too"


@pytest.mark.parametrize("phase, at", [("fetching", 8), ("deleting", 10)])
def test_a_run_killed_while_fetching_or_deleting_messages_loses_and_repeats_nothing(spark, trail, lake, phase, at):
    keys = [trail.deliver(events_of(20, NOW - timedelta(hours=2), f"{phase}{n}"), NOW, f"{phase}-{n}") for n in range(30)]
    trail.notify_many([cloudtrail_sns(trail.bucket, [key]) for key in keys])
    job = ["--landing", trail.url, "--lake", str(lake), "--queue-url", trail.queue_url, "--visibility-timeout", "2"]
    job += ["--reconcile-interval", "3650 days"]
    killed = subprocess.run(
        [sys.executable, "-m", "tests.fault_runner", phase, str(at), "--", *job, "--run-id", "killed"],
        start_new_session=True, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert killed.returncode == -9, killed.stderr[-3000:]
    time.sleep(2.5)  # the messages the killed run received and did not delete come back
    report = ingest(spark, trail.url, lake, queue_url=trail.queue_url, reconcile_interval="3650 days")
    assert_table_is_oracle(spark, lake, trail)
    assert trail.waiting() == 0
    if phase == "deleting":  # every file was in the ledger: the 20 messages not deleted come back and name nothing new
        assert report.ledger["new_files"] == 0 and report.deliveries["messages"]["deleted"] == 20
    else:  # the 8 objects fetched before the kill are not downloaded again
        assert report.ledger["new_files"] == 30 and report.deliveries["objects_already_cached"] >= 8


def test_a_message_is_kept_hidden_while_its_file_is_fetched_past_its_visibility_timeout(spark, trail, lake, monkeypatch):
    key = trail.deliver(events_of(5, NOW - timedelta(hours=1), "v"), NOW, "slow")
    trail.notify(cloudtrail_sns(trail.bucket, [key]))
    other: list[dict] = []
    fetch_one = BucketLanding._fetch_one

    def slow(self, s3, wanted):  # the visibility (1 s) would run out twice; another consumer asks meanwhile
        time.sleep(2.5)
        other.extend(trail.sqs.receive_message(QueueUrl=trail.queue_url, VisibilityTimeout=1).get("Messages", []))
        return fetch_one(self, s3, wanted)

    monkeypatch.setattr(BucketLanding, "_fetch_one", slow)
    report = ingest(spark, trail.url, lake, queue_url=trail.queue_url, visibility_timeout=1)
    monkeypatch.undo()
    assert other == [], "the run extended the message's visibility while it worked"
    assert report.deliveries["messages"]["deleted"] == 1 and trail.waiting() == 0
    time.sleep(1.5)
    again = ingest(spark, trail.url, lake, queue_url=trail.queue_url)
    assert again.ledger["new_files"] == 0
    assert_table_is_oracle(spark, lake, trail)


def test_a_message_received_again_after_its_receipt_expired_adds_nothing_twice(spark, trail, lake, monkeypatch):
    """When the extension fails (the run paused, the network down), another consumer takes the message: the run's
    delete then fails or comes too late, the message comes back, and names a file the ledger has."""
    key = trail.deliver(events_of(5, NOW - timedelta(hours=1), "w"), NOW, "stalled")
    trail.notify(cloudtrail_sns(trail.bucket, [key]))
    other: list[dict] = []
    fetch_one = BucketLanding._fetch_one

    def stalled(self, s3, wanted):
        time.sleep(1.5)
        other.extend(trail.sqs.receive_message(QueueUrl=trail.queue_url, VisibilityTimeout=1).get("Messages", []))
        return fetch_one(self, s3, wanted)

    monkeypatch.setattr(BucketLanding, "_fetch_one", stalled)
    monkeypatch.setattr(sqs.Holding, "run", lambda self: None)  # no extension
    ingest(spark, trail.url, lake, queue_url=trail.queue_url, visibility_timeout=1)
    monkeypatch.undo()
    assert len(other) == 1, "the message was received again while the run fetched its file"
    time.sleep(1.5)
    again = ingest(spark, trail.url, lake, queue_url=trail.queue_url)
    assert again.ledger["new_files"] == 0
    assert_table_is_oracle(spark, lake, trail)


def test_a_burst_of_notifications_is_taken_in_one_run(spark, trail, lake):
    """$S3_BURST notifications (2,000 in make test, 10,000 in make test-s3-burst) for 200 objects: each named by
    several messages of the four shapes, out of order."""
    burst = int(os.environ.get("S3_BURST", "2000"))
    keys = [trail.deliver(events_of(2, NOW - timedelta(hours=1), f"b{n}"), NOW, f"burst-{n}") for n in range(200)]
    shapes = [
        lambda key: cloudtrail_sns(trail.bucket, [key]),
        lambda key: s3_event(trail.bucket, [key]),
        lambda key: eventbridge(trail.bucket, key),
        lambda key: cloudtrail_sns(trail.bucket, [key], wrapped=False),
    ]
    bodies = [shapes[n % 4](keys[(n * 7919) % len(keys)]) for n in range(burst)]
    trail.notify_many(bodies)
    report = ingest(spark, trail.url, lake, queue_url=trail.queue_url, max_messages=burst)
    assert report.deliveries["messages"]["messages"] == burst and report.deliveries["messages"]["deleted"] == burst
    assert report.deliveries["objects_fetched"] == 200 and trail.waiting() == 0
    assert_table_is_oracle(spark, lake, trail)


def test_a_forbidden_object_is_named_and_its_message_comes_back_once_per_visibility_timeout(spark, trail, lake, monkeypatch):
    """moto does not enforce access: the 403 is S3's answer as botocore raises it, for one key, on the real queue."""
    from botocore.exceptions import ClientError

    readable = trail.deliver(events_of(3, NOW - timedelta(hours=1), "ok"), NOW, "readable")
    forbidden = trail.deliver(events_of(3, NOW - timedelta(hours=1), "kms"), NOW, "forbidden")
    trail.notify_many([cloudtrail_sns(trail.bucket, [readable]), cloudtrail_sns(trail.bucket, [forbidden])])
    fetch_one = BucketLanding._fetch_one
    asked: list[str] = []

    def denied(self, s3, key):
        if key == forbidden:
            asked.append(key)
            error = {"Error": {"Code": "AccessDenied"}, "ResponseMetadata": {"HTTPStatusCode": 403}}
            s3 = type("Denied", (), {"get_object": lambda *_, **__: (_ for _ in ()).throw(ClientError(error, "GetObject"))})()
        return fetch_one(self, s3, key)

    monkeypatch.setattr(BucketLanding, "_fetch_one", denied)
    report = ingest(spark, trail.url, lake, queue_url=trail.queue_url, visibility_timeout=1)
    (problem,) = report.deliveries["problems_shown"]
    assert problem["bucket"] == trail.bucket and problem["key"] == forbidden and problem["reason"].startswith("forbidden (403)")
    assert report.deliveries["messages"]["deleted"] == 1 and report.deliveries["messages"]["left_for_retry"] == 1
    assert asked == [forbidden], "one GET, no retries"
    monkeypatch.undo()  # the role may read it now
    time.sleep(1.5)
    ingest(spark, trail.url, lake, queue_url=trail.queue_url)
    assert trail.waiting() == 0
    assert_table_is_oracle(spark, lake, trail)


@pytest.mark.unit
def test_an_inbox_or_outside_entry_that_cannot_be_read_is_kept_with_its_reason_and_the_others_taken_back(tmp_path):
    lake = Lake.at(tmp_path / "lake")
    kept_notifications.write_inbox(lake, "asset-event-1", ["body one", "body two"])
    kept_notifications.keep_outside(lake, "m-1", [notifications.Delivery("other-bucket", "AWSLogs/x.json.gz")], "s3://ours/")
    (lake.inbox / "broken.json").write_text("{not json")
    (lake.outside_messages / "broken.json").write_text(json.dumps({"format": 1, "landing": "s3://ours/"}))  # no objects

    inbox = kept_notifications.inbox_entries(lake)
    assert [(path.name, bodies) for path, bodies in inbox] == [("asset-event-1.json", ["body one", "body two"])]
    taken = kept_notifications.outside_entries(lake)
    assert [(message_id, objects) for message_id, _, objects in taken] == [("m-1", [["other-bucket", "AWSLogs/x.json.gz"]])]
    assert not (lake.inbox / "broken.json").exists() and not (lake.outside_messages / "broken.json").exists()
    reasons = sorted(entry["reason"].split(" that cannot be read")[0] for entry in kept_notifications.kept(lake))
    assert reasons == ["a kept outside entry", "an inbox entry"]


@pytest.mark.unit
def test_a_manifest_written_on_another_machine_names_each_file_where_this_machines_cache_holds_it(spark):
    """A manifest names the cache of the machine that planned it; the stream reads each file at its place from AWSLogs/
    on (the ledger's identity of a file, `layout.relative`) under this machine's cache, or, where the executors read
    the store (a cluster's, sharing no disk with the driver), the object at that place in the bucket."""
    from jobs.ingest.deliveries import where_read
    from jobs.landing.bucket import READS, BucketLanding
    from jobs.landing.layout import relative
    from jobs.records.decode import READ_FROM

    elsewhere = "/scratch-a/cloudtrail/0123/landing"
    named = [
        f"{elsewhere}/AWSLogs/111122223333/CloudTrail/us-east-1/2024/03/01/111122223333_CloudTrail_us-east-1_20240301T0000Z_a.json.gz",
        f"{elsewhere}/AWSLogs/o-org1/111122223333/CloudTrail/eu-west-1/2024/03/01/111122223333_CloudTrail_eu-west-1_x.json.gz",
        "/mnt/AWSLogs/landing/AWSLogs/111122223333/CloudTrail/us-east-1/2024/03/02/f.json.gz",  # 'AWSLogs' higher up too
        "/somewhere/odd.json.gz",  # no place under AWSLogs/: read as named
    ]
    files = spark.createDataFrame([(path, 1) for path in named], "path string, size long")
    landing = BucketLanding.at("s3://trail/org", Path("/scratch-b/landing"))
    cached = where_read(files, landing, from_store=False)
    found = [row.path for row in cached.collect()]
    assert found == [f"/scratch-b/landing/{relative(path)}" for path in named[:3]] + [named[3]]
    assert [relative(path) for path in found] == [relative(path) for path in named]
    assert READ_FROM not in cached.columns, "read where the path names it"

    stored = where_read(files, landing, from_store=True).collect()
    assert [row.path for row in stored] == found, "the path, and so _source_file, is the same either way"
    assert [row[READ_FROM] for row in stored] == [f"s3a://trail/org/{relative(path)}" for path in named[:3]] + [named[3]]
    assert not BucketLanding.from_store(spark, {}), "local mode: the executors share the driver's disk"
    assert BucketLanding.from_store(spark, {READS: "store"}) and not BucketLanding.from_store(spark, {READS: "cache"})
    with pytest.raises(ValueError, match="must be 'store', 'cache' or unset"):
        BucketLanding.from_store(spark, {READS: "disk"})
