"""The DAG's Spark applications on a real Spark standalone cluster (master and workers started
from the pip package on 127.0.0.1), not only in local mode; and a cluster of two workers that share no disk with
each other or with the driver, a lake and a landing in S3 (moto's), one worker killed while a batch is written."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobs import options
from jobs.lake import Lake
from tests.helpers import DAY, deliver, duckdb_rows, events_of
from tools.cluster import Cluster, start, stop
from tools.stack import free_port, listeners


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


@pytest.mark.harness  # a master, a worker and two applications (about 40 s): `make test-harness`, which CI runs
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


@pytest.mark.stack  # a cluster of its own and two applications (about 2 minutes): `make test-stack`
def test_two_workers_that_share_no_disk_write_a_lake_in_s3_and_one_killed_mid_batch_loses_nothing(s3_lake, trail, tmp_path):
    """The driver on this machine, each worker on a "machine" of its own (tools/cluster.py: nothing of the driver's or
    the other's visible to it): the executors read the landing's objects through S3A and write the tables, the
    checkpoint and the state to the lake's prefix. One worker's processes are killed while a batch is written; the run
    finishes on the other, or fails and the next run completes it: the events equal the oracle, each once."""
    from tests.test_s3_lake import events_in, keys

    now = datetime.now(tz=UTC).replace(microsecond=0)
    for n in range(12):
        trail.deliver(events_of(200, now - timedelta(hours=2, minutes=n), f"w{n}"), now - timedelta(minutes=30 - n), f"w-{n}")
    job = [sys.executable, "-m", "jobs.cloudtrail_ingest", "--landing", trail.url, "--lake", s3_lake, "--catalog", "records",
           "--max-files-per-trigger", "3", "--settle", "0 seconds"]  # fmt: skip
    with Cluster(tmp_path, workers=2, memory="2g") as cluster:
        run = subprocess.Popen(
            [*job, "--run-id", "killed-worker"], env=cluster.driver_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 300
        while not any(key.startswith("_checkpoints/ingest/offsets/1") for key in keys(s3_lake)):
            assert run.poll() is None and time.monotonic() < deadline, "batch 1 never started"
            time.sleep(0.2)
        cluster.kill(0)
        _, stderr = run.communicate(timeout=600)
        if run.returncode != 0:  # the run may fail with its executor; the next completes it
            again = subprocess.run(
                [*job, "--run-id", "after-the-kill"], env=cluster.driver_env(), capture_output=True, text=True, timeout=600
            )
            assert again.returncode == 0, again.stderr[-3000:]
        ran = cluster.executors_ran()
    assert [event_id for event_id, _ in events_in(s3_lake)] == trail.oracle() and len(trail.oracle()) == 2400, stderr[-3000:]
    assert all(ran.values()), f"each worker ran an executor: {ran}"
    held = [path for home in cluster.homes for path in (home / "local").rglob("*.json.gz")]
    assert (cluster.driver / "scratch").exists() and not held, "the driver fetched the objects to plan them; no executor holds one"
    state = {key.split("/")[4] for key in keys(s3_lake) if key.startswith("_checkpoints/ingest/state/0/") and key.endswith(".zip")}
    partitions = {str(partition) for partition in range(options.STATE_PARTITIONS)}
    assert state == partitions, f"each state partition's snapshots are in the lake, whichever executor wrote them: {state}"
