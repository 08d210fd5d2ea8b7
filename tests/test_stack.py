"""The production stack, run by `make test-stack` (not part of `make test`).

Every service of docker-compose.yml started natively from that file (tools/stack.py):
PostgreSQL, the Airflow API server, scheduler (LocalExecutor), DAG processor and triggerer,
a Spark master and two workers, and the stand-in for AWS (moto) that holds the landing, the lake
and its Glue catalog. Each process runs in a mount namespace that covers the others' folders, so
the workers share no disk with each other or with the Airflow services. The DAG is unpaused and
driven through the REST API with the admin's credentials, as the UI does: a scheduled run and a
backfill at the same time (every socket the services open meanwhile is on loopback, read from the
kernel), then a `mode=rebuild` backfill over 3 damaged partitions; the derived DAG follows on the
events Asset. Another test starts the stack with `make stack-up`, clicks a backfill through the
UI in headless Chromium (Debian's, driven by Playwright) and stops it with `make stack-down`. The
tables are read through the lake's catalog, as any reader does, and checked against the oracle."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from jobs.iceberg.catalog import open_catalog
from jobs.lake import OCSF_API_ACTIVITY, Lake
from jobs.quality import gate
from tests.aws import Trail, burst_lags, cloudtrail_sns, committed_ids, landing_trail, queryable_after, reaching, s3_stack
from tests.helpers import DAY, catalog_rows, events_of
from tools.airflow_api import DAG_ID, Api, sign_in
from tools.stack import ROOT, STATE, Listener, Stack, alive, write_env_file

pytestmark = pytest.mark.stack

DATES = ["2024-03-01", "2024-03-02", "2024-03-03"]
CATALOG = "glue"  # .env.example's: Glue, here the stand-in's


def published(lake: str) -> list[tuple[str, str]]:
    """(eventID, event_date) of the events table as its readers see it (the gated `main`), through the catalog."""
    return catalog_rows(lake, CATALOG, "main")


def table_sum(lake: str, table: str, column: str | None = None) -> int:
    """A derived table's rows (or the sum of `column`), read through the catalog; 0 before it exists."""
    catalog = open_catalog(Lake.at(lake, CATALOG), CATALOG)
    if not catalog.table_exists(f"cloudtrail.{table}"):
        return 0
    rows = catalog.load_table(f"cloudtrail.{table}").scan().to_arrow()
    return len(rows) if column is None else sum(rows.column(column).to_pylist())


def deliver_now(trail: Trail, records: list[dict[str, Any]], file_id: str) -> str:
    """One log file delivered now, as CloudTrail delivers (the key dated by the delivery)."""
    return trail.deliver(records, datetime.now(tz=UTC), file_id)


def nothing_of_the_lake_on_a_machine(stack: Stack) -> None:
    """No worker's folder holds a table's file, a landing file or the state; the driver's machine (the scheduler's)
    holds scratch only (the landing objects it fetched to plan them), never a table's file or the state: all of it is
    in the bucket."""

    def found(folder: Path, *patterns: str) -> list[Path]:
        return [path for pattern in patterns for path in folder.glob(pattern)]

    for worker in stack.home.glob("spark-worker-*"):
        assert not found(worker, "**/*.parquet", "**/*.json.gz", "**/*.sst"), worker
    assert not found(stack.home / "airflow-scheduler", "**/*.parquet", "**/*.sst")


@pytest.fixture
def env_file(tmp_path: Path) -> Path:
    written = tmp_path / "stack.env"
    write_env_file(written, {"CLOUDTRAIL_SCHEDULE": "@daily", "CLOUDTRAIL_SETTLE": "0 seconds"})  # files land just before
    return written


@pytest.fixture
def stack(tmp_path: Path, env_file: Path) -> Iterator[Stack]:
    running = Stack(home=tmp_path / "stack", env_file=env_file, fixed_ports=False)
    try:
        running.up()
        with reaching(running):
            yield running
    finally:
        running.down()


