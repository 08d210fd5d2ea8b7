"""The ingest DAG's watcher of CloudTrail's notification queue (docs/design.md, "Waking on deliveries").

Airflow's SQS trigger receives and deletes messages, so a notification lives only in an asset event from then on,
and an event that arrives while a run is queued or running is taken by no run until another event or the schedule
creates one. This trigger leaves every message in the queue: it watches how many messages no run has received
(ApproximateNumberOfMessages, which counts neither the messages a run holds nor delayed ones) and fires when that
number rises, and again every `refire_seconds` while it is not zero; the ingest receives the messages itself and
deletes each once its files are in the ledger. A notification that arrives while a run is queued is taken by that
run; one that arrives while a run is running raises the number, the trigger fires, and Airflow keeps the event
queued for the DAG and creates the run that takes it as soon as the running one ends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent


class NotificationsWaiting(BaseEventTrigger):
    """Fires when the queue holds more messages no run has taken than at its last look, and again every
    `refire_seconds` while any wait: one event per delivery, not one per poll while the run it woke is starting."""

    def __init__(
        self, queue_url: str, aws_conn_id: str | None = "aws_default", poll_seconds: float = 5.0, refire_seconds: float = 60.0
    ) -> None:
        super().__init__()
        self.queue_url, self.aws_conn_id = queue_url, aws_conn_id
        self.poll_seconds, self.refire_seconds = poll_seconds, refire_seconds

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", {
            "queue_url": self.queue_url,
            "aws_conn_id": self.aws_conn_id,
            "poll_seconds": self.poll_seconds,
            "refire_seconds": self.refire_seconds,
        }

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow.providers.amazon.aws.hooks.sqs import SqsHook

        async with await SqsHook(aws_conn_id=self.aws_conn_id).get_async_conn() as client:  # one client while it watches
            before, fired_at = 0, None
            while True:
                waiting = await self.waiting(client)
                due = fired_at is None or time.monotonic() - fired_at >= self.refire_seconds
                if waiting and (waiting > before or due):
                    yield TriggerEvent({"queue": self.queue_url, "waiting": waiting})
                    fired_at = time.monotonic()
                before = waiting
                await asyncio.sleep(self.poll_seconds)

    async def waiting(self, client: Any) -> int:
        """Messages waiting to be received: not in flight (a run holds those), not delayed."""
        answer = await client.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["ApproximateNumberOfMessages"])
        return int(answer["Attributes"]["ApproximateNumberOfMessages"])
