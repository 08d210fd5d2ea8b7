"""What a delivery notification names (stdlib only): the shapes an SQS queue receives when CloudTrail delivers.

    CloudTrail's SNS notification   {"s3Bucket": B, "s3ObjectKey": [K, ...]}, raw or wrapped in SNS's envelope
    S3 Event Notifications          {"Records": [{"eventSource": "aws:s3", "s3": {"bucket": {"name": B},
                                     "object": {"key": K (URL-encoded)}}}]}, raw or SNS-wrapped; and s3:TestEvent
    EventBridge "Object Created"    {"source": "aws.s3", "detail-type": "Object Created",
                                     "detail": {"bucket": {"name": B}, "object": {"key": K}}}

A message body is data from outside: `parse` never raises, it says what the body names, what it ignores (a digest,
another service's key, a test event) and, for a body it cannot read, why.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_plus

from jobs.landing.layout import FILE_NAME

# A message SNS wrapped: its own body is in "Message", as text.
SNS_TYPE = "Notification"
OBJECT_CREATED = "Object Created"


@dataclass(frozen=True)
class Delivery:
    """One object a notification says was written."""

    bucket: str
    key: str

    def is_log(self) -> bool:
        """A CloudTrail log file (not a digest, an Insights file, or another service's object): its name says so."""
        parts = self.key.split("/")
        return len(parts) >= 7 and "CloudTrail" in parts[:-1] and FILE_NAME.fullmatch(parts[-1]) is not None


@dataclass(frozen=True)
class Notification:
    """What one message body says: the log files it names, how many other objects (digests, test events), and the
    reason it cannot be read (None when it can)."""

    deliveries: tuple[Delivery, ...] = ()
    ignored: int = 0
    reason: str | None = None


def parse(body: str) -> Notification:
    try:
        message = json.loads(body)
    except (ValueError, RecursionError) as exc:
        return Notification(reason=f"not JSON: {exc}"[:300])
    if isinstance(message, dict) and message.get("Type") == SNS_TYPE and isinstance(message.get("Message"), str):
        return parse(message["Message"])
    try:
        named = _named(message)
    except (TypeError, KeyError, AttributeError) as exc:
        return Notification(reason=f"a notification of an unknown shape ({type(exc).__name__}: {exc})"[:300])
    if named is None:
        return Notification(reason="a notification of an unknown shape: no s3ObjectKey, Records[].s3 or EventBridge detail")
    logs = tuple(dict.fromkeys(d for d in named if d.is_log()))
    return Notification(logs, len(named) - sum(1 for d in named if d.is_log()))


def _named(message: Any) -> list[Delivery] | None:
    """Every object a message names (a test event names none); None for a shape this module does not know."""
    if not isinstance(message, dict):
        return None
    if "s3ObjectKey" in message:  # CloudTrail's own notification: keys as written, not encoded
        keys = message["s3ObjectKey"]
        return [Delivery(_text(message["s3Bucket"]), _text(key)) for key in (keys if isinstance(keys, list) else [keys])]
    if message.get("Event") == "s3:TestEvent":
        return []
    if isinstance(message.get("Records"), list) and all(isinstance(r, dict) and "s3" in r for r in message["Records"]):
        return [
            Delivery(_text(r["s3"]["bucket"]["name"]), unquote_plus(_text(r["s3"]["object"]["key"])))
            for r in message["Records"]
            if str(r.get("eventName", "ObjectCreated")).startswith("ObjectCreated")
        ]
    if message.get("source") == "aws.s3" and "detail" in message:
        if message.get("detail-type") != OBJECT_CREATED:
            return []
        detail = message["detail"]
        return [Delivery(_text(detail["bucket"]["name"]), _text(detail["object"]["key"]))]
    return None


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"expected a name, found {json.dumps(value)[:80]}")
    return value
