"""An S3 landing against its targets (issue #59), on moto's S3 + SQS server on loopback, in one sitting.

    python -m bench.s3 [--accounts 2,1000] [--repeats 3] [--backlog-files 200] [--smoke]

1. Per-run cost: for each number of accounts, a bucket with one real-shaped object per account x 17 regions, all
   taken by a first run (listed from --since: their history in the ledger). Then `--repeats` runs with one new
   object and its notification, each the product's whole command: the largest zone's median against the smallest's
   (target <= 1.2x). And a run with an empty queue, in process: whether it started Spark, and its S3 listings.
2. Reconciliation: one digest per place naming its object, reconciled first (every digest unproven), then again
   (every digest proven): S3 calls and seconds at each number of accounts. moto lists a prefix by scanning every key
   of the bucket, so its seconds grow with the bucket where S3's do not: the calls are the figure that carries over.
3. Reading from the endpoint: `--backlog-files` objects of 1,000 real-shaped records fetched by the product
   (BucketLanding.fetch) against boto3's transfer manager downloading the same objects at the same concurrency,
   alternating, `--repeats` times each: MB/s and files/s, the ratio (target >= 0.8x); the whole backlog
   ingest's MB/s for scale; and the objects into Spark fetched then read from the cache against read through S3A
   where they are (`landing_read`): seconds and local disk.
Writes bench/s3.json (bench-work/s3-smoke.json with --smoke).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import shutil
import statistics
import sys
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3

from bench.benchmark import SAMPLES, WORK, measure
from bench.history import REGIONS
from jobs.ingest.command import parse_args
from jobs.ingest.run import run
from jobs.lake import Lake
from jobs.landing.bucket import FETCH_THREADS, BucketLanding
from jobs.ledger import reconcile
from jobs.ledger.store import verified_checkpoint
from jobs.tables.tables_of_record import held_batches
from tests.aws import ENVIRONMENT, cloudtrail_sns, log_key, start_server
from tools.generate_landing import like, real_records

TARGETS = {"one_notification": 1.2, "fetch_against_transfer_manager": 0.8}
PREFIX = "org/"
RECORDS_PER_PLACE = 10


def put_places(s3: Any, bucket: str, accounts: int, delivered: datetime, digests: bool) -> None:
    """One object per account x region (and its digest): what a first run takes, then the zone's history."""
    make, rng = like(real_records(SAMPLES)), random.Random(accounts)
    for n in range(accounts):
        account = str(100000000000 + n)
        for region in REGIONS:
            records = [make(rng, delivered - timedelta(minutes=5), account, region) for _ in range(RECORDS_PER_PLACE)]
            body = json.dumps({"Records": records}).encode()
            key = log_key(PREFIX, delivered, "first", account, region)
            s3.put_object(Bucket=bucket, Key=key, Body=gzip.compress(body, mtime=0))
            if digests:
                end = delivered + timedelta(hours=1)
                name = f"{account}_CloudTrail-Digest_{region}_trail_{region}_{end:%Y%m%dT%H%M%SZ}.json.gz"
                digest = {
                    "awsAccountId": account, "digestEndTime": end.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "logFiles": [{"s3Bucket": bucket, "s3Object": key, "hashValue": hashlib.sha256(body).hexdigest()}],
                }  # fmt: skip
                digest_key = f"{PREFIX}AWSLogs/{account}/CloudTrail-Digest/{region}/{end:%Y/%m/%d}/{name}"
                s3.put_object(Bucket=bucket, Key=digest_key, Body=gzip.compress(json.dumps(digest).encode()))


def command(bucket: str, lake: Path, run_id: str, *options: str) -> float:
    argv = [sys.executable, "-m", "jobs.cloudtrail_ingest", "--landing", f"s3://{bucket}/{PREFIX}", "--lake", str(lake), "--run-id", run_id]
    wall, *_ = measure([*argv, *options])
    report = json.loads(Lake.at(lake).ingest_report(run_id).read_text())
    assert report["status"] == "succeeded", report
    return wall


