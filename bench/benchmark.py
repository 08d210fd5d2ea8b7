"""Benchmark the ingest job against baselines measured in the same sitting.

    python -m bench.benchmark [--sizes 200000,1000000,2000000] [--repeats 3] [--days 60] [--out BENCHMARKS.md]
    python -m bench.benchmark --sizes-only     (the peers on each zone, queries, no-op run: not the memory, incremental, 60-day runs)
    python -m bench.benchmark --smoke          (one tiny zone, one repeat: checks the harness runs)
    python -m bench.benchmark --reuse-sizes bench-work/sizes.json   (after a later phase failed: the size comparison
                                               as the failed run kept it, then the rest)

For each landing zone (real-shaped: the real sample records copied with ids and times of their own,
1,000 a gzipped file over 3 days, delivered layout, 1% re-delivered duplicates; and one of another
shape: other seed, 5 days, 250 records a file) it runs, one after another, the product's job
(availableNow, dedup on) and the peers a user compares it with: A a plain Spark batch (same schema),
B the recipe from Spark's guide (availableNow file stream, dropDuplicatesWithinWatermark, Parquet
file sink), C a Spark batch with dropDuplicates, and DuckDB's COPY. It reports medians and
baseline/product ratios of whole-process time (the command from start to exit), pair by pair. Then: a 1-file
run after 20,000 files against a 1-file run with no history, a no-op run against a bare
spark-submit, analyst queries on the table against the raw JSON, checkpoint and log sizes
after 60 simulated daily runs against after 10, and driver peak memory for the largest
backlog against the smallest.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import psutil

from bench.metadata_growth import deliver_one, size_kb
from jobs.iceberg.embedded import registered
from jobs.lake import EVENT_DATE, EVENTS, Lake
from jobs.spark.logs import local_path
from jobs.tables.events import date_files, event_dates, events_source
from tools.generate_landing import generate, like, real_records

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench-work"
SAMPLES = Path(os.environ.get("CLOUDTRAIL_SAMPLES", ROOT.parent / "shared" / "cloudtrail-samples"))


def results_path(smoke: bool) -> Path:
    """Raw figures: a full run's are kept beside BENCHMARKS.md (and can be reused with --reuse-sizes); a smoke run's are scratch."""
    return WORK / "results-smoke.json" if smoke else ROOT / "bench" / "results.json"


def sizes_path(smoke: bool) -> Path:
    """The size comparison and analyst queries, kept as soon as measured: a run whose later phase failed goes on
    from them with --reuse-sizes."""
    return WORK / ("sizes-smoke.json" if smoke else "sizes.json")


def measure(
    command: list[str], env: dict[str, str] | None = None, full_gc_every: float | None = None, cwd: Path | None = None
) -> tuple[float, float, str, float]:
    """Run a command; return (wall seconds, peak RSS of its whole process tree in MB, stdout, when it exited: epoch s).

    With `full_gc_every` (seconds), its JVMs are made to collect their whole heap that often (jcmd GC.run),
    so their GC logs show what they hold, not what G1 has yet to reclaim.
    """
    started = time.monotonic()
    process = psutil.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        # This environment's folder first on PATH (make does not put it there): pyspark's spark-submit finds Spark, and
        # runs the driver, with the `python3` it finds there, as in the DAG's image.
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            **(env or {}),
        },
        cwd=cwd,
    )
    peak = 0.0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        collected = time.monotonic()
        while not done.is_set():
            try:
                tree = [process, *process.children(recursive=True)]
                peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()) / 1e6)
                if full_gc_every and time.monotonic() - collected >= full_gc_every:
                    collected = time.monotonic()
                    for jvm in (p for p in tree if p.name() == "java"):
                        subprocess.run(["jcmd", str(jvm.pid), "GC.run"], capture_output=True, timeout=60, check=False)
            except psutil.Error:
                pass
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, _ = process.communicate()
    wall = time.monotonic() - started  # before the sampler's last sleep, which would round it up to its 0.2 s step
    exited = time.time()
    done.set()
    sampler.join()
    if process.returncode != 0:
        raise RuntimeError(f"{command} exited {process.returncode}")
    return wall, peak, stdout, exited


# Zone shapes: the reference, and another seed, more days and smaller files (so no figure fits one zone).
SHAPES: dict[str, dict[str, Any]] = {
    "": {"seed": 11, "days": 3, "records_per_file": 1000},
    "other": {"seed": 23, "days": 5, "records_per_file": 250},
}


def zone(records: int, shape: str = "") -> Path:
    """A cached landing zone of `records` real-shaped events (plus 1% re-deliveries): copies of the
    real delivered sample records (about 1 KB each) with ids and times of their own, in files of SHAPES[shape]."""
    path = WORK / f"landing-real-{records}{'-' + shape if shape else ''}"
    if not (path / "_complete").exists():  # a zone cut short by an interrupted run is made again
        shutil.rmtree(path, ignore_errors=True)
        if not SAMPLES.is_dir():
            raise SystemExit(
                f"the real CloudTrail samples are needed for real-shaped zones: not found at {SAMPLES} (set CLOUDTRAIL_SAMPLES)"
            )
        make = like(real_records(SAMPLES))
        generate(path, records=records, duplicate_rate=0.01, make=make, **SHAPES[shape])
        (path / "_complete").touch()
    return path


GC_PAUSE = re.compile(r"GC\(\d+\) Pause .* \d+M->(\d+)M\(\d+M\)")
FULL_GC = re.compile(r"GC\(\d+\) Pause Full \(Diagnostic Command\) \d+M->(\d+)M\(\d+M\)")  # jcmd GC.run


def live_heap_mb(gc_log: Path) -> float:
    """The driver's largest heap after a full collection (measure's full_gc_every): the most it held at once."""
    return float(max((int(match[1]) for match in FULL_GC.finditer(gc_log.read_text())), default=0))


def heap_after_gc_mb(gc_log: Path) -> float:
    """The driver's largest heap occupancy right after a garbage collection: what the run needed
    to keep, unlike RSS, which shows how far the JVM grew its heap (lazily, up to -Xmx) and
    includes the Python workers that come and go."""
    after = [int(match[1]) for match in GC_PAUSE.finditer(gc_log.read_text())] if gc_log.exists() else []
    return float(max(after, default=0))


PRODUCT_RUN_ID = "bench"


def product_command(landing: Path, lake: Path, python: str = sys.executable) -> list[str]:
    """The product as the benchmark runs it: every file of the zone in this run (no settle time)."""
    return [python, "-m", "jobs.cloudtrail_ingest", "--landing", str(landing), "--lake", str(lake), "--run-id", PRODUCT_RUN_ID,
            "--settle", "0 seconds"]  # fmt: skip


def run_product(landing: Path, lake: Path, *options: str, full_gc_every: float | None = None) -> dict:
    gc_log = lake.parent / f"{lake.name}-gc.log"
    gc_log.unlink(missing_ok=True)
    # python -m starts the driver JVM through spark-submit, which takes these arguments from here.
    submit_args = f"--driver-java-options '-Xlog:gc:file={gc_log}' pyspark-shell"
    wall, peak, _, exited = measure(
        [*product_command(landing, lake), *options], env={"PYSPARK_SUBMIT_ARGS": submit_args}, full_gc_every=full_gc_every
    )
    written = Lake.at(lake).ingest_report(PRODUCT_RUN_ID)
    report = json.loads(written.read_text())
    work = sum((b["duration_ms"] or 0) for b in report["batches"]) / 1000
    exit_s = exited - written.stat().st_mtime  # from the report, written once the run succeeded, to the process's exit
    return {"wall_s": wall, "work_s": work, "exit_s": exit_s, "peak_mb": peak, "heap_mb": heap_after_gc_mb(gc_log),
            "live_heap_mb": live_heap_mb(gc_log), "records": report["records_read"], "rows": report["rows_written"]}  # fmt: skip


def run_baseline(script: str, landing: Path, out: Path) -> dict:
    wall, peak, stdout, _ = measure([sys.executable, str(ROOT / "bench" / script), str(landing), str(out)])
    result = json.loads(stdout.strip().splitlines()[-1])
    return {"wall_s": wall, "work_s": result["work_s"], "peak_mb": peak, "rows": result["rows"]}


# The peers, each a script of bench/ that prints {"work_s": ..., "rows": ...}.
BASELINES = {
    "spark_batch": "baseline_spark.py",
    "recipe": "baseline_recipe.py",
    "dedup": "baseline_dedup.py",
    "duckdb": "baseline_duckdb.py",
}
SYSTEMS = ("product", *BASELINES)
LABELS = {
    "product": "product",
    "spark_batch": "A Spark batch",
    "recipe": "B recipe",
    "dedup": "C batch + dropDuplicates",
    "duckdb": "DuckDB",
}


def compare_sizes(zones: list[tuple[int, str]], repeats: int, scratch: Path) -> list[dict]:
    """Each (size, shape) zone: the product and every peer, one after another, `repeats` rounds."""
    rows = []
    for size, shape in zones:
        landing = zone(size, shape)
        runs: list[dict[str, dict]] = []
        for repeat in range(repeats):
            results = {}
            for system in SYSTEMS:
                out = scratch / system
                shutil.rmtree(out, ignore_errors=True)
                shutil.rmtree(f"{out}-checkpoint", ignore_errors=True)
                results[system] = run_product(landing, out) if system == "product" else run_baseline(BASELINES[system], landing, out)
            runs.append(results)
            print(f"  {size:>9}{shape and ' ' + shape} #{repeat + 1}: "
                  + ", ".join(f"{system} {r['wall_s']:.1f}s" for system, r in results.items())
                  + f" (the product's exit after success: {results['product']['exit_s']:.2f}s)", flush=True)  # fmt: skip
        product = [run["product"] for run in runs]
        row = {
            "zone": size,
            "shape": shape or "reference",
            "records": product[0]["records"],
            "rows": product[0]["rows"],
            "product": {k: statistics.median(p[k] for p in product) for k in ("wall_s", "work_s", "exit_s", "peak_mb", "heap_mb")},
        }
        for system in BASELINES:
            row[system] = {k: statistics.median(run[system][k] for run in runs) for k in ("wall_s", "work_s", "peak_mb", "rows")}
            # Ratios of time (baseline / product: above 1, the product is faster), pair by pair, then the median.
            row[f"wall_vs_{system}"] = statistics.median(run[system]["wall_s"] / run["product"]["wall_s"] for run in runs)
        row["work_vs_spark_batch"] = statistics.median(run["spark_batch"]["work_s"] / run["product"]["work_s"] for run in runs)
        rows.append(row)
    return rows


def driver_memory(small: int, large: int, repeats: int, scratch: Path) -> dict:
    """The driver's live heap through a backlog of `large` records against one of `small`, under the
    default rate limits. In runs of their own: the full collections that show it cost time."""
    live = {}
    for size in (small, large):
        runs = []
        for _ in range(repeats):
            shutil.rmtree(scratch / "lake", ignore_errors=True)
            runs.append(run_product(zone(size), scratch / "lake", full_gc_every=1)["live_heap_mb"])
        live[size] = statistics.median(runs)
        print(f"  {size:>9}: driver live heap {live[size]:.0f} MB", flush=True)
    shutil.rmtree(scratch / "lake", ignore_errors=True)
    return {"small": small, "large": large, "small_mb": live[small], "large_mb": live[large], "ratio": live[large] / live[small]}


def noop_vs_bare_submit(landing: Path, lake: Path, repeats: int) -> dict:
    """The job with nothing new, submitted as the DAG submits it, against an empty application."""
    empty = ROOT / "bench" / "empty_app.py"
    job = ["--landing", str(landing), "--lake", str(lake)]
    spark_submit = str(Path(sys.executable).parent / "spark-submit")  # pyspark's, beside this interpreter (see measure)
    jar = str(ROOT / "build" / "cloudtrail.jar")
    # As the DAG's operator submits it: the helpers and the dependencies (Iceberg: a lake moved since it was written
    # registers its tables where it is, with Spark, even when nothing is new).
    submit = [spark_submit, "--master", "local[*]", "--jars", f"{jar},{ROOT / 'build' / 'jars'}/*.jar", "--driver-class-path", jar]
    noop = [measure([*submit, str(ROOT / "jobs" / "cloudtrail_ingest.py"), *job])[0] for _ in range(repeats)]
    embedded = [measure([sys.executable, "-m", "jobs.cloudtrail_ingest", *job])[0] for _ in range(repeats)]
    bare = [measure([spark_submit, "--master", "local[*]", str(empty)])[0] for _ in range(repeats)]
    return {
        "noop_s": statistics.median(noop),
        "noop_embedded_s": statistics.median(embedded),
        "bare_submit_s": statistics.median(bare),
        "ratio": statistics.median(noop) / statistics.median(bare),
    }


def incremental_vs_fresh(scratch: Path, history_files: int, repeats: int) -> dict:
    """A run with 1 new file after `history_files` were processed, against 1 file and no history."""
    rng = random.Random(3)
    landing, lake = scratch / "incr-landing", scratch / "incr-lake"
    generate(landing, records=history_files * 5, days=3, seed=5, records_per_file=5, duplicate_rate=0)
    started = time.monotonic()
    run_product(landing, lake)
    history_s = time.monotonic() - started
    after = datetime(2024, 1, 5, tzinfo=UTC)
    incremental, fresh = [], []
    for repeat in range(repeats):
        deliver_one(landing, rng, after + timedelta(hours=repeat), f"new{repeat}")
        incremental.append(run_product(landing, lake)["wall_s"])
        one_landing, one_lake = scratch / f"one-landing-{repeat}", scratch / f"one-lake-{repeat}"
        deliver_one(one_landing, rng, after, "only")
        fresh.append(run_product(one_landing, one_lake)["wall_s"])
    shutil.rmtree(landing)
    shutil.rmtree(lake)
    return {"history_files": history_files, "history_run_s": history_s, "incremental_s": statistics.median(incremental),
            "fresh_s": statistics.median(fresh), "ratio": statistics.median(incremental) / statistics.median(fresh)}  # fmt: skip


def daily_sizes(scratch: Path, days: int, day_seconds: float) -> dict:
    """Checkpoint and table metadata sizes after 2 and after `days` simulated daily runs (one process each).

    Each day delivers 24 hourly files (arrival times a day apart, so the 2-day de-duplication horizon moves), is
    published as the DAG publishes after each run, and is given `day_seconds` of wall clock, because the publish's
    snapshot expiry is wall-clock time: it is set to two such days. The events table's metadata is its current
    metadata file, which every commit writes and every reader reads (older ones: 10 kept; manifests nothing
    references: deleted by the publish a day after, which days of seconds never reach).
    """
    rng = random.Random(9)
    landing, lake = scratch / "daily-landing", scratch / "daily-lake"
    start = datetime(2024, 2, 1, tzinfo=UTC)
    layout = Lake.at(lake)
    parts = {"state": [layout.checkpoint / "state"], "sources": [layout.checkpoint / "sources", layout.manifests],
             "offsets+commits": [layout.checkpoint / "offsets", layout.checkpoint / "commits"],
             "events metadata": []}  # fmt: skip
    sizes: dict[int, dict[str, float]] = {}
    for day in range(1, days + 1):
        began = time.monotonic()
        for hour in range(24):
            deliver_one(landing, rng, start + timedelta(days=day - 1, hours=hour, minutes=30), f"d{day}h{hour}", records=200)
        run_product(landing, lake)
        expiry = ["--expire-after", f"{int(2 * day_seconds)} seconds"]
        subprocess.run([sys.executable, "-m", "jobs.publish", "--lake", str(lake), *expiry], check=True, capture_output=True)
        sizes[day] = {name: sum(size_kb(folder)[0] for folder in folders) for name, folders in parts.items()}
        entry = registered(layout, EVENTS)
        assert entry is not None, "the ingest created the events table"
        sizes[day]["events metadata"] = Path(local_path(entry.metadata_location)).stat().st_size / 1024
        time.sleep(max(0.0, day_seconds - (time.monotonic() - began)))
    shutil.rmtree(landing)
    shutil.rmtree(lake)

    def state_and_log(day: int) -> float:
        return sizes[day]["state"] + sizes[day]["events metadata"]

    settled = min(10, days)  # the steady state: the state holds one horizon of eventIDs (docs/design.md) from day 2 or 3 on
    return {"days": days, "day_seconds": day_seconds, "after_settled": sizes[settled], "settled_day": settled,
            "after_last": sizes[days], "state_and_log_kb_per_day": [round(state_and_log(d)) for d in sorted(sizes)],
            "ratio": sum(sizes[days].values()) / sum(sizes[settled].values()),
            "state_and_log_ratio": state_and_log(days) / state_and_log(settled)}  # fmt: skip


def analyst_queries(landing: Path, lake: Path, repeats: int) -> list[dict]:
    table = events_source(Lake.at(lake))
    raw = (f"(SELECT unnest(Records, recursive := true) FROM read_json('{landing}/AWSLogs/*/CloudTrail/*/*/*/*/*.json.gz', "
           f"columns = {{Records: 'STRUCT(eventTime VARCHAR, eventSource VARCHAR, errorCode VARCHAR, userIdentity STRUCT(arn VARCHAR))[]'}}))")  # fmt: skip
    db = duckdb.connect()
    arn = db.execute(f"select userIdentity.arn from {table} where userIdentity.arn is not null limit 1").fetchall()[0][0]
    day = db.execute(f"select min({EVENT_DATE}) from {table}").fetchall()[0][0]
    queries = {
        "events per eventSource, one day": (
            f"select eventSource, count(*) from {table} where {EVENT_DATE} = DATE '{day}' group by 1",
            f"select eventSource, count(*) from {raw} where eventTime like '{day}%' group by 1",
        ),
        "errors by errorCode, one week": (
            f"select errorCode, count(*) from {table} where {EVENT_DATE} between DATE '{day}' and DATE '{day}' + 6 and errorCode is not null group by 1",
            f"select errorCode, count(*) from {raw} where eventTime::TIMESTAMPTZ < TIMESTAMPTZ '{day}' + INTERVAL 7 DAY and errorCode is not null group by 1",
        ),
        "all events of one principal ARN": (
            f"select eventTime, eventSource, errorCode, userIdentity.arn from {table} where userIdentity.arn = '{arn}'",
            f"select * from {raw} where arn = '{arn}'",
        ),
    }
    results = []
    for name, (on_table, on_raw) in queries.items():

        def timed(sql: str) -> float:
            started = time.monotonic()
            db.execute(sql).fetchall()
            return time.monotonic() - started

        table_s = statistics.median(timed(on_table) for _ in range(repeats))
        raw_s = statistics.median(timed(on_raw) for _ in range(repeats))
        results.append({"query": name, "table_s": table_s, "raw_s": raw_s, "speedup": raw_s / table_s})
    return results


def files_per_partition(lake: Path) -> dict:
    layout = Lake.at(lake)
    dates = event_dates(layout)
    sizes = [path.stat().st_size for day in dates for path in date_files(layout, day)]
    return {"files": len(sizes), "partitions": len(dates), "median_file_mb": statistics.median(sizes) / 1e6 if sizes else 0}


def bar_chart_svg(rows: list[dict]) -> str:
    """Records/s per system and size, as a small SVG (no plotting library needed)."""
    colors = ("#1f77b4", "#ff7f0e", "#d62728", "#9467bd", "#2ca02c")
    systems = [(LABELS[system], color) for system, color in zip(SYSTEMS, colors, strict=True)]
    values = [[r["records"] / r[s]["wall_s"] for s in SYSTEMS] for r in rows]
    top = max(max(v) for v in values) * 1.15
    width, height, group = 200 + 220 * len(rows), 300, 220
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">',
             '<text x="10" y="16">records/s, whole process (higher is better)</text>']  # fmt: skip
    for i, (row, vals) in enumerate(zip(rows, values, strict=True)):
        for j, ((name, color), value) in enumerate(zip(systems, vals, strict=True)):
            h = 230 * value / top
            x = 60 + i * group + j * 40
            parts.append(f'<rect x="{x}" y="{260 - h:.0f}" width="34" height="{h:.0f}" fill="{color}"><title>{name}</title></rect>')
            parts.append(f'<text x="{x}" y="{255 - h:.0f}">{value / 1000:.0f}k</text>')
        parts.append(
            f'<text x="{60 + i * group}" y="280">{row["records"]:,} records{" (" + row["shape"] + ")" if row["shape"] != "reference" else ""}</text>'
        )
    for j, (name, color) in enumerate(systems):
        parts.append(
            f'<rect x="{width - 170}" y="{30 + 16 * j}" width="10" height="10" fill="{color}"/><text x="{width - 155}" y="{39 + 16 * j}">{name}</text>'
        )
    return "\n".join(parts + ["</svg>"])


def now() -> str:
    return datetime.now(tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="200000,1000000,2000000")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--shapes", default="other:1000000", help="more zones of other shapes (bench.benchmark.SHAPES), shape:size,...")
    parser.add_argument("--out", type=Path, default=ROOT / "BENCHMARKS.md")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument(
        "--sizes-only",
        action="store_true",
        help="the size comparison, analyst queries and no-op run; not the memory, incremental and 60-day runs",
    )
    parser.add_argument("--days", type=int, default=60, help="simulated daily runs for the metadata sizes")
    parser.add_argument(
        "--reuse-sizes", type=Path, help="take the size comparison and analyst queries from an earlier bench/results.json; measure the rest"
    )
    args = parser.parse_args(argv)
    sizes = [2000] if args.smoke else [int(s) for s in args.sizes.split(",")]
    others = [(int(size), shape) for shape, size in (item.split(":") for item in args.shapes.split(",") if item)]
    # The largest reference zone last: its lake is the one the layout and the analyst queries look at.
    zones = ([] if args.smoke else others) + [(size, "") for size in sizes]
    repeats = 1 if args.smoke else args.repeats
    WORK.mkdir(exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="bench-", dir=WORK))
    earlier: dict = {}
    if args.reuse_sizes:
        earlier = json.loads(args.reuse_sizes.read_text())
        rows, layout, queries = earlier["sizes"], earlier["layout_last_size"], earlier["queries"]
        sizes = [row["zone"] for row in rows if row.get("shape", "reference") == "reference"]
        run_product(zone(sizes[-1]), scratch / "lake")
    else:
        print(f"main comparison: zones {zones}, {repeats} repeats", flush=True)
        rows = compare_sizes(zones, repeats, scratch)
        (scratch / "product").rename(scratch / "lake")  # the largest reference zone's, left by the comparison
        layout = files_per_partition(scratch / "lake")
        queries = analyst_queries(zone(sizes[-1]), scratch / "lake", repeats)
        kept = sizes_path(args.smoke)
        kept.write_text(json.dumps({"sizes": rows, "layout_last_size": layout, "queries": queries, "measured_at": now()}, indent=1))
        print(f"size comparison kept in {kept}", flush=True)
    print("no-op run against a bare spark-submit", flush=True)
    noop = noop_vs_bare_submit(zone(sizes[-1]), scratch / "lake", repeats)
    shutil.rmtree(scratch / "lake")
    # The smoke run proves the harness on the parts above; these take minutes whatever the size.
    incremental = daily = live = None
    if not (args.smoke or args.sizes_only):
        print("driver live heap, smallest backlog against largest", flush=True)
        live = driver_memory(sizes[0], sizes[-1], repeats, scratch)
        print("incremental run against a fresh one", flush=True)
        incremental = incremental_vs_fresh(scratch, 20_000, repeats)
        print(f"{args.days} simulated daily runs", flush=True)
        daily = daily_sizes(scratch, args.days, 12)
    reference = [row for row in rows if row.get("shape", "reference") == "reference"]
    memory = {
        "live_heap": live,
        "heap_ratio": reference[-1]["product"]["heap_mb"] / reference[0]["product"]["heap_mb"],
        "rss_ratio": reference[-1]["product"]["peak_mb"] / reference[0]["product"]["peak_mb"],
    }
    results = {"sizes": rows, "noop": noop, "queries": queries, "peak_memory": memory, "layout_last_size": layout,
               "incremental": incremental, "daily": daily, "sizes_from": earlier.get("sizes_from") or earlier.get("measured_at", str(args.reuse_sizes)) if args.reuse_sizes else None,
               "measured_at": now(),
               "machine": f"{os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB"}  # fmt: skip
    results_path(args.smoke).write_text(json.dumps(results, indent=1))
    if not args.smoke:
        (ROOT / "bench" / "throughput.svg").write_text(bar_chart_svg(rows))
        args.out.write_text(with_section(args.out.read_text(), render(results, repeats)))
    print(render(results, repeats))
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


def fmt_sizes(sizes: dict[str, float]) -> str:
    return ", ".join(f"{name} {kb:.0f}" for name, kb in sizes.items())


# Where a full run's section lies in BENCHMARKS.md: the run writes between these, people write the rest.
SECTION = ("<!-- make bench writes from here -->", "<!-- make bench writes up to here -->")


def with_section(document: str, section: str) -> str:
    """BENCHMARKS.md with its `make bench` section replaced by `section` (the rest as people wrote it)."""
    start, end = document.index(SECTION[0]), document.index(SECTION[1])
    return f"{document[:start]}{SECTION[0]}\n{section}\n{document[end:]}"


def render(results: dict, repeats: int) -> str:
    lines = [
        f"## The complete `make bench` ({results['measured_at']})",
        "",
        f"Measured by `make bench` on this machine ({results['machine']}), every figure a median of {repeats} runs,",
        "product and baselines run one after another in the same sitting. Ratios are records/s of the product",
        "over records/s of the baseline (above 1: the product is faster), computed pair by pair.",
        *(
            [
                f"The size comparison and the analyst queries come from an earlier sitting ({results['sizes_from']}, `--reuse-sizes`);",
                f"everything else was measured on {results['measured_at']}.",
            ]
            if results.get("sizes_from")
            else []
        ),  # fmt: skip
        "",
        "![records per second](bench/throughput.svg)",
        "",
        "Whole process, seconds (the command from start to exit), and each peer's time over the product's (above 1: the",
        "product is faster). The product's work phase (its batches), its exit (from its report, written once the run",
        "succeeded, to the process's end: stopping the session) and memory beside.",
        "",
        "| records | zone | product s | product exit s | A Spark batch s | B recipe s | C batch + dropDuplicates s | DuckDB s | vs A | vs B | vs C | vs DuckDB "
        "| product work s | work vs A's | product heap MB | product RSS MB |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results["sizes"]:
        lines.append(
            f"| {r['records']:,} | {r.get('shape', 'reference')} | {r['product']['wall_s']:.1f} | {r['product'].get('exit_s', float('nan')):.2f} | "
            + " | ".join(f"{r[system]['wall_s']:.1f}" for system in BASELINES)
            + " | "
            + " | ".join(f"{r['wall_vs_' + system]:.2f}x" for system in BASELINES)
            + f" | {r['product']['work_s']:.1f} | {r['work_vs_spark_batch']:.2f}x | {r['product']['heap_mb']:.0f} | {r['product']['peak_mb']:.0f} |"
        )
    noop, incremental, daily = results["noop"], results["incremental"], results["daily"]
    lines += [
        "",
        f"- No-op run (nothing new), submitted with `spark-submit` as the DAG does: {noop['noop_s']:.1f} s against a bare `spark-submit` "
        f"of an empty application {noop['bare_submit_s']:.1f} s: **{noop['ratio']:.2f}x** "
        f"(run with `python -m`, where no JVM starts at all: {noop['noop_embedded_s']:.1f} s).",
        f"- Driver memory, largest backlog against smallest, in the runs above: largest heap after any GC {results['peak_memory']['heap_ratio']:.2f}x "
        "(garbage the collector had not yet reclaimed included), RSS of the process tree "
        f"{results['peak_memory']['rss_ratio']:.2f}x.",
    ]
    live = results["peak_memory"]["live_heap"]
    if live:
        lines.append(
            f"- Driver live heap (largest after a full collection every second, in runs of their own): {live['large']:,} records "
            f"{live['large_mb']:.0f} MB against {live['small']:,} records {live['small_mb']:.0f} MB: **{live['ratio']:.2f}x**."
        )
    if incremental:
        lines.append(
            f"- 1 new file after {incremental['history_files']:,} processed files: {incremental['incremental_s']:.1f} s, "
            f"against 1 file with no history {incremental['fresh_s']:.1f} s: **{incremental['ratio']:.2f}x** "
            f"(the {incremental['history_files']:,}-file history itself took {incremental['history_run_s']:.0f} s)."
        )
    if daily:
        lines.append(
            f"- Checkpoint and log sizes after {daily['days']} simulated daily runs against after {daily['settled_day']}: "
            f"**{daily['ratio']:.2f}x** in total, state + events metadata file **{daily['state_and_log_ratio']:.2f}x** "
            f"(KB after {daily['settled_day']}: {fmt_sizes(daily['after_settled'])}; after {daily['days']}: {fmt_sizes(daily['after_last'])}); "
            f"state + events metadata file KB day by day: {daily['state_and_log_kb_per_day']}."
        )
    lines += [
        f"- Output layout at the largest size: {results['layout_last_size']['files']} files in {results['layout_last_size']['partitions']} "
        f"partitions, median {results['layout_last_size']['median_file_mb']:.1f} MB.",
        "",
        "| analyst query (DuckDB) | on the table s | on raw JSON s | speed-up |",
        "| --- | ---: | ---: | ---: |",
    ]
    lines += [f"| {q['query']} | {q['table_s']:.3f} | {q['raw_s']:.2f} | {q['speedup']:.0f}x |" for q in results["queries"]]
    lines += ["", "### Targets, as that run measured them", "", "| target | measured | met |", "| --- | ---: | --- |"]
    lines += [f"| {name} | {value:.2f}x | {'yes' if met else 'no'} |" for name, value, met in targets(results)]
    return "\n".join(lines) + "\n"


def targets(results: dict) -> list[tuple[str, float, bool]]:
    """The benchmark issue's targets against this run (at the sizes nearest to the ones named)."""

    reference = [row for row in results["sizes"] if row.get("shape", "reference") == "reference"]
    others = [row for row in results["sizes"] if row.get("shape", "reference") != "reference"]

    def nearest(records: int) -> dict:
        return min(reference, key=lambda row: abs(row["records"] - records))

    def unique(rows: list[dict]) -> list[dict]:
        return [row for index, row in enumerate(rows) if row not in rows[:index]]

    at_200k, at_1m, at_2m = nearest(200_000), nearest(1_000_000), nearest(2_000_000)
    speedup = statistics.median(q["speedup"] for q in results["queries"])
    found = [
        *((f"whole process >= 1.25x B, the recipe ({row['records']:,} records, {row.get('shape', 'reference')})", row["wall_vs_recipe"],
           row["wall_vs_recipe"] >= 1.25) for row in unique([at_200k, at_1m, at_2m, *others])),
        (f"whole process >= 1.0x C, batch + dropDuplicates ({at_1m['records']:,} records)", at_1m["wall_vs_dedup"], at_1m["wall_vs_dedup"] >= 1.0),
        # Issue #67: ahead of the engines that do not de-duplicate.
        *((f"whole process >= 1.0x {LABELS[peer]} ({row['records']:,} records)", row[f"wall_vs_{peer}"], row[f"wall_vs_{peer}"] >= 1.0)
          for peer in ("spark_batch", "duckdb") for row in unique([at_1m, at_2m])),
        ("no-op run <= 1.2x bare spark-submit", results["noop"]["ratio"], results["noop"]["ratio"] <= 1.2),
        ("analyst queries >= 20x faster on the table (median)", speedup, speedup >= 20),
    ]  # fmt: skip
    if results["peak_memory"]["live_heap"]:
        ratio = results["peak_memory"]["live_heap"]["ratio"]
        found.append(("10x backlog peak memory (driver live heap) <= 1.3x the 1x one", ratio, ratio <= 1.3))
    if results["incremental"]:
        ratio = results["incremental"]["ratio"]
        found.append(("incremental 1-file run <= 1.3x a no-history 1-file run", ratio, ratio <= 1.3))
    if results["daily"]:
        daily = results["daily"]
        found.append((f"state + table log after {daily['days']} days <= 1.1x after {daily['settled_day']}", daily["state_and_log_ratio"],
                      daily["state_and_log_ratio"] <= 1.1))  # fmt: skip
    return found


if __name__ == "__main__":
    raise SystemExit(main())
