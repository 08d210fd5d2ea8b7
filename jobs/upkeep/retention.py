"""Retention: event dates older than the lake keeps (`--retain`, jobs/upkeep/compact.py) dropped from every table
that holds rows by event date (the events, activity_hourly, findings, the OCSF table), whole partitions at a time.

Each partition goes as a rebuild's does (jobs/tables/staging.py): swapped out atomically, so a reader sees the date or
nothing, never part of it; then its files are deleted, not kept aside, since freeing the space is the point. The next
publish removes the dates from the Iceberg tables in one snapshot (a date the lake no longer holds is no table's), and
expiry and orphan removal free the warehouse's copies. A late event of a dropped date, or a rebuild over it, writes
the date again; the next retention drops it again. The quarantine is kept by reason, not date: it is not dropped here.
"""

from __future__ import annotations

import logging
import shutil
from datetime import date, datetime
from pathlib import Path

from jobs.lake import DERIVED, EVENT_DATE, EVENTS, Lake, partition_leaves
from jobs.tables.staging import Staging

log = logging.getLogger("retention")

# The tables partitioned by event date (the OCSF table by its eventDay), in the order they go.
DATED = (EVENTS, *(name for derived in DERIVED for name in derived.tables))


def _date_of(leaf: Path) -> date:
    column, value = leaf.name.split("=", 1)
    return date.fromisoformat(value) if column == EVENT_DATE else datetime.strptime(value, "%Y%m%d").date()


def expired_dates(lake: Lake, before: date) -> list[date]:
    """The event dates any dated table holds that are older than `before`."""
    found = {_date_of(leaf) for name in DATED for leaf in partition_leaves(lake.table(name), name)}
    return sorted(day for day in found if day < before)


def retire(lake: Lake, run_id: str, dates: list[date]) -> None:
    """Drop `dates` from every dated table: each partition swapped out, then deleted (under the lake lock)."""
    tag = f"{run_id}.retain"
    Staging(lake, tag).publish(True, dict.fromkeys(DATED, dates))
    for name in DATED:
        shutil.rmtree(lake.replaced_by_run(lake.table(name), tag), ignore_errors=True)
    log.info("dropped %d event dates older than the lake keeps: %s", len(dates), ", ".join(map(str, dates)))
