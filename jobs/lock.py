"""The lake lock: one writer per lake at a time. A folder lake's is a file the kernel locks (`LakeLock`, jobs/lake.py's
`Lake.lock`); a lake in object storage, which drivers on different machines share, holds a lease object there
(`LeaseLock`): written with S3's conditional PUT, renewed while its holder runs, taken over once it expired."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import IO, Any

from jobs import object_store, options, storage
from jobs.cli import LAKE_BUSY, Refused
from jobs.lake import Lake


class LakeBusyError(Refused):
    """Another writer holds the lake."""

    exit_code = LAKE_BUSY


class LakeUnusableError(Refused):
    """The lake's folder cannot be written: a file, a read-only mount, no permission."""


class LakeMovedError(Refused):
    """The lake migrated to another location, or a migration to it did not finish: no writer starts on it."""


class LeaseLostError(Refused):
    """A holder's lease was taken over while it ran: it stalled past the lease, and another writer may have started."""

    exit_code = LAKE_BUSY


log = logging.getLogger("lock")


def _try_lock(handle: IO[str]) -> bool:
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


class LakeLock:
    """One writer per lake: an exclusive flock on a folder lake's lock file (a lake in object storage takes a LeaseLock there).

    The kernel releases it when the holder dies, even by SIGKILL, so a crashed run never
    leaves a stale lock behind. `wait_seconds` > 0 waits that long for the holder to finish.
    The holder writes who it is (`who`: "ingest run manual__...", "rebuild", ...) into the lock
    file, so a writer that gives up says who held the lake.
    """

    def __init__(self, lake: Lake, who: str, wait_seconds: float = 0, migrating: bool = False) -> None:
        self.lake, self.path = lake, lake.lock
        self.who = who
        self.wait_seconds = wait_seconds
        self.migrating = migrating  # the migration's own lock: it takes a lake its note names
        self._file: IO[str] | None = None
        self._lease: LeaseLock | None = None

    def __enter__(self) -> LakeLock:
        if not self.migrating and (note := migration(self.lake)) is not None:
            raise moved_refusal(self.lake, note)
        if not storage.is_folder(self.path):  # a lake in object storage: no kernel is shared, a lease is
            self._lease = LeaseLock(str(self.path), self.who, self.wait_seconds, lease_seconds()).__enter__()
            return self
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

    def __exit__(self, kind: object = None, *exc: object) -> None:
        if self._lease is not None:
            lease, self._lease = self._lease, None
            lease.__exit__(kind, *exc)
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None


# The migration note's format (jobs/storage.py's `record_body`).
MIGRATION_FORMAT = 1


def migration(lake: Lake) -> dict[str, Any] | None:
    """The note of a migration from or to `lake` (`from`, `to`, `done`), or None."""
    try:
        return storage.read_record(lake.migration, MIGRATION_FORMAT)
    except (FileNotFoundError, NotADirectoryError):  # no note; a lake that is a file is refused by the lock itself
        return None


def moved_refusal(lake: Lake, note: dict[str, Any]) -> LakeMovedError:
    """Why no writer starts on a lake a migration's note names: it moved, or a migration to it did not finish."""
    if note["to"] != lake.location:
        return LakeMovedError(f"this lake moved to {note['to']} (python -m jobs.migrate): point --lake and --catalog "
                              f"($CLOUDTRAIL_LAKE, $CLOUDTRAIL_CATALOG) there; {lake.root} is kept as it was")  # fmt: skip
    return LakeMovedError(f"a migration from {note['from']} to this lake did not finish: run python -m jobs.migrate "
                          f"--lake {note['from']} --to {lake.location} again to finish it")  # fmt: skip


# How long a lease lasts unless renewed; its holder renews it every third of that. A holder that dies (a lost machine,
# SIGKILL) holds the lake until then; one that stalls longer (a paused VM) loses it and fails when it exits.
LEASE_SECONDS = 120.0
# The shortest lease $CLOUDTRAIL_LEASE may set: renewals a third of it apart must outlast a slow request to the store.
SHORTEST_LEASE = timedelta(seconds=5)


def lease_seconds(env: Mapping[str, str] = os.environ) -> float:
    """A lake's lease, $CLOUDTRAIL_LEASE (a duration, at least SHORTEST_LEASE), else LEASE_SECONDS: how long a lost
    driver holds the lake."""
    text = env.get("CLOUDTRAIL_LEASE")
    if not text:
        return LEASE_SECONDS
    try:
        span = options.duration(text)
    except ValueError as exc:
        raise LakeUnusableError(f"CLOUDTRAIL_LEASE: {exc}") from None
    if span < SHORTEST_LEASE:
        raise LakeUnusableError(f"CLOUDTRAIL_LEASE={text!r}: a lease shorter than {SHORTEST_LEASE.seconds} s could lapse under its holder")
    return span.total_seconds()