def counted_calls() -> Counter[str]:
    """Every AWS call the default boto3 session's clients make from now on, by operation."""
    calls: Counter[str] = Counter()
    boto3.setup_default_session()
    assert boto3.DEFAULT_SESSION is not None
    boto3.DEFAULT_SESSION.events.register("before-call", lambda model, **_: calls.update([model.name]))
    return calls


def per_run(s3: Any, sqs: Any, accounts: int, repeats: int, scratch: Path) -> dict[str, Any]:
    bucket = f"bench-{accounts}-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    queue_url = sqs.create_queue(QueueName=bucket)["QueueUrl"]
    delivered = datetime.now(tz=UTC).replace(second=0, microsecond=0) - timedelta(hours=3)
    started = time.monotonic()
    put_places(s3, bucket, accounts, delivered, digests=True)
    built = time.monotonic() - started
    lake = scratch / f"lake-{accounts}"
    # A reconciliation report that makes none due in these runs: the reconciliation is measured below, on its own.
    reconcile.Reconciliation("bench-not-due", datetime.now(tz=UTC).isoformat(timespec="seconds"), []).write(Lake.at(lake))
    queue = ("--queue-url", queue_url, "--reconcile-interval", "3650 days")
    # The first run takes every place's object from notifications (a hundred keys a message, as CloudTrail's SNS
    # message may carry): moto's listings scan the whole bucket, where S3's do not, so a listed first run would measure moto.
    keys = [log_key(PREFIX, delivered, "first", str(100000000000 + n), region) for n in range(accounts) for region in REGIONS]
    for start in range(0, len(keys), 100):
        sqs.send_message(QueueUrl=queue_url, MessageBody=cloudtrail_sns(bucket, keys[start : start + 100]))
    first = command(bucket, lake, "first", *queue)
    times = []
    make = like(real_records(SAMPLES))
    for n in range(repeats):
        moment = delivered + timedelta(minutes=10 + n)
        account, region = str(100000000000 + n % accounts), REGIONS[n % len(REGIONS)]
        key = log_key(PREFIX, moment, f"new-{n}", account, region)
        record = make(random.Random(n), moment, account, region)
        s3.put_object(Bucket=bucket, Key=key, Body=gzip.compress(json.dumps({"Records": [record]}).encode()))
        sqs.send_message(QueueUrl=queue_url, MessageBody=cloudtrail_sns(bucket, [key]))
        times.append(command(bucket, lake, f"one-{n}", *queue))
    # An empty queue, in process: a session that fails if asked for, the calls counted.
    calls = counted_calls()
    argv = ["--landing", f"s3://{bucket}/{PREFIX}", "--lake", str(lake), "--run-id", "empty", *queue]

    def no_spark() -> Any:
        raise AssertionError("an empty queue started Spark")

    run(parse_args(argv), no_spark)
    empty_calls = dict(calls)
    # The reconciliation: every digest unproven, then every one proven.
    landing = BucketLanding.at(f"s3://{bucket}/{PREFIX}", Lake.at(lake).landing_cache)
    costs = []
    for label in ("first", "proven"):
        calls = counted_calls()
        found = reconcile.reconcile_ledger(
            boto3.client("s3"),
            landing,
            Lake.at(lake),
            verified_checkpoint(Lake.at(lake), held_batches(Lake.at(lake))),
            set(),
            f"bench-{label}",
            2,
            datetime.now(tz=UTC),
        )
        assert not found.missing, found.missing[:3]
        costs.append({"pass": label, "seconds": found.seconds, "calls": sum(calls.values()), "digests_read": found.digests_read,
                      "list_calls": found.list_calls})  # fmt: skip
    return {
        "accounts": accounts, "places": accounts * len(REGIONS), "bucket_built_s": round(built, 1), "first_run_s": round(first, 1),
        "one_notification_s": round(statistics.median(times), 2), "one_notification_runs_s": [round(t, 2) for t in times],
        "empty_queue_calls": empty_calls, "empty_queue_listings": sum(v for k, v in empty_calls.items() if k.startswith("List")),
        "reconciliation": costs,
    }  # fmt: skip


