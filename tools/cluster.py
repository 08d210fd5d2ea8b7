"""A Spark standalone cluster on this machine whose workers share no disk: with each other, or with the driver.

    with Cluster(home, workers=2) as cluster:        # a master, and two workers of one core each
        env = cluster.driver_env()                   # a driver of this cluster, with folders of its own
        cluster.kill(0)                              # a worker and its executors, as a machine lost

Each worker runs in a mount namespace of its own (`unshare --mount`, as root) in which the driver's folders and the
other workers' are covered by an empty file system: nothing it or its executors do can read or write them, as on
machines of their own. What they share is the code (the virtualenv, the jars), as an image would give it them.
tests/test_cluster.py and bench/cluster.py start it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from tools.stack import HOST_LOCAL_READS, covered, free_port, own_folders

__all__ = ["Cluster", "start", "stop"]

SPARK_HOME = str(Path(importlib.util.find_spec("pyspark").origin or "").parent)  # type: ignore[union-attr]


def start(*command: str, log: Path, env: dict[str, str] | None = None, hidden: Sequence[Path] = ()) -> subprocess.Popen[bytes]:
    """`spark-class COMMAND` in a process group of its own, the `hidden` folders covered (`covered`)."""
    # pyspark's own launcher and Spark, beside this Python where make's PATH does not name them
    argv = [shutil.which("spark-class") or str(Path(sys.executable).parent / "spark-class"), *command]
    env = (env or dict(os.environ)) | {"SPARK_HOME": SPARK_HOME}
    if hidden:
        argv = covered(argv, hidden)
    return subprocess.Popen(argv, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def stop(process: subprocess.Popen[bytes]) -> None:
    """The process's group ended: asked, then killed after 20 s."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@dataclass
class Cluster:
    """A master and `workers` workers of `cores` cores each, under `home`: home/driver, home/worker-N."""

    home: Path
    workers: int = 2
    cores: int = 1
    memory: str = "3g"
    port: int = field(default_factory=free_port)
    ui: int = field(default_factory=free_port)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def driver(self) -> Path:
        return self.home / "driver"

    @property
    def homes(self) -> list[Path]:
        return [self.home / f"worker-{n + 1}" for n in range(self.workers)]

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def __enter__(self) -> Cluster:
        for folder in (self.driver / "scratch", *(home / "work" for home in self.homes)):
            folder.mkdir(parents=True, exist_ok=True)
        master = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.ui)]
        self.processes.append(start(*master, log=self.home / "master.log"))
        for home in self.homes:
            hidden = [self.driver, *(other for other in self.homes if other != home)]
            worker = ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory,
                      "--webui-port", str(free_port()), "--work-dir", str(home / "work"), self.master_url]  # fmt: skip
            self.processes.append(start(*worker, log=home / "worker.log", env=os.environ | own_folders(home), hidden=hidden))
        deadline = time.monotonic() + 90
        while self.alive_workers() < self.workers:
            if time.monotonic() > deadline:
                self.__exit__(None, None, None)
                logs = " ".join((home / "worker.log").read_text()[-1500:] for home in self.homes)
                raise RuntimeError(f"the workers did not register with the master: {logs}")
            time.sleep(1)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, trace: TracebackType | None) -> None:
        for process in reversed(self.processes):
            stop(process)

    def alive_workers(self) -> int:
        """How many workers the master has registered (none while it starts)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=5) as response:
                return int(json.loads(response.read()).get("aliveworkers", 0))
        except OSError:
            return 0

    def driver_env(self) -> dict[str, str]:
        """The environment of a job's command run as a driver of this cluster (CLOUDTRAIL_SPARK_MASTER), with its
        scratch and Spark folders its own."""
        ours = {
            "CLOUDTRAIL_SPARK_MASTER": self.master_url,
            "CLOUDTRAIL_SCRATCH": str(self.driver / "scratch"),
            # Each executor takes its worker's memory (Spark's default is 1g, whatever the worker has).
            "PYSPARK_SUBMIT_ARGS": f"--conf {'='.join(HOST_LOCAL_READS)} --conf spark.executor.memory={self.memory} pyspark-shell",
        }
        return os.environ | own_folders(self.driver) | ours

    def kill(self, worker: int) -> None:
        """Worker `worker` (from 0) and its executors killed at once, as a machine lost."""
        os.killpg(self.processes[1 + worker].pid, signal.SIGKILL)

    def executors_ran(self) -> dict[str, list[str]]:
        """Per worker, the executors it started (their ids)."""
        return {home.name: sorted(path.parent.name for path in (home / "work").glob("app-*/*/stderr")) for home in self.homes}
