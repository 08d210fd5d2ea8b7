"""The ingest checkpoint, read once per run into a snapshot.

It holds Spark's logs (jobs/spark_logs.py) and one file of this job's own,
last_success.json: the check time of the last successful run and the last batch it
committed, swept.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from jobs.lake import LAST_SUCCESS
from jobs.spark_logs import (
    CheckpointError,
    Commit,
    SourceLog,
    last_commit,
    planned_batch_id,
    read_source_log,
    sink_log_files,
    source_offset,
)


@dataclass(frozen=True)
class LastSuccess:
    checked_at_ns: int = 0  # every file that changed before this was listed by a successful run
    batch_id: int | None = None  # the last batch committed when that run finished, swept


def read_last_success(checkpoint: Path) -> LastSuccess:
    path = checkpoint / LAST_SUCCESS
    if not path.exists():
        return LastSuccess()
    body = json.loads(path.read_text())
    return LastSuccess(int(body["checked_at_ns"]), body.get("batch_id"))


def write_last_success(checkpoint: Path, state: LastSuccess) -> None:
    path = checkpoint / LAST_SUCCESS
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{LAST_SUCCESS}.partial")
    partial.write_text(json.dumps({"checked_at_ns": state.checked_at_ns, "batch_id": state.batch_id}) + "\n")
    os.replace(partial, path)


@dataclass(frozen=True)
class CheckpointSnapshot:
    path: Path
    commit: Commit
    planned_batch_id: int | None
    last_success: LastSuccess
    sources: SourceLog
    # The source's log offsets the last committed and the last planned batch read up to.
    committed_offset: int | None
    planned_offset: int | None

    @classmethod
    def read(cls, path: Path) -> CheckpointSnapshot:
        commit, planned = last_commit(path), planned_batch_id(path)
        offsets = source_offset(path, commit.batch_id), source_offset(path, planned)
        return cls(path, commit, planned, read_last_success(path), read_source_log(path), *offsets)

    @property
    def watermark(self) -> datetime | None:
        """The de-duplication watermark the next batch will use; None before the first batch."""
        return self.commit.watermark

    @property
    def settled(self) -> bool:
        """No batch half done, and none committed since a successful run swept the lake."""
        committed = self.commit.batch_id
        return committed is not None and self.planned_batch_id == committed and self.last_success.batch_id == committed

    def check_matches(self, table: Path) -> None:
        """Refuse a run whose checkpoint was lost while the table it wrote is still there:
        a fresh checkpoint would read every landing file again."""
        if sink_log_files(table) and self.commit.batch_id is None:
            raise CheckpointError(
                f"the table {table} has committed batches but the checkpoint {self.path} has none: it is missing or was reset. "
                "Refusing to start, as that would ingest every landing file again. Recovery: restore the checkpoint from backup, "
                f"or move {table}, the quarantine beside it and {self.path.parent} aside to rebuild the table "
                "(README, 'Recovering a checkpoint')."
            )
