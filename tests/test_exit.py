"""A job's process (issue #67): its exit well under a second after its last commit, nothing at ERROR, no stack; no
process started per file it writes or renames."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import timedelta

import pytest

from tests.helpers import DAY, STACK_TRACE, around_stack, deliver, events_of

# The commands Hadoop's local file system runs without its native library: one per file it creates with a permission,
# one per rename (jobs/java/cloudtrail/LocalFileSystem.java).
FILE_COMMANDS = ("chmod", "readlink")

# Stands in for a command on PATH: notes which program started it (its parent's name) and its arguments, then runs it.
SHIM = """#!/bin/sh
echo "$(cat /proc/$PPID/comm) $(basename "$0") $*" >> {log}
exec {real} "$@"
"""


@dataclass
class IngestProcess:
    returncode: int
    stderr: list[str]
    succeeded_at: float | None
    exited: float
    started: list[str]  # "<parent program> <command> <arguments>" of each FILE_COMMANDS command run


@pytest.fixture(scope="module")
def ingest_process(tmp_path_factory: pytest.TempPathFactory) -> IngestProcess:
    """An ingest of 12 files in 4 batches, run as operators run it (`python -m`), FILE_COMMANDS watched on its PATH."""
    root = tmp_path_factory.mktemp("process")
    landing, lake, shims, log = root / "landing", root / "lake", root / "bin", root / "started.log"
    for n in range(12):
        deliver(landing, events_of(500, DAY + timedelta(minutes=n), f"x{n}"), DAY + timedelta(minutes=n + 3), f"f{n}")
    shims.mkdir()
    for name in FILE_COMMANDS:
        real = shutil.which(name)
        assert real, f"{name} is not on PATH"
        (shims / name).write_text(SHIM.format(log=log, real=real))
        (shims / name).chmod(0o755)
    command = [sys.executable, "-m", "jobs.cloudtrail_ingest", "--landing", str(landing), "--lake", str(lake), "--settle", "0 seconds",
               "--max-files-per-trigger", "3", "--run-id", "exit"]  # fmt: skip
    env = {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"}
    job = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    lines, succeeded_at = [], None
    assert job.stderr is not None
    for line in job.stderr:
        lines.append(line)
        if succeeded_at is None and "run exit succeeded" in line:
            succeeded_at = time.monotonic()
    job.wait(timeout=60)
    started = log.read_text().splitlines() if log.exists() else []
    return IngestProcess(job.returncode, lines, succeeded_at, time.monotonic(), started)


def test_an_ingest_exits_at_once_after_its_run_succeeded_with_nothing_at_error(ingest_process):
    """Spark's StateStore.stop() waited on a maintenance task that waited on its lock: 20 s, then an ERROR and a
    stack after "succeeded". The state stores are stopped with the maintenance first (jobs/spark/session.py)."""
    lines, succeeded_at = ingest_process.stderr, ingest_process.succeeded_at
    stderr = "".join(lines)
    assert ingest_process.returncode == 0 and succeeded_at is not None, stderr[-3000:]
    after = [line for line in stderr.split("run exit succeeded", 1)[1].splitlines()]
    assert not [line for line in lines if " ERROR " in line], stderr[-3000:]
    assert not STACK_TRACE.search(stderr), around_stack(stderr)
    assert ingest_process.exited - succeeded_at < 3, f"{ingest_process.exited - succeeded_at:.1f} s from success to exit: {after}"


def test_an_ingest_starts_no_process_per_file_it_writes_or_renames(ingest_process):
    """Without Hadoop's native library its local file system ran chmod for each file created and readlink for each
    rename: about 250 processes in a run of 4 files, 3-9 ms each (BENCHMARKS.md). The jobs' file system sets the
    permission and reads the link in the JVM (options.LOCAL_FILE_SYSTEM)."""
    assert ingest_process.returncode == 0, "".join(ingest_process.stderr)[-3000:]
    by_java = [line for line in ingest_process.started if line.split(" ", 1)[0] == "java"]
    assert not by_java, f"{len(by_java)} commands started by the JVM, the first: {by_java[:3]}"


# A job's process in miniature: a session built and stopped through JobSession, as every job's main does.
RELEASE = """
import json, sys
from pyspark import SparkContext
from jobs.spark.session import JobSession, spark_session

with JobSession(lambda: spark_session("release", master="local[1]")) as session:
    first = session().range(3).count()
    jvm = SparkContext._gateway.proc
jvm.wait(timeout=60)  # never returns before this process ends unless the JVM was let go
again = spark_session("again", master="local[1]")  # a later session in the process launches a JVM of its own
print(json.dumps({"first": first, "jvm_exit": jvm.returncode, "again": again.range(4).count()}))
again.stop()
"""


def test_a_job_lets_the_jvm_it_launched_exit_with_its_session():
    """A JDK 17 JVM waits up to 300 ms at exit for its threads inside native code, and Py4J's gateway keeps one there:
    the JVM of a job run as `python -m` is let go with its session (jobs/spark/session.release_jvm), not after Python."""
    done = subprocess.run([sys.executable, "-c", RELEASE], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {"first": 3, "jvm_exit": 0, "again": 4}


# Three jobs' sessions, each released while other threads are calling the JVM (as a listener or a progress reporter
# may be when a run ends), each then logging its success: what the process prints after that.
RELEASED_UNDER_CALLS = """
import logging, sys, threading, time
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
from jobs.spark.session import JobSession, spark_session

def calling(jvm, stop):
    while not stop.is_set():
        try:
            jvm.java.lang.Thread.sleep(5)
        except Exception:
            return

for run in range(3):
    stop = threading.Event()
    with JobSession(lambda: spark_session("released")) as session:
        jvm = session()._jvm
        for _ in range(4):
            threading.Thread(target=calling, args=(jvm, stop), daemon=True).start()
        time.sleep(0.3)
    logging.info("run %d succeeded", run)
    stop.set()
    time.sleep(0.3)
"""


def test_nothing_prints_a_traceback_after_success_when_other_threads_were_calling_the_jvm():
    """Py4J logs a call whose socket the release closes under it at INFO, with its traceback, through the root logger:
    an ingest printed `INFO root: Exception while sending command. Traceback ... Py4JNetworkError` after its success."""
    done = subprocess.run([sys.executable, "-c", RELEASED_UNDER_CALLS], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    after = done.stderr.split("run 0 succeeded", 1)[1]
    assert "run 2 succeeded" in after
    assert not STACK_TRACE.search(after) and "Exception while sending command" not in after, around_stack(after)
