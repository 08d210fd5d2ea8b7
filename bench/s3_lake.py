"""The ingest into a lake in S3 (moto's server, on loopback) against the same ingest into a folder lake, in one sitting.

    python -m bench.s3_lake [--records 100000] [--repeats 2] [--smoke]      (make bench-s3-lake)

Per repeat, the two kinds alternating: a fresh lake takes a real-shaped zone (1,000 records a file) in one run of the
product's command, then one more file in a second run. The seconds of each run, the S3 lake's against the folder
lake's; what each lake holds (objects and bytes under the prefix, files and bytes in the folder); the peak memory of
each run's processes; what this machine kept after an S3 run (its scratch folder); the requests each S3 run made, by
kind, and the bytes it sent; the folder lake moved to S3 by `python -m jobs.migrate`: its seconds, requests and
bytes; and, on the same zone in the same repeat, the peers of `make bench` (Spark's availableNow + dedup recipe, DuckDB)
writing their own output to a folder, against each lake's backfill (peer / product: above 1, the product is faster).
moto's server is Python on
loopback, serving each request in turn: its seconds bound S3's from above, while the counts and bytes carry over.
Writes bench-work/s3_lake.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3

from bench.benchmark import BASELINES, SAMPLES, WORK, measure, run_baseline
from bench.publish import counting
from jobs.landing.layout import delivery_path
from tests.aws import ENVIRONMENT, start_server
from tools.generate_landing import generate, like, real_records, write_delivery


def ingest(landing: Path, lake: str, run_id: str, env: dict[str, str]) -> tuple[float, float]:
    """One run of the product's command: its seconds and the peak memory of its processes (MB)."""
    command = [sys.executable, "-m", "jobs.cloudtrail_ingest", "--landing", str(landing), "--lake", lake, "--run-id", run_id,
               "--settle", "0 seconds"]  # fmt: skip
    wall, peak, _, _ = measure(command, env=env)
    if not json.loads(_report(lake, run_id)).get("status") == "succeeded":
        raise SystemExit(f"the run {run_id} into {lake} did not succeed")
    return wall, peak


def _report(lake: str, run_id: str) -> str:
    from jobs.lake import Lake

    return Lake.at(lake).ingest_report(run_id).read_text()


def held(lake: str) -> tuple[int, int]:
    """Files (objects) and bytes under a lake."""
    if not lake.startswith("s3://"):
        files = [path for path in Path(lake).rglob("*") if path.is_file()]
        return len(files), sum(path.stat().st_size for path in files)
    bucket, _, prefix = lake.removeprefix("s3://").partition("/")
    pages = boto3.client("s3").get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/")
    sizes = [item["Size"] for page in pages for item in page.get("Contents", [])]
    return len(sizes), sum(sizes)


