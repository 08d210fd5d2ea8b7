"""The SQS queue of delivery notifications: what a run takes from it, and when a message is done.

A run receives every message waiting (up to --max-messages, each once: a message received again ends the receiving),
keeps them hidden while it works (ChangeMessageVisibility), parses each (jobs/landing/notifications.py), and deletes a
message only after the files it names are in the ledger (`Received.done`, called once the run's manifests are
written): a run that dies before that leaves them to come back, and a message received twice names files the ledger
already has. Log files a message names outside the configured landing (a mistyped prefix or bucket) are kept under
<lake>/notifications/outside/ and taken back by every later run, which ingests them once the landing holds them.
Messages that cannot be parsed are kept, whole, with their reason, under <lake>/notifications/kept/ (the lake page
counts them), then deleted: left in the queue they would come back every run.
Notifications the event-driven DAG's watcher took from the queue reach a run through the inbox
(<lake>/notifications/inbox/), written by the DAG's first task and emptied by the run that ledgered their files.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobs import options
from jobs.files import read_record, write_record
from jobs.lake import Lake
from jobs.landing.bucket import REFUSED, BucketLanding, Problem
from jobs.landing.notifications import Delivery, parse

log = logging.getLogger("cloudtrail_ingest")
RECEIVE_BATCH = 10  # SQS's most per call
MAX_MESSAGES = options.MAX_MESSAGES
VISIBILITY_SECONDS = options.VISIBILITY_SECONDS
# The notification records the lake keeps (kept, refused, outside, inbox): their format (jobs/files.py's `record_body`), 1
# since they named one.
RECORD_FORMAT = 1


@dataclass
class Received:
    """The messages one run took (from the queue, the inbox and the notifications kept as outside the landing), by
    message id, and what they name."""

    # Each queue message's newest receipt (a message received twice answers only to the newer one): what deletes it.
    held: dict[str, str] = field(default_factory=dict)
    # The log files each message names, by message id.
    named: dict[str, tuple[Delivery, ...]] = field(default_factory=dict)
    inbox_files: list[Path] = field(default_factory=list)
    # Entries of <lake>/notifications/outside/ taken back, by message id, with what they name: removed once nothing
    # they name is outside, written again only when what they name outside changes.
    outside_files: dict[str, tuple[Path, list[list[str]]]] = field(default_factory=dict)
    # What the messages name outside the landing (kept, not deleted in silence), by message id.
    outside: dict[str, list[Delivery]] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    # When the oldest queue message taken was sent (ms since the epoch): SQS has no call that tells the oldest
    # message's age without CloudWatch, so the page shows it as the last run found it.
    oldest_sent_ms: int | None = None
    holding: Holding | None = None

    @property
    def deliveries(self) -> list[Delivery]:
        return [delivery for named in self.named.values() for delivery in named]

    def take(self, message_id: str, body: str, lake: Lake, receipt: str | None = None) -> None:
        notification = parse(body)
        if receipt is not None:
            self.held[message_id] = receipt
        self.counts["messages"] += 1
        if notification.reason is not None:
            keep(lake, message_id, body, notification.reason)
            self.counts["kept_unparseable"] += 1
            return
        self.named[message_id] = notification.deliveries
        self.counts["files_named"] += len(notification.deliveries)
        self.counts["ignored_objects"] += notification.ignored

    def sort_out(self, lake: Lake, landing: BucketLanding) -> list[str]:
        """The log keys under `landing`, each once; what a message names outside it is kept in the lake until a run
        whose landing holds it takes it back (`take_outside`), its message deleted from the queue meanwhile."""
        for message_id, named in self.named.items():
            outside = [d for d in named if not landing.holds(d.bucket, d.key)]
            if outside:
                self.outside[message_id] = outside
                if [[d.bucket, d.key] for d in outside] != self.outside_files.get(message_id, (None, None))[1]:
                    keep_outside(lake, message_id, outside, landing.url)
        self.counts["outside_landing"] = sum(len(named) for named in self.outside.values())
        return list(dict.fromkeys(d.key for d in self.deliveries if landing.holds(d.bucket, d.key)))

    def done(self, sqs: Any, queue_url: str | None, retry: Iterable[str] = ()) -> None:
        """Delete the messages and inbox entries: their files are in the ledger (or kept as outside the landing). A
        message naming a key in `retry` (its object was forbidden, or its fetch failed) stays, to come back after its
        visibility timeout: once per timeout, then to the queue's dead-letter queue. A message whose receipt expired
        (another receive took it) stays too and comes back naming files the ledger has."""
        self.release()
        again = set(retry)
        finished = [receipt for mid, receipt in self.held.items() if again.isdisjoint(d.key for d in self.named.get(mid, ()))]
        self.counts["left_for_retry"] += len(self.held) - len(finished)
        for start in range(0, len(finished), RECEIVE_BATCH):
            entries = [{"Id": str(i), "ReceiptHandle": h} for i, h in enumerate(finished[start : start + RECEIVE_BATCH])]
            failed = sqs.delete_message_batch(QueueUrl=queue_url, Entries=entries).get("Failed", [])
            self.counts["delete_failed"] += len(failed)
            self.counts["deleted"] += len(entries) - len(failed)
        for path in self.inbox_files:
            path.unlink(missing_ok=True)
        for message_id, (path, _) in self.outside_files.items():
            if message_id not in self.outside:
                path.unlink(missing_ok=True)
                self.counts["taken_back"] += 1

    def release(self) -> None:
        """Stop extending the held messages' visibility: those not deleted come back after their timeout."""
        if self.holding is not None:
            self.holding.stop()
            self.holding = None


