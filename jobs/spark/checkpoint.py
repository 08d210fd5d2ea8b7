"""The ingest checkpoint: an ingest run enters here twice, to open it (mended, read once into a snapshot, checked
against the tables) before the stream and to record its success after it (the commit log read once).

It holds Spark's logs (jobs/spark/logs.py) and one file of this job's own,
last_success.json: the check time of the last successful run and the last batch it
committed, swept. This module is its one writer: the ledger hands back what to record.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jobs import storage
from jobs.lake import LAST_SUCCESS, MANIFESTS, Lake
from jobs.reporting.report import read_reports
from jobs.spark.logs import (
    RESTORE,
    STREAM_METADATA,
    CheckpointError,
    Commit,
    SourceLog,
    drop_orphan_checksums,
    last_commit,
    planned_batch_id,
    read_source_log,
    relocate_source_log,
    restore_stream_metadata,
    source_log_gaps,
    source_offset,
    state_folder,
)
from jobs.spark.state import state_partitions
from jobs.storage import LakePath, read_record, write_record

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# last_success.json's format (jobs/storage.py's `record_body`): 1 since it named one.
LAST_SUCCESS_FORMAT = 1
# Spark's checkpoint manager for object stores (spark-hadoop-cloud): it writes each file in its place and aborts the
# upload of one that fails, where the default writes a temporary file and renames it (in S3, a copy and a delete).
OBJECT_STORE_CHECKPOINTS = "org.apache.spark.internal.io.cloud.AbortableStreamBasedCheckpointFileManager"
CHECKPOINT_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"

log = logging.getLogger("checkpoint")


def checkpoint_location(spark: SparkSession, checkpoint: LakePath) -> str:
    """Where a stream keeps its checkpoint, with the session's checkpoint manager for that storage (set or unset each
    time: a session that ran a stream on one lake and then another must not keep the first one's)."""
    if storage.is_folder(checkpoint):
        spark.conf.unset(CHECKPOINT_MANAGER)
    else:
        spark.conf.set(CHECKPOINT_MANAGER, OBJECT_STORE_CHECKPOINTS)
    return str(checkpoint)


def make_state_folders(spark: SparkSession, checkpoint: LakePath) -> None:
    """In object storage, each state partition's folder made as the first batch starts, after Spark has checked
    that a new checkpoint holds no state and before its tasks open the state. Spark's state maintenance may list a
    partition's folder as a task opens it (RocksDBFileManager.deleteOldVersions), before anything is written there;
    in object storage nothing is there until an object is, so the list fails, and Spark logs the failure with a
    stack trace (harmless, and tried again). Hadoop's own mkdirs writes the marker S3A reads as an empty folder."""
    partitions = state_partitions(checkpoint)
    if storage.is_folder(checkpoint) or partitions is None:
        return
    for partition in range(partitions):
        make_folder(spark, state_folder(checkpoint) / "0" / str(partition))


def make_folder(spark: SparkSession, folder: LakePath) -> None:
    """A folder made as Hadoop makes one: in object storage, the marker S3A reads as an empty folder (a prefix holds no
    folder until an object is under it)."""
    from jobs.spark.sinks import classic_jvm  # pyspark, which the checkpoint's readers without Spark do not load

    path = classic_jvm(spark).org.apache.hadoop.fs.Path(str(folder))
    path.getFileSystem(spark._jsc.hadoopConfiguration()).mkdirs(path)


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


