"""The ingest DAG's watcher of CloudTrail's notification queue (docs/design.md, "Waking on deliveries").

Airflow's SQS trigger receives and deletes messages, so a notification lives only in an asset event from then on,
and an event that arrives while a run is queued or running is taken by no run until another event or the schedule
creates one. This trigger leaves every message in the queue: it fires while the queue holds messages no run has
received (ApproximateNumberOfMessages, which counts neither the messages a run holds nor delayed ones), and the
ingest receives them itself and deletes each once its files are in the ledger. A notification that arrives while
a run is queued is taken by that run; one that arrives while a run is running keeps the queue non-empty, so the
trigger fires again, and the run Airflow creates once the running one ends takes it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent


class NotificationsWaiting(BaseEventTrigger):
    """Fires once the queue holds a message no run has taken, then ends (the triggerer runs it again)."""

    def __init__(self, queue_url: str, aws_conn_id: str | None = "aws_default", poll_seconds: float = 5.0) -> None:
        super().__init__()
        self.queue_url, self.aws_conn_id, self.poll_seconds = queue_url, aws_conn_id, poll_seconds

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", {
            "queue_url": self.queue_url,
            "aws_conn_id": self.aws_conn_id,
            "poll_seconds": self.poll_seconds,
        }

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow.providers.amazon.aws.hooks.sqs import SqsHook

        async with await SqsHook(aws_conn_id=self.aws_conn_id).get_async_conn() as client:  # one client while it waits
            while True:
                waiting = await self.waiting(client)
                if waiting:
                    yield TriggerEvent({"queue": self.queue_url, "waiting": waiting})
                    return
                await asyncio.sleep(self.poll_seconds)

    async def waiting(self, client: Any) -> int:
        """Messages waiting to be received: not in flight (a run holds those), not delayed."""
        answer = await client.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["ApproximateNumberOfMessages"])
        return int(answer["Attributes"]["ApproximateNumberOfMessages"])
