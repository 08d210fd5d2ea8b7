"""The lake lock in object storage (jobs/lock.py's LeaseLock) on moto's S3: drivers on different machines share no
kernel, so one writer per lake rests on S3's conditional PUT and a lease its holder renews."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import boto3
import pytest
from botocore.exceptions import ClientError

from jobs.lock import LakeBusyError, LakeUnusableError, LeaseLock

pytestmark = pytest.mark.integration


@pytest.fixture
def lease(aws, request) -> str:
    bucket = f"lake-{request.node.name[-30:].lower().replace('_', '-')}".strip("-")
    boto3.client("s3").create_bucket(Bucket=bucket)
    return f"s3://{bucket}/lake/_checkpoints/ingest.lease"


def body(uri: str) -> dict:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return json.loads(boto3.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())


def test_a_second_driver_is_refused_naming_the_holder_and_takes_the_lake_once_it_is_released(lease):
    with LeaseLock(lease, "ingest run scheduled__1", lease_seconds=30):
        with pytest.raises(LakeBusyError, match=r"^ingest run scheduled__1 \(pid \d+ on .+\) holds this lake; a rebuild waited 0 s"):
            LeaseLock(lease, "a rebuild").__enter__()
    assert body(lease)["released"] is True
    with LeaseLock(lease, "a rebuild", lease_seconds=30):
        assert body(lease)["holder"].startswith("a rebuild (pid")


def test_of_drivers_starting_at_once_exactly_one_holds_the_lake(lease):
    start, results = threading.Barrier(6), []

    def driver(n: int) -> None:
        lock = LeaseLock(lease, f"driver {n}", lease_seconds=30)
        start.wait()
        try:
            lock.__enter__()
        except LakeBusyError:
            results.append("refused")
            return
        results.append("held")
        time.sleep(2)  # held while every other driver tries
        lock.__exit__(None)

    threads = [threading.Thread(target=driver, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == ["held", *["refused"] * 5]


def test_a_live_holder_keeps_its_lease_past_its_length_and_a_killed_one_frees_the_lake_once_it_expires(lease):
    script = ("import sys, time; from jobs.lock import LeaseLock; LeaseLock(sys.argv[1], 'ingest run on machine A', lease_seconds=2)"
              ".__enter__(); print('held', flush=True); time.sleep(120)")  # fmt: skip
    holder = subprocess.Popen([sys.executable, "-c", script, lease], stdout=subprocess.PIPE, text=True, env=os.environ)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        time.sleep(4)  # twice the lease: renewed by its holder all along
        with pytest.raises(LakeBusyError, match="ingest run on machine A"):
            LeaseLock(lease, "ingest run on machine B").__enter__()
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        started = time.monotonic()
        with LeaseLock(lease, "ingest run on machine B", wait_seconds=30, lease_seconds=30):
            waited = time.monotonic() - started
            assert body(lease)["holder"].startswith("ingest run on machine B")
        assert waited < 10, f"the dead holder's lease of 2 s kept the lake {waited:.0f} s"
    finally:
        holder.kill()


HOLD_THEN_EXIT = """
import sys, time
from jobs.lock import LeaseLock, LeaseLostError
try:
    with LeaseLock(sys.argv[1], "a stalled ingest", lease_seconds=1.5):
        print("held", flush=True)
        time.sleep(float(sys.argv[2]))
except LeaseLostError as exc:
    print(exc, flush=True)
"""


def test_a_holder_stalled_past_its_lease_loses_it_to_the_next_and_fails_when_it_exits(lease):
    holder = subprocess.Popen([sys.executable, "-c", HOLD_THEN_EXIT, lease, "6"], stdout=subprocess.PIPE, text=True, env=os.environ)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        holder.send_signal(signal.SIGSTOP)  # a paused VM, a stop-the-world pause: no renewal
        time.sleep(2.5)
        with LeaseLock(lease, "another ingest", wait_seconds=5, lease_seconds=30):
            holder.send_signal(signal.SIGCONT)
            out, _ = holder.communicate(timeout=30)
            assert out.startswith("a stalled ingest lost its lease on this lake to another ingest (pid"), out
            assert body(lease)["holder"].startswith("another ingest"), "the new holder's lease is left as it is"
    finally:
        holder.kill()


def test_an_unreachable_bucket_is_one_line(aws):
    one_line = r"^the lake's lease s3://no-such-bucket/lake.lease cannot be read \(NoSuchBucket\); check --lake$"
    with pytest.raises(LakeUnusableError, match=one_line):
        LeaseLock("s3://no-such-bucket/lake.lease", "an ingest").__enter__()


class FailingOnce:
    """The S3 client, whose next PUT fails as a throttled or reset request does."""

    def __init__(self) -> None:
        self.client, self.fail_next = boto3.client("s3"), False

    def get_object(self, **kwargs):
        return self.client.get_object(**kwargs)

    def put_object(self, **kwargs):
        if self.fail_next:
            self.fail_next = False
            raise ClientError({"Error": {"Code": "SlowDown", "Message": "Please reduce your request rate."}}, "PutObject")
        return self.client.put_object(**kwargs)


def test_a_renewal_that_fails_once_is_tried_again_and_the_holder_keeps_the_lake(lease):
    s3 = FailingOnce()
    lock = LeaseLock(lease, "a holder", lease_seconds=1.5, s3=s3).__enter__()
    s3.fail_next = True
    time.sleep(3.5)  # past the lease: the failed renewal was tried again
    with pytest.raises(LakeBusyError, match="^a holder"):
        LeaseLock(lease, "another").__enter__()
    lock.__exit__(None)
    assert body(lease)["released"] is True


@pytest.mark.unit
def test_a_lakes_lease_is_two_minutes_unless_cloudtrail_lease_sets_another_and_never_under_five_seconds():
    from jobs.lock import LakeUnusableError, lease_seconds

    assert lease_seconds({}) == 120 and lease_seconds({"CLOUDTRAIL_LEASE": "30 seconds"}) == 30
    for text, why in (("2 seconds", "a lease shorter than 5 s could lapse under its holder"), ("soon", "is not a duration")):
        with pytest.raises(LakeUnusableError, match=why):
            lease_seconds({"CLOUDTRAIL_LEASE": text})


@pytest.mark.unit
def test_no_writer_starts_on_a_lake_that_moved_or_on_one_a_migration_has_not_finished(tmp_path):
    """jobs.migrate's note: in the folder it left, every writer refused naming where the lake went; in the lake it
    copies to, every writer refused until the migration is run again; the migration's own lock takes both."""
    from jobs.lake import Lake
    from jobs.lock import MIGRATION_FORMAT, LakeLock, LakeMovedError
    from jobs.storage import write_record

    old, new = Lake(tmp_path / "old"), Lake(tmp_path / "new")
    note = {"from": old.location, "to": new.location}
    write_record(old.migration, MIGRATION_FORMAT, note | {"done": True})
    write_record(new.migration, MIGRATION_FORMAT, note | {"done": False})
    with pytest.raises(LakeMovedError, match=f"this lake moved to {new.location}"):
        LakeLock(old, "an ingest run").__enter__()
    with pytest.raises(LakeMovedError, match=f"a migration from {old.location} to this lake did not finish: run python -m jobs.migrate"):
        LakeLock(new, "a rebuild").__enter__()
    for lake in (old, new):
        with LakeLock(lake, "a migration", migrating=True):
            assert lake.lock.read_text().startswith("a migration")
