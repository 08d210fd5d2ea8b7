"""The DAG's Spark applications on a real Spark standalone cluster (master and worker started
from the pip package on 127.0.0.1), not only in local mode."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobs import options
from jobs.lake import Lake
from tests.helpers import DAY, deliver, duckdb_rows, events_of
from tools.stack import free_port, listeners


def start(*command: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen(["spark-class", *command], stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def stop(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)


@pytest.fixture
def standalone_cluster(tmp_path: Path):
    port, ui = free_port(), free_port()
    master = start("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui),
                   log=tmp_path / "master.log")  # fmt: skip
    worker = start("org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "2", "--memory", "2g",
                   "--webui-port", str(free_port()), "--work-dir", str(tmp_path / "work"), f"spark://127.0.0.1:{port}",
                   log=tmp_path / "worker.log")  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                state = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2).read())
                if state.get("aliveworkers", 0) >= 1:
                    break
            except OSError:
                pass
            time.sleep(1)
        else:
            pytest.fail(f"the standalone worker did not register:\n{(tmp_path / 'worker.log').read_text()[-2000:]}")
        yield port, ui, (master.pid, worker.pid)
    finally:
        stop(worker)
        stop(master)


def test_the_dag_runs_its_spark_applications_on_a_standalone_cluster(standalone_cluster, dag_roots, monkeypatch, tmp_path):
    from airflow.dag_processing.dagbag import DagBag

    port, ui, processes = standalone_cluster
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "spark://127.0.0.1", "port": port}))
    landing, lake = dag_roots
    deliver(landing, events_of(40, DAY, "cluster"), DAY + timedelta(minutes=20))

    dag = DagBag(dag_folder=str(Path(__file__).resolve().parents[1] / "dags")).dags["cloudtrail_ingest"]
    run = dag.test(logical_date=datetime(2024, 3, 1, tzinfo=UTC), run_conf={"landing": str(landing), "lake": str(lake)})
    assert str(run.state) == "success", {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert len(duckdb_rows(lake)) == 40

    # The applications really ran on the cluster: the master lists them as completed.
    state = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5).read())
    names = sorted(app["name"] for app in state["completedapps"])
    assert names == ["cloudtrail_ingest"], f"one application: the ingest gates what it wrote itself; {names}"
    assert json.loads(Lake(lake).gate_report(run.run_id).read_text())["verdict"] == "passed"
    # Its executors started with the product's JVM options (the worker logs each one's command line).
    commands = [line for log in (tmp_path / "work").glob("app-*/*/stderr") for line in log.read_text().splitlines()
                if "Spark Executor Command" in line]  # fmt: skip
    assert commands and all(f'"{option}"' in line for line in commands for option in options.JVM_OPTIONS.split()), commands
    # What the master and the worker listen on, read from the kernel: loopback only (make test-stack checks every service).
    sockets = listeners(processes)
    assert {port, ui} <= {listener.port for listener in sockets} and all(listener.loopback for listener in sockets), sockets
