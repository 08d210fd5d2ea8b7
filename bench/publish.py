"""What publishing the lake as Iceberg tables costs (issue #66), on moto's S3 + Glue server on loopback, in one sitting.

    python -m bench.publish [--repeats 3] [--backfill-records 1000000] [--days 30] [--runs 100] [--smoke]

1. A one-file run: a lake of a few real-shaped files, ingested, gated and published to Glue with an S3 warehouse;
   then `--repeats` times one new file of 1,000 real-shaped records: the ingest with its gate (the product's
   command, its own process) against the publish after it (`python -m jobs.publish`, its own process), seconds each,
   and every request the publish made to S3 and Glue (counted at the server), by kind.
2. A backfill: the benchmark's zone of `--backfill-records` records in files of 1,000 (1,000 files at 1M), ingested
   with its gate, then published: seconds each, the files and MB copied.
3. Pruning: `--days` event dates of the events table published (a backfill's file copied into each date), then a
   one-day filter planned through pyiceberg: the files planned against the files the table holds.
4. Metadata over `--runs` publishes (each a new date: one file added, one snapshot): the table's metadata (files
   and bytes) and snapshots after them, then after a publish a week and a day later (expiry, orphans deleted).
Writes bench/publish.json (bench-work/publish-smoke.json with --smoke).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3

from bench.benchmark import SAMPLES, WORK, measure, product_command, zone
from jobs import storage
from jobs.iceberg import catalog
from jobs.lake import EVENT_DATE, Lake
from jobs.landing.layout import delivery_path
from jobs.publishing import command as publish
from jobs.quality import gate
from jobs.spark.logs import local_path
from jobs.tables.events import date_files, event_dates
from tests.aws import ENVIRONMENT, glue_catalog, start_server
from tools.generate_landing import like, real_records, write_delivery

CATALOG = "bench"


def counting(server: Any) -> Counter[str]:
    """Every request moto's server takes from now on, by kind: Glue's operation, or S3's method (a listing apart)."""
    calls: Counter[str] = Counter()
    inner = server._server.app

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if target:
            calls[target.split(".")[-1]] += 1
        else:
            listing = environ["REQUEST_METHOD"] == "GET" and "list-type" in environ.get("QUERY_STRING", "")
            calls[f"S3 {'LIST' if listing else environ['REQUEST_METHOD']}"] += 1
            calls["S3 bytes sent"] += int(environ.get("CONTENT_LENGTH") or 0)
        return inner(environ, start_response)

    server._server.app = app
    return calls


def ingest(landing: Path, lake: Path, run_id: str, days: list[str]) -> float:
    """The product's command with its gate on `days` (as the DAG runs it): whole-process seconds."""
    argv = [*product_command(landing, lake), "--gate-from", days[0], "--gate-to", days[-1]]
    argv[argv.index("--run-id") + 1] = run_id
    wall, *_ = measure(argv)
    assert gate.verdict(Lake.at(lake), run_id) == "passed", run_id
    return wall


def publish_command(lake: Path, run_id: str, namespace: str) -> tuple[float, dict[str, Any]]:
    """`python -m jobs.publish` into the Glue catalog, `namespace` its own (each phase's lake has its tables)."""
    argv = [sys.executable, "-m", "jobs.publish", "--lake", str(lake), "--catalog", CATALOG, "--namespace", namespace, "--run-id", run_id]
    wall, *_ = measure(argv)
    report = json.loads(Lake.at(lake).publish_report(run_id).read_text())
    assert report["status"] == "succeeded", report
    return wall, report


