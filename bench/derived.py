"""The derived tables as Iceberg tables their jobs write (issue #78) against the release that swapped them into the
lake's folders and published copies, in one sitting.

    git worktree add build/derived-before <commit>        # the release before, beside this checkout
    python -m bench.derived build/derived-before [--records 1000000] [--rounds 2]

One lake of the benchmark's real-shaped zone (bench.benchmark.zone), ingested and gated once by this checkout (the
ingest is the same in both). Per round, each checkout in turn (the order flipped every round) on a copy of that
lake: `python -m jobs.activity`, `python -m jobs.ocsf`, then `python -m jobs.publish`, each in its own process,
seconds each; then the bytes the derived tables take, in the lake's folders and in the embedded warehouse. Both
checkouts run this checkout's environment and JVM jars (the other's dependencies are the same). Writes
bench/derived.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

from bench.benchmark import PRODUCT_RUN_ID, ROOT, WORK, measure, product_command, zone
from jobs.iceberg.catalog import NAMESPACE, TABLE_NAMES
from jobs.lake import DERIVED, Lake
from jobs.storage import LakePath

STEPS = ("activity", "ocsf", "publish")
TABLES = [name for derived in DERIVED for name in derived.tables]


def size_of(folder: LakePath) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0


def derived_bytes(lake: Path) -> dict[str, int]:
    """The bytes the derived tables take: in the lake's own folders, and in the embedded catalog's warehouse."""
    layout = Lake.at(lake)
    return {
        "lake folders": sum(size_of(layout.table(name)) for name in TABLES),
        "warehouse": sum(size_of(layout.iceberg_warehouse / NAMESPACE / TABLE_NAMES[name]) for name in TABLES),
    }


def gated_lake(records: int) -> Path:
    """The zone ingested and gated once (by this checkout), kept for the rounds to copy."""
    lake = WORK / f"derived-lake-{records}"
    if not (lake / "_bench_complete").exists():
        shutil.rmtree(lake, ignore_errors=True)
        measure(product_command(zone(records), lake))
        measure([sys.executable, "-m", "jobs.validate_events", "--lake", str(lake), "--run-id", PRODUCT_RUN_ID])
        (lake / "_bench_complete").touch()
    return lake


def run_steps(checkout: Path, lake: Path) -> dict[str, float]:
    """The derived jobs and the publish of `checkout` on `lake`, seconds each."""
    env = {
        "PYTHONPATH": f"{checkout}:{checkout}/plugins",
        "CLOUDTRAIL_JARS": str(ROOT / "build" / "jars"),
        "CLOUDTRAIL_JAR": str(ROOT / "build" / "cloudtrail.jar"),
    }
    seconds = {}
    for step in STEPS:
        wall, *_ = measure([sys.executable, "-m", f"jobs.{step}", "--lake", str(lake), "--run-id", f"bench-{step}"], env=env, cwd=checkout)
        seconds[step] = round(wall, 1)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path, help="a checkout of the release before")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    checkouts = {"this": ROOT, "before": args.before.resolve()}
    source = gated_lake(args.records)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in checkouts}
    sizes: dict[str, dict[str, int]] = {}
    for round_ in range(args.rounds):
        for name in list(checkouts) if round_ % 2 == 0 else list(checkouts)[::-1]:
            lake = WORK / f"derived-{name}"
            shutil.rmtree(lake, ignore_errors=True)
            shutil.copytree(source, lake)
            runs[name].append(run_steps(checkouts[name], lake))
            sizes[name] = derived_bytes(lake)
            print(f"round {round_ + 1} {name}: {runs[name][-1]} {sizes[name]}", flush=True)
    medians = {name: {step: statistics.median(r[step] for r in done) for step in STEPS} for name, done in runs.items()}
    for step in STEPS:
        print(f"{step:<10} this {medians['this'][step]:6.1f} s   before {medians['before'][step]:6.1f} s   "
              f"this/before {medians['this'][step] / medians['before'][step]:.2f}x")  # fmt: skip
    for name, held in sizes.items():
        print(f"derived tables' bytes, {name}: {held}")
    result = {"records": args.records, "rounds": args.rounds, "seconds": runs, "medians": medians, "bytes": sizes,
              "cores": os.cpu_count()}  # fmt: skip
    (ROOT / "bench" / "derived.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
