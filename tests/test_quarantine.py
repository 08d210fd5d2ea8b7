"""The quarantine is a waiting room: replays and changed files move what now parses into the table, once."""

from __future__ import annotations

import gzip
import json
from datetime import timedelta
from pathlib import Path

import duckdb

from jobs.iceberg.catalog import NAMESPACE, open_catalog
from jobs.lake import Lake
from jobs.landing.layout import delivery_path
from jobs.tables.quarantine import Replay
from jobs.tables.quarantine_files import quarantine_source
from jobs.upkeep import replay_quarantine
from tests.helpers import DAY, duckdb_rows, event, events_of, ingest, with_nan


def quarantined(lake: Path) -> list[tuple[str, int | None, str]]:
    """(file name, record index, reason) of every quarantine row, as the quarantine's Iceberg table holds it now."""
    source = quarantine_source(Lake(lake))
    if source is None:
        return []
    query = f"select source_file, record_index, reason from {source}"
    return sorted((Path(source).name, index, reason) for source, index, reason in duckdb.connect().execute(query).fetchall())


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(text.encode()))


def test_a_replay_after_a_hand_repair_moves_the_record_into_the_table_once(spark, landing, lake):
    path = delivery_path(landing, "111122223333", "us-east-1", DAY, "nan")
    write(path, with_nan("r"))
    kept = delivery_path(landing, "111122223333", "us-east-1", DAY + timedelta(minutes=1), "other")
    write(kept, '{"Records": [')
    ingest(spark, landing, lake)
    assert [event_id for event_id, _ in duckdb_rows(lake)] == ["r-0", "r-2"]
    assert quarantined(lake) == [(path.name, 1, "invalid_json"), (kept.name, None, "not_json")]

    # Replayed as it is, the record fails again: one row, its current reason, not two.
    again = ingest(spark, landing, lake, replay=Replay(reasons=("invalid_json",)))
    assert again.ledger["replayed_files"] == 1 and again.totals()["records_read"] == 1
    assert quarantined(lake) == [(path.name, 1, "invalid_json"), (kept.name, None, "not_json")]

    write(path, with_nan("r").replace("NaN", "0.5"))  # repaired by hand; the file's other records are in the table already
    code = replay_quarantine.main(["--landing", str(landing), "--lake", str(lake), "--reason", "invalid_json", "--settle", "0 seconds"])
    assert code == 0
    assert [event_id for event_id, _ in duckdb_rows(lake)] == ["r-0", "r-1", "r-2"]
    assert quarantined(lake) == [(kept.name, None, "not_json")]
    table = open_catalog(Lake.at(lake), None).load_table(f"{NAMESPACE}.quarantine")
    replaced = table.current_snapshot()
    assert replaced.summary["deleted-records"] == "1" and replaced.summary.get("cloudtrail.batch"), "the replay's batch took it out"
    before = table.scan(snapshot_id=replaced.parent_snapshot_id).to_arrow().select(["record_index", "reason"]).to_pylist()
    assert {"record_index": 1, "reason": "invalid_json"} in before, "the replaced row stays in the table's history"
    assert ingest(spark, landing, lake).totals()["files_read"] == 0


def test_a_replay_takes_the_delivery_dates_and_reasons_asked_for(spark, landing, lake):
    first = delivery_path(landing, "111122223333", "us-east-1", DAY, "first")
    later = delivery_path(landing, "111122223333", "us-east-1", DAY + timedelta(days=2), "later")
    for path in (first, later):
        write(path, '{"Records": [')
    ingest(spark, landing, lake)
    for path in (first, later):
        write(path, json.dumps({"Records": events_of(2, DAY, path.stem.split("_")[-1].split(".")[0])}))
    report = ingest(spark, landing, lake, settle="1 hour", replay=Replay(first=(DAY + timedelta(days=1)).date()))
    assert report.ledger["replayed_files"] == 1 and report.ledger["settling_files"] == 1  # the other changed file waits
    assert [event_id for event_id, _ in duckdb_rows(lake)] == ["later-0", "later-1"]
    assert quarantined(lake) == [(first.name, None, "not_json")]


def test_a_hostile_landing_zone_ingested_twice_with_the_in_flight_file_completed_between(spark, landing, lake):
    """Every kind at once: odd names, an in-flight copy, records the parser cannot take, broken files.
    No run fails; every valid record is in the table once; everything else is in quarantine once, with its reason."""

    def place(name: str, text: str, gzipped: bool = True, minute: int = 0) -> Path:
        path = delivery_path(
            landing, "111122223333", "us-east-1", DAY + timedelta(minutes=minute), name, ".json.gz" if gzipped else ".json"
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(text.encode()) if gzipped else text.encode())
        return path

    def records(*texts: str) -> str:
        return '{"Records":[' + ",".join(texts) + "]}"

    good = lambda event_id: json.dumps(event(event_id, DAY))  # noqa: E731
    deep = '{"eventID":"deep","eventTime":"2024-03-01T00:00:00Z","requestParameters":' + "[" * 1200 + "]" * 1200 + "}"
    place("colon:name", records(good("colon")))
    place("[glob]{chars}*?", records(good("glob")))
    place("sp ace %41 #é", records(good("space"), deep, good("space-2")), minute=1)
    place("nan", records(good("nan-0"), '{"eventID":"nan-1","eventTime":"2024-03-01T00:00:00Z","x":NaN}'), minute=2)
    place("control", records(good("ctrl-0"), '{"eventID":"ctrl-1","eventTime":"2024-03-01T00:00:00Z","x":"a\x02b"}'), minute=3)
    place("no-id", records(json.dumps({**event("x", DAY), "eventID": ""})), minute=4)
    place("bad-time", records(json.dumps({**event("bad-time", DAY), "eventTime": "yesterday"})), minute=5)
    place("binary", "\x00\x01", gzipped=False, minute=6)
    place("empty", "", gzipped=False, minute=7)
    whole = gzip.compress(records(good("flight-0"), good("flight-1")).encode())
    in_flight = delivery_path(landing, "111122223333", "us-east-1", DAY + timedelta(minutes=8), "in-flight")
    in_flight.write_bytes(whole[: len(whole) // 2])

    first = ingest(spark, landing, lake)
    in_flight.write_bytes(whole)  # the copy completes
    second = ingest(spark, landing, lake)
    assert first.status == second.status == "succeeded" and second.ledger["changed_files"] == 1
    expected = ["colon", "ctrl-0", "flight-0", "flight-1", "glob", "nan-0", "space", "space-2"]
    assert [event_id for event_id, _ in duckdb_rows(lake)] == expected
    assert sorted((name.split("_", 4)[-1], index, reason) for name, index, reason in quarantined(lake)) == [
        ("bad-time.json.gz", 0, "unparseable_event_time"),
        ("binary.json", None, "binary"),
        ("control.json.gz", 1, "invalid_json"),
        ("empty.json", None, "empty_file"),
        ("nan.json.gz", 1, "invalid_json"),
        ("no-id.json.gz", 0, "missing_event_id"),
        ("sp ace %41 #é.json.gz", 1, "record_too_deep"),
    ]
    assert ingest(spark, landing, lake).totals()["files_read"] == 0