class Holding(threading.Thread):
    """Keeps a run's messages hidden while it works (ChangeMessageVisibility every third of the timeout), so a run
    longer than the visibility timeout neither sees them again nor hands them to another receiver."""

    def __init__(self, sqs: Any, queue_url: str, received: Received, visibility_seconds: int) -> None:
        super().__init__(name="sqs-visibility", daemon=True)
        self.sqs, self.queue_url, self.received, self.seconds = sqs, queue_url, received, visibility_seconds
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(max(self.seconds / 3, 0.2)):
            receipts = list(self.received.held.values())
            for start in range(0, len(receipts), RECEIVE_BATCH):
                entries = [
                    {"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": self.seconds}
                    for i, h in enumerate(receipts[start : start + RECEIVE_BATCH])
                ]
                try:
                    failed = self.sqs.change_message_visibility_batch(QueueUrl=self.queue_url, Entries=entries).get("Failed", [])
                except Exception as exc:  # noqa: BLE001 - a missed extension costs a second receive, which the ledger absorbs
                    log.warning("could not extend the visibility of %d messages: %s", len(entries), exc)
                    continue
                self.received.counts["visibility_extension_failed"] += len(failed)

    def stop(self) -> None:
        self.stopped.set()
        self.join()


def receive(sqs: Any, queue_url: str, lake: Lake, limit: int = MAX_MESSAGES, visibility_seconds: int = VISIBILITY_SECONDS) -> Received:
    """Every message waiting in the queue, up to `limit`, each hidden from other receivers for `visibility_seconds`
    and kept hidden until `done` (or `release`); and the inbox's and the kept outside ones. A message received a
    second time ends the receiving: the queue has come round to what this run holds."""
    received = take_inbox(lake)
    take_outside(lake, received)
    received.holding = Holding(sqs, queue_url, received, visibility_seconds)
    received.holding.start()
    queued = 0
    while queued < limit:
        messages = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=RECEIVE_BATCH, WaitTimeSeconds=0, VisibilityTimeout=visibility_seconds,
            MessageSystemAttributeNames=["SentTimestamp"],
        ).get("Messages", [])  # fmt: skip
        again = [message for message in messages if message["MessageId"] in received.held]
        for message in again:  # only its newest receipt deletes it
            received.held[message["MessageId"]] = message["ReceiptHandle"]
        received.counts["received_again"] += len(again)
        fresh = [message for message in messages if message["MessageId"] not in received.held]
        for message in fresh:
            received.take(message["MessageId"], message.get("Body", ""), lake, message["ReceiptHandle"])
            sent = int(message.get("Attributes", {}).get("SentTimestamp", 0)) or None
            if sent is not None and (received.oldest_sent_ms is None or sent < received.oldest_sent_ms):
                received.oldest_sent_ms = sent
        queued += len(fresh)
        if not messages or again:
            break
    return received