def read_last_success(checkpoint: LakePath) -> LastSuccess | None:
    """The file as the last successful run wrote it; None when there is none or it is damaged (cut short, edited)."""
    path = checkpoint / LAST_SUCCESS
    try:
        body = read_record(path, LAST_SUCCESS_FORMAT)
        return last_success_of(body, body.get("batch_id"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write(checkpoint: LakePath, state: LastSuccess) -> None:
    body = {
        "checked_at_ns": state.checked_at_ns,
        "batch_id": state.batch_id,
        "listed_all_at_ns": state.listed_all_at_ns,
        "recheck": list(state.recheck),
    }
    write_record(checkpoint / LAST_SUCCESS, LAST_SUCCESS_FORMAT, body)


def record_success(lake: Lake, check_times: LastSuccess) -> Commit:
    """After a successful run, swept: its check times (the ledger's plan hands them back) and the last clean batch,
    the checkpoint's last commit, which is returned (the commit log's one read after the stream)."""
    commit = last_commit(lake.checkpoint)
    _write(lake.checkpoint, dataclasses.replace(check_times, batch_id=commit.batch_id))
    return commit


def open_for_ingest(lake: Lake, held: dict[str, int | None]) -> CheckpointSnapshot:
    """The checkpoint an ingest run starts from: what can be mended is (a checksum whose file is gone, Spark's stream
    metadata, a moved lake's log of read manifests, last_success.json from the reports), then it is read once and
    checked against the tables (`held`: the newest batch of each table that keeps no sink log, by name); a new checkpoint
    gets its last_success.json before the ledger lets go of a manifest.
    Refused (CheckpointError) while a rescale of the de-duplication state is unfinished."""
    if lake.rescaling.exists():
        raise CheckpointError(
            f"{lake.rescaling}: a rescale of the de-duplication state did not finish. Run python -m jobs.rescale "
            "--lake LAKE --state-partitions N again to finish it (README, 'Rescaling the de-duplication state')."
        )
    for crc in drop_orphan_checksums(lake.checkpoint, [lake.events] if lake.events.is_dir() else []):
        log.warning("deleted %s: the file it was the checksum of is gone", crc)
    if restore_stream_metadata(lake.checkpoint):
        log.warning("%s was missing or damaged: written again (it holds only the stream's id)", lake.checkpoint / STREAM_METADATA)
    if relocate_source_log(lake.checkpoint, lake.manifests):
        log.warning("the lake was moved: Spark's log of read manifests now names them under %s", lake.manifests)
    if restore_last_success(lake):
        log.warning("%s was missing or damaged: written again from the newest successful run's report", lake.last_success)
    snapshot = CheckpointSnapshot.verified(lake, held)
    keep_check_times(snapshot)
    return snapshot


def keep_check_times(snapshot: CheckpointSnapshot) -> None:
    """Write the file when there is none (a new checkpoint, one from before it), before the ledger lets go of its
    first manifest: a checkpoint without it has never lost one."""
    if not (snapshot.path / LAST_SUCCESS).exists():
        _write(snapshot.path, dataclasses.replace(snapshot.last_success, batch_id=None))


def restore_last_success(lake: Lake) -> bool:
    """A missing or damaged file beside committed batches written again from the newest successful run's report,
    which holds the same check times; the batch is left unknown, so the next run sweeps. Whether it was written."""
    if read_last_success(lake.checkpoint) is not None or last_commit(lake.checkpoint).batch_id is None:
        return False
    succeeded = [run for run in read_reports(lake.ingest_reports) if run.get("status") == "succeeded"]
    checked = [run["ledger"] for run in succeeded if "checked_at_ns" in (run.get("ledger") or {})]
    if checked:
        _write(lake.checkpoint, last_success_of(checked[-1], None))
    return bool(checked)


def forget_batch(checkpoint: LakePath) -> None:
    """The batch the file names was rolled back (jobs/upkeep/repair.py): left unknown, so the next run sweeps."""
    last = read_last_success(checkpoint)
    if last is not None:
        _write(checkpoint, dataclasses.replace(last, batch_id=None))


@dataclass(frozen=True)
class CheckpointSnapshot:
    path: LakePath
    commit: Commit
    planned_batch_id: int | None
    last_success: LastSuccess
    sources: SourceLog
    # The source's log offsets the last committed and the last planned batch read up to.
    committed_offset: int | None
    planned_offset: int | None

    @classmethod
    def verified(cls, lake: Lake, held: dict[str, int | None]) -> CheckpointSnapshot:
        """The lake's checkpoint, read and checked against the newest batch of each table in `held`, by where it is
        (CheckpointError names the mend)."""
        snapshot = cls.read(lake.checkpoint)
        snapshot.check_matches(held)
        return snapshot

    @classmethod
    def read(cls, path: LakePath) -> CheckpointSnapshot:
        commit, planned = last_commit(path), planned_batch_id(path)
        if commit.batch_id is not None and (planned is None or planned < commit.batch_id):
            raise CheckpointError(
                f"{path / 'commits'} has batch {commit.batch_id} committed but {path / 'offsets'} plans "
                f"{'no batch' if planned is None else f'up to batch {planned}'}: offset files were deleted, and the files "
                f"those batches read would be skipped. Refusing to start. {RESTORE}"
            )
        offsets = source_offset(path, commit.batch_id), source_offset(path, planned)
        gaps = source_log_gaps(path, offsets[1])
        if gaps:
            raise CheckpointError(
                f"{path / 'sources' / '0'} lacks the files of log offsets {gaps[:5]}: they were deleted, and the manifests "
                f"they named would be read again or skipped. Refusing to start. {RESTORE}"
            )
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

    def check_matches(self, tables: dict[str, int | None]) -> None:
        """Refuse tables and a checkpoint that disagree on which batches are done. Every batch commits to each table's
        sink log before the checkpoint commits it, so a table's newest batch is the checkpoint's last commit, or the
        batch it planned after it when the run died between the two.

        A checkpoint older than a table (lost, reset, restored from a backup on its own, batches deleted by hand) would
        reuse batch ids the table has committed, and the sink, which commits a batch id once, would drop their rows.
        A table older than the checkpoint (restored from an older backup, its log cut) lacks the rows of batches the
        checkpoint counts as done, which no run would read again."""
        committed = -1 if self.commit.batch_id is None else self.commit.batch_id
        planned = -1 if self.planned_batch_id is None else self.planned_batch_id
        for table, logged in tables.items():
            newest = -1 if logged is None else logged
            if newest > planned:
                found = (
                    f"the checkpoint {self.path} has none: it is missing or was reset"
                    if self.planned_batch_id is None
                    else f"the checkpoint {self.path} goes up to batch {planned}: it is older than the table (restored on its own?)"
                )
                raise CheckpointError(
                    f"the table {table} has committed batches up to {newest} but {found}. Refusing to start: "
                    "its batches would lose rows or read landing files again. Recovery: `python -m jobs.repair --lake LAKE "
                    "--landing LANDING` rolls the tables back to the checkpoint and the next run reads the rest again, once; "
                    "or restore the whole lake (tables and checkpoint) from one backup (README, 'Recovering a checkpoint')."
                )
            if newest < committed:
                has = "no committed batch" if logged is None else f"committed batches up to {newest}"
                raise CheckpointError(
                    f"the table {table} has {has} but the checkpoint {self.path} committed batch {committed}: the table is "
                    f"older than the checkpoint (restored from an older backup?) and lacks the rows of batches {newest + 1}-"
                    f"{committed}. Refusing to start. {RESTORE}"
                )
