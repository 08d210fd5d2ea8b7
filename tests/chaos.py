"""Kill the ingest job at chosen or random moments (until --kills of them have landed), run it again until it finishes, with new
files arriving between runs; then check the table against the oracle through Spark and DuckDB.

    python -m tests.chaos --kills 20 [--seed 1] [--work DIR]      (make chaos)
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path

from jobs.lake import Lake
from jobs.spark.session import STREAM_CONF, spark_session
from jobs.tables.events import all_files, events_location
from tests.helpers import duckdb_rows, table_rows
from tools.generate_landing import generate

PHASES = ["reading", "writing_data", "between_outputs", "committing_state"]
# A 1-day source retention retires the folders of all but the newest delivery, so late files exercise that path too.
JOB_OPTIONS = ["--max-files-per-trigger", "3", "--state-partitions", "2", "--source-retention", "1 day", "--settle", "0 seconds"]


@dataclass
class ChaosRun:
    landing: Path
    lake: Path
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


def uncommitted_files(lake: Path) -> list[Path]:
    """Data files in the events table's folder that no commit names (a killed batch's): no reader's rows."""
    committed = all_files(Lake(lake))
    return [p for p in (Path(events_location(Lake(lake))) / "data").rglob("*.parquet") if p not in committed]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    work = args.work or Path(tempfile.mkdtemp(prefix="chaos-"))
    chaos = ChaosRun(work / "landing", work / "lake")
    chaos.deliver()
    attempt = 0
    while sum(1 for _, code, _ in chaos.log if code == -9) < args.kills:
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
    rows = duckdb_rows(chaos.lake)
    expected = sorted(chaos.expected.items())
    killed = sum(1 for _, code, _ in chaos.log if code == -9)
    phases = sorted({fault.split("@")[0].split(":")[0] for fault, code, _ in chaos.log if code == -9})
    print(f"{killed} runs killed ({', '.join(phases)}) of {len(chaos.log)}; {len(rows)} rows in the table, oracle {len(expected)}")
    if rows != expected:
        missing, extra = set(expected) - set(rows), len(rows) - len(set(rows))
        print(f"MISMATCH: {len(missing)} events missing, {extra} duplicated rows")
        return 1
    spark_rows = table_via_spark(chaos.lake)
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
