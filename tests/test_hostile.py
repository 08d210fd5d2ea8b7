"""Hostile content: CloudTrail's fields are chosen by whoever calls an AWS API, a landing file's every
field and name by whoever can write into the bucket, a run id by whoever starts a run. Payloads are
planted in each, ingested and gated, then every page the plugin serves is opened in headless Chromium:
no dialog opens, no planted markup becomes an element, no request leaves 127.0.0.1, and each payload
reads as the text it is. A forged far-future event does not switch the freshness alarm off."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote, urlparse

import pytest

from jobs.lake import Lake
from jobs.landing.layout import delivery_path
from jobs.quality import validate_events
from jobs.reporting import tally
from jobs.reporting.report import RunReport
from jobs.status import lake_status as status
from tests.conftest import own_airflow_home
from tests.helpers import DAY, event, events_of, ingest
from tools import status as terminal
from tools.airflow_api import Server, api_server, sign_in
from tools.generate_landing import write_delivery

# Each payload names where it was planted, so a dialog says which one ran.
PAYLOADS = {
    "eventSource": "<svg onload=alert('eventSource')>.amazonaws.com",
    "awsRegion": "<img src=x onerror=alert('awsRegion')>",
    "recipientAccountId": "<script>alert('recipientAccountId')</script>",
    "eventName": "<img src=x onerror=alert('eventName')>",
    "userAgent": "</code></td><script>alert('userAgent')</script>",
    "errorCode": "'><svg onload=alert('errorCode')>",
    "errorMessage": "<iframe src=javascript:alert('errorMessage')>",
    "requestParameters key": "<img src=x onerror=alert('requestParameters')>",
    "file name": "<img src=x onerror=alert('file')>",
    "account folder": "<svg onload=alert('account')>",
    "run id": "\"><img src=x onerror=alert('run-id')>/<b>",
}
FAR_FUTURE = "9999-12-31T00:00:00Z"
ACCOUNT, REGION = "111122223333", "us-east-1"


@dataclass(frozen=True)
class HostileLake:
    landing: Path
    lake: Lake
    report: RunReport
    run_id: str


def planted(name: str, *fields: str) -> dict:
    """A record without an eventID (quarantined, its text shown on the page) that leads with these payloads."""
    record: dict = {}
    for field in fields:
        if field == "requestParameters key":
            record["requestParameters"] = {PAYLOADS[field]: 1}
        else:
            record[field] = PAYLOADS[field]
    return {**record, "eventTime": "2024-03-01T01:00:00Z", "note": name}


@pytest.fixture(scope="module")
def hostile(spark, tmp_path_factory) -> HostileLake:
    root = tmp_path_factory.mktemp("hostile")
    landing, lake = root / "landing", root / "lake"
    ordinary = events_of(20, DAY, "ok")
    write_delivery(delivery_path(landing, ACCOUNT, REGION, DAY + timedelta(minutes=30), "ordinary"), ordinary, DAY + timedelta(minutes=30))
    records = [
        event("hostile-1", DAY + timedelta(minutes=50), eventSource=PAYLOADS["eventSource"], awsRegion=PAYLOADS["awsRegion"],
              recipientAccountId=PAYLOADS["recipientAccountId"], eventName=PAYLOADS["eventName"], userAgent=PAYLOADS["userAgent"],
              errorCode=PAYLOADS["errorCode"], errorMessage=PAYLOADS["errorMessage"],
              requestParameters={PAYLOADS["requestParameters key"]: "x"}),
        {**event("forged", DAY), "eventTime": FAR_FUTURE},
        planted("one", "eventName", "userAgent"),
        planted("two", "errorCode", "errorMessage"),
        planted("three", "requestParameters key"),
    ]  # fmt: skip
    delivered = DAY + timedelta(hours=1)
    write_delivery(delivery_path(landing, ACCOUNT, REGION, delivered, PAYLOADS["file name"]), records, delivered)
    elsewhere = delivery_path(landing, PAYLOADS["account folder"], REGION, delivered, "x")
    write_delivery(elsewhere, [event("elsewhere-1", DAY + timedelta(minutes=40))], delivered)

    run_id = PAYLOADS["run id"]
    report = ingest(spark, landing, lake, run_id=run_id)
    validate_events.main(["--lake", str(lake), "--run-id", run_id, "--dates", "2024-03-01"])
    return HostileLake(landing, Lake.at(lake), report, run_id)


def test_a_forged_far_future_event_is_counted_and_never_switches_the_freshness_alarm_off(hostile: HostileLake):
    body = json.loads(hostile.lake.ingest_report(hostile.run_id).read_text())
    place = f"{ACCOUNT}/{REGION}"
    assert body["newest_event_times"][place] == "2024-03-01T00:50:00Z", "the newest event dated before the batch ran"
    assert body["future_dated_events"] == {place: 1}
    assert body["rows_written_per_event_date"]["9999-12-31"] == 1, "the forged event is kept, as evidence"

    runs, skew, threshold = tally.read(hostile.lake), timedelta(minutes=15), timedelta(hours=2)

    def places(now: timedelta) -> dict[tuple[str, str], status.Freshness]:
        return {(r.account, r.region): r for r in status.freshness(hostile.lake, hostile.landing, threshold, runs, DAY + now, skew)}

    east = places(timedelta(hours=1))[ACCOUNT, REGION]
    assert (east.newest_event, east.future_dated, east.stale) == (DAY + timedelta(minutes=50), 1, False)
    assert east.lag == timedelta(minutes=10)
    assert places(timedelta(hours=4))[ACCOUNT, REGION].stale, "its deliveries stopped: STALE, whatever one event claims"

    # A report written before the ingest counted future-dated events carries the forged time as the newest: not believed either.
    older = {**body, "newest_event_times": {place: FAR_FUTURE}, "future_dated_events": {}}
    shown = status.freshness(hostile.lake, hostile.landing, threshold, tally.folded([older]), DAY + timedelta(hours=4), skew)
    (before,) = [r for r in shown if r.account == ACCOUNT]
    assert before.newest_event is None and before.future_dated == 1 and before.stale

    printed = "\n".join(terminal.overview(hostile.lake, str(hostile.landing), None, threshold, skew, DAY + timedelta(hours=4)))
    row = next(line for line in printed.splitlines() if line.strip().startswith(f"{ACCOUNT} ") and REGION in line)
    assert row.split()[-2:] == ["1", "STALE"], row


@pytest.fixture(scope="module")
def server(hostile: HostileLake, airflow_db: Path, tmp_path_factory) -> Iterator[Server]:
    env = {"CLOUDTRAIL_LAKE": str(hostile.lake.root), "CLOUDTRAIL_LANDING": str(hostile.landing)}
    env |= own_airflow_home(airflow_db, tmp_path_factory.mktemp("airflow") / "home")
    with api_server(env, tmp_path_factory.mktemp("api-server") / "api-server.log") as running:
        yield running


# The markup of our own pages: the chart's svg, the ledger's form. Anything else would be planted.
ELEMENTS_WITH_HANDLERS = "[...document.querySelectorAll('*')].filter(e => [...e.attributes].some(a => a.name.startsWith('on'))).length"
PLANTED_ELEMENTS = "img, script, iframe, svg[onload], b"


def test_every_page_shows_planted_payloads_as_text_and_runs_and_fetches_nothing(server: Server, hostile: HostileLake, tmp_path: Path):
    from playwright.sync_api import sync_playwright

    run_id = quote(hostile.run_id, safe="")
    pages = {
        "lake page": "/cloudtrail/",
        "ledger search": f"/cloudtrail/?file={quote('onerror')}",
        "run view": f"/cloudtrail/runs/cloudtrail_ingest/{run_id}",
        "status.json": "/cloudtrail/status.json",
        "gate runs": "/cloudtrail/gates/",
        "gate results": f"/cloudtrail/gates/events/{run_id}",
    }
    expected = {
        "lake page": [
            "eventName",
            "userAgent",
            "errorCode",
            "errorMessage",
            "requestParameters key",
            "file name",
            "account folder",
            "run id",
        ],  # fmt: skip
        "ledger search": ["file name"],
        "run view": ["run id"],
        "status.json": ["file name", "account folder"],
        "gate runs": ["run id"],
        "gate results": ["eventSource", "awsRegion", "recipientAccountId", "run id"],
    }
    dialogs: list[str] = []
    requests: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1800})
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        sign_in(page, server.url, server.password)
        page.goto("about:blank")  # the UI's own page stops asking its API before the plugin's pages are counted
        page.on("request", lambda request: requests.append(request.url))
        for name, path in pages.items():
            response = page.goto(server.url + path)
            assert response is not None and response.status == 200, name
            assert "script-src 'none'" in response.headers["content-security-policy"], name
            page.wait_for_load_state("load")
            shown = page.locator("body").inner_text()
            for field in expected[name]:
                text = json.dumps(PAYLOADS[field])[1:-1] if name == "status.json" else PAYLOADS[field]
                assert text in shown, f"{field} is not shown as text on the {name}"
            assert page.evaluate(ELEMENTS_WITH_HANDLERS) == 0, f"an element with an event handler on the {name}"
            assert page.locator(PLANTED_ELEMENTS).count() == 0, f"planted markup became an element on the {name}"
            page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)
        browser.close()
    assert dialogs == [], f"planted script ran: {dialogs}"
    hosts = {urlparse(url).hostname for url in requests}
    assert hosts == {"127.0.0.1"}, f"requests left the machine: {sorted(set(requests))}"
    assert {urlparse(url).path for url in requests} <= {urlparse(server.url + path).path for path in pages.values()} | {"/favicon.ico"}, (
        f"each page is one document, nothing more: {requests}"
    )
