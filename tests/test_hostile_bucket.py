"""A hostile or unlucky bucket and queue (issue #65), on moto's S3 + SQS server: no key, object, digest or message
halts a run, and no notification is lost.

After each case the events table equals the oracle of the objects the lake can hold (through Spark's commit log
and through DuckDB), what it cannot hold is named by bucket and key with its reason, and the queue ends empty.
"""

from __future__ import annotations

import gzip
import json
import os
import time
import zlib
from datetime import UTC, datetime, timedelta
from html import escape

import pytest

from cloudtrail_airflow.lake_view import _deliveries
from jobs.lake import Lake
from jobs.landing import kept_notifications
from jobs.landing.bucket import BucketLanding
from jobs.reporting import summary as run_summary
from jobs.reporting import tally
from jobs.status import lake_status
from tests.aws import ACCOUNT, REGION, cloudtrail_sns, log_key
from tests.helpers import command, duckdb_rows, events_of, ingest, refusal, table_rows
from tools import status

NOW = datetime.now(tz=UTC).replace(microsecond=0)
HOUR_AGO = NOW - timedelta(hours=1)


def assert_table_holds(spark, lake, wanted: set[str]) -> None:
    rows = table_rows(spark, lake)
    assert sorted(i for i, _ in rows) == sorted(wanted), "each held event once, nothing else"
    assert sorted(i for i, _ in duckdb_rows(lake)) == sorted(wanted)


def put(trail, key: str, records: list[dict]) -> str:
    trail.s3.put_object(Bucket=trail.bucket, Key=key, Body=gzip.compress(json.dumps({"Records": records}).encode(), mtime=0))
    return key


def ids_of(records: list[dict]) -> set[str]:
    return {r["eventID"] for r in records}


@pytest.mark.unit
@pytest.mark.parametrize(
    "key, reason",
    [
        (log_key("t/", NOW, "x" * 300), "a part of 3"),  # a 300-byte file name
        (log_key("t/", NOW, "ok") + "/CloudTrail/r/2024/03/01/1_CloudTrail_r_20240301T0000Z_a.json.gz", "a log file's name as a folder"),
        ("t/AWSLogs/" + "/".join(["d" * 250] * 17) + "/CloudTrail/r/2024/03/01/1_CloudTrail_r_20240301T0000Z_a.json.gz", "as a path"),
        ("t/AWSLogs/1/CloudTrail/r/2024/03/01/../1_CloudTrail_r_20240301T0000Z_a.json.gz", "climb out"),
        ("t/AWSLogs/1/CloudTrail/r/2024/03/01/x.log.gz", "not a CloudTrail log file"),
        ("u/AWSLogs/1/CloudTrail/r/2024/03/01/1_CloudTrail_r_20240301T0000Z_a.json.gz", "not under"),
    ],
    ids=["long-name", "file-as-folder", "long-path", "dot-dot", "not-a-log", "other-prefix"],
)
def test_a_key_the_cache_cannot_hold_gets_a_reason_and_no_place(tmp_path, key, reason):
    landing = BucketLanding.at("s3://b/t", tmp_path)
    assert landing.relative_key(key) is None
    assert reason in (landing.refusal(key) or ""), landing.refusal(key)


@pytest.mark.unit
def test_a_long_name_the_file_system_holds_is_taken(tmp_path):
    """250 bytes: held, though the old partial name (.<name>.<pid>.part) went past 255."""
    landing = BucketLanding.at("s3://b/t", tmp_path)
    key = log_key("t/", NOW, "y" * (250 - len(f"{ACCOUNT}_CloudTrail_{REGION}_20240301T0000Z_.json.gz")))
    assert len(key.rsplit("/", 1)[1]) == 250 and landing.refusal(key) is None


