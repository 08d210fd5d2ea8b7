"""An independent reader of the delivered JSON: DuckDB's own JSON reader over the landing's log files, each event once
(by eventID), as the view `cloudtrail.events` the shipped investigations read. Nothing of the product's parse, typing
or de-duplication is used: a question asked of it and of the lake's tables must get the same answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jobs.investigations.catalogue import sql_literal
from jobs.lake import EVENT_DATE

IDENTITY = ("type", "principalId", "arn", "accountId", "accessKeyId", "userName", "invokedBy")
TEXT = ("eventSource", "eventName", "awsRegion", "sourceIPAddress", "userAgent", "errorCode", "errorMessage", "eventType",
        "recipientAccountId")  # fmt: skip
JSON = ("requestParameters", "responseElements", "additionalEventData")


def log_files(landing: Path) -> list[Path]:
    """The landing's CloudTrail log files (not digests), as CloudTrail names them."""
    return sorted(p for p in landing.rglob("*_CloudTrail_*.json*") if "CloudTrail-Digest" not in p.parts)


def with_raw_events(db: Any, files: list[Path]) -> Any:
    """`db` (catalogue.prepared) with cloudtrail.events read from `files`' Records."""
    identity = ", ".join(f"'{name}': r->>'$.userIdentity.{name}'" for name in IDENTITY)
    columns = ",\n".join(
        [f"r->>'{name}' AS {name}" for name in TEXT]
        + [f"CASE WHEN json_type(r->'{name}') = 'NULL' THEN NULL ELSE CAST(r->'{name}' AS VARCHAR) END AS {name}" for name in JSON]
    )
    listed = ", ".join(sql_literal(str(path)) for path in files)
    db.execute(f"""
        CREATE VIEW cloudtrail.events AS
        WITH records AS (
            SELECT unnest(Records) AS r FROM read_json([{listed}], columns = {{'Records': 'JSON[]'}}, format = 'auto')
        ), typed AS (
            SELECT r->>'eventID' AS eventID, TRY_CAST(r->>'eventTime' AS TIMESTAMPTZ) AS eventTime, {{{identity}}} AS userIdentity,
                   {columns}
            FROM records
        )
        SELECT *, CAST(eventTime AS DATE) AS {EVENT_DATE} FROM typed
        WHERE eventID IS NOT NULL AND eventTime IS NOT NULL
        QUALIFY row_number() OVER (PARTITION BY eventID ORDER BY eventTime) = 1
    """)
    return db
