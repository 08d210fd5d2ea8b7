"""The lake in the Airflow UI: the read model on a lake with known content, then the page served
by a real API server with the plugin, rendered in headless Chromium, and refused without sign-in."""

from __future__ import annotations

import functools
import json
import logging
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from jobs.derived import ocsf
from jobs.derived.derivation import DerivedConfig
from jobs.lake import DERIVED, Lake
from jobs.landing.layout import delivery_path
from jobs.ledger import search as ledger_search
from jobs.quality import validate_events
from jobs.reporting import summary as run_summary
from jobs.reporting import tally
from jobs.reporting.report import DerivedReport, RunReport
from jobs.status import lake_status as status
from jobs.status import quarantined
from jobs.tables.events import date_files, events_source
from jobs.tables.quarantine_files import quarantine_source
from tests.conftest import own_airflow_home
from tests.helpers import DAY, deliver, event, events_of, ingest, put_raw
from tools.airflow_api import Api, Server, api_server, sign_in
from tools.generate_landing import write_delivery

THRESHOLD, SKEW = timedelta(hours=2), timedelta(minutes=15)


@dataclass(frozen=True)
class KnownLake:
    landing: Path
    lake: Lake
    report: RunReport
    good: Path  # 30 events and one of them again
    corrupt: Path  # quarantined whole: corrupt_gzip
    waiting: Path  # delivered after the run: the backlog, and eu-west-1 has no event yet
    log: list[str]  # the ingest's log messages


@pytest.fixture(scope="module")
def known(spark, tmp_path_factory) -> KnownLake:
    root = tmp_path_factory.mktemp("lake-view")
    landing, lake = root / "landing", root / "lake"
    records = events_of(30, DAY, "ok")
    good = deliver(landing, [*records, records[0]], DAY + timedelta(minutes=40), name="goodfile")
    corrupt = put_raw(landing, b"\x1f\x8b\x08\x00" + b"not a gzip stream" * 4, DAY + timedelta(minutes=45), suffix=".json.gz")
    messages: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    logger, level = logging.getLogger("cloudtrail_ingest"), logging.getLogger("cloudtrail_ingest").level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        report = ingest(spark, landing, lake)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    # The gate fails: a quarantined file is 1 of 2 files read, over a 0.001 threshold.
    args = ["--lake", str(lake), "--run-id", report.run_id, "--dates", "2024-03-01", "--quarantine-threshold", "0.001"]
    assert validate_events.main(args) == 1
    assert ocsf.run(DerivedConfig(str(lake), None, "ocsf-known"), lambda: spark).status == "succeeded"
    waiting = delivery_path(landing, "111122223333", "eu-west-1", DAY + timedelta(hours=5), "waitingfile")
    write_delivery(waiting, [event("eu-1", DAY + timedelta(hours=4, minutes=55), awsRegion="eu-west-1")], DAY + timedelta(hours=5))
    return KnownLake(landing, Lake.at(lake), report, good, corrupt, waiting, messages)


def test_the_run_report_has_a_progress_line_per_batch_and_the_newest_event_per_region(known: KnownLake):
    body = json.loads(known.lake.ingest_report(known.report.run_id).read_text())
    assert body["ledger"]["backlog_files"] == 2, "planned: the good file and the corrupt one"
    batch = body["batches"][0]
    assert (batch["files_read"], batch["backlog_files"], batch["backlog_bytes"]) == (2, 0, 0), "its one batch leaves nothing to read"
    assert batch["records_per_second"] == pytest.approx(batch["records_read"] / (batch["duration_ms"] / 1000), abs=0.1)
    progress = [message for message in known.log if message.startswith("batch 0:")]
    assert progress and "records/s; backlog 0 files (0.0 MB)" in progress[0]
    assert body["newest_event_times"] == {"111122223333/us-east-1": "2024-03-01T00:29:00Z"}
    assert body["duplicates_dropped"] == 1


