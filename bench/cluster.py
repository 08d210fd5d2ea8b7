"""The same backfill on a Spark cluster of one worker and of two, then a one-file run there and in local mode.

    python -m bench.cluster [--records 2000000] [--smoke]      (make bench-cluster)

The cluster is tools/cluster.py's: workers of one core each that share no disk with each other or with the driver,
so the machine's two cores can show what a second worker buys. The landing and the lake are in S3 (moto's server on
loopback): the executors read the objects through S3A and write the tables, checkpoint and state to the lake's
prefix. Per cluster size, a fresh lake takes a real-shaped zone (1,000 records a file) in one run of the product's
command: its seconds, records per second and per second per core, the most bytes the machines' local disks held at
once meanwhile (the driver's scratch, fetched objects and Spark folders; the workers' Spark folders), and what the
lake holds after it against its tables' Parquet. Then one more file, in a run on the cluster and in
a run in local mode (local[*], the same lake and driver). moto's server and the driver share the same two cores with
the workers: a second worker's gain here is a floor.

Then where the executors read an S3 landing, in local mode: the driver's cache (local mode's default) or the objects
through S3A (a cluster's), each a fresh lake taking the first `--reads-files` files: the seconds and the S3 GETs
(the lake's and the landing's). Writes bench-work/cluster.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import boto3

from bench.benchmark import WORK, measure
from bench.publish import counting
from bench.s3_lake import _s3_lake, one_more_file
from jobs.landing.bucket import READS
from tests.aws import ENVIRONMENT, start_server
from tools.cluster import Cluster
from tools.generate_landing import generate

LANDING_BUCKET, READS_BUCKET = "cloudtrail-bench", "cloudtrail-reads"


def upload(folder: Path, s3: Any) -> int:
    """Every file under `folder`'s AWSLogs/ put in the landing bucket under its place: how many."""
    files = sorted(path for path in (folder / "AWSLogs").rglob("*") if path.is_file() and not path.name.startswith("."))
    for path in files:
        s3.put_object(Bucket=LANDING_BUCKET, Key=str(path.relative_to(folder)), Body=path.read_bytes())
    return len(files)


def ingest(lake: str, run_id: str, env: dict[str, str], landing: str = LANDING_BUCKET) -> float:
    """One run of the product's command on a landing bucket: its seconds."""
    command = [sys.executable, "-m", "jobs.cloudtrail_ingest", "--landing", f"s3://{landing}", "--lake", lake, "--run-id", run_id,
               "--settle", "0 seconds"]  # fmt: skip
    wall, *_ = measure(command, env=env)
    from jobs.lake import Lake

    report = json.loads(Lake.at(lake).ingest_report(run_id).read_text())
    if report.get("status") != "succeeded" or report.get("quarantined"):
        raise SystemExit(
            f"the run {run_id} into {lake} did not take every file: {report.get('status')}, {report.get('quarantined')} quarantined"
        )
    return wall