def one_file_runs(calls: Counter[str], repeats: int, scratch: Path) -> dict[str, Any]:
    landing, lake = scratch / "one-landing", scratch / "one-lake"
    make, rng = like(real_records(SAMPLES)), random.Random(5)
    start = datetime(2024, 1, 1, tzinfo=UTC)

    def deliver(when: datetime, name: str) -> None:
        records = [make(rng, when - timedelta(minutes=5), "111122223333", "us-east-1") for _ in range(1000)]
        write_delivery(delivery_path(landing, "111122223333", "us-east-1", when, name), records, when)

    for n in range(4):
        deliver(start + timedelta(hours=n), f"first{n}")
    ingest(landing, lake, "first", ["2024-01-01", "2024-01-01"])
    publish_command(lake, "first", "one_file")
    runs = []
    for n in range(repeats):
        when = start + timedelta(hours=6 + n)
        deliver(when, f"one{n}")
        ingest_s = ingest(landing, lake, f"one{n}", [when.date().isoformat()] * 2)
        calls.clear()
        publish_s, report = publish_command(lake, f"publish{n}", "one_file")
        events = next(t for t in report["tables"] if t["table"] == "events")
        runs.append({"ingest_s": round(ingest_s, 2), "publish_s": round(publish_s, 2), "added": events["added"], "calls": dict(calls)})
    ingest_median = statistics.median(r["ingest_s"] for r in runs)
    publish_median = statistics.median(r["publish_s"] for r in runs)
    return {"runs": runs, "ingest_s": ingest_median, "publish_s": publish_median, "share": round(publish_median / ingest_median, 2)}


def backfill(records: int, scratch: Path) -> dict[str, Any]:
    """The benchmark's zone (1,000 records a file over 3 days from 2024-01-01) ingested with its gate, then published."""
    landing, lake = zone(records), scratch / "backfill-lake"
    ingest_s = ingest(landing, lake, "backfill", ["2023-12-31", "2024-01-04"])
    publish_s, report = publish_command(lake, "backfill", "backfill")
    copied = sum(p.stat().st_size for p in Lake.at(lake).events.rglob("*.parquet"))
    events = next(t for t in report["tables"] if t["table"] == "events")
    files = sum(1 for _ in (landing / "AWSLogs").rglob("*.json.gz"))
    return {"records": records, "landing_files": files, "ingest_s": round(ingest_s, 1), "publish_s": round(publish_s, 1),
            "files_published": events["added"], "mb_published": round(copied / 1e6, 1), "share": round(publish_s / ingest_s, 2),
            "lake": str(lake)}  # fmt: skip


def synthetic_dates(lake: Lake, source: Path, first: date, days: int, files_per_day: int) -> list[str]:
    """Event dates of the events table made of copies of one real file, committed in one snapshot of its branch
    `ingest` (Spark, as the lake's writers commit) and recorded as their gate passed them."""
    from jobs.spark.session import spark_session
    from jobs.tables.events_table import EventsTable

    events = EventsTable(spark_session("bench_publish"), lake)
    made, files = [], []
    for n in range(days):
        day = (first + timedelta(days=n)).isoformat()
        folder = Path(local_path(events.data_folder)) / "bench" / f"{EVENT_DATE}={day}"
        folder.mkdir(parents=True, exist_ok=True)
        for k in range(files_per_day):
            files.append(str(folder / f"part-{k:05d}-{uuid.uuid4()}.c000.zstd.parquet"))
            shutil.copy2(source, files[-1])
        made.append(day)
    events.replace_dates(made, files, {"bench": "synthetic dates"})
    gate.record_validated(lake, gate.fingerprints(lake, made), "bench")
    return made


