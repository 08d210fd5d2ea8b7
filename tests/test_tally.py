"""The ingest runs' tally (jobs/reporting/tally.py): what the lake page adds up over every run, kept as the runs finish."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.lake import Lake
from jobs.reporting import tally
from jobs.reporting.report import write_json

pytestmark = pytest.mark.unit

PLACE = "111122223333/us-east-1"


def run(run_id: str, newest: str, file: str, late: dict[str, int], future: int = 0) -> dict:
    return {
        "run_id": run_id,
        "newest_event_times": {PLACE: newest},
        "future_dated_events": {PLACE: future} if future else {},
        "late_events": {"per_event_date": late},
        "deliveries": {"newest_per_place": {PLACE: file}},
    }


def key(stamp: str) -> str:
    return f"/c/AWSLogs/111122223333/CloudTrail/us-east-1/2024/03/01/111122223333_CloudTrail_us-east-1_{stamp}_x.json.gz"


def test_newest_times_and_files_are_kept_and_counts_added_in_any_order():
    runs = [
        run("a", "2024-03-01T10:00:00Z", key("20240301T1005Z"), {"2024-02-27": 2}, future=1),
        run("b", "2024-03-01T09:00:00Z", key("20240301T0905Z"), {"2024-02-27": 3, "2024-02-28": 1}),
    ]
    expected = {
        "places": {PLACE: {"newest_event": "2024-03-01T10:00:00Z", "future_dated": 1, "newest_file": key("20240301T1005Z")}},
        "late_per_event_date": {"2024-02-27": 5, "2024-02-28": 1},
    }
    assert tally.folded(runs) == expected
    assert tally.folded(reversed(runs)) == expected


def test_the_first_run_that_keeps_a_tally_adds_up_every_report_before_it(tmp_path: Path):
    lake = Lake.at(tmp_path / "lake")
    older = [run(f"r{n}", f"2024-03-01T0{n}:00:00Z", key(f"20240301T0{n}05Z"), {"2024-02-27": 1}) for n in range(3)]
    for body in older:
        write_json(lake.ingest_report(body["run_id"]), body)
    assert tally.read(lake) == tally.folded(older), "before any run keeps it, a reader adds the reports up itself"
    newest = run("r3", "2024-03-01T03:00:00Z", key("20240301T0305Z"), {"2024-02-27": 1})
    write_json(lake.ingest_report("r3"), newest)
    tally.record(lake, newest)
    assert json.loads(lake.tally.read_text()) == {"format": tally.TALLY_FORMAT, **tally.folded([*older, newest])}, (
        "every report once, the new one too"
    )
    later = run("r4", "2024-03-01T04:00:00Z", key("20240301T0405Z"), {"2024-02-27": 1})
    tally.record(lake, later)
    assert tally.read(lake)["late_per_event_date"] == {"2024-02-27": 5}
    assert tally.read(lake)["places"][PLACE]["newest_file"] == key("20240301T0405Z")
    lake.tally.write_text("{cut")
    tally.record(lake, later)
    assert tally.read(lake) == tally.folded([*older, newest]), "a damaged tally is added up again from the reports"


def test_the_newest_delivery_figures_are_those_of_the_newest_run_that_had_any():
    took = {"run_id": "a", "started_at": "t1", "deliveries": {"delivery_lag": {"files": 2, "p50_seconds": 9.0, "p95_seconds": 12.0},
                                                                "oldest_message_age_seconds": 30.0}}  # fmt: skip
    idle = {"run_id": "b", "started_at": "t2", "deliveries": {"delivery_lag": {"files": 0, "p50_seconds": None, "p95_seconds": None},
                                                                "oldest_message_age_seconds": None}}  # fmt: skip
    tallied = tally.folded([took, idle])
    assert tallied["delivery_lag"] == {"run_id": "a", "files": 2, "p50_seconds": 9.0, "p95_seconds": 12.0}
    assert tallied["oldest_message"] == ["t1", 30.0], "an idle run took no message: the figures stay the last run's that did"
