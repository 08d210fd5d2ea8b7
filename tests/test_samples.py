"""Every delivered-shape source among the real samples ingests, and the table equals an
oracle computed independently in plain Python over the raw files."""

from __future__ import annotations

import json
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path

from jobs.landing.layout import delivery_path
from tests.helpers import DAY, duckdb_rows, ingest, quarantine_rows, table_rows
from tools.generate_landing import SAMPLE_SOURCES, add_samples

ISO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?(Z|[+-]\d\d:\d\d)$")
# JSON-lines sources (one record per line): not delivered as such, but a supported shape.
JSON_LINES_SOURCES = [
    ("elastic_integrations_aws-cloudtrail-pipeline-tests", "packages/aws/data_stream/cloudtrail/_dev/test/pipeline/*.log"),
    ("awsdocs_cloudtrail-user-guide", "awsdocs_cloudtrail_user_guide_examples.jsonl"),
]


def oracle_records(path: Path) -> list | None:
    """Records of one file by plain json, or None when the file is not valid JSON."""
    text = path.read_text()
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        try:
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError:
            return None
    if isinstance(body, dict):
        return body["Records"] if "Records" in body else [body]
    return body


def oracle(files: list[Path]) -> dict[str, set[str]]:
    """eventID -> the event dates its copies carry, for records with an id and an ISO eventTime."""
    events: dict[str, set[str]] = {}
    for path in files:
        for record in oracle_records(path) or []:
            event_id, event_time = record.get("eventID"), record.get("eventTime")
            if not event_id or not isinstance(event_time, str) or not ISO_TIME.match(event_time):
                continue
            moment = datetime.fromisoformat(event_time.replace("Z", "+00:00")).astimezone(UTC)
            events.setdefault(event_id, set()).add(moment.date().isoformat())
    return events


def deliver_samples(landing: Path, samples: Path) -> list[Path]:
    """Every sample file into the landing zone: the delivered shapes as CloudTrail delivers them, the JSON-lines
    sources as log files of one place; the paths placed."""
    placed = [Path(p) for p in add_samples(landing, samples, DAY)]
    for index, (folder, pattern) in enumerate(JSON_LINES_SOURCES):
        for number, source in enumerate(sorted((samples / folder).glob(pattern))):
            target = delivery_path(landing, "123456789012", "eu-west-1", DAY, f"lines{index}x{number:02d}", ".json")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            placed.append(target)
    return placed


def test_real_samples_equal_the_oracle(spark, samples, landing, lake):
    placed = deliver_samples(landing, samples)
    assert {p.parts[-8] for p in placed if "AWSLogs" in p.parts} and len(placed) > 100

    report = ingest(spark, landing, lake)
    expected = oracle(placed)
    rows = table_rows(spark, lake)
    assert sorted({event_id for event_id, _ in rows}) == sorted(expected)
    assert all(day in expected[event_id] for event_id, day in rows)
    assert len(rows) == len(expected), "each eventID once"
    assert duckdb_rows(lake) == rows

    # The delivered-shape sources alone hold 2,900 + 310 + 15 events; the malformed
    # zmallen file (a missing comma) is quarantined whole with its reason.
    malformed = next(p for p in placed if "sample002" in p.name and p.parts[-7] == SAMPLE_SOURCES[2][2])
    assert oracle_records(malformed) is None
    assert (malformed.name, "not_json") in quarantine_rows(spark, lake)
    assert report.totals()["quarantined_by_reason"]["not_json"] == 1
    unreadable = {name for name, reason in quarantine_rows(spark, lake) if reason in ("missing_event_id", "missing_event_time")}
    assert unreadable, "records of the doc examples without eventID are quarantined, not dropped"