def test_the_read_model_answers_the_operators_questions(known: KnownLake):
    lake, runs = known.lake, tally.read(known.lake)
    assert known.lake.tally.exists() and runs == tally.folded(status.ingest_runs(lake)), "the tally the runs kept adds up their reports"

    def places(now: timedelta) -> dict[tuple[str, str], status.Freshness]:
        return {(row.account, row.region): row for row in status.freshness(lake, known.landing, THRESHOLD, runs, DAY + now, SKEW)}

    fresh = places(timedelta(hours=1))
    east, west = fresh["111122223333", "us-east-1"], fresh["111122223333", "eu-west-1"]
    assert east.newest_file == str(known.corrupt) and east.lag == timedelta(minutes=16) and not east.stale
    assert west.newest_event is None and west.stale
    assert west.newest_file is None, "at 01:00 the file stamped 05:00 is a delivery from the future: not believed"
    later = places(timedelta(hours=5))
    assert later["111122223333", "eu-west-1"].newest_file == str(known.waiting)
    assert later["111122223333", "us-east-1"].stale, "nothing delivered nor written for over 2 hours: the place went quiet"

    assert status.backlog(lake, known.landing) == status.Backlog(1, known.waiting.stat().st_size, str(known.waiting))
    files = len(date_files(lake, "2024-03-01"))
    assert files > 0 and status.daily_rows(lake, runs) == [status.DayRows("2024-03-01", 30, 0, files)]

    (gate,) = run_summary.gate_verdicts(status.gate_runs(lake))
    assert (gate.event_date, gate.verdict, gate.run_id) == ("2024-03-01", "failed", known.report.run_id)
    assert any("quarantine" in failure for failure in gate.failed)

    held = quarantined.quarantine(lake)
    assert [(reason, rows) for reason, _, rows in held.by_reason_and_day] == [("corrupt_gzip", 1)]
    assert held.samples[0].source_file == str(known.corrupt) and held.samples[0].detail

    health = status.checkpoint_health(lake)
    assert health.committed_batch == 1, "the data batch, then the one that moved the watermark"
    assert health.watermark is not None and health.watermark.isoformat() == known.report.watermark_after
    assert health.state_bytes > 0 and health.source_log_files >= 1 and health.manifests == 1


def searched(known, query: str):
    events = functools.partial(events_source, known.lake)
    return ledger_search.search_ledger(known.lake, known.landing, query, events, quarantine_source(known.lake))


def test_the_file_ledger_says_what_became_of_each_file(known: KnownLake):
    hits = {Path(hit.path).name: hit for hit in searched(known, "2024-03-01")}
    assert len(hits) == 3
    good, corrupt, waiting = hits[known.good.name], hits[known.corrupt.name], hits[known.waiting.name]
    assert (good.status, good.rows_written, good.records_in_file, good.duplicates_dropped) == ("ingested", 30, 31, 1)
    assert good.runs == (known.report.run_id,) and good.source_batch == 0
    assert corrupt.status == "quarantined" and corrupt.quarantined == {"corrupt_gzip": 1} and corrupt.details
    assert waiting.status == "not seen"
    assert [hit.path for hit in searched(known, "goodfile")] == [str(known.good)]


