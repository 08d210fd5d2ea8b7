"""The SQS queue of delivery notifications: what a run takes from it, and when a message is done.

A run receives every message waiting (up to --max-messages), parses each (jobs/notifications.py), and deletes a
message only after the files it names are in the ledger (`Received.done`, called once the run's manifests are
written): a run that dies before that leaves them to come back, and a message received twice names files the ledger
already has. Messages that cannot be parsed are kept, whole, with their reason, under <lake>/notifications/kept/
(the lake page counts them), then deleted: left in the queue they would come back every run.
Notifications the event-driven DAG's watcher took from the queue reach a run through the inbox
(<lake>/notifications/inbox/), written by the DAG's first task and emptied by the run that ledgered their files.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobs import options
from jobs.files import write_whole
from jobs.lake import Lake
from jobs.notifications import Delivery, parse

log = logging.getLogger("cloudtrail_ingest")
RECEIVE_BATCH = 10  # SQS's most per call
MAX_MESSAGES = options.MAX_MESSAGES
VISIBILITY_SECONDS = options.VISIBILITY_SECONDS


@dataclass
class Received:
    """The messages one run took (from the queue and the inbox), and what they name."""

    receipts: list[str] = field(default_factory=list)  # queue messages to delete once done
    # The object keys each queue message names, by its receipt.
    named: dict[str, list[str]] = field(default_factory=dict)
    inbox_files: list[Path] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    # When the oldest queue message taken was sent (ms since the epoch): SQS has no call that tells the oldest
    # message's age without CloudWatch, so the page shows it as the last run found it.
    oldest_sent_ms: int | None = None

    def take(self, message_id: str, body: str, lake: Lake, receipt: str | None = None) -> None:
        notification = parse(body)
        if receipt is not None:
            self.receipts.append(receipt)
            self.named[receipt] = [d.key for d in notification.deliveries]
        self.counts["messages"] += 1
        if notification.reason is not None:
            keep(lake, message_id, body, notification.reason)
            self.counts["kept_unparseable"] += 1
            return
        self.deliveries += notification.deliveries
        self.counts["files_named"] += len(notification.deliveries)
        self.counts["ignored_objects"] += notification.ignored

    def done(self, sqs: Any, queue_url: str | None, retry: Iterable[str] = ()) -> None:
        """Delete the messages and inbox entries: their files are in the ledger. A message naming a key in `retry` (its
        object was forbidden, or its fetch failed) stays, to come back after its visibility timeout: once per timeout,
        then to the queue's dead-letter queue. A message whose receipt expired (another receive took it) stays too and
        comes back naming files the ledger has."""
        again = set(retry)
        finished = [receipt for receipt in self.receipts if again.isdisjoint(self.named.get(receipt, ()))]
        self.counts["left_for_retry"] += len(self.receipts) - len(finished)
        for start in range(0, len(finished), RECEIVE_BATCH):
            entries = [{"Id": str(i), "ReceiptHandle": h} for i, h in enumerate(finished[start : start + RECEIVE_BATCH])]
            failed = sqs.delete_message_batch(QueueUrl=queue_url, Entries=entries).get("Failed", [])
            self.counts["delete_failed"] += len(failed)
            self.counts["deleted"] += len(entries) - len(failed)
        for path in self.inbox_files:
            path.unlink(missing_ok=True)


def receive(sqs: Any, queue_url: str, lake: Lake, limit: int = MAX_MESSAGES, visibility_seconds: int = VISIBILITY_SECONDS) -> Received:
    """Every message waiting in the queue, up to `limit`, each hidden from other receivers for `visibility_seconds`,
    and the inbox's."""
    received = take_inbox(lake)
    while len(received.receipts) < limit:
        messages = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=RECEIVE_BATCH, WaitTimeSeconds=0, VisibilityTimeout=visibility_seconds,
            MessageSystemAttributeNames=["SentTimestamp"],
        ).get("Messages", [])  # fmt: skip
        if not messages:
            break
        for message in messages:
            received.take(message["MessageId"], message.get("Body", ""), lake, message["ReceiptHandle"])
            sent = int(message.get("Attributes", {}).get("SentTimestamp", 0)) or None
            if sent is not None and (received.oldest_sent_ms is None or sent < received.oldest_sent_ms):
                received.oldest_sent_ms = sent
    return received


def keep(lake: Lake, message_id: str, body: str, reason: str) -> Path:
    path = lake.kept_messages / f"{_safe(message_id)}.json"
    write_whole(path, json.dumps({"message_id": message_id, "reason": reason, "body": body}) + "\n")
    log.warning("kept a notification that cannot be read, %s: %s", path.name, reason)
    return path


def kept(lake: Lake) -> list[dict[str, str]]:
    """The messages kept as unreadable, each with its reason."""
    folder = lake.kept_messages
    return [json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))] if folder.is_dir() else []


def write_inbox(lake: Lake, event_id: str, bodies: Sequence[str]) -> Path:
    """The event-driven DAG's first task: the notifications its asset event carries (the watcher deleted them from
    the queue), kept in the lake until a run has ledgered their files. Written again for the same event: the same file."""
    path = lake.inbox / f"{_safe(event_id)}.json"
    write_whole(path, json.dumps({"event": event_id, "bodies": list(bodies)}) + "\n")
    return path


def take_inbox(lake: Lake) -> Received:
    received = Received()
    for path in sorted(lake.inbox.glob("*.json")) if lake.inbox.is_dir() else []:
        try:
            bodies = json.loads(path.read_text())["bodies"]
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
