"""A day of hourly ingest runs, then the compaction of its event date: files per date, and the time of analyst
queries on the date, before and after (medians of 5). Real-shaped records (1,000 a file), the product's own commands.

    python -m bench.compaction [--records 240000] [--runs 24]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import duckdb

from bench.benchmark import SAMPLES
from jobs.lake import Lake, partition
from jobs.landing.layout import day_folders, delivered_at, log_files_in
from jobs.storage import LakePath
from jobs.tables import partitions
from tools.generate_landing import generate, like, real_records

DAY = date(2024, 1, 1)
QUERIES = {
    "calls per eventName": "select eventName, count(*) from {t} group by 1",
    "an hour of eventTime": "select count(*) from {t} where eventTime >= timestamp '2024-01-01 10:00:00' and eventTime < timestamp '2024-01-01 11:00:00'",
}


def query_seconds(folder: LakePath) -> dict[str, float]:
    table = f"read_parquet('{folder}/*.parquet')"
    times: dict[str, float] = {}
    for name, query in QUERIES.items():
        runs = []
        for _ in range(5):
            db = duckdb.connect()  # a new reader each time: it opens every file again
            started = time.perf_counter()
            db.execute(query.format(t=table)).fetchall()
            runs.append(time.perf_counter() - started)
        times[name] = statistics.median(runs)
    return times


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=240_000)
    parser.add_argument("--runs", type=int, default=24)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        generate(root / "all", records=args.records, days=1, start=DAY, records_per_file=1000, make=like(real_records(SAMPLES)))
        files = sorted((delivered_at(f.path), Path(f.path)) for _, folder in day_folders(root / "all") for f in log_files_in(folder))
        landing, lake = root / "landing", root / "lake"
        (landing / "AWSLogs").mkdir(parents=True)
        ingest = [sys.executable, "-m", "jobs.cloudtrail_ingest", "--landing", str(landing), "--lake", str(lake), "--settle", "0 seconds"]
        for run in range(args.runs):
            for stamp, path in files:
                if stamp is not None and stamp.hour * args.runs // 24 == run:
                    target = landing / path.relative_to(root / "all")
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, target)
            timed(ingest)
        day = partition(Lake.at(lake).events, DAY)
        before = len(partitions.data_files(day)), query_seconds(day)
        seconds = timed([sys.executable, "-m", "jobs.compact", "--lake", str(lake), "--from-date", str(DAY), "--to-date", str(DAY)])
        after = len(partitions.data_files(day)), query_seconds(day)
    print(f"{args.records} records over {args.runs} runs; {DAY}: {before[0]} files before, {after[0]} after; compaction {seconds:.1f} s")
    for name in QUERIES:
        print(f"{name:<24} before {before[1][name]:.3f} s  after {after[1][name]:.3f} s  ({before[1][name] / after[1][name]:.2f}x faster)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
