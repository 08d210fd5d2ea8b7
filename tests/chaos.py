"""Kill the ingest job at chosen or random moments (until --kills of them have landed), run it again until it finishes, with new
files arriving between runs; then check the table against the oracle through Spark and DuckDB (a lake in S3: through
its catalog, with pyiceberg).

    python -m tests.chaos --kills 20 [--seed 1] [--work DIR] [--s3]      (make chaos, make chaos-s3)
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import boto3

from jobs import storage
from jobs.lake import Lake
from jobs.spark.session import STREAM_CONF, spark_session
from jobs.storage import LakePath
from jobs.tables.events import all_files, events_location
from tests.helpers import catalog_rows, duckdb_rows, table_rows
from tools.generate_landing import generate

PHASES = ["reading", "writing_data", "between_outputs", "committing_state"]
# A 1-day source retention retires the folders of all but the newest delivery, so late files exercise that path too.
JOB_OPTIONS = ["--max-files-per-trigger", "3", "--state-partitions", "2", "--source-retention", "1 day", "--settle", "0 seconds"]


@dataclass
class ChaosRun:
    landing: Path
    lake: Path | str  # a folder, or an S3 prefix (its catalog, $CLOUDTRAIL_CATALOG)
    expected: dict[str, str] = field(default_factory=dict)  # eventID -> event_date
    log: list[tuple[str, int, float]] = field(default_factory=list)  # (fault, return code, seconds)
    deliveries: int = 0
    # How a clean run runs: by default in a process of its own; given, a function of the job's arguments that runs them
    # and returns the exit code (the tests' in their shared session: only a killed run needs a process).
    clean: Callable[[list[str]], int] | None = None

    def deliver(self, files: int = 6, seed: int | None = None, late: bool = False) -> None:
        """New files land: ~100 events each, a few re-delivered, one malformed file now and then.

        `late` files land in the first delivery's folders, which the source log has retired by then."""
        start = date(2024, 1, 1) + timedelta(days=0 if late else 2 * self.deliveries)
        manifest = generate(
            self.landing, records=files * 100, days=2, seed=seed if seed is not None else 100 + self.deliveries, start=start,
            records_per_file=100, duplicate_rate=0.03, malformed_files=self.deliveries % 2,
        )  # fmt: skip
        self.expected.update(manifest.events)
        self.deliveries += 1

    def run(self, fault: str | None = None, full_listing: bool = False) -> int:
        """One run, killed by `fault`; `full_listing`: one that lists every folder (the daily one), else the default."""
        job = ["--landing", str(self.landing), "--lake", str(self.lake), *JOB_OPTIONS]
        job += ["--full-listing-interval", "0 seconds"] if full_listing else []
        started = time.monotonic()
        if fault is None and self.clean is not None:
            self.log.append(("-", self.clean(job), time.monotonic() - started))
            return self.log[-1][1]
        if fault:
            phase, _, batch = fault.partition("@")
            command = [sys.executable, "-m", "tests.fault_runner", phase, batch or "0", "--", *job]
        else:
            command = [sys.executable, "-m", "jobs.cloudtrail_ingest", *job]
        # Own session: the kill takes the driver's whole process group (Python and its JVM).
        result = subprocess.run(command, start_new_session=True, capture_output=True, text=True, timeout=600, env=os.environ)
        self.log.append((fault or "-", result.returncode, time.monotonic() - started))
        if result.returncode not in (0, -9):
            raise RuntimeError(f"ingest exited {result.returncode}:\n{result.stderr[-4000:]}")
        return result.returncode

    def run_until_done(self) -> None:
        """Clean runs, the first a full listing: it takes the late files that landed in existing retired folders."""
        for attempt in range(5):
            if self.run(full_listing=attempt == 0) == 0:
                return
        raise RuntimeError("the job did not finish after 5 clean runs")