class LeaseLock:
    """One writer per lake in object storage: the lease object at `uri` (s3://bucket/key).

    A free lease (none, released, or expired) is taken with a conditional PUT (`If-None-Match: *` where there is none,
    `If-Match` its ETag where there is one), so of two drivers taking it at once exactly one succeeds. Whether a lease
    expired is judged on the store's clock alone (its Last-Modified against the response's Date), never on the
    machines' clocks. The holder renews it with `If-Match` its own ETag; each body holds a random token, so no two
    holders' ETags are alike."""

    def __init__(self, uri: str, who: str, wait_seconds: float = 0, lease_seconds: float = LEASE_SECONDS, s3: Any = None) -> None:
        self.bucket, _, self.key = uri.removeprefix("s3://").partition("/")
        self.uri, self.who, self.wait_seconds, self.lease_seconds = uri, who, wait_seconds, lease_seconds
        self.s3 = s3 or object_store.s3_client()
        self._etag: str | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self.lost_to: str | None = None
        self._since = ""

    def __enter__(self) -> LeaseLock:
        self._since = _now()
        deadline = time.monotonic() + self.wait_seconds
        while True:
            holder, etag, free = self._held()
            if free and (taken := self._put(etag, released=False)) is not None:
                self._etag = taken
                break
            if time.monotonic() >= deadline:
                raise LakeBusyError(
                    f"{holder or 'another writer'} holds this lake; {self.who} waited {self.wait_seconds:.0f} s for it and refuses "
                    f"to start. Try again when it has finished (the lease is {self.uri}; a holder that died frees it "
                    f"{self.lease_seconds:.0f} s after its last renewal)."
                )
            time.sleep(min(1.0, self.lease_seconds / 4))
        self._renewer = threading.Thread(target=self._renew, name="lease-renewer", daemon=True)
        self._renewer.start()
        return self

    def __exit__(self, kind: object = None, *exc: object) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        if self.lost_to is None and self._etag is not None:
            self._put(self._etag, released=True)
        self._etag = None
        if self.lost_to is not None and kind is None:
            raise LeaseLostError(
                f"{self.who} lost its lease on this lake to {self.lost_to} while it ran (it stalled longer than "
                f"{self.lease_seconds:.0f} s): what it wrote after that is not certain to stand; run it again (the lease is {self.uri})"
            )

    def _renew(self) -> None:
        while not self._stop.wait(self.lease_seconds / 3):
            try:
                renewed = self._put(self._etag, released=False)
            except LakeUnusableError as exc:  # a refusal or a reset in passing: two more tries before the lease ends
                log.warning("%s could not renew its lease on the lake, trying again: %s", self.who, exc)
                continue
            if renewed is None:
                self.lost_to = self._held()[0] or "another writer"
                log.error("%s lost its lease on the lake (%s) to %s", self.who, self.uri, self.lost_to)
                return
            self._etag = renewed

    def _held(self) -> tuple[str | None, str | None, bool]:
        """Who holds the lease, its ETag (None: no lease yet), and whether it is free to take."""
        try:
            found = self.s3.get_object(Bucket=self.bucket, Key=self.key)
        except Exception as exc:  # noqa: BLE001 - the store's refusals, as boto3 raises them
            if _code(exc) in {"NoSuchKey", "404"}:
                return None, None, True
            raise self._unusable("read", exc) from None
        body = _lease(found["Body"].read())
        now = parsedate_to_datetime(found["ResponseMetadata"]["HTTPHeaders"]["date"])
        age = (now - found["LastModified"]).total_seconds()
        free = body.get("released") is True or age > float(body.get("lease_seconds", 0))
        return str(body.get("holder") or "another writer"), found["ETag"], free

    def _put(self, etag: str | None, released: bool) -> str | None:
        """The lease written over the version `etag` (None: where there is none); its new ETag, or None when another
        writer's came first."""
        holder = f"{self.who} (pid {os.getpid()} on {socket.gethostname()}, since {self._since})"
        body = {"holder": holder, "token": uuid.uuid4().hex, "lease_seconds": self.lease_seconds, "released": released}
        condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
        try:
            return str(self.s3.put_object(Bucket=self.bucket, Key=self.key, Body=json.dumps(body).encode(), **condition)["ETag"])
        except Exception as exc:  # noqa: BLE001 - the store's refusals, as boto3 raises them
            if _code(exc) in {"PreconditionFailed", "ConditionalRequestConflict", "412", "409"}:
                return None
            raise self._unusable("written", exc) from None

    def _unusable(self, done: str, exc: Exception) -> LakeUnusableError:
        return LakeUnusableError(f"the lake's lease {self.uri} cannot be {done} ({_code(exc) or type(exc).__name__}); check --lake")


def _code(exc: Exception) -> str | None:
    response = getattr(exc, "response", None)
    return str(response.get("Error", {}).get("Code")) if isinstance(response, dict) else None


def _lease(text: bytes) -> dict[str, Any]:
    """A lease's body; one that is no lease (damaged, written by hand) is a free one, never a lake locked for good."""
    try:
        body = json.loads(text)
    except ValueError:
        return {"released": True}
    return body if isinstance(body, dict) else {"released": True}


def _now() -> str:
    return datetime.now(tz=UTC).isoformat(timespec="seconds")
