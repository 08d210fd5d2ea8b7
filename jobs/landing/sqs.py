"""The SQS queue of delivery notifications: what a run takes from it, and when a message is done.

A run receives every message waiting (up to --max-messages, each once: a message received again ends the receiving),
keeps them hidden while it works (ChangeMessageVisibility), parses each (jobs/landing/notifications.py), sorts what
they name into the log files under its landing and those outside it, and deletes a message only after the files it
names are in the ledger (`Received.done`, called once the run's manifests are written): a run that dies before that
leaves them to come back, and a message received twice names files the ledger already has. What the lake keeps of
the notifications (unreadable messages, refused keys, files outside the landing, the watcher's inbox) is
jobs/landing/kept_notifications.py's: a run takes the inbox and the outside files back in with the queue's messages.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobs import options
from jobs.lake import Lake
from jobs.landing.bucket import BucketLanding, Problem
from jobs.landing.kept_notifications import inbox_entries, keep, keep_outside, keep_refused, outside_entries
from jobs.landing.notifications import Delivery, parse
from jobs.storage import LakePath

log = logging.getLogger("cloudtrail_ingest")
RECEIVE_BATCH = 10  # SQS's most per call
MAX_MESSAGES = options.MAX_MESSAGES
VISIBILITY_SECONDS = options.VISIBILITY_SECONDS


@dataclass
class Received:
    """The messages one run took (from the queue, the inbox and the notifications kept as outside the landing), by
    message id, and what they name."""

    # Each queue message's newest receipt (a message received twice answers only to the newer one): what deletes it.
    held: dict[str, str] = field(default_factory=dict)
    # The log files each message names, by message id.
    named: dict[str, tuple[Delivery, ...]] = field(default_factory=dict)
    # The log keys under the landing the messages name, each once: what the run fetches.
    keys: list[str] = field(default_factory=list)
    inbox_files: list[LakePath] = field(default_factory=list)
    # Entries of <lake>/notifications/outside/ taken back, by message id, with what they name: removed once nothing
    # they name is outside, written again only when what they name outside changes.
    outside_files: dict[str, tuple[LakePath, list[list[str]]]] = field(default_factory=dict)
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

    def oldest_age_seconds(self, now: datetime) -> float | None:
        """How long the oldest queue message taken had waited, at `now`."""
        return round(now.timestamp() - self.oldest_sent_ms / 1000, 1) if self.oldest_sent_ms is not None else None

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

    def sort_out(self, lake: Lake, landing: BucketLanding) -> None:
        """`keys`: the log keys under `landing`, each once; what a message names outside it is kept in the lake until a
        run whose landing holds it takes it back, its message deleted from the queue meanwhile."""
        for message_id, named in self.named.items():
            outside = [d for d in named if not landing.holds(d.bucket, d.key)]
            if outside:
                self.outside[message_id] = outside
                if [[d.bucket, d.key] for d in outside] != self.outside_files.get(message_id, (None, None))[1]:
                    keep_outside(lake, message_id, outside, landing.url)
        self.counts["outside_landing"] = sum(len(named) for named in self.outside.values())
        self.keys = list(dict.fromkeys(d.key for d in self.deliveries if landing.holds(d.bucket, d.key)))

    def done(self, sqs: Any, queue_url: str | None, lake: Lake, problems: Iterable[Problem] = ()) -> None:
        """Delete the messages and inbox entries: their files are in the ledger (or kept as outside the landing). The
        keys the run refused are kept first, so a run that dies now has named them. A message naming a key whose fetch
        failed for now (forbidden, an error) stays, to come back after its visibility timeout: once per timeout, then
        to the queue's dead-letter queue. A message whose receipt expired (another receive took it) stays too and comes
        back naming files the ledger has."""
        problems = list(problems)
        keep_refused(lake, problems)
        self.release()
        again = {p.key for p in problems if not p.lasting}
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


def receive(
    sqs: Any, queue_url: str, lake: Lake, landing: BucketLanding, limit: int = MAX_MESSAGES, visibility_seconds: int = VISIBILITY_SECONDS
) -> Received:
    """Every message waiting in the queue, up to `limit`, each hidden from other receivers for `visibility_seconds`
    and kept hidden until `done` (or `release`); and the inbox's and the kept outside ones; sorted out against
    `landing` (`Received.keys`). A message received a second time ends the receiving: the queue has come round to
    what this run holds."""
    received = Received()
    for path, bodies in inbox_entries(lake):
        for index, body in enumerate(bodies):
            received.take(f"{path.stem}-{index}", body, lake)
        received.inbox_files.append(path)
    for message_id, path, objects in outside_entries(lake):
        received.named[message_id] = tuple(Delivery(bucket, key) for bucket, key in objects)
        received.outside_files[message_id] = (path, objects)
    received.holding = Holding(sqs, queue_url, received, visibility_seconds)
    received.holding.start()
    try:
        _receive_waiting(sqs, queue_url, lake, received, limit, visibility_seconds)
        received.sort_out(lake, landing)
    except BaseException:
        received.release()
        raise
    return received


def _receive_waiting(sqs: Any, queue_url: str, lake: Lake, received: Received, limit: int, visibility_seconds: int) -> None:
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


def depth(sqs: Any, queue_url: str) -> dict[str, int]:
    """The queue's approximate figures: messages waiting, in flight (received, not deleted), delayed."""
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"]
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=names)["Attributes"]
    return {"waiting": int(attributes[names[0]]), "in_flight": int(attributes[names[1]]), "delayed": int(attributes[names[2]])}


def sqs_client(timeout_seconds: float | None = None) -> Any:
    import boto3
    from botocore.config import Config

    if timeout_seconds is None:
        return boto3.client("sqs")
    quick = Config(connect_timeout=timeout_seconds, read_timeout=timeout_seconds, retries={"max_attempts": 1})
    return boto3.client("sqs", config=quick)


def queue_url_default() -> str | None:
    return os.environ.get("CLOUDTRAIL_QUEUE_URL") or None