def backlog(s3: Any, files: int, repeats: int, scratch: Path) -> dict[str, Any]:
    """The product's fetch against boto3's transfer manager, the same objects, alternating; then the whole ingest."""
    from boto3.s3.transfer import TransferConfig
    from s3transfer.manager import TransferManager

    bucket = f"backlog-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    make, rng = like(real_records(SAMPLES)), random.Random(files)
    delivered = datetime.now(tz=UTC).replace(second=0, microsecond=0) - timedelta(hours=2)
    keys, size = [], 0
    for n in range(files):
        records = [make(rng, delivered, "111122223333", REGIONS[n % len(REGIONS)]) for _ in range(1000)]
        body = gzip.compress(json.dumps({"Records": records}).encode(), mtime=0)
        keys.append(log_key(PREFIX, delivered + timedelta(minutes=n % 60), f"b{n}", region=REGIONS[n % len(REGIONS)]))
        s3.put_object(Bucket=bucket, Key=keys[-1], Body=body)
        size += len(body)
    product, manager = [], []
    for n in range(repeats):
        cache = scratch / f"cache-{n}"
        started = time.monotonic()
        fetched = BucketLanding.at(f"s3://{bucket}/{PREFIX}", cache).fetch(s3, keys)
        product.append(time.monotonic() - started)
        assert fetched.downloaded == files and not fetched.problems
        shutil.rmtree(cache)
        target = scratch / f"tm-{n}"
        target.mkdir()
        started = time.monotonic()
        with TransferManager(s3, TransferConfig(max_concurrency=FETCH_THREADS)) as transfers:
            for index, key in enumerate(keys):
                transfers.download(bucket, key, str(target / f"{index}.json.gz"))
        manager.append(time.monotonic() - started)
        shutil.rmtree(target)
    lake = scratch / "lake-backlog"
    ingest = command(bucket, lake, "backlog", "--since", (delivered - timedelta(days=1)).date().isoformat())
    mb = size / 1e6
    fetch_s, manager_s = statistics.median(product), statistics.median(manager)
    return {
        "files": files, "megabytes": round(mb, 1),
        "fetch_mb_s": round(mb / fetch_s, 1), "fetch_files_s": round(files / fetch_s, 1),
        "transfer_manager_mb_s": round(mb / manager_s, 1), "transfer_manager_files_s": round(files / manager_s, 1),
        "ratio": round(manager_s / fetch_s, 2), "whole_ingest_s": round(ingest, 1), "whole_ingest_mb_s": round(mb / ingest, 2),
        "landing_read": landing_read(s3, bucket, keys, repeats, scratch),
    }  # fmt: skip


def landing_read(s3: Any, bucket: str, keys: list[str], repeats: int, scratch: Path) -> dict[str, Any]:
    """Whether Spark should read an S3 landing's objects where they are (S3A) or from the lake's fetch cache, as today:
    the same objects' bytes into one Spark job, alternating: fetched (BucketLanding.fetch) then read from the local
    cache, against read through S3A by the session every job builds (jobs/object_store.py). Seconds, and the local
    disk each leaves behind."""
    from jobs.spark.session import JobSession, spark_session

    paths = [f"s3://{bucket}/{key}" for key in keys]
    cached, direct, disk = [], [], 0
    with JobSession(lambda: spark_session("bench-landing-read", {"spark.ui.enabled": "false"})) as session:
        spark = session()

        def read(files: list[str]) -> int:
            row = spark.read.format("binaryFile").load(files).selectExpr("sum(length(content))").first()
            assert row is not None
            return int(row[0])

        read(paths[:1])  # the JVM's first read of each kind pays its class loading, not the comparison
        for n in range(repeats):
            cache = scratch / f"read-cache-{n}"
            started = time.monotonic()
            BucketLanding.at(f"s3://{bucket}/{PREFIX}", cache).fetch(s3, keys)
            local = read([str(path) for path in cache.rglob("*.json.gz")])
            cached.append(time.monotonic() - started)
            disk = sum(path.stat().st_size for path in cache.rglob("*") if path.is_file())
            shutil.rmtree(cache)
            started = time.monotonic()
            assert read(paths) == local, "the same bytes either way"
            direct.append(time.monotonic() - started)
    cached_s, direct_s = statistics.median(cached), statistics.median(direct)
    return {"fetch_then_read_s": round(cached_s, 2), "s3a_read_s": round(direct_s, 2), "s3a_against_fetch": round(cached_s / direct_s, 2),
            "fetch_cache_bytes": disk, "s3a_local_bytes": 0}  # fmt: skip


