"""What an ingest run costs as the landing zone's history grows (issue #36): an organization trail's delivery day
folders for a year under each account x 17 regions, one real-shaped file in each place's newest folder.

    python -m bench.history [--accounts 2,20,100] [--days 365] [--repeats 2]

For each zone a first run takes every place's file. Then `--repeats` runs in a row of each kind: with nothing
new, with one new file, and listing every folder (`--full-listing-interval '0 seconds'`: what one run a day
pays), each the product's whole command from start to exit. Prints medians, the ratios against the smallest
zone with the targets, and a straight line through the measured points, read at 1,000 and 10,000 accounts.
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
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from bench.benchmark import SAMPLES, WORK, measure
from jobs import ledger
from jobs.lake import Lake
from jobs.landing import aws_logs, delivery_path
from tools.generate_landing import like, real_records, write_delivery

REGIONS = [
    "us-east-1", "us-east-2", "us-west-1", "us-west-2", "ca-central-1", "eu-west-1", "eu-west-2", "eu-west-3", "eu-central-1",
    "eu-north-1", "ap-south-1", "ap-northeast-1", "ap-northeast-2", "ap-northeast-3", "ap-southeast-1", "ap-southeast-2", "sa-east-1",
]  # fmt: skip
NEWEST = date(2026, 6, 30)  # the zone's newest delivery folder: fixed, so a zone built once serves every sitting
RECORDS_PER_FILE = 10
TARGETS = {"nothing_new": 1.5, "one_new_file": 1.2}  # largest zone against the smallest, at most


def results_path(smoke: bool) -> Path:
    return WORK / ("history-smoke.json" if smoke else "history.json")


def zone(accounts: int, days: int) -> Path:
    """A cached landing zone: `days` empty day folders under each account x region, and one file in the newest.
    Returned once it is older than the ledger's clock slack: a history, not folders that have just landed."""
    path = WORK / f"history-{accounts}x{days}"
    if not (path / "_complete").exists():
        build(path, accounts, days)
    time.sleep(max(0.0, (path / "_complete").stat().st_mtime + ledger.CLOCK_SLACK_NS / 1e9 + 1 - time.time()))
    return path


def build(path: Path, accounts: int, days: int) -> None:
    shutil.rmtree(path, ignore_errors=True)
    make, rng = like(real_records(SAMPLES)), random.Random(accounts)
    delivered = datetime.combine(NEWEST, datetime.min.time(), UTC) + timedelta(hours=1)
    for account in (str(100000000000 + n) for n in range(accounts)):
        for region in REGIONS:
            region_folder = aws_logs(path) / account / "CloudTrail" / region
            for back in range(days):
                (region_folder / (NEWEST - timedelta(days=back)).strftime("%Y/%m/%d")).mkdir(parents=True, exist_ok=True)
            records = [make(rng, delivered - timedelta(minutes=5), account, region) for _ in range(RECORDS_PER_FILE)]
            write_delivery(delivery_path(path, account, region, delivered, "first"), records, delivered)
    (path / "_complete").touch()


def ingest_seconds(landing: Path, lake: Path, run_id: str, *options: str) -> tuple[float, dict]:
    """The product's command, whole process: wall seconds, and its run report's ledger summary."""
    command = [sys.executable, "-m", "jobs.cloudtrail_ingest", "--landing", str(landing), "--lake", str(lake)]
    wall, _, _ = measure([*command, "--run-id", run_id, "--settle", "0 seconds", *options])
    return wall, json.loads(Lake(lake).ingest_report(run_id).read_text())["ledger"]


