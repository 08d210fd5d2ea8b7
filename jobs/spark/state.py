"""Spark's stream state and batches, rewound or rescaled where Spark offers no API: the state's partitions (jobs/upkeep/rescale.py)
and a rollback of the checkpoint to a batch (jobs/upkeep/repair.py). The logs' formats, and the
reading of them, are jobs/spark/logs.py's.
"""

from __future__ import annotations

import json
import re

from jobs import storage
from jobs.spark.logs import CheckpointError, batch_files, latest_entry, replace_log_file, state_folder
from jobs.storage import LakePath, read_whole

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


def state_partitions(checkpoint: LakePath) -> int | None:
    """The state's partitions, as the offset log fixes them for the next batch; None before the first batch."""
    entry = latest_entry(checkpoint / "offsets")
    return int(entry[1]["conf"][SHUFFLE_PARTITIONS]) if entry else None


def set_state_partitions(checkpoint: LakePath, partitions: int) -> None:
    """Make the next batch run with `partitions` state partitions (Spark takes them from the newest offset log entry)."""
    batch_id, path = batch_files(checkpoint / "offsets")[-1]
    version, metadata, *offsets = read_whole(path).split("\n")
    body = json.loads(metadata)
    body["conf"][SHUFFLE_PARTITIONS] = str(partitions)
    replace_log_file(path, version, [json.dumps(body, separators=(",", ":")), *offsets])


def state_version_files(checkpoint: LakePath, version: int, to: int) -> None:
    """Rename state version `version` of every partition of the checkpoint's state to version `to`: a snapshot is
    the same files whatever version it is named. Refuses a partition holding any other version."""
    for folder in _state_partitions(checkpoint):
        versions = {p.name for p in folder.iterdir() if p.name.endswith((".zip", ".changelog"))}
        if versions != {f"{version}.zip"}:
            raise CheckpointError(f"{folder} holds state versions {sorted(versions)}, where only {version}.zip was written")
        storage.move(folder / f"{version}.zip", folder / f"{to}.zip")
        crc = folder / f".{version}.zip.crc"
        if crc.exists():
            storage.move(crc, folder / f".{to}.zip.crc")


# A state version's files in a partition's folder: a RocksDB snapshot, or the changelog and delta files of others.
STATE_KINDS = ("zip", "changelog", "delta", "snapshot")


STATE_VERSION = re.compile(rf"^(\d+)\.({'|'.join(STATE_KINDS)})$")


def missing_for_rollback(checkpoint: LakePath, through: int) -> list[str]:
    """What a rollback of the checkpoint to batch `through` needs and the checkpoint no longer keeps: the batch's
    offset and commit entries, and in every state partition the version the next batch loads (it keeps 3)."""
    missing = [str(checkpoint / log / str(through)) for log in ("commits", "offsets") if not (checkpoint / log / str(through)).exists()]
    for folder in _state_partitions(checkpoint):
        if not any((folder / f"{through + 1}.{kind}").exists() for kind in STATE_KINDS):
            missing.append(str(folder / f"{through + 1}.zip"))
    return missing


def rollback_checkpoint(checkpoint: LakePath, through: int) -> None:
    """Put the checkpoint back to after batch `through`: later state versions, offsets and commits deleted (the state
    first, the commits last, so a rollback that dies is done again by the same call). The next batch reads every
    manifest the source logged after that batch's offset, once, on the state that batch left."""
    for folder in _state_partitions(checkpoint):
        for path in folder.iterdir():
            version = STATE_VERSION.match(path.name)
            if version and int(version[1]) > through + 1:
                _unlink(path)
    for log in ("offsets", "commits"):
        for batch_id, path in reversed(batch_files(checkpoint / log)):
            if batch_id > through:
                _unlink(path)


def _state_partitions(checkpoint: LakePath) -> list[LakePath]:
    operator = state_folder(checkpoint) / "0"
    return sorted(p for p in operator.iterdir() if p.name.isdigit()) if operator.is_dir() else []


def _unlink(path: LakePath) -> None:
    """A log or state file and its checksum."""
    path.unlink()
    path.with_name(f".{path.name}.crc").unlink(missing_ok=True)


# The batch id jobs/java/cloudtrail/TableWriter.java puts in each data file's name: part-...-b<batch id>.c000...
WRITTEN_BY_BATCH = re.compile(r"-b(\d+)\.c\d{3}")
