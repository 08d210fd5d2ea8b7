"""Full stack, run by `make test-stack` (not part of `make test`).

Backfills the way a user runs them: a scheduler (LocalExecutor), the API server and the DAG
processor running. `airflow backfill create` over 3 past dates, then the table against the
oracle and each run's gate report; and a `mode=rebuild` backfill through the REST API call the
UI's Backfill dialog makes, over 3 damaged partitions."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest

from jobs.lake import Lake
from tests.helpers import DAY, deliver, duckdb_rows, events_of
from tests.test_cluster import free_port

pytestmark = pytest.mark.stack

DATES = ["2024-03-01", "2024-03-02", "2024-03-03"]


@pytest.fixture
def airflow_services(tmp_path: Path, jobs_zip: Path):
    """An Airflow of its own (home, SQLite DB, daily schedule) with its three services running."""
    port = free_port()
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "2",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API_AUTH__JWT_SECRET": "backfill-test-secret",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "CLOUDTRAIL_SCHEDULE": "@daily",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": "tests.airflow_sqlite.CONNECT_ARGS",
        "CLOUDTRAIL_LANDING": str(tmp_path / "landing"),
        "CLOUDTRAIL_LAKE": str(tmp_path / "lake"),
    }
    subprocess.run(["airflow", "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    services = [
        subprocess.Popen(
            ["airflow", *command],
            env=env,
            stdout=(tmp_path / f"{command[0]}.log").open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        for command in (["api-server", "--port", str(port)], ["scheduler"], ["dag-processor"])
    ]
    try:
        yield env
    finally:
        for service in services:
            os.killpg(service.pid, signal.SIGTERM)
        for service in services:
            try:
                service.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(service.pid, signal.SIGKILL)


def airflow(env: dict, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["airflow", *args], env=env, capture_output=True, text=True, timeout=120, check=check)


def cli_json(env: dict, *args: str) -> list[dict]:
    """A list command's JSON output (the CLI prints warnings on stdout before it); [] when the
    command failed, e.g. on a busy SQLite file: the callers poll again."""
    output = airflow(env, *args, "-o", "json", check=False).stdout.splitlines()
    return json.loads(next((line for line in reversed(output) if line.startswith("[")), "[]"))


def test_a_backfill_over_three_past_dates_through_a_running_scheduler(airflow_services):
    env = airflow_services
    landing, lake = Path(env["CLOUDTRAIL_LANDING"]), Path(env["CLOUDTRAIL_LAKE"])
    for offset in range(len(DATES)):
        delivered = DAY + timedelta(days=offset, hours=12)
        deliver(landing, events_of(30, delivered - timedelta(hours=1), f"d{offset}"), delivered)
    deliver(landing, events_of(5, DAY - timedelta(days=5), "late"), DAY + timedelta(days=2, hours=13))  # late delivery
    deliver(landing, events_of(10, DAY + timedelta(hours=11), "d0"), DAY + timedelta(days=1, hours=13))  # re-delivered

    deadline = time.monotonic() + 180
    while not any(d["dag_id"] == "cloudtrail_ingest" and str(d["is_paused"]).lower() == "false" for d in cli_json(env, "dags", "list")):
        assert time.monotonic() < deadline, "the DAG processor did not register cloudtrail_ingest, unpaused"
        time.sleep(3)
    airflow(env, "backfill", "create", "--dag-id", "cloudtrail_ingest", "--from-date", DATES[0], "--to-date", DATES[-1])

    deadline = time.monotonic() + 900
    while True:
        runs = cli_json(env, "dags", "list-runs", "cloudtrail_ingest")
        backfill = [r for r in runs if r["run_id"].startswith("backfill__")]
        if len(backfill) == 3 and all(r["state"] in ("success", "failed") for r in runs):
            break
        assert time.monotonic() < deadline, f"runs did not finish: {runs}"
        time.sleep(20)

    assert sorted(r["state"] for r in backfill) == ["success"] * 3, backfill
    expected = sorted([(f"d{o}-{i}", d) for o, d in enumerate(DATES) for i in range(30)] + [(f"late-{i}", "2024-02-25") for i in range(5)])
    assert duckdb_rows(lake) == expected, "every event once, nothing duplicated by the backfill"
    for run in backfill:
        gate = json.loads(Lake(lake).gate_report(run["run_id"]).read_text())
        assert gate["verdict"] == "passed"
        assert run["logical_date"][:10] in gate["event_dates"], "the backfilled interval's partition was re-validated"


def api(env: dict, method: str, path: str, body: dict | None = None) -> dict:
    """One call to the API server's public REST API, as the UI makes it (a token from the simple auth manager)."""
    base = env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"].removesuffix("/execution/")
    with urllib.request.urlopen(f"{base}/auth/token", timeout=30) as response:
        token = json.loads(response.read())["access_token"]
    request = urllib.request.Request(
        f"{base}{path}", method=method, data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def test_a_rebuild_backfill_from_the_rest_api_repairs_three_damaged_partitions(airflow_services, spark):
    env = airflow_services
    landing, lake = Path(env["CLOUDTRAIL_LANDING"]), Path(env["CLOUDTRAIL_LAKE"])
    for offset in range(len(DATES)):
        for hour in (3, 15):
            delivered = DAY + timedelta(days=offset, hours=hour)
            deliver(landing, events_of(20, delivered - timedelta(hours=1), f"d{offset}h{hour}"), delivered)
    deliver(landing, events_of(20, DAY + timedelta(hours=2), "d0h3"), DAY + timedelta(hours=5))  # a copy
    ingest = [sys.executable, "-m", "jobs.cloudtrail_ingest", "--landing", str(landing), "--lake", str(lake), "--settle", "0 seconds"]
    subprocess.run(ingest, env=env, check=True, capture_output=True, timeout=300)
    oracle = duckdb_rows(lake)
    assert len(oracle) == 120
    events = Lake(lake).events
    shutil.rmtree(events / "event_date=2024-03-01")
    min((events / "event_date=2024-03-02").glob("*.parquet")).unlink()
    third = min((events / "event_date=2024-03-03").glob("*.parquet"))
    shutil.copyfile(third, third.with_name(f"copy-{third.name}"))

    deadline = time.monotonic() + 180
    while not any(d["dag_id"] == "cloudtrail_ingest" and str(d["is_paused"]).lower() == "false" for d in cli_json(env, "dags", "list")):
        assert time.monotonic() < deadline, "the DAG processor did not register cloudtrail_ingest, unpaused"
        time.sleep(3)
    backfill = api(env, "POST", "/api/v2/backfills", {
        "dag_id": "cloudtrail_ingest", "from_date": f"{DATES[0]}T00:00:00Z", "to_date": f"{DATES[-1]}T00:00:00Z",
        "dag_run_conf": {"mode": "rebuild"}, "max_active_runs": 1,
    })  # fmt: skip
    assert backfill["dag_run_conf"] == {"mode": "rebuild"}

    deadline = time.monotonic() + 1200
    while True:
        runs = [r for r in cli_json(env, "dags", "list-runs", "cloudtrail_ingest") if r["run_id"].startswith("backfill__")]
        if len(runs) == 3 and all(r["state"] in ("success", "failed") for r in runs):
            break
        assert time.monotonic() < deadline, f"runs did not finish: {runs}"
        time.sleep(20)
    assert sorted(r["state"] for r in runs) == ["success"] * 3, runs

    assert duckdb_rows(lake) == oracle, "the table equals the oracle again, read by DuckDB"
    read = spark.read.parquet(str(events)).select("eventID", "event_date").collect()
    assert sorted((r.eventID, str(r.event_date)) for r in read) == oracle, "and by Spark"
    for run in runs:
        (report,) = Lake(lake).rebuild_reports(run["run_id"])
        assert list(json.loads(report.read_text())["partitions"]) == [run["logical_date"][:10]], "one date per daily run"

    deliver(landing, events_of(5, DAY + timedelta(days=2, hours=20), "new"), DAY + timedelta(days=2, hours=21))
    deliver(landing, events_of(20, DAY + timedelta(days=2, hours=14), "d2h15"), DAY + timedelta(days=2, hours=22))  # a copy
    subprocess.run(ingest, env=env, check=True, capture_output=True, timeout=300)
    assert duckdb_rows(lake) == sorted(oracle + [(f"new-{i}", "2024-03-03") for i in range(5)]), "new files once, nothing twice"