def sitting(accounts: int, days: int, repeats: int, scratch: Path) -> dict:
    """The first run, then `repeats` runs of each kind in a row (as an hourly schedule runs them): medians."""
    landing, lake = zone(accounts, days), scratch / f"lake-{accounts}"
    make = like(real_records(SAMPLES))
    first, _ = ingest_seconds(landing, lake, "first")
    times: dict[str, list[float]] = {"nothing_new": [], "one_new_file": [], "full_listing": []}
    for n in range(repeats):
        wall, ledger = ingest_seconds(landing, lake, f"quiet-{n}")
        assert ledger["new_files"] == 0 and not ledger["full_listing"], ledger
        times["nothing_new"].append(wall)
    added: list[Path] = []
    try:
        for n in range(repeats):
            delivered = datetime.combine(NEWEST, datetime.min.time(), UTC) + timedelta(hours=2, minutes=n)
            account, region = str(100000000000 + n % accounts), REGIONS[n % len(REGIONS)]
            added.append(delivery_path(landing, account, region, delivered, f"bench-{n}"))
            write_delivery(added[-1], [make(random.Random(n), delivered, account, region)], delivered)
            wall, ledger = ingest_seconds(landing, lake, f"one-{n}")
            assert ledger["new_files"] == 1 and not ledger["full_listing"], ledger
            times["one_new_file"].append(wall)
    finally:
        for path in added:  # the cached zone stays as built
            path.unlink(missing_ok=True)
    for n in range(repeats):
        wall, ledger = ingest_seconds(landing, lake, f"full-{n}", "--full-listing-interval", "0 seconds")
        assert ledger["full_listing"], ledger
        times["full_listing"].append(wall)
    folders = accounts * len(REGIONS) * days
    return {"accounts": accounts, "day_folders": folders, "first_run_s": first, **{k: statistics.median(v) for k, v in times.items()}}


def line_at(rows: list[dict], key: str, accounts: int) -> float:
    """A least-squares straight line through (accounts, seconds), read at `accounts`."""
    xs, ys = [r["accounts"] for r in rows], [r[key] for r in rows]
    slope, intercept = statistics.linear_regression(xs, ys) if len(rows) > 1 else (0.0, ys[0])
    return intercept + slope * accounts


def render(results: dict) -> str:
    rows = results["rows"]
    lines = [
        f"{results['days']} day folders per place x {len(REGIONS)} regions, medians of {results['repeats']}, whole process "
        f"({results['measured_at']}, {results['machine']}):",
        "",
        "| accounts | day folders | nothing new | one new file | full listing (once a day) |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {r['accounts']:,} | {r['day_folders']:,} | {r['nothing_new']:.2f} s | {r['one_new_file']:.2f} s | {r['full_listing']:.2f} s |"
        for r in rows
    ]
    for accounts in (1_000, 10_000):
        fitted = {key: line_at(rows, key, accounts) for key in ("nothing_new", "one_new_file", "full_listing")}
        lines.append(
            f"| {accounts:,} (line through the above) | {accounts * len(REGIONS) * results['days']:,} | {fitted['nothing_new']:.1f} s "
            f"| {fitted['one_new_file']:.1f} s | {fitted['full_listing']:.1f} s |"
        )
    lines += ["", "| target: largest zone against smallest | ratio | met |", "| --- | ---: | --- |"]
    lines += [
        f"| {name.replace('_', ' ')} <= {limit}x | {ratio:.2f}x | {'yes' if ratio <= limit else 'NO'} |"
        for name, limit, ratio in targets(results)
    ]
    return "\n".join(lines)


def targets(results: dict) -> list[tuple[str, float, float]]:
    smallest, largest = results["rows"][0], results["rows"][-1]
    return [(name, limit, largest[name] / smallest[name]) for name, limit in TARGETS.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--accounts", default="2,20,100", help="zone sizes, smallest first")
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="1 account, 5 days, once: the harness, not the figures")
    args = parser.parse_args(argv)
    accounts, days, repeats = ([1], 5, 1) if args.smoke else ([int(a) for a in args.accounts.split(",")], args.days, args.repeats)
    WORK.mkdir(exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="history-", dir=WORK))
    try:
        rows = []
        for size in accounts:
            print(f"{size} accounts x {len(REGIONS)} regions x {days} days", flush=True)
            rows.append(sitting(size, days, repeats, scratch))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results = {"days": days, "repeats": repeats, "rows": rows, "measured_at": datetime.now(tz=UTC).strftime("%Y-%m-%d %H:%M UTC"),
               "machine": f"{os.cpu_count()} cores"}  # fmt: skip
    results_path(args.smoke).write_text(json.dumps(results, indent=1))
    print(render(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
