"""The notification records the lake keeps, one owner for all four (each a record of jobs/storage.py):

    <lake>/notifications/kept/      messages that cannot be read, whole, with the reason (then deleted from the queue)
    <lake>/notifications/refused/   keys the lake's disk cannot hold, named before their messages are deleted
    <lake>/notifications/outside/   log files a message names outside the configured landing, until a run takes them
    <lake>/notifications/inbox/     notifications the event-driven DAG's watcher took, until a run has ledgered them

The queue's calls are jobs/landing/sqs.py's; the lake page and `make status` read these through the functions here.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from jobs.lake import Lake
from jobs.landing.bucket import REFUSED, Problem
from jobs.landing.notifications import Delivery
from jobs.storage import LakePath, read_record, write_record

log = logging.getLogger("cloudtrail_ingest")
T = TypeVar("T")
# Their format (jobs/storage.py's `record_body`), 1 since they named one.
RECORD_FORMAT = 1


def keep(lake: Lake, message_id: str, body: str, reason: str) -> LakePath:
    path = lake.kept_messages / f"{_safe(message_id)}.json"
    write_record(path, RECORD_FORMAT, {"message_id": message_id, "reason": reason, "body": body})
    log.warning("kept a notification that cannot be read, %s: %s", path.name, reason)
    return path


def kept(lake: Lake) -> list[dict[str, Any]]:
    """The messages kept as unreadable, each with its reason."""
    return _entries(lake.kept_messages)


def _entries(folder: LakePath) -> list[dict[str, Any]]:
    """A folder's JSON entries (kept messages), in name order."""
    return [_record(path) for path in _paths(folder)]


def _paths(folder: LakePath) -> list[LakePath]:
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def _taken_back(lake: Lake, folder: LakePath, what: str, read: Callable[[dict[str, Any]], T]) -> list[tuple[LakePath, T]]:
    """A folder's entries, each as `read` takes its record; one that cannot be read is kept as an unreadable
    notification (`what` says which kind of entry it was; its name says the folder too, so an inbox entry and an
    outside one of the same name are both kept) and removed."""
    entries = []
    for path in _paths(folder):
        try:
            entries.append((path, read(_record(path))))
        except (ValueError, KeyError, TypeError) as exc:
            keep(lake, f"{folder.name}-{path.stem}", path.read_text(errors="replace"), f"{what} that cannot be read: {exc}")
            path.unlink()
    return entries


def _record(path: LakePath) -> dict[str, Any]:
    return read_record(path, RECORD_FORMAT)


def keep_refused(lake: Lake, problems: Iterable[Problem]) -> None:
    """The keys a run refused (the lake's disk cannot hold them), each kept under notifications/refused/ before their
    messages are deleted: named even when the run dies before its report."""
    for problem in problems:
        if problem.reason.startswith(REFUSED):
            name = hashlib.sha256(f"{problem.bucket}/{problem.key}".encode()).hexdigest()[:32]
            path = lake.refused_keys / f"{name}.json"
            if not path.exists():
                write_record(path, RECORD_FORMAT, problem.to_json())


def refused(lake: Lake, newest: int = 100) -> list[dict[str, str]]:
    """The keys kept as refused, the newest first."""
    folder = lake.refused_keys
    paths = sorted(_paths(folder), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    return [_record(path) for path in paths[:newest]]


def keep_outside(lake: Lake, message_id: str, outside: Sequence[Delivery], landing: str) -> LakePath:
    """A message's log files outside the configured landing, kept until a run whose landing holds them takes them back:
    a mistyped prefix or bucket loses nothing, and the run names both."""
    path = lake.outside_messages / f"{_safe(message_id)}.json"
    body = {"message_id": message_id, "landing": landing, "objects": [[d.bucket, d.key] for d in outside]}
    write_record(path, RECORD_FORMAT, body)
    return path


def outside_entries(lake: Lake) -> list[tuple[str, LakePath, list[list[str]]]]:
    """The kept messages outside the landing, to take back into a run: (message id, its entry, the [bucket, key] it
    names). An entry that cannot be read is kept as unreadable and removed."""

    def read(entry: dict[str, Any]) -> tuple[str, list[list[str]]]:
        return str(entry["message_id"]), [[str(bucket), str(key)] for bucket, key in entry["objects"]]

    taken = _taken_back(lake, lake.outside_messages, "a kept outside entry", read)
    return [(message_id, path, objects) for path, (message_id, objects) in taken]


def outside(lake: Lake) -> list[dict[str, Any]]:
    """The kept messages naming log files outside the landing, each with the landing it was kept under."""
    return _entries(lake.outside_messages)


def write_inbox(lake: Lake, event_id: str, bodies: Sequence[str]) -> LakePath:
    """The event-driven DAG's first task: the notifications its asset event carries (the watcher deleted them from
    the queue), kept in the lake until a run has ledgered their files. Written again for the same event: the same file."""
    path = lake.inbox / f"{_safe(event_id)}.json"
    write_record(path, RECORD_FORMAT, {"event": event_id, "bodies": list(bodies)})
    return path


def inbox_entries(lake: Lake) -> list[tuple[LakePath, list[str]]]:
    """The inbox's entries, each with the notification bodies it holds. An entry that cannot be read is kept as
    unreadable and removed."""

    def read(entry: dict[str, Any]) -> list[str]:
        bodies = entry["bodies"]
        return [body if isinstance(body, str) else json.dumps(body) for body in (bodies if isinstance(bodies, list) else [])]

    return _taken_back(lake, lake.inbox, "an inbox entry", read)


def keep_asset_events(lake: Lake, triggering: Mapping[Any, Iterable[Any]]) -> int:
    """The event-driven DAG's run: the notifications of the asset events that woke it, into the inbox; how many."""
    kept_bodies = 0
    for events in triggering.values():
        for event in events:
            bodies = bodies_of([event])
            if bodies:
                write_inbox(lake, f"asset-event-{getattr(event, 'id', None) or uuid.uuid4().hex}", bodies)
                kept_bodies += len(bodies)
    return kept_bodies


def bodies_of(events: Iterable[Any]) -> list[str]:
    """The message bodies the SQS trigger put in asset events' extra (payload.message_batch[].Body)."""
    bodies = []
    for event in events:
        extra = getattr(event, "extra", None) or (event.get("extra") if isinstance(event, dict) else None) or {}
        for message in (extra.get("payload") or {}).get("message_batch") or []:
            if isinstance(message, dict) and "Body" in message:
                bodies.append(message["Body"])
    return bodies


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:200] or "message"
