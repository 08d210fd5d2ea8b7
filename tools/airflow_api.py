"""The Airflow API server's public REST API (`/api/v2`), called as the UI calls it: with the admin's token.

Used by the stack tests and the stack benchmark to drive the ingest DAG on a running stack, and
(`api_server`, `sign_in`) by the lake page's test and benchmark to start an API server of their own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from tools.stack import Stack, free_port

DAG_ID = "cloudtrail_ingest"


class Api:
    def __init__(self, base: str, password: str | None, dag_id: str = DAG_ID) -> None:
        self.base, self.dag = base, f"/api/v2/dags/{dag_id}"
        self.dag_id = dag_id
        login = {"username": "admin", "password": password}
        self.token = self.call("POST", "/auth/token", login, token=None)["access_token"]

    @classmethod
    def of(cls, stack: Stack) -> Api:
        return cls(stack.url("airflow-api", 8080), stack.admin_password())

    def call(self, method: str, path: str, body: dict | None = None, token: str | None = "") -> Any:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token or self.token}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.base}{path}", method=method, data=data, headers=headers)
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    def registered(self) -> None:
        """Wait until the DAG processor has registered the DAG (paused at creation, as for a user)."""
        deadline = time.monotonic() + 180
        while True:
            try:
                self.call("GET", self.dag)
                return
            except urllib.error.HTTPError as missing:
                assert missing.code == 404 and time.monotonic() < deadline, f"{self.dag_id} was not registered: {missing}"
                time.sleep(3)

    def unpause(self) -> None:
        self.registered()
        self.call("PATCH", self.dag, {"is_paused": False})

    def backfill(self, first: str, last: str, conf: dict | None = None) -> dict:
        """Daily runs for the logical dates first..last (YYYY-MM-DD), one at a time.

        The API server answered a backfill asked for just after the DAG was registered with 500 once in
        a while: asked again (a few times), unless the first request created it after all."""
        body = {"dag_id": self.dag_id, "from_date": f"{first}T00:00:00Z", "to_date": f"{last}T00:00:00Z", "max_active_runs": 1}
        for _ in range(4):
            try:
                return dict(self.call("POST", "/api/v2/backfills", {**body, "dag_run_conf": conf or {}}))
            except urllib.error.HTTPError as failed:
                if failed.code != 500:
                    raise
            time.sleep(3)
            made = self.call("GET", f"/api/v2/backfills?dag_id={self.dag_id}")["backfills"]
            if made:
                return dict(made[-1])
        return dict(self.call("POST", "/api/v2/backfills", {**body, "dag_run_conf": conf or {}}))

    def trigger(self) -> str:
        """A manual run now; its run id."""
        return str(self.call("POST", f"{self.dag}/dagRuns", {"logical_date": None})["dag_run_id"])

    def finished(self, run_id: str, poll: float = 0.5) -> str:
        """Wait for the run to end; its final state."""
        while (state := self.call("GET", f"{self.dag}/dagRuns/{run_id}")["state"]) not in ("success", "failed"):
            time.sleep(poll)
        return str(state)

    def runs_in(self, state: str) -> list[dict]:
        """The DAG's runs in `state` (queued, running, success, failed)."""
        return list(self.call("GET", f"{self.dag}/dagRuns?state={state}&limit=100")["dag_runs"])

    def finished_runs(self, expected: int, timeout: float) -> list[dict]:
        deadline = time.monotonic() + timeout
        while True:
            runs = self.call("GET", f"{self.dag}/dagRuns?limit=100")["dag_runs"]
            if len(runs) >= expected and all(r["state"] in ("success", "failed") for r in runs):
                return list(runs)
            assert time.monotonic() < deadline, f"runs did not finish: {[(r['dag_run_id'], r['state']) for r in runs]}"
            time.sleep(10)

    def task_log(self, run_id: str, task_id: str, try_number: int = 1) -> str:
        """A task try's log as the UI shows it, as text."""
        return json.dumps(self.call("GET", f"{self.dag}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}")["content"])

    def task_instance(self, run_id: str, task_id: str) -> dict:
        return dict(self.call("GET", f"{self.dag}/dagRuns/{run_id}/taskInstances/{task_id}"))

    def task_seconds(self, run_id: str) -> dict[str, dict[str, float]]:
        """Per task that ran, in start order: seconds since the previous one ended (the run's start for the first) and running."""
        run = self.call("GET", f"{self.dag}/dagRuns/{run_id}")
        instances = self.call("GET", f"{self.dag}/dagRuns/{run_id}/taskInstances")["task_instances"]
        ran = sorted((ti for ti in instances if ti["state"] in ("success", "failed")), key=lambda ti: ti["start_date"])
        phases: dict[str, dict[str, float]] = {}
        previous_end = run["start_date"]
        for ti in ran:
            phases[ti["task_id"]] = {
                "waited": seconds(previous_end, ti["start_date"]),
                "running": seconds(ti["start_date"], ti["end_date"]),
            }
            previous_end = ti["end_date"]
        return phases


def seconds(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


@dataclass(frozen=True)
class Server:
    url: str
    password: str  # the admin's
    env: dict[str, str]  # what the server runs with: run Airflow commands against its DB with it


@contextmanager
def api_server(env: dict[str, str], log: Path, timeout: float = 180) -> Iterator[Server]:
    """`airflow api-server` on a free loopback port with `env` (its AIRFLOW_HOME holds a migrated DB),
    SimpleAuthManager's admin user, one worker; stopped on exit."""
    port = free_port()
    env = {
        **os.environ,
        **env,
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
    }
    env.setdefault("AIRFLOW__API_AUTH__JWT_SECRET", os.urandom(16).hex())
    with open(log, "w") as out:
        server = subprocess.Popen([sys.executable, "-m", "airflow", "api-server", "--port", str(port)], env=env, stdout=out, stderr=out)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            try:
                urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=5)
                break
            except OSError:
                time.sleep(1)
        passwords = Path(env["AIRFLOW_HOME"]) / "simple_auth_manager_passwords.json.generated"
        yield Server(url, json.loads(passwords.read_text())["admin"], env)
    finally:
        server.terminate()
        server.wait(timeout=60)


def sign_in(page: Any, url: str, password: str) -> None:
    """Sign a Playwright page in to the UI at `url` as the admin (SimpleAuthManager's form)."""
    page.goto(f"{url}/")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{url}/")
