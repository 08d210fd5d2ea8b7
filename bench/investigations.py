"""The shipped investigations (jobs/investigations/queries/) on a week of events: bytes read, row groups and seconds
per question, on the lake as the product lays it out (sorted by principal within each date, bloom filters on the
lookup columns, 8 MB row groups: jobs/records/layout.py), on the same rows without that layout (sorted by time,
no bloom filters, Parquet's defaults), and on the delivered JSON (what a query over the trail's bucket reads). Both lakes are written
by the product's own ingest and compaction, alternately, so what the layout costs the ingest is measured beside.

    python -m bench.investigations [--records 700000] [--days 7] [--seed 5] [--writes 3] [--out bench/investigations.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import duckdb

from bench.benchmark import SAMPLES
from jobs.investigations import catalogue
from jobs.lake import Lake
from jobs.tables.events import all_files, events_source
from tools.generate_landing import generate, like, real_records
from tools.investigated import maker, population
from tools.raw_cloudtrail import log_files, with_raw_events

START = date(2024, 1, 1)
VARIANTS = ("laid-out", "plain")
RESULTS = Path(__file__).with_name("investigations.json")


def _scans(node: dict[str, Any]) -> list[dict[str, Any]]:
    found = [node] if node.get("type") == "TABLE_SCAN" else []
    return found + [scan for child in node.get("children", []) for scan in _scans(child)]


def ingest_variant(
    variant: str, landing: Path, lake: Path, first: date, last: date, sort: str | None, row_group_mb: int | None
) -> dict[str, float]:
    """One lake written by the ingest and compacted: with the layout (another sort order or row group size when asked:
    a candidate), or (plain) with Parquet's defaults, no bloom filters, the compaction sorting by time as it did before
    the layout."""
    from jobs.ingest.command import main as ingest
    from jobs.records import layout
    from jobs.upkeep import compact

    if sort:
        layout.SORT_COLUMNS = tuple(sort.split(","))
    if row_group_mb:
        layout.ROW_GROUP_BYTES = row_group_mb << 20
    if variant == "plain":
        layout.spark_conf = dict  # type: ignore[assignment]
        # The compaction as it was before the layout: each file sorted by eventTime.
        compact.compacted = lambda rows, n: rows.repartitionByRange(n, "eventTime", "eventID").sortWithinPartitions("eventTime", "eventID")  # type: ignore[assignment]
    started = time.perf_counter()
    assert ingest(["--landing", str(landing), "--lake", str(lake), "--settle", "0 seconds"]) == 0
    ingested = time.perf_counter() - started
    assert compact.main(["--lake", str(lake), "--from-date", str(first), "--to-date", str(last)]) == 0
    return {"ingest_s": ingested, "compact_s": time.perf_counter() - started - ingested}


def _values(found: catalogue.Query, first: date, last: date, seed: int) -> dict[str, str]:
    """A principal from the middle of the population: neither the busiest nor one seen once."""
    who = population(seed)[40]
    given = {"access_key": who.access_key, "arn": who.arn, "ip": who.addresses[0]}
    return found.values(first, last, {name: given[name] for name in found.parameters})


def measured(view: str, found: catalogue.Query, values: dict[str, str], repeats: int, profile: Path) -> dict[str, float]:
    """Seconds (median of `repeats`, a new reader each), and from DuckDB's profile of the last: the bytes it read, the row
    groups it scanned of those its files hold."""
    times = []
    for _ in range(repeats):
        db = catalogue.prepared(duckdb.connect())
        db.execute(f"CREATE VIEW cloudtrail.events AS SELECT * FROM {view}")
        db.execute("PRAGMA enable_profiling = 'json'")
        db.execute(f"PRAGMA profiling_output = '{profile}'")
        started = time.perf_counter()
        catalogue.answer(db, found, values)
        times.append(time.perf_counter() - started)
    body = json.loads(profile.read_text())
    scans = [scan for node in body["operator"] for scan in _scans(node)]
    return {
        "seconds": statistics.median(times),
        "bytes": body["io"]["total_bytes_read"],
        "row_groups": sum(scan.get("row_groups_scanned", 0) for scan in scans),
        "row_groups_of": sum(scan.get("total_row_groups_to_scan", 0) for scan in scans),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=700_000)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--writes", type=int, default=3, help="each lake written this many times, alternately (the ingest's median)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the figures go (JSON)")
    parser.add_argument("--sort", help="a candidate's sort columns, comma-separated (default: jobs/records/layout.py's)")
    parser.add_argument("--row-group-mb", type=int, help="a candidate's row group size (default: jobs/records/layout.py's)")
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # one lake's write, in its own process
    parser.add_argument("--landing", type=Path, help="the landing to use, generated there first when missing (kept)")
    parser.add_argument("--lake", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    first, last = START, START + timedelta(days=args.days - 1)
    if args.variant:
        print(json.dumps(ingest_variant(args.variant, args.landing, args.lake, first, last, args.sort, args.row_group_mb)))
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        landing = args.landing or root / "landing"
        if not landing.is_dir():  # a landing given is generated once and kept: candidates are measured on the same one
            generate(landing, records=args.records, days=args.days, seed=args.seed, records_per_file=1000, start=START,
                     duplicate_rate=0.01, make=maker(args.seed, base=like(real_records(SAMPLES))))  # fmt: skip
        writes: dict[str, list[dict[str, float]]] = {variant: [] for variant in VARIANTS}
        queried = args.writes - 1  # the lake the questions are asked of: the last written
        for attempt in range(args.writes):  # alternately: what the layout costs the ingest is the medians' ratio
            for variant in VARIANTS:
                lake = root / f"{variant}-{attempt}"
                command = [sys.executable, "-m", "bench.investigations", "--variant", variant, "--landing", str(landing),
                           "--lake", str(lake), "--days", str(args.days)]  # fmt: skip
                command += [f"--{name}={value}" for name, value in (("sort", args.sort), ("row-group-mb", args.row_group_mb)) if value]
                done = subprocess.run(command, check=True, capture_output=True, text=True)
                writes[variant].append(json.loads(done.stdout.splitlines()[-1]))
        files = log_files(landing)
        lakes = {variant: Lake.at(root / f"{variant}-{queried}") for variant in VARIANTS}
        views = {variant: str(events_source(lake)) for variant, lake in lakes.items()}
        results: dict[str, Any] = {"records": args.records, "days": args.days, "seed": args.seed, "writes": writes, "queries": {},
                                   "sort": args.sort, "row_group_mb": args.row_group_mb}  # fmt: skip
        for variant in VARIANTS:
            results[f"{variant}_bytes"] = sum(path.stat().st_size for path in all_files(lakes[variant]))
        results["json_bytes"] = sum(p.stat().st_size for p in files)
        for found in catalogue.queries():
            if found.tables != ("events",):
                continue
            values = _values(found, first, last, args.seed)
            row = {variant: measured(views[variant], found, values, args.repeats, root / "profile.json") for variant in VARIANTS}
            raw = with_raw_events(catalogue.prepared(duckdb.connect()), files)
            started = time.perf_counter()
            catalogue.answer(raw, found, values)
            row["json"] = {"seconds": time.perf_counter() - started, "bytes": results["json_bytes"]}
            results["queries"][found.name] = row
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(report(results))
    return 0


def report(results: dict[str, Any]) -> str:
    laid, plain = results["laid-out_bytes"], results["plain_bytes"]
    ingest = {v: statistics.median(w["ingest_s"] for w in results["writes"][v]) for v in VARIANTS}
    lines = [
        f"{results['records']:,} events over {results['days']} days; Parquet {laid / 1e6:.0f} MB laid out, {plain / 1e6:.0f} MB plain; "
        f"JSON {results['json_bytes'] / 1e6:.0f} MB",
        f"ingest: laid out {ingest['laid-out']:.1f} s, plain {ingest['plain']:.1f} s ({ingest['laid-out'] / ingest['plain'] - 1:+.1%})",
        "| question | laid out: MB read (% of the week), row groups, s | plain: MB read (%), row groups, s | JSON: MB, s |",
        "|---|---|---|---|",
    ]
    for name, row in results["queries"].items():
        cells = [
            f"{row[v]['bytes'] / 1e6:.1f} ({row[v]['bytes'] / total:.1%}), {row[v]['row_groups']}/{row[v]['row_groups_of']}, {row[v]['seconds']:.3f}"
            for v, total in (("laid-out", laid), ("plain", plain))
        ]
        json_row = row["json"]
        lines.append(f"| {name} | {cells[0]} | {cells[1]} | {json_row['bytes'] / 1e6:.0f}, {json_row['seconds']:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