def uncommitted_files(lake: Path | str) -> list[LakePath]:
    """Data files in the events table's folder that no commit names (a killed batch's): no reader's rows."""
    found = Lake.at(lake, os.environ.get("CLOUDTRAIL_CATALOG"))
    committed = all_files(found)
    return [p for p in (storage.at(events_location(found)) / "data").rglob("*.parquet") if p not in committed]


def in_s3(work: Path) -> tuple[Any, str]:
    """moto's S3 on loopback, a bucket for the lake, and a SQL catalog for its tables (in `work`): the server, the lake."""
    from tests.aws import ENVIRONMENT, start_server

    server, url = start_server()
    os.environ.update({**ENVIRONMENT, "AWS_ENDPOINT_URL": url, "CLOUDTRAIL_CATALOG": "chaos"})
    bucket = f"chaos-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    settings = {"TYPE": "sql", "URI": f"sqlite:///{work / 'catalog.db'}", "WAREHOUSE": f"s3://{bucket}/warehouse"}
    os.environ.update({f"PYICEBERG_CATALOG__CHAOS__{key}": value for key, value in settings.items()})
    return server, f"s3://{bucket}/lake"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--s3", action="store_true", help="the lake in S3 (moto's, on loopback), its tables in a SQL catalog")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    work = args.work or Path(tempfile.mkdtemp(prefix="chaos-"))
    work.mkdir(parents=True, exist_ok=True)
    server, lake = in_s3(work) if args.s3 else (None, str(work / "lake"))
    try:
        return _kill_and_check(ChaosRun(work / "landing", lake), rng, args.kills)
    finally:
        if server is not None:
            server.stop()


def _kill_and_check(chaos: ChaosRun, rng: random.Random, kills: int) -> int:
    chaos.deliver()
    attempt = 0
    while sum(1 for _, code, _ in chaos.log if code == -9) < kills:
        attempt += 1
        if rng.random() < 0.5:
            fault = f"{rng.choice(PHASES)}@{rng.randint(0, 2)}"
        else:
            fault = f"random:{rng.uniform(8, 25):.1f}"
        code = chaos.run(fault)
        left = len(uncommitted_files(chaos.lake))
        print(f"attempt {attempt:>2}: {fault:<22} exit {code:>3}  uncommitted data files left: {left}", flush=True)
        if rng.random() < 0.4:
            chaos.deliver(files=rng.randint(2, 6), late=rng.random() < 0.3)
    chaos.run_until_done()
    in_bucket = str(chaos.lake).startswith("s3://")
    rows = catalog_rows(str(chaos.lake), os.environ["CLOUDTRAIL_CATALOG"]) if in_bucket else duckdb_rows(Path(chaos.lake))
    expected = sorted(chaos.expected.items())
    killed = sum(1 for _, code, _ in chaos.log if code == -9)
    phases = sorted({fault.split("@")[0].split(":")[0] for fault, code, _ in chaos.log if code == -9})
    print(f"{killed} runs killed ({', '.join(phases)}) of {len(chaos.log)}; {len(rows)} rows in the table, oracle {len(expected)}")
    if rows != expected:
        missing, extra = set(expected) - set(rows), len(rows) - len(set(rows))
        print(f"MISMATCH: {len(missing)} events missing, {extra} duplicated rows")
        return 1
    if in_bucket:
        print("table equals the oracle through Iceberg's catalog (pyiceberg), the lake in S3; every event once")
        return 0
    spark_rows = table_via_spark(Path(chaos.lake))
    if spark_rows != expected:
        print(f"MISMATCH through Spark: {len(spark_rows)} rows")
        return 1
    print("table equals the oracle through its files (DuckDB) and through Iceberg's catalog (Spark); every event once")
    return 0


def table_via_spark(lake: Path) -> list[tuple[str, str]]:
    spark = spark_session("chaos-check", STREAM_CONF, "local[2]")
    try:
        return table_rows(spark, lake)
    finally:
        spark.stop()


if __name__ == "__main__":
    raise SystemExit(main())