def one_more_file(landing: Path, seed: int) -> None:
    """One delivered file of 1,000 real-shaped records."""
    make, rng = like(real_records(SAMPLES)), random.Random(seed)
    when = datetime(2024, 2, 1, tzinfo=UTC) + timedelta(hours=seed)
    records = [make(rng, when, "111122223333", "us-east-1") for _ in range(1000)]
    write_delivery(delivery_path(landing, "111122223333", "us-east-1", when, f"one{seed}"), records, when)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="5,000 records, one repeat")
    args = parser.parse_args(argv)
    records, repeats = (5_000, 1) if args.smoke else (args.records, args.repeats)
    work = Path(tempfile.mkdtemp(prefix="s3-lake-", dir=WORK if WORK.is_dir() else None))
    server, url = start_server()
    os.environ.update({**ENVIRONMENT, "AWS_ENDPOINT_URL": url, "CLOUDTRAIL_SCRATCH": str(work / "scratch")})
    runs: dict[str, list[dict[str, Any]]] = {"folder": [], "s3": []}
    peers: dict[str, list[float]] = {name: [] for name in PEERS}
    calls = counting(server)
    try:
        generate(work / "landing", records=records, days=2, seed=11, records_per_file=1000, duplicate_rate=0.01)
        for repeat in range(repeats):
            for kind in ("folder", "s3"):
                runs[kind].append(_one_lake(kind, work, repeat, calls))
            for name in PEERS:
                peers[name].append(round(run_baseline(BASELINES[name], work / "landing", work / f"{name}-{repeat}")["wall_s"], 1))
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    result = {"records": records, "runs": runs} | {
        f"{step}_s3_over_folder": round(statistics.median(r[step] for r in runs["s3"]) / statistics.median(r[step] for r in runs["folder"]), 2)
        for step in ("backfill_seconds", "one_file_seconds")
    }  # fmt: skip
    result["peers_seconds"] = peers
    for name, kind in ((name, kind) for name in PEERS for kind in runs):  # pair by pair, then the median
        pairs = [peer / run["backfill_seconds"] for peer, run in zip(peers[name], runs[kind], strict=True)]
        result[f"{name}_over_{kind}_backfill"] = round(statistics.median(pairs), 2)
    (WORK / "s3_lake.json").parent.mkdir(parents=True, exist_ok=True)
    (WORK / "s3_lake.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


# The peers the issue names for a lake in S3: the seeds' recipe and DuckDB (bench/baseline_*.py).
PEERS = ("recipe", "duckdb")


def _s3_lake(work: Path, name: str) -> tuple[str, dict[str, str]]:
    """A fresh bucket's prefix and the environment naming its catalog (SQL, a file of its own)."""
    bucket = f"lake-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    catalog = {"TYPE": "sql", "URI": f"sqlite:///{work / f'catalog-{name}.db'}", "WAREHOUSE": f"s3://{bucket}/warehouse"}
    return f"s3://{bucket}/lake", {f"PYICEBERG_CATALOG__BENCH__{key}": value for key, value in catalog.items()} | {
        "CLOUDTRAIL_CATALOG": "bench"
    }


def _taken(calls: Any) -> dict[str, int]:
    """The requests counted since the last call, by kind (and the bytes they sent), then counted anew."""
    taken = dict(sorted(calls.items()))
    calls.clear()
    return taken


def _one_lake(kind: str, work: Path, repeat: int, calls: Any) -> dict[str, Any]:
    """A fresh lake of `kind` takes the zone, then one more file; a folder lake is then migrated to S3."""
    landing = work / f"landing-{kind}-{repeat}"
    shutil.copytree(work / "landing", landing)
    lake, env = _s3_lake(work, str(repeat)) if kind == "s3" else (str(work / f"lake-{repeat}"), {})
    _taken(calls)
    backfill, backfill_mb = ingest(landing, lake, "backfill", env)
    backfill_calls = _taken(calls)
    one_more_file(landing, repeat)
    one_file, _ = ingest(landing, lake, "one-file", env)
    one_file_calls = _taken(calls)
    files, size = held(lake)
    scratch = [path for path in (work / "scratch").rglob("*") if path.is_file()] if (work / "scratch").exists() else []
    result = {"backfill_seconds": round(backfill, 1), "one_file_seconds": round(one_file, 1), "peak_mb": round(backfill_mb),
              "files": files, "bytes": size, "scratch_files_left": len(scratch)}  # fmt: skip
    if kind == "s3":
        return result | {"backfill_requests": backfill_calls, "one_file_requests": one_file_calls}
    target, env = _s3_lake(work, f"migrated-{repeat}")
    wall, *_ = measure([sys.executable, "-m", "jobs.migrate", "--lake", lake, "--to", target], env=env)
    from jobs.lake import Lake

    if not json.loads(Lake.at(lake).migration.read_text()).get("done"):
        raise SystemExit(f"the migration of {lake} to {target} did not finish")
    moved_files, moved_size = held(target)
    return result | {"migration_seconds": round(wall, 1), "migration_requests": _taken(calls), "migrated_objects": moved_files,
                     "migrated_bytes": moved_size}  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