def test_status_prints_freshness_backlog_and_the_last_run(known: KnownLake):
    shown = subprocess.run(
        [sys.executable, "-m", "tools.status", "--lake", str(known.lake.root), "--landing", str(known.landing)],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    assert f"run {known.report.run_id}: succeeded" in shown
    assert "backlog: 1 landing files" in shown
    assert "eu-west-1" in shown and "STALE" in shown
    assert re.search(r"gate +failed", shown)


@pytest.fixture(scope="module")
def server(known: KnownLake, airflow_db: Path, tmp_path_factory) -> Iterator[Server]:
    """`airflow api-server` with this project's plugins, on the known lake."""
    env = {"CLOUDTRAIL_LAKE": str(known.lake.root), "CLOUDTRAIL_LANDING": str(known.landing)}
    env |= own_airflow_home(airflow_db, tmp_path_factory.mktemp("airflow") / "home")
    with api_server(env, tmp_path_factory.mktemp("api-server") / "api-server.log") as running:
        yield running


def get(url: str, token: str | None = None) -> tuple[int, bytes, dict[str, str]]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read(), {k.lower(): v for k, v in response.headers.items()}
    except urllib.error.HTTPError as refused:
        return refused.code, b"", {k.lower(): v for k, v in refused.headers.items()}


PAGES = ("/cloudtrail/", "/cloudtrail/status.json", "/cloudtrail/gates/", "/cloudtrail/runs/cloudtrail_ingest/x")


def test_the_page_refuses_anonymous_requests_and_every_answer_forbids_scripts_and_other_origins(server: Server, known: KnownLake):
    for path in PAGES:
        code, body, _ = get(server.url + path)
        assert code in (401, 403) and not body, path
    assert get(f"{server.url}/cloudtrail/", "not-a-token")[0] == 403, "a forged token"
    token = Api(server.url, server.password).token
    for path in (*PAGES, f"/cloudtrail/gates/events/{known.report.run_id}", "/cloudtrail/gates/events/no-such-run"):
        code, _, headers = get(server.url + path, token)
        assert code == (404 if path.endswith("no-such-run") else 200), path
        policy = headers["content-security-policy"]
        assert "default-src 'self'" in policy and "script-src 'none'" in policy and "frame-ancestors 'self'" in policy, path
        assert headers["x-content-type-options"] == "nosniff", path
    assert get(f"{server.url}/cloudtrail/docs/index.html", token)[0] == 404, "GX's Data Docs are not served"


def test_a_derived_run_has_a_view_of_its_own(server: Server, known: KnownLake):
    token = Api(server.url, server.password).token
    DerivedReport("asset_triggered__x", "2024-03-01T01:00:00+00:00", ["2024-03-01"], "succeeded", {"activity_hourly": {"2024-03-01": 3}},
                  {"findings by rule": {"cis-4.1": 2}}, "passed").write(known.lake)  # fmt: skip
    DerivedReport("asset_triggered__x", "2024-03-01T01:00:00+00:00", ["2024-03-01"], "succeeded",
                  {"ocsf/api_activity": {"2024-03-01": 30}}, gate="passed", job="ocsf",
                  folders={"ocsf/api_activity": {"2024-03-01": 1}}).write(known.lake)  # fmt: skip
    code, page, _ = get(f"{server.url}/cloudtrail/runs/cloudtrail_derived/asset_triggered__x", token)
    assert code == 200 and re.search(r"activity_hourly +3 rows", page.decode()) and re.search(r"findings by rule +cis-4.1 2", page.decode())
    assert re.search(r"ocsf run asset_triggered__x: succeeded.*ocsf/api_activity +30 rows", page.decode(), re.S)
    code, body, _ = get(f"{server.url}/cloudtrail/status.json", token)
    shown = json.loads(body)["derived_rows_per_event_date"]
    ocsf_rows = [{"event_date": "2024-03-01", "rows": {"ocsf/api_activity": 30}, "folders": {"ocsf/api_activity": 1}}]
    assert shown == {derived.job: [] for derived in DERIVED} | {"ocsf": ocsf_rows}, (
        "as the known lake's OCSF run counted them (its state), no activity run"
    )


def test_the_lake_page_in_the_airflow_ui(server: Server, known: KnownLake, tmp_path: Path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1800})
        sign_in(page, server.url, server.password)

        page.goto(f"{server.url}/plugin/cloudtrail_lake")  # the navigation's entry: the UI frames the plugin's page
        lake = page.frame_locator("iframe").first
        stale = lake.locator("#freshness tr.stale", has_text="eu-west-1")
        stale.first.wait_for(timeout=60_000)
        assert "waitingfile" in stale.inner_text() and "none" in stale.inner_text(), "delivered, no event written yet"
        assert lake.locator("#freshness tr.stale").count() == 2, "us-east-1 too: its newest delivery is years old today"
        assert "corrupt_gzip" in lake.locator("#quarantine h3").all_inner_texts()
        assert lake.locator("#ocsf tr", has_text="2024-03-01").inner_text().split("\t")[:3] == ["2024-03-01", "30", "1"]
        assert "replay_reason" in lake.get_by_text("airflow dags trigger cloudtrail_ingest").first.inner_text()
        failed = lake.locator("#gate tr.failed")
        assert failed.count() == 1 and "2024-03-01" in failed.inner_text() and "failed" in failed.inner_text()
        page.screenshot(path=str(tmp_path / "lake-page.png"), full_page=True)

        lake.locator("input[name=file]").fill(known.corrupt.name)
        lake.get_by_role("button", name="Search").click()
        hit = lake.locator("#ledger tr", has_text=known.corrupt.name)
        hit.first.wait_for()
        assert "quarantined" in hit.first.inner_text() and "corrupt_gzip" in hit.first.inner_text()

        lake.locator("#gate").get_by_role("link", name="results").click()  # the gate's results, rendered by the plugin
        failed = lake.locator("section[id='cloudtrail_run.critical'] tr.failed")
        failed.first.wait_for()
        assert "quarantine_share" in failed.first.inner_text() and "expect_column_max_to_be_between" in failed.first.inner_text()
        assert any(frame.url.endswith(f"/cloudtrail/gates/events/{known.report.run_id}") for frame in page.frames)

        # The run's "Lake" tab: the DAG registered (no DAG processor here) and a run of it under the ingest's run id.
        subprocess.run([sys.executable, "-m", "airflow", "dags", "reserialize"], env=server.env, check=True, capture_output=True)
        api = Api(server.url, server.password)
        api.call("POST", "/api/v2/dags/cloudtrail_ingest/dagRuns", {"dag_run_id": known.report.run_id, "logical_date": None})
        page.goto(f"{server.url}/dags/cloudtrail_ingest/runs/{known.report.run_id}/plugin/cloudtrail_lake_run")
        run = page.frame_locator("iframe").first
        run.locator("pre").wait_for(timeout=60_000)
        assert re.search(r"rows written +30 ", run.locator("pre").inner_text())
        batches = run.locator("table tr").all_inner_texts()[1:]
        assert len(batches) == len(known.report.batches)
        assert batches[0].split("\t")[:5] == ["0", "2", "32", "30", "1"], "batch 0: files, records, rows written, quarantined"
        page.screenshot(path=str(tmp_path / "run-view.png"), full_page=True)
        browser.close()

    # Airflow marks the DAG run failed (its publish, say) though its ingest job succeeded: the run is failed on the page.
    last_run = f"run {known.report.run_id}: succeeded"
    assert last_run in get(f"{server.url}/cloudtrail/", api.token)[1].decode(), "a queued DAG run is judged by its ingest"
    api.call("PATCH", f"/api/v2/dags/cloudtrail_ingest/dagRuns/{known.report.run_id}", {"state": "failed"})
    page_text = get(f"{server.url}/cloudtrail/", api.token)[1].decode()
    heading = page_text[page_text.index("id='run'") :]
    assert f"run {known.report.run_id}: failed (the DAG run; its ingest job succeeded)" in heading and last_run not in heading