@contextmanager
def watching_sockets(stack: Stack, every: float = 1.0) -> Iterator[set[Listener]]:
    """Every socket the stack's processes listen on while the block runs (Spark drivers and executors come and go)."""
    seen: set[Listener] = set()
    done = threading.Event()

    def sample() -> None:
        while not done.wait(every):
            seen.update(stack.listening())

    sampler = threading.Thread(target=sample, daemon=True)
    seen.update(stack.listening())
    sampler.start()
    try:
        yield seen
    finally:
        done.set()
        sampler.join()
        seen.update(stack.listening())


def spark_applications(stack: Stack, timeout: float = 600) -> list[dict]:
    """The cluster's applications, once none is running (a derived DAG run on the events Asset may still be)."""
    deadline = time.monotonic() + timeout
    while True:
        with urllib.request.urlopen(f"{stack.url('spark-master', 8081)}/json/", timeout=10) as response:
            state = json.loads(response.read())
        if not state["activeapps"]:
            return list(state["completedapps"])
        assert time.monotonic() < deadline, f"still running after {timeout:.0f} s: {state['activeapps']}"
        time.sleep(5)


def test_the_api_refuses_a_request_without_credentials(stack: Stack):
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{stack.url('airflow-api', 8080)}/api/v2/dags", timeout=30)
    assert refused.value.code in (401, 403)


def test_a_scheduled_run_and_a_backfill_at_the_same_time_on_postgres_and_the_spark_cluster(stack: Stack):
    lake, trail = stack.env("airflow-scheduler")["CLOUDTRAIL_LAKE"], landing_trail(stack)
    for offset in range(len(DATES)):
        deliver_now(trail, events_of(30, DAY + timedelta(days=offset, hours=11), f"d{offset}"), f"d{offset}")
    deliver_now(trail, events_of(5, DAY - timedelta(days=5), "late"), "late")  # events of a date long past
    deliver_now(trail, events_of(10, DAY + timedelta(hours=11), "d0"), "again")  # re-delivered

    derived = Api(stack.url("airflow-api", 8080), stack.admin_password(), "cloudtrail_derived")
    derived.unpause()  # scheduled on the events Asset: it runs after each ingest run that publishes
    api = Api.of(stack)
    with watching_sockets(stack) as sockets:
        api.unpause()  # the scheduler creates the latest daily run at once (catchup is off)
        api.backfill(DATES[0], DATES[-1])
        runs = api.finished_runs(expected=4, timeout=1200)

    # What listens, read from the kernel while the runs ran: loopback only, and no task log server at all.
    assert {listener for listener in sockets if not listener.loopback} == set()
    ports = {listener.port for listener in sockets}
    assert {
        stack.ports["airflow-api:8080"],
        stack.ports["postgres:5432"],
        stack.ports["spark-master:7077"],
        stack.ports["aws-stand-in:5000"],
    } <= ports
    assert not ports & {8793, 8794}, "the scheduler and the triggerer start no log server (--skip-serve-logs)"
    assert any("java" in listener.commands for listener in sockets if listener.port not in stack.ports.values()), (
        "the sampler saw the Spark applications' own ports (drivers, executors) too"
    )

    assert sorted(r["run_type"] for r in runs) == ["backfill", "backfill", "backfill", "scheduled"]
    assert {r["dag_run_id"]: r["state"] for r in runs} == {r["dag_run_id"]: "success" for r in runs}
    for run in runs:
        ingest = api.task_instance(run["dag_run_id"], "ingest")
        assert ingest["try_number"] == 1, "writers queue for the pool, they never fail on the lake lock and retry"
    expected = sorted([(f"d{o}-{i}", d) for o, d in enumerate(DATES) for i in range(30)] + [(f"late-{i}", "2024-02-25") for i in range(5)])
    assert published(lake) == expected, "every event once, nothing duplicated by the backfill, gated for the readers"
    layout = Lake.at(lake, CATALOG)
    gates = {r["dag_run_id"]: json.loads(layout.gate_report(r["dag_run_id"]).read_text()) for r in runs}
    for run in runs:
        checked = gates[run["dag_run_id"]]
        assert checked["verdict"] in ("passed", "skipped"), checked
        if run["run_type"] == "backfill":
            # re-validated, or skipped because a gate passed exactly these files already
            assert run["logical_date"][:10] in checked["event_dates"]
    validated = gate.validated(layout)
    assert {validated[d]["run_id"] for d in DATES} <= {run_id for run_id, checked in gates.items() if checked["verdict"] == "passed"}

    # Only runs with something to do start Spark, and they run on the cluster.
    applications = spark_applications(stack)
    assert {app["state"] for app in applications} == {"FINISHED"}
    ingests = [json.loads(layout.ingest_report(r["dag_run_id"]).read_text()) for r in runs]
    assert sum(app["name"] == "cloudtrail_ingest" for app in applications) == sum(bool(report["batches"]) for report in ingests) >= 1
    wrote = next(run["dag_run_id"] for run, report in zip(runs, ingests, strict=True) if report["batches"])
    assert "batch 0:" in api.task_log(wrote, "ingest"), "the UI's log view reads the task's log from the shared volume"
    gated_apart = [r["dag_run_id"] for r, report in zip(runs, ingests, strict=True) if not gate.wrote_anything(report)]
    assert sum(app["name"] == "cloudtrail_validate_events" for app in applications) == sum(
        gates[run_id]["verdict"] == "passed" for run_id in gated_apart
    ), "a run that wrote something gated it in the ingest's application; a gate application only for the others"

    # The derived DAG ran on the Asset events, on the cluster, and its tables agree with the events table.
    deadline = time.monotonic() + 900
    while True:
        derived_runs = derived.finished_runs(expected=1, timeout=900)
        if table_sum(lake, "activity_hourly", "events") == len(expected) and table_sum(lake, "ocsf_api_activity") == len(expected):
            break
        assert time.monotonic() < deadline, f"the activity and OCSF tables never caught up: {derived_runs}"
        time.sleep(10)
    assert {r["state"] for r in derived_runs} == {"success"} and {r["run_type"] for r in derived_runs} == {"asset_triggered"}

    # Both workers ran executors, and no machine kept anything of the lake or the landing.
    assert all(list((stack.home / f"spark-worker-{n}").glob("spark-work/app-*/*/stderr")) for n in (1, 2))
    nothing_of_the_lake_on_a_machine(stack)

    # The compose API server serves the lake page from the lake in S3, behind the same sign-in.
    shown = api.call("GET", "/cloudtrail/status.json")
    assert {(row["account"], row["region"]) for row in shown["freshness"]} == {("111122223333", "us-east-1")}
    assert sum(day["rows"] for day in shown["rows_per_event_date"]) == len(expected)
    ocsf_shown = shown["derived_rows_per_event_date"]["ocsf"]
    assert sum(day["rows"][OCSF_API_ACTIVITY] for day in ocsf_shown) == len(expected), "the OCSF task ran on the cluster too"
    assert (shown["deliveries"]["inbox"], shown["deliveries"]["kept"]) == (0, 0), shown["deliveries"]
    assert shown["checkpoint"]["committed_batch"] is not None and shown["problems"] == [], shown["problems"]


