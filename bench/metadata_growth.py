"""Checkpoint and table metadata sizes over many batches: what stays bounded, what grows.

    python -m bench.metadata_growth [--runs 4] [--files-per-run 100] [--expire-after "1 minute"]
        [--source-retention "2 days"]

Each run ingests `--files-per-run` new files, one file per batch, each file delivered an
hour after the previous one (so the arrival watermark moves and state can expire), then publishes as the DAG does;
sizes are printed after every run. The publish's snapshot expiry is wall-clock time, so it is scaled down
here (a run of 100 batches takes about two minutes) to let snapshots expire during the
measurement. The source log's retention is in delivery days; 100 hourly files span about 4,
so it is scaled down from 7 days to 2 for the retired folders to show within a few runs.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from jobs import storage
from jobs.lake import Lake
from jobs.landing.layout import delivery_path
from jobs.storage import LakePath
from jobs.tables.events import events_batch, events_location
from tools.generate_landing import make_record, write_delivery


def parts(lake: Lake) -> dict[str, LakePath]:
    return {
        "checkpoint offsets/": lake.checkpoint / "offsets",
        "checkpoint commits/": lake.checkpoint / "commits",
        "checkpoint sources/ (read manifests)": lake.checkpoint / "sources",
        "checkpoint manifests/ (file ledger)": lake.manifests,
        "checkpoint state/ (dedup)": lake.checkpoint / "state",
        "events table metadata/": storage.at(events_location(lake)) / "metadata",
    }


def deliver_one(landing: Path, rng: random.Random, when: datetime, name: str, records: int = 100) -> None:
    """One delivered file of `records` synthetic events, each from 5 minutes before `when`."""
    events = [make_record(rng, when - timedelta(minutes=5), "111122223333", "us-east-1") for _ in range(records)]
    write_delivery(delivery_path(landing, "111122223333", "us-east-1", when, name), events, when)


def size_kb(path: LakePath) -> tuple[float, int]:
    files = [p for p in path.rglob("*") if p.is_file()] if path.exists() else []
    return sum(p.stat().st_size for p in files) / 1024, len(files)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--files-per-run", type=int, default=100)
    parser.add_argument("--expire-after", default="1 minute")
    parser.add_argument("--source-retention", default="2 days")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="growth-"))
    landing, lake = work / "landing", work / "lake"
    rng = random.Random(5)
    start = datetime(2024, 1, 1, tzinfo=UTC)
    print(f"{'batches':>8} | " + " | ".join(f"{name}" for name in parts(Lake.at(lake))))
    for run in range(args.runs):
        for index in range(args.files_per_run):
            delivered = start + timedelta(hours=run * args.files_per_run + index)
            deliver_one(landing, rng, delivered, f"f{run}x{index}", records=50)
        subprocess.run([sys.executable, "-m", "jobs.cloudtrail_ingest", "--landing", str(landing), "--lake", str(lake),
                        "--max-files-per-trigger", "1", "--dedup-horizon", "1 day",
                        "--source-retention", args.source_retention, "--settle", "0 seconds"],
                       check=True, capture_output=True)  # fmt: skip
        subprocess.run([sys.executable, "-m", "jobs.publish", "--lake", str(lake), "--expire-after", args.expire_after],
                       check=True, capture_output=True)  # fmt: skip
        newest = events_batch(Lake.at(lake))
        batches = 0 if newest is None else newest + 1
        cells = [f"{kb:8.0f} KB in {n:>3} files" for kb, n in (size_kb(folder) for folder in parts(Lake.at(lake)).values())]
        print(f"{batches:>8} | " + " | ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
