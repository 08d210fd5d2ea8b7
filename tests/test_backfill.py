"""Full stack, run by `make test-stack` (not part of `make test`).

A backfill the way a user runs one: a scheduler (LocalExecutor), the API server and the DAG
processor running, `airflow backfill create` over 3 past dates, wait for the runs, then check
the table against the oracle and each run's gate report."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
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