class DiskHighWater:
    """The most bytes the files under a folder (the machines' homes) held at once while the block ran, sampled each second."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.most = folder, 0
        self._done = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> DiskHighWater:
        self._sampler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._sampler.join()

    def _sample(self) -> None:
        while True:
            self.most = max(self.most, sum(_size(Path(root) / name) for root, _, names in os.walk(self.folder) for name in names))
            if self._done.wait(1.0):
                return


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # gone between the listing and the look
        return 0


def lake_bytes(lake: str) -> dict[str, int]:
    """The bytes under a lake's prefix: all of them, and the tables' Parquet data files."""
    bucket, _, prefix = lake.removeprefix("s3://").partition("/")
    pages = boto3.client("s3").get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/")
    objects = [(item["Key"], item["Size"]) for page in pages for item in page.get("Contents", [])]
    parquet = sum(size for key, size in objects if key.startswith(f"{prefix}/iceberg/") and key.endswith(".parquet"))
    return {"lake_bytes": sum(size for _, size in objects), "tables_parquet_bytes": parquet}


def on_cluster(work: Path, workers: int, records: int, seed: int) -> dict[str, Any]:
    """A fresh lake backfilled on a cluster of `workers` one-core workers; one more file there, and in local mode."""
    lake, catalog = _s3_lake(work, f"workers-{workers}")
    with Cluster(work / f"cluster-{workers}", workers=workers, memory="3g") as cluster:
        env = cluster.driver_env() | catalog
        with DiskHighWater(cluster.home) as disk:
            backfill = ingest(lake, "backfill", env)
        held = lake_bytes(lake)
        one_more_file(work / f"more-{workers}", seed)
        upload(work / f"more-{workers}", boto3.client("s3"))
        one_file = ingest(lake, "one-file", env)
    local = {key: value for key, value in env.items() if key not in ("CLOUDTRAIL_SPARK_MASTER", "PYSPARK_SUBMIT_ARGS")}
    one_more_file(work / f"local-{workers}", seed + 100)
    upload(work / f"local-{workers}", boto3.client("s3"))
    one_file_local = ingest(lake, "one-file-local", local)
    return {
        "workers": workers,
        "backfill_seconds": round(backfill, 1),
        "records_per_second": round(records / backfill),
        "records_per_second_per_core": round(records / backfill / workers),
        "one_file_seconds": round(one_file, 1),
        "one_file_local_seconds": round(one_file_local, 1),
        "backfill_local_disk_high_water_bytes": disk.most,
        **held,
    }


def landing_reads(work: Path, files: int, calls: Counter[str]) -> dict[str, Any]:
    """A backfill of `files` landing files in local mode, the executors reading the driver's cache, then the objects."""
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=READS_BUCKET)
    keys = sorted(
        item["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=LANDING_BUCKET) for item in page.get("Contents", [])
    )
    for key in keys[:files]:
        s3.copy_object(Bucket=READS_BUCKET, Key=key, CopySource={"Bucket": LANDING_BUCKET, "Key": key})
    found: dict[str, Any] = {"files": min(files, len(keys))}
    for reads in ("cache", "store"):
        lake, catalog = _s3_lake(work, f"reads-{reads}")
        env = catalog | {READS: reads, "CLOUDTRAIL_SCRATCH": str(work / f"reads-{reads}")}
        calls.clear()
        seconds = ingest(lake, "backfill", env, READS_BUCKET)
        found[reads] = {"seconds": round(seconds, 1), "s3_gets": calls["S3 GET"]}
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--reads-files", type=int, default=200, help="the landing files of the comparison of reads")
    parser.add_argument("--smoke", action="store_true", help="5,000 records, 5 files read both ways")
    args = parser.parse_args(argv)
    records, reads_files = (5_000, 5) if args.smoke else (args.records, args.reads_files)
    work = Path(tempfile.mkdtemp(prefix="cluster-", dir=WORK if WORK.is_dir() else None))
    server, url = start_server()
    os.environ.update({**ENVIRONMENT, "AWS_ENDPOINT_URL": url})
    calls = counting(server)
    try:
        generate(work / "landing", records=records, days=2, seed=23, records_per_file=1000, duplicate_rate=0.01)
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket=LANDING_BUCKET)
        files = upload(work / "landing", s3)
        runs = []
        for seed, workers in enumerate((1, 2)):
            # The second cluster's lake is fresh; the files the first one's runs added are in the landing for it too.
            runs.append(on_cluster(work, workers, records + 2_000 * seed, seed))
        reads = landing_reads(work, reads_files, calls)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    one, two = runs
    result = {
        "records": records,
        "files": files,
        "runs": runs,
        "two_workers_over_one": round(one["backfill_seconds"] / two["backfill_seconds"], 2),
        "one_file_cluster_over_local": round(two["one_file_seconds"] / two["one_file_local_seconds"], 2),
        "landing_reads": reads,
        "store_reads_over_cache": round(reads["store"]["seconds"] / reads["cache"]["seconds"], 2),
    }
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / "cluster.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