def lose_a_file_of_each_date(lake: str) -> list[str]:
    """One data file of each date the events table holds deleted from the bucket, as a bug or a hand would: the dates
    cannot be read any more. The URIs lost."""
    table = open_catalog(Lake.at(lake, CATALOG), CATALOG).load_table("cloudtrail.events")
    tasks = table.scan(snapshot_id=table.metadata.snapshot_by_name("ingest").snapshot_id).plan_files()
    by_date: dict[str, str] = {}
    for task in tasks:
        by_date.setdefault(str(task.file.partition[0]), task.file.file_path)
    for uri in by_date.values():
        bucket, _, key = uri.removeprefix("s3://").removeprefix("s3a://").partition("/")
        boto3.client("s3").delete_object(Bucket=bucket, Key=key)
    return sorted(by_date.values())


def test_a_rebuild_backfill_from_the_rest_api_repairs_three_damaged_partitions(stack: Stack):
    lake, trail = stack.env("airflow-scheduler")["CLOUDTRAIL_LAKE"], landing_trail(stack)
    for offset in range(len(DATES)):
        for hour in (3, 15):
            deliver_now(trail, events_of(20, DAY + timedelta(days=offset, hours=hour - 1), f"d{offset}h{hour}"), f"d{offset}h{hour}")
    deliver_now(trail, events_of(20, DAY + timedelta(hours=2), "d0h3"), "copy-1")
    # A driver by hand on the scheduler's machine: its scratch there, not this process's temporary folder, which a
    # lake of another test at the same location left its landing copies in.
    scheduler_env = stack.env("airflow-scheduler") | {"CLOUDTRAIL_SCRATCH": str(stack.home / "airflow-scheduler" / "tmp")}
    ingest = [sys.executable, "-m", "jobs.cloudtrail_ingest", "--settle", "0 seconds"]
    subprocess.run(ingest, env=scheduler_env, check=True, capture_output=True, timeout=300)
    oracle = catalog_rows(lake, CATALOG)
    assert len(oracle) == 120
    assert len(lose_a_file_of_each_date(lake)) == len(DATES)
    with pytest.raises(OSError):
        catalog_rows(lake, CATALOG)

    api = Api.of(stack)
    api.unpause()
    assert api.backfill(DATES[0], DATES[-1], {"mode": "rebuild"})["dag_run_conf"] == {"mode": "rebuild"}
    runs = [r for r in api.finished_runs(expected=4, timeout=1500) if r["run_type"] == "backfill"]
    assert sorted(r["state"] for r in runs) == ["success"] * 3, runs

    assert catalog_rows(lake, CATALOG) == oracle, "the table of record equals the oracle again, read through its catalog"
    assert published(lake) == oracle, "and so does what its readers see"
    for run in runs:
        (report,) = Lake.at(lake, CATALOG).rebuild_reports(run["dag_run_id"])
        assert list(json.loads(report.read_text())["partitions"]) == [run["logical_date"][:10]], "one date per daily run"
    assert sum(app["name"] == "cloudtrail_rebuild" for app in spark_applications(stack)) == 3, "the rebuilds ran on the cluster"

    deliver_now(trail, events_of(5, DAY + timedelta(days=2, hours=20), "new"), "new")
    deliver_now(trail, events_of(20, DAY + timedelta(days=2, hours=14), "d2h15"), "copy-2")
    subprocess.run(ingest, env=scheduler_env, check=True, capture_output=True, timeout=300)
    assert catalog_rows(lake, CATALOG) == sorted(oracle + [(f"new-{i}", "2024-03-03") for i in range(5)]), "new files once, nothing twice"
    nothing_of_the_lake_on_a_machine(stack)


