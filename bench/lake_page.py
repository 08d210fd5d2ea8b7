"""How fast the Airflow UI's lake page answers on a year of daily runs (`make bench-ui`).

    python -m bench.lake_page [--days 365] [--repeats 5]
    python -m bench.lake_page --smoke          (a week: proves the harness)
    python -m bench.lake_page --accounts 1000 --bucket-days 30   (the S3 landing's case; these are the defaults)

The lake, built without Spark but for one commit of the events table: one account in 17 regions, one ingest run and one gate a day
(`--days` run reports and gate reports, each with its batches, places and event dates), an
events partition a day (the newest 3 at a real day's size, 244,800 rows, the rest 1,000
rows: the page counts rows from Parquet footers, and reads rows only of the dates a ledger
search names), a quarantine, the ledger's manifests for the source retention (7 days of a
file per region every 5 minutes: 34,272 entries) and a landing zone with a day folder per
region and day (the newest 7 days full). The page's app is called in-process through
Starlette's test client, signed in (the auth dependency stubbed), `--repeats` times each; the
baseline is what any page built on the reports must do at least: read every report's JSON.
Then (not in a smoke run) the page as a user gets it: `airflow api-server` with the plugin,
headless Chromium signed in, from navigating to Browse -> CloudTrail lake until the framed page
has rendered; a screenshot goes to bench-work/lake-page.png.
Results: bench/lake_page.json (a smoke run's: bench-work/).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb

from jobs.derived.state import record_built
from jobs.lake import EVENT_DATE, OCSF, OCSF_API_ACTIVITY, Lake, partition
from jobs.landing.layout import delivery_path
from jobs.ledger.store import Entry
from jobs.reporting import tally
from jobs.reporting.report import BatchStats, RunReport, write_json
from jobs.spark.logs import local_path
from jobs.storage import write_whole
from jobs.tables.events import events_location

ROOT = Path(__file__).resolve().parents[1]
REGIONS = [f"{area}-{n}" for area in ("us-east", "us-west", "eu-west", "eu-central", "ap-south", "ap-northeast") for n in (1, 2, 3)][:17]
ACCOUNT = "111122223333"
FILES_PER_DAY = 288
FULL_DAY_ROWS = 244_800
RETENTION_DAYS = 7
PAGE_TARGET_MS = 2000  # an S3 landing's page at 1,000 accounts x 17 regions x 30 days (issue #59)


def results_path(smoke: bool) -> Path:
    return ROOT / ("bench-work/lake_page.json" if smoke else "bench/lake_page.json")


def events_folder(lake: Lake, day: date) -> Path:
    """Where a date's files go in the events table's data folder (`committed` makes them the table's)."""
    return Path(local_path(events_location(lake))) / "data" / f"{EVENT_DATE}={day}"


def committed(lake: Lake) -> None:
    """Every file written under the events table's data folder committed to it in one snapshot of its branch
    `ingest`, as the lake's writers commit (Spark: one JVM for the whole year)."""
    from jobs.spark.session import spark_session
    from jobs.tables.events_table import EventsTable

    events = EventsTable(spark_session("bench_lake_page"), lake)
    data = Path(local_path(events.data_folder))
    files = sorted(str(path) for path in data.glob(f"{EVENT_DATE}=*/*.parquet"))
    events.replace_dates(sorted({Path(path).parent.name.split("=", 1)[1] for path in files}), files, {"bench": "a year of dates"})


def build(root: Path, days: int, full_days: int) -> tuple[Lake, Path, date]:
    lake, landing = Lake.at(root / "lake"), root / "landing"
    last = date(2025, 12, 31)
    db = duckdb.connect()
    for back in reversed(range(days)):  # oldest first, as the runs wrote them
        day = last - timedelta(days=back)
        run_id = f"scheduled__{day}T00:00:00+00:00"
        report = RunReport(run_id, str(landing), str(lake.root), "availableNow", f"{day}T00:05:00+00:00", None, "2 days")
        report.status, report.finished_at = "succeeded", f"{day}T00:09:00+00:00"
        for batch_id in range(8):
            report.batches.append(
                BatchStats(
                    back * 8 + batch_id,
                    {str(day - timedelta(days=1)): 30_000, str(day): 600},
                    {"not_json": 1},
                    duration_ms=30_000,
                    files_read=612,
                    bytes_read=32 << 20,
                    records_read=30_700,
                    late_per_event_date={str(day - timedelta(days=3)): 5},
                    newest_event_times={f"{ACCOUNT}/{region}": f"{day}T00:0{batch_id}:00Z" for region in REGIONS},
                )  # fmt: skip
            )
        report.write()
        gate = {"run_id": run_id, "validated_at": f"{day}T00:10:00+00:00", "event_dates": [str(day - timedelta(days=1)), str(day)],
                "verdict": "failed" if back % 50 == 0 else "passed", "failed_critical": [], "warnings": []}  # fmt: skip
        lake.gate_report(run_id).parent.mkdir(parents=True, exist_ok=True)
        lake.gate_report(run_id).write_text(json.dumps(gate))
        folder = events_folder(lake, day)
        folder.mkdir(parents=True)
        rows = FULL_DAY_ROWS if back < full_days else 1_000
        db.execute(
            f"""copy (select timestamp '{day}' + to_seconds(i % 86400) as eventTime,
                             'file:{landing}/AWSLogs/{ACCOUNT}/CloudTrail/' || 'us-east-1' || '/f' || (i // 1000) || '.json.gz' as _source_file,
                             '{run_id}' as _ingest_run_id
                      from range({rows}) t(i)) to '{folder}/part-0.parquet' (format parquet)"""
        )
    quarantine = partition(lake.quarantine, "not_json")
    quarantine.mkdir(parents=True)
    db.execute(
        f"""copy (select 'file:{landing}/x' || i || '.json.gz' as source_file, i::int as record_index, repeat('x', 3000) as record,
                         'not JSON' as detail, 'run' as _ingest_run_id, timestamp '{last}' - to_days(i % {days}) as _ingest_time
                  from range(1000) t(i)) to '{quarantine}/part-0.parquet' (format parquet)"""
    )
    lake.manifests.mkdir(parents=True)
    for back in range(min(days, RETENTION_DAYS)):
        day = last - timedelta(days=back)
        for hour in range(24):
            entries = []
            for region in REGIONS:
                for slot in range(FILES_PER_DAY // 24):
                    delivered = datetime(day.year, day.month, day.day, hour, slot * 5, tzinfo=UTC)
                    path = delivery_path(landing, ACCOUNT, region, delivered, f"{hour:02d}{slot:02d}")
                    if back < RETENTION_DAYS:
                        path.parent.mkdir(parents=True, exist_ok=True)
                        path.write_bytes(b"")
                    entries.append(Entry(str(path), 0, int(delivered.timestamp() * 1000), int(delivered.timestamp() * 1000)))
            stamp = int(datetime(day.year, day.month, day.day, hour, 59, tzinfo=UTC).timestamp() * 1e9)
            (lake.manifests / f"{stamp}-00000.jsonl").write_text("".join(entry.line() + "\n" for entry in entries))
    for back in range(RETENTION_DAYS, days):  # older day folders: one file each (the listing walks the folders)
        day = last - timedelta(days=back)
        for region in REGIONS:
            path = delivery_path(landing, ACCOUNT, region, datetime(day.year, day.month, day.day, tzinfo=UTC), "old")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"")
    committed(lake)
    return lake, landing, last


def build_bucket(root: Path, accounts: int, days: int) -> tuple[Lake, date]:
    """An S3 landing's lake at `accounts` x 17 regions x `days`: an ingest run an hour, each taking a file from every
    place (its report naming every place, per batch and in total, as a run's report does), the OCSF job's state (a
    partition per region, account and day: the OCSF table itself is in the catalog), an events partition a day, the
    landing cache with a file per place and day (hard links of one file), the ledger's manifests of the source retention, the tally."""
    lake = Lake.at(root / "lake")
    places = [(f"{100000000000 + n:012d}", region) for n in range(accounts) for region in REGIONS]
    last = date(2025, 12, 31)
    db = duckdb.connect()
    folder = root / "one"
    folder.mkdir()
    db.execute(f"copy (select 'x' as class_name, range as time from range(10)) to '{folder}/part-0.parquet' (format parquet)")
    tallied: dict[str, Any] = {"places": {}, "late_per_event_date": {}}
    for back in reversed(range(days)):
        day = last - timedelta(days=back)
        folder_day = events_folder(lake, day)
        folder_day.mkdir(parents=True)
        db.execute(f"copy (select timestamp '{day}' + to_seconds(i % 86400) as eventTime from range(1000) t(i)) "
                   f"to '{folder_day}/part-0.parquet' (format parquet)")  # fmt: skip
        for account, region in places:
            source = folder / f"{account}.parquet"  # a file per account: a file takes at most 65,000 links (ext4)
            if not source.exists():
                shutil.copyfile(folder / "part-0.parquet", source)
            cached = delivery_path(lake.landing_cache, account, region, datetime(day.year, day.month, day.day, 23, 55, tzinfo=UTC), "x")
            cached.parent.mkdir(parents=True, exist_ok=True)
            os.link(source, cached)
        record_built(lake, OCSF, {str(day): "built"}, {OCSF_API_ACTIVITY: {str(day): 10 * len(places)}},
                     {OCSF_API_ACTIVITY: {str(day): len(places)}})  # fmt: skip
        for hour in range(24):
            at = datetime(day.year, day.month, day.day, hour, tzinfo=UTC)
            stamp = f"{at:%Y%m%dT%H}00Z"
            newest = {f"{a}/{r}": f"{at:%Y-%m-%dT%H}:04:00Z" for a, r in places}
            files = {f"{a}/{r}": f"{lake.landing_cache}/AWSLogs/{a}/CloudTrail/{r}/{at:%Y/%m/%d}/{a}_CloudTrail_{r}_{stamp}_h.json.gz"
                     for a, r in places}  # fmt: skip
            run_id = f"asset_triggered__{at.isoformat()}"
            report = RunReport(run_id, "s3://trail/", str(lake.root), "availableNow", f"{at:%Y-%m-%dT%H}:05:00+00:00", None, "2 days")
            report.status, report.finished_at = "succeeded", f"{at:%Y-%m-%dT%H}:07:00+00:00"
            report.batches.append(BatchStats(back * 24 + hour, {str(day): 17_000 * 30}, {}, duration_ms=90_000, files_read=len(places),
                                             records_read=17_000 * 30, newest_event_times=newest))  # fmt: skip
            report.deliveries = {"mode": "notifications", "messages": {"messages": len(places), "deleted": len(places)},
                                 "oldest_message_age_seconds": 61.0, "newest_per_place": files,
                                 "delivery_lag": {"files": len(places), "p50_seconds": 80.0, "p95_seconds": 110.0}}  # fmt: skip
            body = report.to_json()
            write_whole(lake.ingest_report(run_id), json.dumps(body))
            tally.fold(tallied, body)
    write_json(lake.tally, tallied)
    lake.manifests.mkdir(parents=True)
    for back in range(min(days, RETENTION_DAYS)):
        day = last - timedelta(days=back)
        delivered = datetime(day.year, day.month, day.day, 23, 55, tzinfo=UTC)
        taken_ms = int(delivered.timestamp() * 1000)
        entries = [Entry(str(delivery_path(lake.landing_cache, a, r, delivered, "x")), 0, taken_ms, taken_ms) for a, r in places]
        (lake.manifests / f"{taken_ms * 1_000_000}-00000.jsonl").write_text("".join(entry.line() + "\n" for entry in entries))
    committed(lake)
    return lake, last


def bucket_page(root: Path, accounts: int, days: int, repeats: int) -> dict[str, Any]:
    """The page of an S3 landing's lake at `accounts` x 17 regions x `days`, in-process: first load, then usual."""
    started = time.monotonic()
    lake, _ = build_bucket(root, accounts, days)
    built = round(time.monotonic() - started, 1)
    os.environ.update({"CLOUDTRAIL_LAKE": str(lake.root), "CLOUDTRAIL_LANDING": "s3://trail/", "CLOUDTRAIL_QUEUE_URL": ""})
    get = _client()
    started = time.perf_counter()
    get("/")
    first = round((time.perf_counter() - started) * 1000, 1)
    median, runs = timed(lambda: get("/"), repeats)
    return {"accounts": accounts, "regions": len(REGIONS), "days": days, "build_s": built, "first_ms": first,
            "median_ms": round(median, 1), "runs_ms": runs, "target_ms": PAGE_TARGET_MS, "met": median <= PAGE_TARGET_MS}  # fmt: skip


def _client() -> Any:
    """The page's app, in-process, signed in (the auth dependency stubbed): a GET that must answer 200."""
    from fastapi.testclient import TestClient

    from cloudtrail_airflow import lake_view

    lake_view.app.dependency_overrides = {d.dependency: lambda: None for d in lake_view.app.router.dependencies if d.dependency is not None}
    client = TestClient(lake_view.app)

    def get(path: str) -> None:
        response = client.get(path)
        assert response.status_code == 200, (path, response.status_code, response.text[:500])

    return get


def browser_loads(lake: Lake, landing: Path, scratch: Path, repeats: int) -> dict[str, Any]:
    """Load times of the lake page in the Airflow UI: an API server of its own, headless Chromium."""
    from playwright.sync_api import sync_playwright

    from tools.airflow_api import api_server, sign_in

    env = {
        "AIRFLOW_HOME": str(scratch / "airflow-ui"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins")]),
        "CLOUDTRAIL_LAKE": str(lake.root),
        "CLOUDTRAIL_LANDING": str(landing),
    }
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env={**os.environ, **env}, check=True, capture_output=True)
    loads = []
    with api_server(env, scratch / "api-server.log") as server, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 2400})
        sign_in(page, server.url, server.password)
        served = []  # what the server took to render the framed page (the page says, at its foot)
        for _ in range(repeats + 1):
            started = time.perf_counter()
            page.goto(f"{server.url}/plugin/cloudtrail_lake")
            took = page.frame_locator("iframe").first.locator("#took")
            took.wait_for()
            loads.append(round((time.perf_counter() - started) * 1000, 1))
            served.append(float(took.inner_text().split()[2]))
        screenshot = ROOT / "bench-work" / "lake-page.png"
        screenshot.parent.mkdir(exist_ok=True)
        page.screenshot(path=str(screenshot), full_page=True)
        browser.close()
    return {
        "first_ms": loads[0],
        "median_ms": statistics.median(loads[1:]),
        "runs_ms": loads[1:],
        "rendered_first_ms": served[0],
        "rendered_median_ms": statistics.median(served[1:]),
    }


