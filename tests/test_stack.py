"""The production stack, run by `make test-stack` (not part of `make test`).

Every service of docker-compose.yml started natively from that file (tools/stack.py):
PostgreSQL, the Airflow API server, scheduler (LocalExecutor), DAG processor and triggerer,
a Spark master and two workers. The DAG is unpaused and driven through the REST API with the
admin's credentials, as the UI does: a scheduled run and a backfill at the same time (every socket the
services open meanwhile is on loopback, read from the kernel), then a
`mode=rebuild` backfill over 3 damaged partitions; the derived DAG follows on the events Asset.
A last test starts the stack with `make stack-up`,
clicks a backfill through the UI in headless Chromium (Debian's, driven by Playwright) and stops it
with `make stack-down`. The tables are checked against the oracle."""

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

import duckdb
import pytest

from jobs.lake import OCSF, OCSF_API_ACTIVITY, Lake
from jobs.quality import gate
from jobs.status.lake_status import derived_rows
from tests.aws import burst_lags, cloudtrail_sns, committed_ids, queryable_after, s3_stack
from tests.helpers import DAY, deliver, duckdb_rows, events_of, table_rows
from tests.test_derived import hourly_from_activity, hourly_from_events
from tests.test_rebuild import damage
from tools.airflow_api import DAG_ID, Api, sign_in
from tools.stack import ROOT, STATE, Listener, Stack, alive, write_env_file

pytestmark = pytest.mark.stack

DATES = ["2024-03-01", "2024-03-02", "2024-03-03"]


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
    landing, lake = stack.home / "volumes" / "landing", stack.home / "volumes" / "lake"
    for offset in range(len(DATES)):
        delivered = DAY + timedelta(days=offset, hours=12)
        deliver(landing, events_of(30, delivered - timedelta(hours=1), f"d{offset}"), delivered)
    deliver(landing, events_of(5, DAY - timedelta(days=5), "late"), DAY + timedelta(days=2, hours=13))  # late delivery
    deliver(landing, events_of(10, DAY + timedelta(hours=11), "d0"), DAY + timedelta(days=1, hours=13))  # re-delivered

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
    assert {stack.ports["airflow-api:8080"], stack.ports["postgres:5432"], stack.ports["spark-master:7077"]} <= ports
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
    assert duckdb_rows(lake) == expected, "every event once, nothing duplicated by the backfill"
    gates = {r["dag_run_id"]: json.loads(Lake(lake).gate_report(r["dag_run_id"]).read_text()) for r in runs}
    for run in runs:
        checked = gates[run["dag_run_id"]]
        assert checked["verdict"] in ("passed", "skipped"), checked
        if run["run_type"] == "backfill":
            # re-validated, or skipped because a gate passed exactly these files already
            assert run["logical_date"][:10] in checked["event_dates"]
    validated = gate.validated(Lake(lake))
    assert {validated[d]["run_id"] for d in DATES} <= {run_id for run_id, checked in gates.items() if checked["verdict"] == "passed"}

    # Only runs with something to do start Spark, and they run on the cluster.
    applications = spark_applications(stack)
    assert {app["state"] for app in applications} == {"FINISHED"}
    ingests = [json.loads(Lake(lake).ingest_report(r["dag_run_id"]).read_text()) for r in runs]
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
        try:  # a run may be swapping a folder while this reads
            ocsf = sum(day.rows[OCSF_API_ACTIVITY] for day in derived_rows(Lake(lake), OCSF, days=1000))
        except duckdb.Error:
            ocsf = None
        if hourly_from_activity(lake) == hourly_from_events(lake) and ocsf == len(expected):
            break
        assert time.monotonic() < deadline, f"the activity and OCSF tables never caught up: {derived_runs}"
        time.sleep(10)
    assert {r["state"] for r in derived_runs} == {"success"} and {r["run_type"] for r in derived_runs} == {"asset_triggered"}

    # The compose API server serves the lake page from the shared volumes, behind the same sign-in.
    shown = api.call("GET", "/cloudtrail/status.json")
    assert {(row["account"], row["region"]) for row in shown["freshness"]} == {("111122223333", "us-east-1")}
    assert sum(day["rows"] for day in shown["rows_per_event_date"]) == len(expected)
    ocsf_shown = shown["derived_rows_per_event_date"]["ocsf"]
    assert sum(day["rows"][OCSF_API_ACTIVITY] for day in ocsf_shown) == len(expected), "the OCSF task ran on the cluster too"
    assert shown["backlog"]["files"] == 0 and shown["checkpoint"]["committed_batch"] is not None


