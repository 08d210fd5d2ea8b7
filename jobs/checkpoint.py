"""What the job reads from and guards around its streaming checkpoint."""

from __future__ import annotations

import fcntl
import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import IO


class LakeBusyError(RuntimeError):
    """Another ingest run holds the lake."""


class CheckpointError(RuntimeError):
    """The checkpoint cannot be used as it is; the message says how to recover."""


def _latest_log_entry(directory: Path) -> tuple[int, dict] | None:
    batches = sorted((int(p.name), p) for p in directory.glob("[0-9]*") if p.name.isdigit()) if directory.is_dir() else []
    if not batches:
        return None
    batch_id, path = batches[-1]
    lines = path.read_text().splitlines()
    if len(lines) < 2 or lines[0] != "v1":
        raise CheckpointError(
            f"{path} is not a Spark commit-log entry (corrupted or written by another version). "
            "Recovery: restore the checkpoint from backup, or see README 'Recovering a checkpoint'."
        )
    return batch_id, json.loads(lines[1])


def committed_watermark(checkpoint: Path) -> datetime | None:
    """The de-duplication watermark the next batch will use, from the last commit; None before the first batch."""
    entry = _latest_log_entry(checkpoint / "commits")
    if entry is None:
        return None
    millis = entry[1].get("nextBatchWatermarkMs", 0)
    return datetime.fromtimestamp(millis / 1000, tz=UTC) if millis else None


def committed_batch_id(checkpoint: Path) -> int | None:
    entry = _latest_log_entry(checkpoint / "commits")
    return entry[0] if entry else None


def planned_batch_id(checkpoint: Path) -> int | None:
    """The last batch the offset log fixed; past the last commit when a batch is half done."""
    entry = _latest_log_entry(checkpoint / "offsets")
    return entry[0] if entry else None


def check_checkpoint_matches_table(checkpoint: Path, sink_log: Path) -> None:
    """Refuse a run whose checkpoint was lost while the table it wrote is still there:
    a fresh checkpoint would read every landing file again."""
    table_batches = [p for p in sink_log.glob("[0-9]*")] if sink_log.is_dir() else []
    if table_batches and committed_batch_id(checkpoint) is None:
        raise CheckpointError(
            f"the table has committed batches ({sink_log}) but the checkpoint {checkpoint} has none: it is missing or was reset. "
            "Refusing to start, as that would ingest every landing file again. Recovery: restore the checkpoint from backup, "
            "or move events/, quarantine/ and _checkpoints/ aside to rebuild the table (README, 'Recovering a checkpoint')."
        )


def _try_lock(handle: IO[str]) -> bool:
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


class LakeLock:
    """One writer per lake: an exclusive flock on <lake>/_checkpoints/ingest.lock.

    The kernel releases it when the holder dies, even by SIGKILL, so a crashed run never
    leaves a stale lock behind. `wait_seconds` > 0 waits that long for the holder to finish.
    """

    def __init__(self, lock_path: Path, wait_seconds: float = 0) -> None:
        self.path = lock_path
        self.wait_seconds = wait_seconds
        self._file: IO[str] | None = None

    def __enter__(self) -> LakeLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")  # noqa: SIM115 - held for the life of the run
        deadline = time.monotonic() + self.wait_seconds
        while not _try_lock(handle):
            if time.monotonic() >= deadline:
                handle.seek(0)
                holder = handle.read().strip() or "unknown"
                handle.close()
                raise LakeBusyError(
                    f"another ingest run is writing to this lake ({holder}); refusing to start. "
                    f"Wait for it to finish; the lock is {self.path}."
                )
            time.sleep(1)
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} since {datetime.now(tz=UTC).isoformat(timespec='seconds')}\n")
        handle.flush()
        self._file = handle
        return self

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None
