"""The ingest checkpoint, read once per run into a snapshot.

It holds Spark's logs (jobs/spark_logs.py) and one file of this job's own,
last_success.json: the check time of the last successful run and the last batch it
committed, swept.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from jobs.files import write_whole
from jobs.lake import LAST_SUCCESS, MANIFESTS
from jobs.spark_logs import (
    CheckpointError,
    Commit,
    SourceLog,
    batch_files,
    last_commit,
    planned_batch_id,
    read_source_log,
    sink_log,
    source_offset,
)


@dataclass(frozen=True)
class LastSuccess:
    checked_at_ns: int = 0  # every file that changed before this was listed by a successful run
    batch_id: int | None = None  # the last batch committed when that run finished, swept
    listed_all_at_ns: int = 0  # the check time of the last successful run that listed every delivery folder
    # Day folders the next run lists whatever their times: they hold a file that was settling or could not be read.
    recheck: tuple[str, ...] = ()


def last_success_of(body: dict[str, Any], batch_id: int | None) -> LastSuccess:
    """The check times in `body`: last_success.json, or a run report's ledger summary (which names no batch)."""
    checked = int(body["checked_at_ns"])
    # Written before runs listed part of the zone: every run listed all of it.
    return LastSuccess(checked, batch_id, int(body.get("listed_all_at_ns", checked)), tuple(body.get("recheck", ())))


def read_last_success(checkpoint: Path) -> LastSuccess | None:
    """The file as the last successful run wrote it; None when there is none or it is damaged (cut short, edited)."""
    path = checkpoint / LAST_SUCCESS
    try:
        body = json.loads(path.read_text())
        return last_success_of(body, body.get("batch_id"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_last_success(checkpoint: Path, state: LastSuccess) -> None:
    body = {
        "checked_at_ns": state.checked_at_ns,
        "batch_id": state.batch_id,
        "listed_all_at_ns": state.listed_all_at_ns,
        "recheck": list(state.recheck),
    }
    write_whole(checkpoint / LAST_SUCCESS, json.dumps(body) + "\n")


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
        last_success = read_last_success(path)
        if last_success is None:
            if commit.batch_id is not None:
                raise CheckpointError(
                    f"{path / LAST_SUCCESS} is missing or damaged while {path} has committed batches: without its check "
                    "time the ledger would take retired landing files again. Recovery: restore it from the newest "
                    "successful run's report (the ingest does so itself when one is there), or from a backup."
                )
            last_success = LastSuccess()
        return cls(path, commit, planned, last_success, read_source_log(path, path / MANIFESTS), *offsets)

    @property
    def watermark(self) -> datetime | None:
        """The de-duplication watermark the next batch will use; None before the first batch."""
        return self.commit.watermark

    @property
    def settled(self) -> bool:
        """No batch half done, and none committed since a successful run swept the lake."""
        committed = self.commit.batch_id
        return committed is not None and self.planned_batch_id == committed and self.last_success.batch_id == committed

    def check_matches(self, tables: list[Path]) -> None:
        """Refuse a checkpoint older than the tables it wrote (lost, reset, restored from a backup on its own,
        batches deleted by hand): its next batches would reuse batch ids the tables have committed, and the
        sink, which commits a batch id once, would drop their rows; or it would read every landing file again."""
        for table in tables:
            logged = batch_files(sink_log(table))
            if not logged:
                continue
            committed, planned = logged[-1][0], self.planned_batch_id
            if planned is not None and committed <= planned:
                continue  # at most the batch the checkpoint planned: a replay of it writes nothing twice
            if planned is None:
                found = f"the checkpoint {self.path} has none: it is missing or was reset"
            else:
                found = f"the checkpoint {self.path} goes up to batch {planned}: it is older than the table (restored on its own?)"
            raise CheckpointError(
                f"the table {table} has committed batches up to {committed} but {found}. Refusing to start: "
                "its batches would lose rows or read landing files again. Recovery: `python -m jobs.repair --lake LAKE "
                "--landing LANDING` rolls the tables back to the checkpoint and the next run reads the rest again, once; "
                "or restore the whole lake (tables and checkpoint) from one backup (README, 'Recovering a checkpoint')."
            )
