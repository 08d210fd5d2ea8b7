"""A job's exit after success (issue #67): well under a second after its last commit, nothing at ERROR, no stack."""

from __future__ import annotations

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
