"""The terminal summary (tools/summary.py) on a lake with reports only."""

import json
import os
import time

import pytest

from jobs.lake import Lake
from tools.summary import summarize

pytestmark = pytest.mark.unit


def test_the_summary_shows_the_newest_gate_report_not_the_index_beside_it(tmp_path):
    lake = Lake.at(tmp_path)
    lake.gate_reports.mkdir(parents=True)
    report = {"verdict": "passed", "failed_critical": [], "warnings": []}
    lake.gate_report("run-1").write_text(json.dumps(report))
    lake.validated.write_text(json.dumps({"2024-03-01": {"fingerprint": "x", "run_id": "run-1"}}))
    later = time.time() + 10
    os.utime(lake.validated, (later, later))  # the index is written after the report it follows
    printed = summarize(lake)
    assert "DQ gate: PASSED" in printed and "no rows yet" in printed and "findings" in printed


def test_a_skipped_gate_is_shown_with_its_reason(tmp_path):
    lake = Lake.at(tmp_path)
    lake.gate_reports.mkdir(parents=True)
    skipped = {"run_id": "run-2", "event_dates": ["2024-03-01"], "verdict": "skipped", "reason": "the run wrote nothing"}
    lake.gate_report("run-2").write_text(json.dumps(skipped))  # what a second `make demo` leaves newest
    assert "DQ gate: SKIPPED (the run wrote nothing)" in summarize(lake)