def test_a_rebuild_backfill_from_the_rest_api_repairs_three_damaged_partitions(stack: Stack, spark):
    landing, lake = stack.home / "volumes" / "landing", stack.home / "volumes" / "lake"
    for offset in range(len(DATES)):
        for hour in (3, 15):
            delivered = DAY + timedelta(days=offset, hours=hour)
            deliver(landing, events_of(20, delivered - timedelta(hours=1), f"d{offset}h{hour}"), delivered)
    deliver(landing, events_of(20, DAY + timedelta(hours=2), "d0h3"), DAY + timedelta(hours=5))  # a copy
    ingest = [sys.executable, "-m", "jobs.cloudtrail_ingest", "--landing", str(landing), "--lake", str(lake), "--settle", "0 seconds"]
    scheduler_env = stack.env("airflow-scheduler")
    subprocess.run(ingest, env=scheduler_env, check=True, capture_output=True, timeout=300)
    oracle = duckdb_rows(lake)
    assert len(oracle) == 120
    damage(spark, lake)  # one date's rows gone, one file gone, one file twice: commits as a bug would make them
    assert duckdb_rows(lake) != oracle

    api = Api.of(stack)
    api.unpause()
    assert api.backfill(DATES[0], DATES[-1], {"mode": "rebuild"})["dag_run_conf"] == {"mode": "rebuild"}
    runs = [r for r in api.finished_runs(expected=4, timeout=1500) if r["run_type"] == "backfill"]
    assert sorted(r["state"] for r in runs) == ["success"] * 3, runs

    assert duckdb_rows(lake) == oracle, "the table equals the oracle again, read by DuckDB"
    assert table_rows(spark, lake) == oracle, "and by Spark, through the lake's Iceberg catalog"
    for run in runs:
        (report,) = Lake(lake).rebuild_reports(run["dag_run_id"])
        assert list(json.loads(report.read_text())["partitions"]) == [run["logical_date"][:10]], "one date per daily run"
    assert sum(app["name"] == "cloudtrail_rebuild" for app in spark_applications(stack)) == 3, "the rebuilds ran on the cluster"

    deliver(landing, events_of(5, DAY + timedelta(days=2, hours=20), "new"), DAY + timedelta(days=2, hours=21))
    deliver(landing, events_of(20, DAY + timedelta(days=2, hours=14), "d2h15"), DAY + timedelta(days=2, hours=22))  # a copy
    subprocess.run(ingest, env=scheduler_env, check=True, capture_output=True, timeout=300)
    assert duckdb_rows(lake) == sorted(oracle + [(f"new-{i}", "2024-03-03") for i in range(5)]), "new files once, nothing twice"


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
        landing, lake = home / "volumes" / "landing", home / "volumes" / "lake"
        for offset in range(len(DATES)):
            delivered = DAY + timedelta(days=offset, hours=12)
            deliver(landing, events_of(25, delivered - timedelta(hours=1), f"d{offset}"), delivered)
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
        assert duckdb_rows(lake) == sorted((f"d{o}-{i}", d) for o, d in enumerate(DATES) for i in range(25))
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
        lake = stack.home / "volumes" / "lake"
        start = datetime.now(tz=UTC) - timedelta(minutes=30)
        for n in range(3):
            queryable_after(stack, trail, events_of(40, start + timedelta(minutes=n), f"s3-{n}"), f"f{n}")
        (first, *_) = [key for key in trail.keys() if key.endswith("_f0.json.gz")]
        trail.notify(cloudtrail_sns(trail.bucket, [first]))  # a re-delivered notification
        api = Api.of(stack)
        deadline = time.monotonic() + 600
        while trail.waiting() or any(Lake(lake).inbox.glob("*.json")) or not all_finished(api):
            assert time.monotonic() < deadline, "the re-delivered notification was not taken"
            time.sleep(5)
        runs = api.call("GET", f"{api.dag}/dagRuns?limit=100")["dag_runs"]
        assert sum(run["run_type"] == "asset_triggered" for run in runs) >= 3, "a run per delivery, woken by its notification"
        assert all(run["state"] == "success" for run in runs), runs
        assert sorted(committed_ids(lake)) == trail.oracle(), "each event once, as the bucket's objects hold them"
        assert len(duckdb_rows(lake)) == 120, "and a directory reader sees the same rows"


def test_on_an_s3_landing_a_burst_during_running_and_queued_runs_waits_for_no_other_delivery(tmp_path: Path):
    """The 2nd delivery while the run the 1st woke is running, a run queued behind it, the 3rd and 4th two seconds
    later: each is queryable within 240 s of its LastModified, without a 5th delivery or the schedule (@daily)."""
    with s3_stack(tmp_path) as (stack, trail):
        start = datetime.now(tz=UTC) - timedelta(minutes=30)
        lags = burst_lags(stack, trail, lambda n: events_of(40, start + timedelta(minutes=n), f"burst-{n}"))
        assert max(lags) <= 240, lags
        assert sorted(committed_ids(stack.home / "volumes" / "lake")) == trail.oracle()


def all_finished(api: Api) -> bool:
    runs = api.call("GET", f"{api.dag}/dagRuns?limit=100")["dag_runs"]
    return all(run["state"] in ("success", "failed") for run in runs)
