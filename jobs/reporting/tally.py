"""The ingest runs' running tallies: what the lake page and `make status` would otherwise add up from every run's
report, whose count grows with every run and whose size grows with the places (at 1,000 accounts in 17 regions, a
run's report names 17,000 of them).

    <lake>/reports/tally.json   per "account/region": the newest plausible eventTime written, the events written
                                dated after it (future-dated), the newest file taken; per event date: late events;
                                an S3 landing's newest delivery lag (of a run that took files) and oldest notification,
                                the newest run that took notifications, and what the newest run found notified
                                outside its landing

One writer: the ingest, at the end of each run, folds the run's report in (`record`). A lake whose runs predate the
tally gets it from every report at its next run; until then a reader folds the reports itself (`read`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from jobs.lake import Lake
from jobs.landing.layout import delivery_order
from jobs.reporting.report import read_reports
from jobs.storage import read_record, write_record

Tally = dict[str, Any]


def empty() -> Tally:
    return {"places": {}, "late_per_event_date": {}}


def fold(tally: Tally, run: dict[str, Any]) -> Tally:
    """`tally` with one run's report added (runs in the order they ended): newest times and files kept if newer,
    counts added, the delivery figures replaced."""
    places: dict[str, dict[str, Any]] = tally["places"]
    for where, text in (run.get("newest_event_times") or {}).items():
        place = places.setdefault(where, {})
        if text > place.get("newest_event", ""):  # ISO 8601 UTC text sorts as time does
            place["newest_event"] = text
    for where, count in (run.get("future_dated_events") or {}).items():
        place = places.setdefault(where, {})
        place["future_dated"] = place.get("future_dated", 0) + count
    for where, path in ((run.get("deliveries") or {}).get("newest_per_place") or {}).items():
        place = places.setdefault(where, {})
        place["newest_file"] = max(filter(None, [place.get("newest_file"), path]), key=delivery_order)
    figures = run.get("deliveries") or {}
    if (figures.get("delivery_lag") or {}).get("files"):
        tally["delivery_lag"] = {"run_id": run.get("run_id"), **figures["delivery_lag"]}
    if figures.get("oldest_message_age_seconds") is not None:
        tally["oldest_message"] = [run.get("started_at"), figures["oldest_message_age_seconds"]]
    if (figures.get("messages") or {}).get("messages"):
        tally["notified"] = [run.get("started_at"), figures["messages"]["messages"]]
    if figures.get("mode") == "notifications":
        tally["outside_landing"] = figures.get("outside_landing")
    late: dict[str, int] = tally["late_per_event_date"]
    for day, count in ((run.get("late_events") or {}).get("per_event_date") or {}).items():
        late[day] = late.get(day, 0) + count
    return tally


def folded(runs: Iterable[dict[str, Any]]) -> Tally:
    tally = empty()
    for run in runs:
        fold(tally, run)
    return tally


# tally.json's format (jobs/storage.py's `record_body`): 1 since it named one.
TALLY_FORMAT = 1


def _kept(lake: Lake) -> Tally | None:
    try:
        return read_record(lake.tally, TALLY_FORMAT)
    except (OSError, ValueError):  # none yet, damaged, or newer: folded again from the reports
        return None


def record(lake: Lake, run: dict[str, Any]) -> None:
    """Fold a finished run's report (already written) into the tally; the first time, every report there is."""
    current = _kept(lake)
    write_record(lake.tally, TALLY_FORMAT, fold(current, run) if current else folded(read_reports(lake.ingest_reports)))


def read(lake: Lake) -> Tally:
    """The tally, or, before the first run that keeps one, the same figures from every run's report."""
    return _kept(lake) or folded(read_reports(lake.ingest_reports))
