"""A job's exit after success (issue #67): well under a second after its last commit, nothing at ERROR, no stack."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import timedelta

from tests.helpers import DAY, STACK_TRACE, around_stack, deliver, events_of


def test_an_ingest_exits_at_once_after_its_run_succeeded_with_nothing_at_error(landing, lake):
    """Spark's StateStore.stop() waited on a maintenance task that waited on its lock: 20 s, then an ERROR and a
    stack after "succeeded". The state stores are stopped with the maintenance first (jobs/spark/session.py)."""
    for n in range(12):
        deliver(landing, events_of(500, DAY + timedelta(minutes=n), f"x{n}"), DAY + timedelta(minutes=n + 3), f"f{n}")
    command = [sys.executable, "-m", "jobs.cloudtrail_ingest", "--landing", str(landing), "--lake", str(lake), "--settle", "0 seconds",
               "--max-files-per-trigger", "3", "--run-id", "exit"]  # fmt: skip
    job = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    lines, succeeded_at = [], None
    assert job.stderr is not None
    for line in job.stderr:
        lines.append(line)
        if succeeded_at is None and "run exit succeeded" in line:
            succeeded_at = time.monotonic()
    job.wait(timeout=60)
    exited = time.monotonic()
    stderr = "".join(lines)
    assert job.returncode == 0 and succeeded_at is not None, stderr[-3000:]
    after = [line for line in stderr.split("run exit succeeded", 1)[1].splitlines()]
    assert not [line for line in lines if " ERROR " in line], stderr[-3000:]
    assert not STACK_TRACE.search(stderr), around_stack(stderr)
    assert exited - succeeded_at < 3, f"{exited - succeeded_at:.1f} s from success to exit: {after}"


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
