"""What an ingest run costs as the landing zone's history grows (issue #36): an organization trail's delivery day
folders for a year under each account x 17 regions, one real-shaped file in each place's newest folder.

    python -m bench.history [--accounts 2,20,100] [--days 365] [--short-history 30] [--repeats 2]

For each zone a first run takes every place's file. Then `--repeats` runs in a row of each kind: with nothing
new, with one new file, and listing every folder (`--full-listing-interval '0 seconds'`: what one run a day
pays), each the product's whole command from start to exit. Prints medians, the ratios against the smallest
zone with the targets, and a straight line through the measured points, read at 1,000 and 10,000 accounts.

Two baselines in the same sitting say what the ratios can be. The system calls alone: the folders a nothing-new
run lists and the paths it stats, recorded from the product's own walk, then made again bare (a listing per
folder, a stat per path, no Python between them); the best nothing-new ratio any walk with the same rule can
reach is the smallest zone's run plus the difference of the two zones' bare calls. And history itself: the
largest number of accounts with `--short-history` days of folders instead of `--days`.
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
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from unittest import mock

from bench.benchmark import SAMPLES, WORK, measure
from jobs.ingest import command as ingest_cli
from jobs.lake import Lake
from jobs.landing import layout as landing_layout
from jobs.landing.layout import aws_logs, delivery_path
from jobs.ledger import planner as ledger
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
    wall, *_ = measure([*command, "--run-id", run_id, "--settle", "0 seconds", *options])
    return wall, json.loads(Lake.at(lake).ingest_report(run_id).read_text())["ledger"]


def sitting(accounts: int, days: int, repeats: int, scratch: Path) -> dict:
    """The first run, then `repeats` runs of each kind in a row (as an hourly schedule runs them): medians."""
    landing, lake = zone(accounts, days), scratch / f"lake-{accounts}x{days}"
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
    listed, stated = walk_calls(landing, lake)
    bare = statistics.median(bare_seconds(listed, stated) for _ in range(max(3, repeats)))
    return {
        "accounts": accounts, "day_folders": folders, "first_run_s": first, **{k: statistics.median(v) for k, v in times.items()},
        "listed_folders": len(listed), "stated_paths": len(stated), "bare_calls": bare,
    }  # fmt: skip


@contextmanager
def recorded(listed: list[str], stated: list[str]) -> Iterator[None]:
    """The landing walk, its folder listings and stats noted as it makes them: the listing of each folder, the
    folder-time test of each folder, and the stat of each log file the ledger sorts."""
    entries, ctime, log_files = landing_layout._entries, landing_layout._ctime_ns, landing_layout.log_files_in

    def listing(folder: str | Path, skipped: landing_layout.SkipList) -> list[os.DirEntry[str]]:
        listed.append(str(folder))
        return entries(folder, skipped)

    def folder_time(folder: str) -> int:
        stated.append(folder)
        return ctime(folder)

    def files_in(folder: str | Path, skipped: landing_layout.SkipList = None) -> list[os.DirEntry[str]]:
        found = log_files(folder, skipped)
        stated.extend(entry.path for entry in found)
        return found

    with (
        mock.patch.object(landing_layout, "_entries", listing),
        mock.patch.object(landing_layout, "_ctime_ns", folder_time),
        mock.patch("jobs.ledger.planner.log_files_in", files_in),
    ):
        yield


def walk_calls(landing: Path, lake: Path) -> tuple[list[str], list[str]]:
    """The folders one nothing-new run lists and the paths it stats: the product's run, in this process, recorded."""
    listed: list[str] = []
    stated: list[str] = []
    with recorded(listed, stated):
        code = ingest_cli.main(["--landing", str(landing), "--lake", str(lake), "--run-id", "recorded", "--settle", "0 seconds"])
    recorded_ledger = json.loads(Lake.at(lake).ingest_report("recorded").read_text())["ledger"]
    assert code == 0 and recorded_ledger["new_files"] == 0 and not recorded_ledger["full_listing"], recorded_ledger  # as the timed runs
    return listed, stated


def bare_seconds(listed: list[str], stated: list[str]) -> float:
    """The same system calls with nothing around them: a listing of each folder, a stat of each path (the walk's
    tries of folders that are not there included)."""
    started = time.perf_counter()
    for folder in listed:
        try:
            os.listdir(folder)
        except OSError:
            pass
    for path in stated:
        try:
            os.stat(path)
        except OSError:
            pass
    return time.perf_counter() - started


