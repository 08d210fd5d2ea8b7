"""Exactly once under SIGKILL: five kill points covering the phases of a batch, new files
arriving between runs (some in folders the source log has retired); the table equals the oracle through Spark and through DuckDB.
The killed runs are processes of their own; the clean runs after them run in the tests' session."""

from __future__ import annotations

import json

from tests.chaos import ChaosRun, uncommitted_files
from tests.helpers import duckdb_rows, run_command, table_rows


def test_killed_runs_leave_every_event_exactly_once(spark, landing, lake):
    chaos = ChaosRun(landing, lake, clean=lambda job: run_command(spark, "cloudtrail_ingest", job))
    chaos.deliver(files=9)
    assert chaos.run("reading@1") == -9
    assert chaos.run("writing_data@0") == -9
    assert uncommitted_files(lake), "the kill left data files no batch lists"
    chaos.deliver(files=6)
    assert chaos.run("between_outputs@0") == -9
    assert chaos.run("committing_state@1") == -9
    chaos.run_until_done()  # the first delivery's folders are now retired from the source log
    chaos.deliver(files=6)
    chaos.deliver(files=3, late=True)
    assert chaos.run("writing_data@1") == -9
    chaos.deliver(files=2, late=True)
    chaos.run_until_done()

    expected = sorted(chaos.expected.items())
    assert table_rows(spark, lake) == expected
    assert duckdb_rows(lake) == expected
    assert uncommitted_files(lake), "a killed batch's files stay, no commit naming them (the publish's orphan removal takes them)"
    reports = [json.loads(path.read_text()) for path in (lake / "reports" / "ingest").glob("*.json")]
    assert any(report["ledger"].get("stragglers") for report in reports), "some files should have landed in retired folders"