def results_path(smoke: bool) -> Path:
    return WORK / "s3-smoke.json" if smoke else Path(__file__).with_name("s3.json")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--accounts", default="2,1000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backlog-files", type=int, default=200)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: that the benchmark runs, not its figures")
    args = parser.parse_args(argv)
    accounts = [int(n) for n in args.accounts.split(",")]
    if args.smoke:
        accounts, args.repeats, args.backlog_files = [1, 2], 1, 4
    server, url = start_server()
    os.environ.update({**ENVIRONMENT, "AWS_ENDPOINT_URL": url})
    s3, sqs = boto3.client("s3"), boto3.client("sqs")
    scratch = WORK / f"s3-{uuid.uuid4().hex[:8]}"
    scratch.mkdir(parents=True)
    try:
        runs = [per_run(s3, sqs, n, args.repeats, scratch) for n in accounts]
        read = backlog(s3, args.backlog_files, args.repeats, scratch)
    finally:
        server.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    small, large = runs[0], runs[-1]
    ratio = large["one_notification_s"] / small["one_notification_s"]
    results: dict[str, Any] = {
        "per_run": runs, "backlog": read,
        "verdicts": {
            "one_notification": {"ratio": round(ratio, 2), "target": TARGETS["one_notification"], "met": ratio <= TARGETS["one_notification"]},
            "empty_queue": {"listings": large["empty_queue_listings"], "spark_started": False, "met": large["empty_queue_listings"] == 0},
            "fetch_against_transfer_manager": {
                "ratio": read["ratio"], "target": TARGETS["fetch_against_transfer_manager"],
                "met": read["ratio"] >= TARGETS["fetch_against_transfer_manager"],
            },
        },
    }  # fmt: skip
    out = results_path(args.smoke)
    out.write_text(json.dumps(results, indent=1) + "\n")
    for run_figures in runs:
        print(
            f"{run_figures['accounts']:>5} accounts ({run_figures['places']:,} places): one notification "
            f"{run_figures['one_notification_s']} s; empty queue: {run_figures['empty_queue_calls']}; reconciliation "
            + "; ".join(f"{c['pass']} {c['calls']} calls {c['seconds']} s" for c in run_figures["reconciliation"])
        )
    print(f"backlog of {read['files']} files, {read['megabytes']} MB: fetch {read['fetch_mb_s']} MB/s ({read['fetch_files_s']} files/s), "
          f"transfer manager {read['transfer_manager_mb_s']} MB/s; whole ingest {read['whole_ingest_mb_s']} MB/s")  # fmt: skip
    landing = read["landing_read"]
    print(f"the landing into Spark: fetched then read {landing['fetch_then_read_s']} s ({landing['fetch_cache_bytes'] / 1e6:.1f} MB of local disk), "
          f"through S3A {landing['s3a_read_s']} s (none): S3A {landing['s3a_against_fetch']}x")  # fmt: skip
    for name, verdict in results["verdicts"].items():
        print(f"{name}: {'met' if verdict['met'] else 'MISSED'} {verdict}")
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
