"""Retention: event dates older than the lake keeps (`--retain`, jobs/upkeep/compact.py) dropped from every table
that holds rows by event date (the events, activity_hourly, findings, the OCSF table), whole partitions at a time.

An events partition goes as a rebuild's does (jobs/tables/staging.py): swapped out atomically, so a reader sees the
date or nothing, never part of it; then its files are deleted, not kept aside, since freeing the space is the point.
The next publish removes the dates from the events' Iceberg table in one snapshot (a date the lake no longer holds is
no table's). The derived tables, Iceberg tables of record, lose the dates in one delete snapshot each, their partitions'
files dropped whole; expiry and orphan removal then free the space. A late event of a dropped date, or a rebuild over
it, writes the date again; the next retention drops it again. The quarantine is kept by reason, not date: it is not
dropped here.
"""

from __future__ import annotations

import logging
from datetime import date, datetime
from typing import Any

from jobs.iceberg.catalog import NAMESPACE, TABLE_NAMES, existing_table
from jobs.lake import DERIVED, EVENT_DAY, PARTITION_COLUMNS, Lake, event_day
from jobs.tables.events import event_dates
from jobs.tables.events_table import EventsTable

# A retention's snapshots name its run.
RETAIN_RUN = "cloudtrail.retain-run"

log = logging.getLogger("retention")

# The derived tables, all partitioned by event date (the OCSF table by its eventDay).
DERIVED_TABLES = tuple(name for derived in DERIVED for name in derived.tables)


def _day(column: str, value: object) -> date:
    """A partition value of a dated table as its event date."""
    return datetime.strptime(str(value), "%Y%m%d").date() if column == EVENT_DAY else date.fromisoformat(str(value))


def derived_tables(catalog: Any, namespace: str = NAMESPACE) -> dict[str, Any]:
    """The derived tables `catalog` holds (none without a catalog), loaded once for `expired_dates` and `retire`."""
    if catalog is None:
        return {}
    tables = {name: existing_table(catalog, f"{namespace}.{TABLE_NAMES[name]}") for name in DERIVED_TABLES}
    return {name: table for name, table in tables.items() if table is not None}


def expired_dates(lake: Lake, tables: dict[str, Any], before: date) -> list[date]:
    """The event dates any dated table holds (the events' folders, the derived `tables`' partitions) that are older
    than `before`."""
    found = {date.fromisoformat(day) for day in event_dates(lake)}
    for name, table in tables.items():
        column = PARTITION_COLUMNS[name][-1]
        if table.current_snapshot() is not None:
            found |= {_day(column, row["partition"][column]) for row in table.inspect.partitions().to_pylist()}
    return sorted(day for day in found if day < before)


def retire(events: EventsTable, tables: dict[str, Any], run_id: str, dates: list[date]) -> None:
    """Drop `dates` from every dated table (under the lake lock): the events' in one snapshot on each branch, the
    derived `tables`' rows of those dates in one snapshot per table."""
    events.drop_dates(dates, {RETAIN_RUN: run_id})
    for name, table in tables.items():
        column = PARTITION_COLUMNS[name][-1]
        values = ", ".join(f"'{event_day(day) if column == EVENT_DAY else day}'" for day in dates)  # dates: nothing to escape
        table.delete(f"{column} IN ({values})", snapshot_properties={RETAIN_RUN: run_id})
    log.info("dropped %d event dates older than the lake keeps: %s", len(dates), ", ".join(map(str, dates)))
