"""What one day of CloudTrail costs to ingest, three ways, in CPU-seconds per day of data.

    python -m bench.cost [--records-per-file 50] [--stream-slices 48]      (make bench-cost)
    python -m bench.cost --smoke                                            (a few files: proves the harness)

The day: one account, 17 regions, a file per region every 5 minutes (288 a region, 4,896 in
all), real-shaped records (tools/generate_landing.like). Each way is measured as the CPU time
(user + system) of every process it runs, JVMs included:
- hourly: 24 runs of the job as the DAG runs it hourly (a process each, availableNow), each
  after that hour's 204 files have landed;
- stream: one always-on driver with a 5-minute trigger. The job plans its files before its
  query starts (jobs/ledger/planner.py), so it has no processingTime trigger; this measures what each
  trigger would do, the job's `run()` in one warm session after each 5-minute slice of files
  lands, for the first `--stream-slices` slices, then the idle JVM's CPU for a minute, and
  scales both to a day: an upper bound (each run() also starts its query, plans and sweeps),
  and a lower bound that counts only the micro-batches' share of the time;
- daily: one run of the job over the whole day, and baseline A (bench/baseline_spark.py, a
  plain Spark batch job) over the same files.
Files are written before any measurement and moved into the landing zone as they "land".
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from jobs.landing.layout import delivery_path
from tools.generate_landing import like, real_records, write_delivery

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = Path(os.environ.get("CLOUDTRAIL_SAMPLES", ROOT.parent / "shared" / "cloudtrail-samples"))
ACCOUNT = "111122223333"
REGIONS = [
    "us-east-1", "us-east-2", "us-west-1", "us-west-2", "ca-central-1", "eu-west-1", "eu-west-2", "eu-west-3", "eu-central-1",
    "eu-north-1", "ap-south-1", "ap-northeast-1", "ap-northeast-2", "ap-northeast-3", "ap-southeast-1", "ap-southeast-2", "sa-east-1",
]  # fmt: skip
DAY = datetime(2024, 3, 1, tzinfo=UTC)
SLICE = timedelta(minutes=5)
SLICES = 288
JOB = ["--run-id", "cost", "--settle", "0 seconds"]


def results_path(smoke: bool) -> Path:
    return ROOT / "bench-work" / "cost-smoke.json" if smoke else ROOT / "bench" / "cost.json"


def write_day(staging: Path, records_per_file: int, hours: int) -> list[list[Path]]:
    """The day's first `hours` of files under `staging`, as five-minute slices of one file per region."""
    rng = random.Random(17)
    make = like(real_records(SAMPLES))
    slices = []
    for index in range(hours * 12):
        delivered = DAY + SLICE * (index + 1)
        paths = []
        for region in REGIONS:
            records = [make(rng, delivered - timedelta(minutes=rng.uniform(1, 5)), ACCOUNT, region) for _ in range(records_per_file)]
            path = delivery_path(staging, ACCOUNT, region, delivered, f"{rng.getrandbits(64):016x}")
            write_delivery(path, records, delivered)
            paths.append(path)
        slices.append(paths)
    return slices


def land(paths: list[Path], staging: Path, landing: Path) -> None:
    """Move staged files to where CloudTrail delivers them (modification times kept)."""
    for path in paths:
        target = landing / path.relative_to(staging)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.link(path, target)


def cpu_seconds(command: list[str]) -> float:
    """User + system CPU of `command` and every process it starts, the JVM included (it outlives
    its Python driver: this process is the subreaper that waits for it)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    while True:
        try:
            os.wait()
        except ChildProcessError:
            break
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def ingest(landing: Path, lake: Path) -> list[str]:
    return [sys.executable, "-m", "jobs.cloudtrail_ingest", "--landing", str(landing), "--lake", str(lake), *JOB]


def hourly(slices: list[list[Path]], staging: Path, scratch: Path) -> float:
    landing, lake = scratch / "hourly-landing", scratch / "hourly-lake"
    total = 0.0
    for hour in range(len(slices) // 12):
        land([path for paths in slices[hour * 12 : hour * 12 + 12] for path in paths], staging, landing)
        total += cpu_seconds(ingest(landing, lake))
    return total


def daily(slices: list[list[Path]], staging: Path, scratch: Path) -> tuple[float, float]:
    landing = scratch / "daily-landing"
    land([path for paths in slices for path in paths], staging, landing)
    product = cpu_seconds(ingest(landing, scratch / "daily-lake"))
    baseline = cpu_seconds([sys.executable, str(ROOT / "bench" / "baseline_spark.py"), str(landing), str(scratch / "daily-a")])
    return product, baseline


def stream(staging: Path, scratch: Path, measured: int, idle_s: float) -> dict:
    """The always-on driver, in a process of its own (`stream-worker`), scaled to a day: its start,
    its CPU per 5-minute slice (after the first, which warms the JVM), and its idle CPU per second."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.cost", "stream-worker", str(staging), str(scratch), str(measured), str(idle_s)],
        check=True, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    marks = json.loads(out.stdout.strip().splitlines()[-1])
    per_slice = (marks["slices_cpu_s"] - marks["first_cpu_s"]) / (measured - 1)
    per_slice_wall = (marks["slices_wall_s"] - marks["first_wall_s"]) / (measured - 1)
    idle_per_s = (marks["idle_cpu_s"] - marks["slices_cpu_s"]) / idle_s
    day = marks["first_cpu_s"] + per_slice * (SLICES - 1) + idle_per_s * max(0.0, 86400 - per_slice_wall * SLICES)
    # A trigger of a stream that runs on does not start a query, plan files or sweep the tables, as each
    # run() does: with only its micro-batches' share of the slice's wall time, the day's lower bound.
    batch_share = marks["batches_s"] / (marks["slices_wall_s"] - marks["first_wall_s"])
    day_batches_only = marks["first_cpu_s"] + per_slice * batch_share * (SLICES - 1) + idle_per_s * 86400
    return {"slices_measured": measured, "start_and_first_slice_cpu_s": marks["first_cpu_s"], "per_slice_cpu_s": per_slice,
            "per_slice_wall_s": per_slice_wall, "micro_batch_share_of_wall": batch_share, "idle_cpu_per_s": idle_per_s,
            "day_cpu_s": day, "day_cpu_s_micro_batches_only": day_batches_only}  # fmt: skip