def make(*target: str, timeout: float) -> str:
    done = subprocess.run(["make", *target], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def backfill_in_the_ui(page: Any, base: str, password: str, first: str, last: str) -> None:
    """Sign in, open the DAG, Trigger -> Backfill, pick the date range (the picker's own fields), run it."""
    sign_in(page, base, password)
    page.goto(f"{base}/dags/{DAG_ID}")
    page.get_by_role("button", name="Trigger").first.click()
    dialog = page.get_by_role("dialog").first
    dialog.get_by_text("Backfill", exact=True).click()
    for picker, day in enumerate([first, last]):
        opener = dialog.get_by_test_id("datetime-input").nth(picker)
        opener.click()
        popover = page.locator(f"[id='{opener.get_attribute('aria-controls')}']")
        popover.get_by_placeholder("YYYY/MM/DD").fill(day.replace("-", "/"))
        popover.get_by_placeholder("HH:mm").fill("00:00")
        opener.click()  # closes it
    dialog.get_by_text(f"{len(DATES)} runs will be triggered").wait_for()
    dialog.get_by_role("button", name="Run Backfill").click()
    dialog.wait_for(state="hidden")


def test_make_stack_up_a_backfill_clicked_in_the_ui_and_make_stack_down(tmp_path: Path, env_file: Path):
    from playwright.sync_api import sync_playwright

    home = tmp_path / "stack"
    settings = [f"STACK_HOME={home}", f"STACK_ENV={env_file}"]
    try:
        shown = make("stack-up", *settings, timeout=600)
        base = re.search(r"Airflow UI +(http://\S+) +user admin, password (\S+)", shown)
        assert base, f"stack-up prints the UI's URL and the admin password: {shown}"
        url, password = base.groups()
        with reaching(Stack.load(home)) as lake:
            trail = landing_trail(Stack.load(home))
            for offset in range(len(DATES)):
                deliver_now(trail, events_of(25, DAY + timedelta(days=offset, hours=11), f"d{offset}"), f"d{offset}")
        api = Api(url, password)
        api.registered()

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            backfill_in_the_ui(page, url, password, DATES[0], DATES[-1])
            runs = api.finished_runs(expected=len(DATES) + 1, timeout=1200)  # the UI unpaused it: a scheduled run too
            page.goto(f"{url}/dags/{DAG_ID}/runs")
            page.get_by_text("success").first.wait_for()
            page.screenshot(path=str(tmp_path / "backfill-from-the-ui.png"), full_page=True)
            browser.close()

        backfills = sorted((r["logical_date"][:10], r["state"]) for r in runs if r["run_type"] == "backfill")
        assert backfills == [(day, "success") for day in DATES]
        with reaching(Stack.load(home)):
            assert published(lake) == sorted((f"d{o}-{i}", d) for o, d in enumerate(DATES) for i in range(25))
    finally:
        started = Stack.load(home).processes if (home / STATE).exists() else {}
        if started:
            assert "stopped" in make("stack-down", *settings, timeout=300)
    assert {"postgres", "airflow-api", "airflow-scheduler", "spark-master", "spark-worker-2"} <= started.keys()
    assert not any(alive(group) for group in started.values()), "stack-down stopped every service stack-up started"


def test_on_an_s3_landing_each_delivery_wakes_the_ingest_through_its_notification(tmp_path: Path):
    """moto's S3 + SQS server as the stack's AWS (AWS_ENDPOINT_URL and keys from .env): CloudTrail's notification of each
    delivered file wakes the ingest DAG through the triggerer's SQS watcher, the run fetches the object into the lake's
    cache and commits its events. A notification sent twice adds nothing. The queue and the inbox end empty."""
    with s3_stack(tmp_path) as (stack, trail):
        lake = stack.env("airflow-scheduler")["CLOUDTRAIL_LAKE"]
        start = datetime.now(tz=UTC) - timedelta(minutes=30)
        for n in range(3):
            queryable_after(stack, trail, events_of(40, start + timedelta(minutes=n), f"s3-{n}"), f"f{n}")
        (first, *_) = [key for key in trail.keys() if key.endswith("_f0.json.gz")]
        trail.notify(cloudtrail_sns(trail.bucket, [first]))  # a re-delivered notification
        api = Api.of(stack)
        deadline = time.monotonic() + 600
        while trail.waiting() or any(Lake.at(lake, CATALOG).inbox.glob("*.json")) or not all_finished(api):
            assert time.monotonic() < deadline, "the re-delivered notification was not taken"
            time.sleep(5)
        runs = api.call("GET", f"{api.dag}/dagRuns?limit=100")["dag_runs"]
        assert sum(run["run_type"] == "asset_triggered" for run in runs) >= 3, "a run per delivery, woken by its notification"
        assert all(run["state"] == "success" for run in runs), runs
        assert sorted(committed_ids(lake)) == trail.oracle(), "each event once, as the bucket's objects hold them"
        assert len(published(lake)) == 120, "and the gated tables show the readers the same rows"


def test_on_an_s3_landing_a_burst_during_running_and_queued_runs_waits_for_no_other_delivery(tmp_path: Path):
    """The 2nd delivery while the run the 1st woke is running, a run queued behind it, the 3rd and 4th two seconds
    later: each is queryable within 240 s of its LastModified, without a 5th delivery or the schedule (@daily)."""
    with s3_stack(tmp_path) as (stack, trail):
        start = datetime.now(tz=UTC) - timedelta(minutes=30)
        lags = burst_lags(stack, trail, lambda n: events_of(40, start + timedelta(minutes=n), f"burst-{n}"))
        assert max(lags) <= 240, lags
        assert sorted(committed_ids(stack.env("airflow-scheduler")["CLOUDTRAIL_LAKE"])) == trail.oracle()


def all_finished(api: Api) -> bool:
    runs = api.call("GET", f"{api.dag}/dagRuns?limit=100")["dag_runs"]
    return all(run["state"] in ("success", "failed") for run in runs)