def keep(lake: Lake, message_id: str, body: str, reason: str) -> Path:
    path = lake.kept_messages / f"{_safe(message_id)}.json"
    write_record(path, RECORD_FORMAT, {"message_id": message_id, "reason": reason, "body": body})
    log.warning("kept a notification that cannot be read, %s: %s", path.name, reason)
    return path


def kept(lake: Lake) -> list[dict[str, Any]]:
    """The messages kept as unreadable, each with its reason."""
    return _entries(lake.kept_messages)


def _entries(folder: Path) -> list[dict[str, Any]]:
    """A folder's JSON entries (kept messages), in name order."""
    return [_record(path) for path in sorted(folder.glob("*.json"))] if folder.is_dir() else []


def _record(path: Path) -> dict[str, Any]:
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
    paths = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime_ns, reverse=True) if folder.is_dir() else []
    return [_record(path) for path in paths[:newest]]


def keep_outside(lake: Lake, message_id: str, outside: Sequence[Delivery], landing: str) -> Path:
    """A message's log files outside the configured landing, kept until a run whose landing holds them takes them back:
    a mistyped prefix or bucket loses nothing, and the run names both."""
    path = lake.outside_messages / f"{_safe(message_id)}.json"
    body = {"message_id": message_id, "landing": landing, "objects": [[d.bucket, d.key] for d in outside]}
    write_record(path, RECORD_FORMAT, body)
    return path


def take_outside(lake: Lake, received: Received) -> None:
    """The kept messages outside the landing, back into this run: what its landing holds now is taken."""
    for path in sorted(lake.outside_messages.glob("*.json")) if lake.outside_messages.is_dir() else []:
        try:
            entry = _record(path)
            objects = [[str(bucket), str(key)] for bucket, key in entry["objects"]]
            message_id = str(entry["message_id"])
        except (ValueError, KeyError, TypeError) as exc:
            keep(lake, path.stem, path.read_text(errors="replace"), f"a kept outside entry that cannot be read: {exc}")
            path.unlink()
            continue
        received.named[message_id] = tuple(Delivery(bucket, key) for bucket, key in objects)
        received.outside_files[message_id] = (path, objects)


def outside(lake: Lake) -> list[dict[str, Any]]:
    """The kept messages naming log files outside the landing, each with the landing it was kept under."""
    return _entries(lake.outside_messages)


def write_inbox(lake: Lake, event_id: str, bodies: Sequence[str]) -> Path:
    """The event-driven DAG's first task: the notifications its asset event carries (the watcher deleted them from
    the queue), kept in the lake until a run has ledgered their files. Written again for the same event: the same file."""
    path = lake.inbox / f"{_safe(event_id)}.json"
    write_record(path, RECORD_FORMAT, {"event": event_id, "bodies": list(bodies)})
    return path


def take_inbox(lake: Lake) -> Received:
    received = Received()
    for path in sorted(lake.inbox.glob("*.json")) if lake.inbox.is_dir() else []:
        try:
            bodies = _record(path)["bodies"]
        except (ValueError, KeyError, TypeError) as exc:
            keep(lake, path.stem, path.read_text(errors="replace"), f"an inbox entry that cannot be read: {exc}")
            path.unlink()
            continue
        for index, body in enumerate(bodies if isinstance(bodies, list) else []):
            received.take(f"{path.stem}-{index}", body if isinstance(body, str) else json.dumps(body), lake)
        received.inbox_files.append(path)
    return received


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


def depth(sqs: Any, queue_url: str) -> dict[str, int]:
    """The queue's approximate figures: messages waiting, in flight (received, not deleted), delayed."""
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"]
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=names)["Attributes"]
    return {"waiting": int(attributes[names[0]]), "in_flight": int(attributes[names[1]]), "delayed": int(attributes[names[2]])}


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:200] or "message"


def sqs_client(timeout_seconds: float | None = None) -> Any:
    import boto3
    from botocore.config import Config

    if timeout_seconds is None:
        return boto3.client("sqs")
    quick = Config(connect_timeout=timeout_seconds, read_timeout=timeout_seconds, retries={"max_attempts": 1})
    return boto3.client("sqs", config=quick)


def queue_url_default() -> str | None:
    return os.environ.get("CLOUDTRAIL_QUEUE_URL") or None
