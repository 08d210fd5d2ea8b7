"""The lake lock: one writer per lake at a time (stdlib only). Its file is jobs/lake.py's `Lake.lock`."""

from __future__ import annotations

import fcntl
import os
import time
from datetime import UTC, datetime
from typing import IO

from jobs.cli import LAKE_BUSY, Refused
from jobs.lake import Lake


class LakeBusyError(Refused):
    """Another writer holds the lake."""

    exit_code = LAKE_BUSY


class LakeUnusableError(Refused):
    """The lake's folder cannot be written: a file, a read-only mount, no permission."""


def _try_lock(handle: IO[str]) -> bool:
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


class LakeLock:
    """One writer per lake: an exclusive flock on the lake's lock file.

    The kernel releases it when the holder dies, even by SIGKILL, so a crashed run never
    leaves a stale lock behind. `wait_seconds` > 0 waits that long for the holder to finish.
    The holder writes who it is (`who`: "ingest run manual__...", "rebuild", ...) into the lock
    file, so a writer that gives up says who held the lake.
    """

    def __init__(self, lake: Lake, who: str, wait_seconds: float = 0) -> None:
        self.lake, self.path = lake, lake.lock
        self.who = who
        self.wait_seconds = wait_seconds
        self._file: IO[str] | None = None

    def __enter__(self) -> LakeLock:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle = open(self.path, "a+")  # noqa: SIM115 - held for the life of the run
        except OSError as exc:
            raise LakeUnusableError(f"the lake {self.lake.root} cannot be written ({exc.strerror}: {exc.filename}); check --lake") from None
        deadline = time.monotonic() + self.wait_seconds
        while not _try_lock(handle):
            if time.monotonic() >= deadline:
                handle.seek(0)
                holder = handle.read().strip() or "another writer"
                handle.close()
                raise LakeBusyError(
                    f"{holder} holds this lake; {self.who} waited {self.wait_seconds:.0f} s for it and refuses to start. "
                    f"Try again when it has finished (the lock is {self.path})."
                )
            time.sleep(1)
        handle.seek(0)
        handle.truncate()
        handle.write(f"{self.who} (pid {os.getpid()}, since {datetime.now(tz=UTC).isoformat(timespec='seconds')})\n")
        handle.flush()
        self._file = handle
        return self

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None
