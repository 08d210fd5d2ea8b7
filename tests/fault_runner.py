"""Run the ingest job and SIGKILL it (driver and JVM together) at a chosen phase of a batch.

    python -m tests.fault_runner PHASE N -- <cloudtrail_ingest arguments>

PHASE is where, in the N-th batch this process runs (0-based), the kill lands:
  reading           the batch is planned (offsets logged), its files are being read
  writing_data      the batch has written data files into the events table's folder, none committed
  between_outputs   quarantine is committed, events not yet
  committing_state  both outputs are committed, Spark's commit log for the batch is not
  random:SECONDS    after that many seconds, wherever the run is
  fetching          an S3 landing: once N objects are fetched, before the plan (N counts objects, not batches)
  deleting          an S3 landing: the plan has ledgered every file, N of the messages are deleted
The job code is not changed: this wraps its own functions. Used by tests/test_chaos.py and
`make chaos`.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from jobs import storage
from jobs.ingest import command as cli
from jobs.ingest.batch_writer import BatchWriter
from jobs.lake import EVENTS, Lake
from jobs.landing.bucket import BucketLanding
from jobs.landing.sqs import Received
from jobs.storage import LakePath
from jobs.tables.events import INGEST
from jobs.tables.events_table import EventsTable
from jobs.tables.record_files import record_files


def die() -> None:
    os.killpg(os.getpgid(0), signal.SIGKILL)


def kill_when_uncommitted_data_appears(lake: Lake, folder: LakePath) -> None:
    """Poll for a data file in the events table's data folder that no commit names yet, and kill at once."""

    def committed() -> set[str]:
        return {str(path) for paths in record_files(lake, EVENTS, INGEST).values() for path in paths}

    def watch() -> None:
        known = {str(p) for p in folder.glob("event_date=*/*.parquet")} | committed()
        while True:
            for path in folder.glob("event_date=*/*.parquet"):
                if str(path) not in known:
                    die()
            time.sleep(0.002)

    threading.Thread(target=watch, daemon=True).start()


def main() -> int:
    phase, target = sys.argv[1], int(sys.argv[2])
    job_args = sys.argv[sys.argv.index("--") + 1 :]
    if phase.startswith("random:"):
        threading.Timer(float(phase.split(":")[1]), die).start()
        return cli.main(job_args)

    if phase in ("fetching", "deleting"):
        return _kill_in_deliveries(phase, target, job_args)
    calls = {"batches": 0}
    original_call = BatchWriter.__call__
    original_commit = EventsTable.commit_batch

    def call(self, rows, batch_id):  # type: ignore[no-untyped-def]
        index = calls["batches"]
        calls["batches"] += 1
        if index == target and phase == "reading":
            rows.count()  # read the batch's files, then die before anything is written
            die()
        if index == target and phase == "writing_data":
            kill_when_uncommitted_data_appears(self.lake, storage.at(self.events.data_folder))
        original_call(self, rows, batch_id)
        if index == target and phase == "committing_state":
            die()

    def commit(self, query_id, batch_id, files, replaced):  # type: ignore[no-untyped-def]
        if calls["batches"] - 1 == target and phase == "between_outputs":  # the quarantine's commit is made
            die()
        original_commit(self, query_id, batch_id, files, replaced)

    BatchWriter.__call__ = call  # type: ignore[method-assign]
    EventsTable.commit_batch = commit  # type: ignore[method-assign]
    return cli.main(job_args)


def _kill_in_deliveries(phase: str, target: int, job_args: list[str]) -> int:
    fetched, lock = [0], threading.Lock()
    original_fetch, original_done = BucketLanding._fetch_one, Received.done

    def fetch_one(self, s3, key):  # type: ignore[no-untyped-def]
        outcome = original_fetch(self, s3, key)
        with lock:
            fetched[0] += 1
            if phase == "fetching" and fetched[0] >= target:
                die()
        return outcome

    def done(self, *args):  # type: ignore[no-untyped-def]
        self.held = dict(list(self.held.items())[:target])
        original_done(self, *args)
        die()

    BucketLanding._fetch_one = fetch_one  # type: ignore[method-assign]
    Received.done = done  # type: ignore[method-assign]
    return cli.main(job_args)


if __name__ == "__main__":
    sys.exit(main())