def test_keys_a_posix_disk_cannot_hold_are_refused_by_key_and_every_other_object_is_ingested(spark, trail, lake):
    held = events_of(4, HOUR_AGO, "held")
    long_ok = events_of(3, HOUR_AGO, "long-ok")
    good = trail.deliver(held, NOW, "good")
    fits = put(trail, log_key(trail.prefix, NOW, "y" * 190), long_ok)  # a 247-byte name: held
    too_long = put(trail, log_key(trail.prefix, NOW, "<img src=x onerror=alert(1)>" * 11), events_of(2, HOUR_AGO, "too-long"))
    under_a_file = put(trail, f"{good}/CloudTrail/{REGION}/{NOW:%Y/%m/%d}/{ACCOUNT}_CloudTrail_{REGION}_{NOW:%Y%m%dT%H%MZ}_z.json.gz",
                       events_of(2, HOUR_AGO, "under-a-file"))  # fmt: skip
    trail.notify_many([cloudtrail_sns(trail.bucket, [key]) for key in (under_a_file, too_long, good, fits)])
    report = ingest(spark, trail.url, lake, queue_url=trail.queue_url)
    assert_table_holds(spark, lake, ids_of(held) | ids_of(long_ok))
    refused = {p["key"]: p["reason"] for p in report.deliveries["problems_shown"]}
    assert set(refused) == {too_long, under_a_file} and all(r.startswith("refused: ") for r in refused.values())
    assert report.deliveries["messages"]["deleted"] == 4 and trail.waiting() == 0, "a refused key cannot be fetched later"
    # Named on the lake page's read model, by bucket and key, until later runs name others.
    found = lake_status.deliveries(Lake.at(lake), trail.queue_url, tally.read(Lake.at(lake)))
    assert {p["key"] for p in found.refused} == {too_long, under_a_file}
    section = _deliveries(found)
    assert "<img" not in section and f"s3://{trail.bucket}/{escape(too_long)}" in section, "named, escaped"
    shown = status.overview(Lake.at(lake), trail.url, trail.queue_url, timedelta(hours=2), timedelta(minutes=15), NOW)
    assert sum(line.startswith("refused: s3://") for line in shown) == 2, shown
    assert too_long in "\n".join(run_summary.run_summary(lake_status.ingest_run(Lake.at(lake), None) or {}, None))

    # The folder's other order: the hostile key cached first could not take the real file's place either.
    later = events_of(2, HOUR_AGO, "later")
    real = log_key(trail.prefix, NOW, "real")
    hostile = put(trail, f"{real}/CloudTrail/{REGION}/{NOW:%Y/%m/%d}/{ACCOUNT}_CloudTrail_{REGION}_{NOW:%Y%m%dT%H%MZ}_h.json.gz",
                  events_of(2, HOUR_AGO, "hostile"))  # fmt: skip
    trail.notify(cloudtrail_sns(trail.bucket, [hostile]))
    ingest(spark, trail.url, lake, queue_url=trail.queue_url)
    put(trail, real, later)
    trail.notify(cloudtrail_sns(trail.bucket, [real]))
    ingest(spark, trail.url, lake, queue_url=trail.queue_url)
    assert_table_holds(spark, lake, ids_of(held) | ids_of(long_ok) | ids_of(later))
    assert trail.waiting() == 0


def test_a_folder_taken_by_a_file_in_the_cache_is_refused_by_key_not_a_crash(spark, trail, lake):
    """What the key checks cannot foresee (another file system's limits, a cache someone edited): the file system's
    own refusal names the key; every other object is ingested."""
    held = events_of(3, HOUR_AGO, "fine")
    good = trail.deliver(held, NOW, "fine")
    blocked = trail.deliver(events_of(2, HOUR_AGO, "blocked"), NOW, "blocked")
    place = Lake.at(lake).landing_cache / blocked[len(trail.prefix) :]
    place.mkdir(parents=True)  # a folder where the file must go
    trail.notify_many([cloudtrail_sns(trail.bucket, [good]), cloudtrail_sns(trail.bucket, [blocked])])
    report = ingest(spark, trail.url, lake, queue_url=trail.queue_url)
    (problem,) = report.deliveries["problems_shown"]
    assert problem["key"] == blocked and problem["reason"].startswith("refused: the cache cannot hold it")
    assert_table_holds(spark, lake, ids_of(held))
    assert trail.waiting() == 0