def line_at(rows: list[dict], key: str, accounts: int) -> float:
    """A least-squares straight line through (accounts, seconds), read at `accounts`; the mean where it falls: more
    places never cost less, so a falling line is noise around a flat cost (a one-new-file run is mostly Spark's start)."""
    xs, ys = [r["accounts"] for r in rows], [r[key] for r in rows]
    slope, intercept = statistics.linear_regression(xs, ys) if len(rows) > 1 else (0.0, ys[0])
    return intercept + slope * accounts if slope >= 0 else statistics.mean(ys)


def render(results: dict) -> str:
    rows = results["rows"]
    lines = [
        f"{results['days']} day folders per place x {len(REGIONS)} regions, medians of {results['repeats']}, whole process "
        f"({results['measured_at']}, {results['machine']}):",
        "",
        "| accounts | day folders | nothing new | one new file | full listing (once a day) | nothing new's system calls, bare |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {r['accounts']:,} | {r['day_folders']:,} | {r['nothing_new']:.2f} s | {r['one_new_file']:.2f} s | {r['full_listing']:.2f} s "
        f"| {r['bare_calls']:.3f} s ({r['listed_folders']:,} listings, {r['stated_paths']:,} stats) |"
        for r in rows
    ]
    for accounts in (1_000, 10_000):
        fitted = {key: line_at(rows, key, accounts) for key in ("nothing_new", "one_new_file", "full_listing")}
        lines.append(
            f"| {accounts:,} (line through the above) | {accounts * len(REGIONS) * results['days']:,} | {fitted['nothing_new']:.1f} s "
            f"| {fitted['one_new_file']:.1f} s | {fitted['full_listing']:.1f} s | |"
        )
    lines += ["", "| target: largest zone against smallest | ratio | met |", "| --- | ---: | --- |"]
    lines += [
        f"| {name.replace('_', ' ')} <= {limit}x | {ratio:.2f}x | {'yes' if ratio <= limit else 'NO'} |"
        for name, limit, ratio in targets(results)
    ]
    smallest, largest = rows[0], rows[-1]
    lines += [
        "",
        f"- Nothing new, were the walk to cost only its system calls: at best {floor_ratio(results):.2f}x (the smallest zone's "
        f"run, {smallest['nothing_new']:.2f} s, plus the {largest['bare_calls'] - smallest['bare_calls']:.3f} s more that the "
        "largest zone's listings and stats take bare).",
    ]
    short = results.get("short_history")
    if short:
        lines.append(
            f"- History: {short['accounts']:,} accounts with {short['days']} days of folders, nothing new "
            f"{short['nothing_new']:.2f} s; with {results['days']} days {largest['nothing_new']:.2f} s: "
            f"**{largest['nothing_new'] / short['nothing_new']:.2f}x** for {results['days'] / short['days']:.0f}x the history."
        )
    return "\n".join(lines)


def floor_ratio(results: dict) -> float:
    """The nothing-new ratio of a walk that cost only its system calls (all else in the run as measured)."""
    smallest, largest = results["rows"][0], results["rows"][-1]
    return (smallest["nothing_new"] + largest["bare_calls"] - smallest["bare_calls"]) / smallest["nothing_new"]


def targets(results: dict) -> list[tuple[str, float, float]]:
    smallest, largest = results["rows"][0], results["rows"][-1]
    return [(name, limit, largest[name] / smallest[name]) for name, limit in TARGETS.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--accounts", default="2,20,100", help="zone sizes, smallest first")
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--short-history", type=int, default=30, help="days of folders of the largest zone's history row (0: none)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="1 account, 5 days, once: the harness, not the figures")
    args = parser.parse_args(argv)
    accounts, days, repeats = ([1], 5, 1) if args.smoke else ([int(a) for a in args.accounts.split(",")], args.days, args.repeats)
    WORK.mkdir(exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="history-", dir=WORK))
    short: dict | None = None
    try:
        rows = []
        for size in accounts:
            print(f"{size} accounts x {len(REGIONS)} regions x {days} days", flush=True)
            rows.append(sitting(size, days, repeats, scratch))
        short_days = 0 if args.smoke else args.short_history
        if short_days:
            print(f"{accounts[-1]} accounts x {len(REGIONS)} regions x {short_days} days", flush=True)
            short = {**sitting(accounts[-1], short_days, repeats, scratch), "days": short_days}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results = {"days": days, "repeats": repeats, "rows": rows, "measured_at": datetime.now(tz=UTC).strftime("%Y-%m-%d %H:%M UTC"),
               "machine": f"{os.cpu_count()} cores", "short_history": short}  # fmt: skip
    results_path(args.smoke).write_text(json.dumps(results, indent=1))
    print(render(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