def stream_worker(staging: Path, scratch: Path, measured: int, idle_s: float) -> None:
    """Print this process's CPU (its JVM's included) after the first slice, after `measured` slices, and after idling `idle_s`."""
    import psutil

    from jobs.ingest.command import parse_args
    from jobs.ingest.run import run
    from jobs.ingest.stream import build_session
    from jobs.landing.layout import aws_logs
    from jobs.spark.session import JobSession

    def cpu() -> float:
        # Each live process's own time, and that of its children that ended (Python workers come and go).
        tree = [psutil.Process(), *psutil.Process().children(recursive=True)]
        return sum(sum(process.cpu_times()[:4]) for process in tree)

    began = time.monotonic()
    # In delivery order: a slice is one file per region.
    files = sorted(staging.rglob("*.json.gz"), key=lambda path: (path.stat().st_mtime, path.name))
    landing, lake = scratch / "stream-landing", scratch / "stream-lake"
    aws_logs(landing).mkdir(parents=True)  # the zone's root, before CloudTrail's first delivery
    config = parse_args(["--landing", str(landing), "--lake", str(lake), *JOB])
    marks: dict[str, float] = {}
    with JobSession(lambda: build_session(config)) as session:
        for index in range(measured):
            land(files[index * len(REGIONS) : (index + 1) * len(REGIONS)], staging, landing)
            report = run(config, session)
            if index == 0:
                marks.update(first_cpu_s=cpu(), first_wall_s=time.monotonic() - began, batches_s=0.0)
            else:
                marks["batches_s"] += sum((batch.duration_ms or 0) for batch in report.batches) / 1000
        marks.update(slices_cpu_s=cpu(), slices_wall_s=time.monotonic() - began)
        time.sleep(idle_s)
        marks["idle_cpu_s"] = cpu()
    print(json.dumps(marks))


def measure_day(records_per_file: int, hours: int, stream_slices: int, idle_s: float) -> dict:
    """CPU-seconds for `hours` of one day's files, each way (see the module's docstring)."""
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphaned JVMs are ours to wait for
    (ROOT / "bench-work").mkdir(exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="cost-", dir=ROOT / "bench-work"))
    try:
        staging = scratch / "staging"
        slices = write_day(staging, records_per_file, hours)
        files = sum(map(len, slices))
        print(f"{hours} h of data: {files:,} files, {files * records_per_file:,} records", flush=True)
        results: dict = {"hours": hours, "records_per_file": records_per_file, "files": files}
        results["hourly_cpu_s"] = hourly(slices, staging, scratch)
        print(f"  hourly availableNow runs: {results['hourly_cpu_s']:.0f} CPU-s", flush=True)
        results["daily_cpu_s"], results["baseline_a_cpu_s"] = daily(slices, staging, scratch)
        print(f"  one run: {results['daily_cpu_s']:.0f} CPU-s; baseline A: {results['baseline_a_cpu_s']:.0f} CPU-s", flush=True)
        results["stream"] = stream(staging, scratch, stream_slices, idle_s)
        print(f"  always-on stream, scaled to a day: {results['stream']['day_cpu_s']:.0f} CPU-s ({results['stream']})", flush=True)
        return results
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["stream-worker"]:
        stream_worker(Path(args[1]), Path(args[2]), int(args[3]), float(args[4]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records-per-file", type=int, default=50)
    parser.add_argument("--stream-slices", type=int, default=48, help="5-minute slices the stream is measured on")
    parser.add_argument("--smoke", action="store_true", help="one hour of 2-record files, the stream on 2 slices: the harness only")
    options = parser.parse_args(args)
    if options.smoke:
        results = measure_day(records_per_file=2, hours=1, stream_slices=2, idle_s=1.0)
    else:
        results = measure_day(options.records_per_file, 24, options.stream_slices, 60.0)
    results_path(options.smoke).write_text(json.dumps(results, indent=1))
    return 0 if all(value > 0 for value in (results["hourly_cpu_s"], results["daily_cpu_s"], results["stream"]["day_cpu_s"])) else 1


if __name__ == "__main__":
    raise SystemExit(main())