def timed(call: Any, repeats: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), [round(t, 1) for t in times]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--accounts", type=int, default=1000, help="an S3 landing's lake: accounts, each in 17 regions")
    parser.add_argument("--bucket-days", type=int, default=30)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    days, repeats, full_days = (7, 2, 1) if args.smoke else (args.days, args.repeats, 3)
    accounts, bucket_days = (2, 2) if args.smoke else (args.accounts, args.bucket_days)
    with tempfile.TemporaryDirectory(prefix="lake-page-") as scratch:
        os.environ.setdefault("AIRFLOW_HOME", str(Path(scratch) / "airflow"))
        started = time.monotonic()
        lake, landing, last = build(Path(scratch), days, full_days)
        built = time.monotonic() - started
        os.environ.update({"CLOUDTRAIL_LAKE": str(lake.root), "CLOUDTRAIL_LANDING": str(landing)})

        get = _client()

        def read_reports() -> None:
            for folder in (lake.ingest_reports, lake.gate_reports):
                for path in folder.glob("*.json"):
                    json.loads(path.read_text())

        from jobs.ledger import search as ledger_search

        measured: dict[str, Any] = {}
        # The first call in a fresh API server imports DuckDB and reads every manifest (then kept: they never change).
        started = time.perf_counter()
        get("/")
        measured["lake page, first load in the server process"] = {"median_ms": round((time.perf_counter() - started) * 1000, 1)}

        def unread_manifests() -> None:
            ledger_search._manifest.cache_clear()
            get("/")

        cases = {
            "lake page, manifests not yet read (file system cache warm)": unread_manifests,
            "baseline: read every report's JSON": read_reports,
            "lake page (the usual load)": lambda: get("/"),
            "lake page + ledger search by file id": lambda: get(f"/?file={REGIONS[0]}_{last:%Y%m%d}T1200Z_1200"),
            "lake page + ledger search by delivery date": lambda: get(f"/?file={last}"),
            "a run's view": lambda: get(f"/runs/cloudtrail_ingest/scheduled__{last}T00:00:00+00:00"),
            "status.json": lambda: get("/status.json"),
        }
        for name, call in cases.items():
            median, runs = timed(call, repeats)
            measured[name] = {"median_ms": round(median, 1), "runs_ms": runs}
        baseline = measured["baseline: read every report's JSON"]["median_ms"]
        result = {"days": days, "repeats": repeats, "build_s": round(built, 1), "cases": measured, "baseline_ms": baseline}
        if not args.smoke:
            result["browser"] = browser_loads(lake, landing, Path(scratch), repeats)
    with tempfile.TemporaryDirectory(prefix="lake-page-s3-") as scratch:
        result["s3_landing"] = bucket = bucket_page(Path(scratch), accounts, bucket_days, repeats)
    path = results_path(args.smoke)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"lake page on {days} daily runs (median of {repeats}, in-process, signed in):")
    for name, figures in measured.items():
        print(f"  {name:<62}{figures['median_ms']:>9.1f} ms  {figures['median_ms'] / baseline:>6.1f}x the baseline")
    if "browser" in result:
        shown = result["browser"]
        print(f"in the Airflow UI (Chromium, navigation until the framed page has rendered): first {shown['first_ms']:.0f} ms, "
              f"then {shown['median_ms']:.0f} ms; of which the server rendering the page: {shown['rendered_first_ms']:.0f} ms, "
              f"then {shown['rendered_median_ms']:.0f} ms")  # fmt: skip
    print(f"an S3 landing's lake page at {bucket['accounts']:,} accounts x {bucket['regions']} regions x {bucket['days']} days "
          f"(hourly runs; built in {bucket['build_s']} s): first {bucket['first_ms']:.0f} ms, then {bucket['median_ms']:.0f} ms; "
          f"target {PAGE_TARGET_MS} ms: {'met' if bucket['met'] else 'MISSED'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