def pruning(source: Path, days: int, scratch: Path) -> dict[str, Any]:
    lake = Lake.at(scratch / "pruning-lake")
    made = synthetic_dates(lake, source, date(2024, 2, 1), days, 4)
    config = publish.parse_args(["--lake", str(lake.root), "--catalog", CATALOG, "--namespace", "pruning", "--run-id", "pruning"])
    publish.publish_tables(config)
    table = catalog.open_catalog(lake, CATALOG).load_table("pruning.events")
    day = made[len(made) // 2]
    started = time.monotonic()
    planned = table.scan(row_filter=f"{EVENT_DATE} = '{day}'").plan_files()
    plan_s = time.monotonic() - started
    return {"dates": days, "files": table.inspect.files().num_rows, "planned": len(planned), "plan_s": round(plan_s, 3)}


def metadata_size(table: Any) -> tuple[int, int]:
    from pyarrow import fs

    scheme, _, rest = table.location().partition("://")
    filesystem = table.io.fs_by_scheme(scheme, rest.split("/", 1)[0])
    infos = filesystem.get_file_info(fs.FileSelector(f"{rest}/metadata", recursive=True, allow_not_found=True))
    files = [i for i in infos if i.type == fs.FileType.File]
    return len(files), sum(i.size for i in files)


def metadata_over_runs(source: Path, runs: int, scratch: Path) -> dict[str, Any]:
    lake = Lake.at(scratch / "metadata-lake")
    lake.root.mkdir(parents=True)  # the synthetic dates are written into it as runs go
    config = publish.parse_args(["--lake", str(lake.root), "--catalog", CATALOG, "--namespace", "metadata"])
    now = datetime.now(tz=UTC)
    sizes = []
    for n in range(runs):
        synthetic_dates(lake, source, date(2024, 3, 1) + timedelta(days=n), 1, 1)
        publish.publish_tables(config, now=now)
        if (n + 1) in (1, 10, runs // 2, runs):
            table = catalog.open_catalog(lake, CATALOG).load_table("metadata.events")
            files, size = metadata_size(table)
            sizes.append(
                {"runs": n + 1, "snapshots": len(table.metadata.snapshots), "metadata_files": files, "metadata_kb": round(size / 1024)}
            )
    later = now + timedelta(days=8)
    report = publish.publish_tables(config, now=later)
    table = catalog.open_catalog(lake, CATALOG).load_table("metadata.events")
    files, size = metadata_size(table)
    events = next(t for t in report.tables if t.table == "events")
    after = {"snapshots": len(table.metadata.snapshots), "metadata_files": files, "metadata_kb": round(size / 1024),
             "expired": events.expired, "orphans_deleted": events.orphans_deleted}  # fmt: skip
    return {"over_runs": sizes, "after_expiry": after}


def results_path(smoke: bool) -> Path:
    return WORK / "publish-smoke.json" if smoke else Path(__file__).with_name("publish.json")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backfill-records", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: that the benchmark runs, not its figures")
    args = parser.parse_args(argv)
    if args.smoke:
        args.repeats, args.backfill_records, args.days, args.runs = 1, 4_000, 3, 3
    server, url = start_server()
    calls = counting(server)
    bucket = f"warehouse-{uuid.uuid4().hex[:8]}"
    os.environ.update({**ENVIRONMENT, "AWS_ENDPOINT_URL": url, **glue_catalog(CATALOG, f"s3://{bucket}/iceberg")})
    boto3.client("s3").create_bucket(Bucket=bucket)
    scratch = WORK / f"publish-{uuid.uuid4().hex[:8]}"
    scratch.mkdir(parents=True)
    try:
        one = one_file_runs(calls, args.repeats, scratch)
        filled = backfill(args.backfill_records, scratch)
        backfilled = Lake.at(filled["lake"])
        source = storage.folder(max(date_files(backfilled, event_dates(backfilled)[0]), key=lambda p: p.stat().st_size))
        planned = pruning(source, args.days, scratch)
        grown = metadata_over_runs(source, args.runs, scratch)
    finally:
        server.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    results = {"one_file": one, "backfill": filled, "pruning": planned, "metadata": grown, "measured_at": datetime.now(tz=UTC).isoformat()}
    out = results_path(args.smoke)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"one-file run: ingest with its gate {one['ingest_s']} s, publish after it {one['publish_s']} s ({one['share']}x); "
          f"calls of the last publish: {one['runs'][-1]['calls']}")  # fmt: skip
    print(f"backfill of {filled['landing_files']} files ({filled['records']:,} records): ingest {filled['ingest_s']} s, "
          f"publish {filled['publish_s']} s ({filled['share']}x), {filled['files_published']} files, {filled['mb_published']} MB")  # fmt: skip
    print(
        f"one-day filter over {planned['dates']} dates: {planned['planned']} of {planned['files']} files planned in {planned['plan_s']} s"
    )
    for row in grown["over_runs"]:
        print(
            f"after {row['runs']} publishes: {row['snapshots']} snapshots, metadata {row['metadata_files']} files {row['metadata_kb']} KB"
        )
    print(f"a week and a day later: {grown['after_expiry']}")
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