def test_the_published_tables_show_their_snapshot_the_dates_held_back_and_the_last_error_escaped(server: Server, known: KnownLake):
    from jobs.publishing import command as publish

    # The known lake's only date failed its gate: held back from the events table; the OCSF table, its job's own, is.
    report = publish.publish_tables(publish.parse_args(["--lake", str(known.lake.root), "--run-id", "page-publish"]))
    tables = {t.table: t for t in report.tables}
    assert tables["events"].snapshot_id is None and "its gate failed" in tables["events"].held_back["2024-03-01"]
    assert tables["ocsf_api_activity"].snapshot_id is not None
    hostile = "<img src=x onerror=alert(1)>"
    failed = publish.PublishReport("later", "2024-03-01T02:00:00+00:00", "glue", "cloudtrail", "failed",
                                   [publish.TableOutcome("findings", error=f"CommitFailedException: {hostile}")])  # fmt: skip
    failed.write(known.lake)
    publish.PublishReport("newest", "2024-03-01T03:00:00+00:00", "glue", "cloudtrail", "succeeded", report.tables).write(known.lake)
    token = Api(server.url, server.password).token
    code, body, _ = get(f"{server.url}/cloudtrail/", token)
    page = body.decode()
    section = page[page.index("id='published'") :]
    assert code == 200 and "its gate failed" in section and str(tables["ocsf_api_activity"].snapshot_id) in section
    assert hostile not in page and "&lt;img src=x onerror=alert(1)&gt;" in section, "the last error, escaped"
    shown = json.loads(get(f"{server.url}/cloudtrail/status.json", token)[1])["published"]
    assert {t["table"]: t["last_error"] is not None for t in shown} == {
        "events": False, "activity_hourly": False, "findings": True, "ocsf_api_activity": False, "quarantine": False
    }  # fmt: skip