def test_a_damaged_log_file_a_digest_names_is_a_named_hash_mismatch_and_every_run_goes_on(spark, trail, lake):
    intact = events_of(3, HOUR_AGO, "intact")
    keys = [trail.deliver(intact, NOW, "intact"), trail.deliver(events_of(30, HOUR_AGO, "half"), NOW, "half"),
            trail.deliver(events_of(3, HOUR_AGO, "noise"), NOW, "noise")]  # fmt: skip
    trail.digest(keys, NOW)
    whole = trail.s3.get_object(Bucket=trail.bucket, Key=keys[1])["Body"].read()
    trail.s3.put_object(Bucket=trail.bucket, Key=keys[1], Body=whole[: len(whole) // 2])
    trail.s3.put_object(Bucket=trail.bucket, Key=keys[2], Body=os.urandom(600))
    trail.notify(cloudtrail_sns(trail.bucket, keys))
    for _ in range(2):  # the first run and every later reconciling run
        ingest(spark, trail.url, lake, queue_url=trail.queue_url, reconcile=True)
        newest = max(Lake.at(lake).reconcile_reports.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
        found = json.loads(newest.read_text())
        assert found["missing"] == [] and sorted(found["hash_mismatches"]) == sorted(keys[1:])
        assert set(found["unhashable"]) == set(keys[1:]) and all("cannot be read" in r for r in found["unhashable"].values())
    rows = {i for i, _ in table_rows(spark, lake)}
    assert ids_of(intact) <= rows and rows <= ids_of(intact) | {f"half-{i}" for i in range(30)}, "salvaged rows at most"
    assert trail.waiting() == 0


def test_a_digest_out_of_place_or_a_gzip_bomb_is_named_and_skipped(spark, trail, lake):
    held = events_of(3, HOUR_AGO, "d")
    key = trail.deliver(held, NOW, "d")
    valid = trail.digest([key], NOW)
    folder = valid.rsplit("/", 4)[0]
    long_folder = f"{folder}/{'f' * 300}/{valid.rsplit('/', 1)[1]}"
    trail.s3.copy_object(Bucket=trail.bucket, Key=long_folder, CopySource={"Bucket": trail.bucket, "Key": valid})
    bomb = valid.replace("_CloudTrail-Digest_", "_CloudTrail-Digest_bomb_")
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = b"".join(packer.compress(b"\0" * (1 << 20)) for _ in range(1024)) + packer.flush()  # 1 GiB of zeros
    trail.s3.put_object(Bucket=trail.bucket, Key=bomb, Body=zeros)
    trail.notify(cloudtrail_sns(trail.bucket, [key]))
    for digests_read in (1, 0):  # the valid one is proven by the first run; every later run still reconciles
        ingest(spark, trail.url, lake, queue_url=trail.queue_url, reconcile=True)
        newest = max(Lake.at(lake).reconcile_reports.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
        found = json.loads(newest.read_text())
        assert found["digests_read"] == digests_read and found["missing"] == []
        unreadable = "\n".join(found["unreadable_digests"])
        assert long_folder in unreadable and "not at a digest's place" in unreadable
        assert bomb in unreadable and "decompresses to over 64 MiB" in unreadable
    assert_table_holds(spark, lake, ids_of(held))


def test_a_mistyped_prefix_deletes_nothing_in_silence_and_the_corrected_run_takes_it_at_once(spark, aws, lake):
    from tests.aws import Trail

    trail = Trail.create(prefix="o-abc123/")
    records = events_of(5, HOUR_AGO, "typo")
    keys = [trail.deliver(records[:3], NOW, "a"), trail.deliver(records[3:], NOW, "b")]
    trail.notify_many([cloudtrail_sns(trail.bucket, [key]) for key in keys])
    mistyped = f"s3://{trail.bucket}/o-abc12"
    result = command("jobs.cloudtrail_ingest", "--landing", mistyped, "--lake", lake, "--queue-url", trail.queue_url,
                     "--settle", "0 seconds", "--run-id", "typo")  # fmt: skip
    line = refusal(result)
    assert f"s3://{trail.bucket}/o-abc123/" in line and f"{mistyped}/" in line and "took nothing" in line
    assert trail.waiting() == 0, "kept in the lake, not left to expire into a dead-letter queue"
    kept = kept_notifications.outside(Lake.at(lake))
    assert sorted(key for entry in kept for _, key in entry["objects"]) == sorted(keys)
    run = lake_status.ingest_run(Lake.at(lake), "typo")
    assert run and run["deliveries"]["outside_landing"]["named"] == [f"s3://{trail.bucket}/o-abc123/"]
    found = lake_status.deliveries(Lake.at(lake), trail.queue_url, tally.read(Lake.at(lake)))
    assert found.outside and found.outside["landing"] == f"{mistyped}/" and found.outside["files"] == 2
    assert f"s3://{trail.bucket}/o-abc123/, not the landing {mistyped}/" in _deliveries(found)
    shown = status.overview(Lake.at(lake), f"{mistyped}/", trail.queue_url, timedelta(hours=2), timedelta(minutes=15), NOW)
    assert any(line.startswith("OUTSIDE THE LANDING: 2 log files") for line in shown), shown

    started = time.monotonic()
    report = ingest(spark, trail.url, lake, queue_url=trail.queue_url)  # the setting corrected: no visibility timeout
    assert time.monotonic() - started < 60 and report.deliveries["messages"]["taken_back"] == 2
    assert_table_holds(spark, lake, ids_of(records))
    assert kept_notifications.outside(Lake.at(lake)) == []


def test_one_receive_per_message_per_run_even_past_the_visibility_timeout(spark, trail, lake, monkeypatch):
    records = {n: events_of(1, HOUR_AGO, f"v{n}") for n in range(160)}
    keys = [trail.deliver(records[n], NOW, f"v{n}") for n in range(160)]
    trail.notify_many([cloudtrail_sns(trail.bucket, [key]) for key in keys])
    fetch_one = BucketLanding._fetch_one

    def slow(self, s3, key):  # the run outlasts the messages' 1 s visibility several times over
        time.sleep(0.25)
        return fetch_one(self, s3, key)

    monkeypatch.setattr(BucketLanding, "_fetch_one", slow)
    report = ingest(spark, trail.url, lake, queue_url=trail.queue_url, visibility_timeout=1, reconcile_interval="3650 days")
    monkeypatch.undo()
    messages = report.deliveries["messages"]
    assert messages["messages"] == 160 and messages["deleted"] == 160 and messages.get("received_again", 0) == 0
    time.sleep(1.5)
    again = ingest(spark, trail.url, lake, queue_url=trail.queue_url, reconcile_interval="3650 days")
    assert again.deliveries["messages"].get("messages", 0) == 0, "nothing came back"
    assert_table_holds(spark, lake, {i for r in records.values() for i in ids_of(r)})


def test_the_landing_cache_stays_flat_and_a_rebuild_of_a_pruned_date_fetches_it_again(spark, trail, lake):
    """$PRUNE_DAYS (11 in make test; 30 for BENCHMARKS.md) delivery days, a run each: the cache holds the days the
    ledger has not retired and no more: a run retires the folders 7 days (--source-retention) before the newest the
    ledger held when it began, so 9 delivery days stay."""
    from jobs.upkeep import rebuild

    days = int(os.environ.get("PRUNE_DAYS", "11"))
    first = NOW - timedelta(days=days)
    wanted: set[str] = set()
    held: list[int] = []
    for n in range(days):
        day = first + timedelta(days=n)
        records = events_of(3, day - timedelta(minutes=30), f"p{n}")
        wanted |= ids_of(records)
        trail.notify(cloudtrail_sns(trail.bucket, [trail.deliver(records, day, f"p{n}")]))
        report = ingest(spark, trail.url, lake, queue_url=trail.queue_url, reconcile_days=1, reconcile_interval="3650 days")
        held.append(len(list(Lake.at(lake).landing_cache.rglob("*.json.gz"))))
        print(f"day {n + 1}: {held[-1]} files cached, pruned {report.deliveries['cache_pruned']}")
    assert held == [min(n + 1, 9) for n in range(days)], held
    assert_table_holds(spark, lake, wanted)
    pruned = (first - timedelta(minutes=30)).date().isoformat()
    assert rebuild.main(["--landing", trail.url, "--lake", str(lake), "--from-date", pruned, "--to-date", pruned]) == 0
    assert sorted(i for i, _ in duckdb_rows(lake)) == sorted(wanted), "the rebuilt date equals the oracle"
    assert len(list(Lake.at(lake).landing_cache.rglob("*.json.gz"))) > held[-1], "its files fetched again"
