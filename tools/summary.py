"""Print a short summary of the lake, read with DuckDB the way an analyst would.

python -m tools.summary --lake DIR
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import duckdb

from jobs.iceberg.catalog import NAMESPACE
from jobs.lake import DERIVED, EVENT_DATE, REASON, Lake
from jobs.reporting.report import failure_line, read_reports, verdict_of
from jobs.status.lake_status import derived_rows
from jobs.storage import LakePath
from jobs.tables.events import events_source
from jobs.tables.quarantine_files import quarantine_source


def latest(folder: LakePath) -> dict | None:
    found = read_reports(folder)
    return found[-1] if found else None


def summarize(lake: Lake) -> str:
    table = events_source(lake)
    db = duckdb.connect()
    lines = [f"events table: {lake.events}  (Hive partitions {EVENT_DATE}=YYYY-MM-DD)"]
    if table is None:
        lines.append("  no rows yet")
    else:
        total, dates = db.execute(f"select count(*), count(distinct {EVENT_DATE}) from {table}").fetchone() or (0, 0)
        lines.append(f"  {total} rows in {dates} event dates")
        lines.append(f"rows per {EVENT_DATE}:")
        for day, rows in db.execute(f"select {EVENT_DATE}, count(*) from {table} group by 1 order by 1").fetchall():
            lines.append(f"  {day}  {rows:>8}")
        lines.append("top eventSources:")
        for source, rows in db.execute(f"select eventSource, count(*) n from {table} group by 1 order by n desc, 1 limit 5").fetchall():
            lines.append(f"  {source:<36}{rows:>8}")
    quarantine = quarantine_source(lake)
    lines.append(f"quarantine: {NAMESPACE}.quarantine")
    if quarantine is not None:
        query = f"select {REASON}, count(*) from {quarantine} group by 1 order by 1"
        lines.extend(f"  {reason:<24}{count:>8}" for reason, count in db.execute(query).fetchall())
    else:
        lines.append("  nothing quarantined")
    from jobs.iceberg.catalog import open_catalog

    name = os.environ.get("CLOUDTRAIL_CATALOG") or None
    catalog = open_catalog(lake, name) if name or lake.iceberg_catalog.exists() else None  # a reader creates no catalog
    lines.extend(activity_highlights(catalog))
    lines.extend(published(lake, name, catalog))
    for derived in DERIVED:
        days = derived_rows(lake, derived, days=100_000)
        for name in derived.tables:
            rows = sum(day.rows.get(name, 0) for day in days)
            held = f"{rows} rows in {len(days)} event dates" if days else "no rows yet"
            lines.append(f"{derived.title}, {name}: {held}")
    ingest = latest(lake.ingest_reports)
    if ingest:
        lines.append(
            f"last ingest run {ingest['run_id']}: {ingest['status']}, {ingest['files_read']} files, {ingest['records_read']} records, "
            f"{ingest['rows_written']} rows written, {ingest['duplicates_dropped']} duplicates dropped, {ingest['quarantined']} quarantined"
        )
    gate = latest(lake.gate_reports)
    if gate and verdict_of(gate) == "skipped":  # jobs/quality/gate.py: nothing changed since a gate passed
        lines.append(f"DQ gate: SKIPPED ({gate['reason']})")
    elif gate:
        failed = gate.get("failed_critical", [])
        lines.append(f"DQ gate: {verdict_of(gate).upper()} ({len(failed)} critical failures, {len(gate.get('warnings', []))} warnings)")
        lines.extend(f"  {failure_line(check)}" for check in failed)
    return "\n".join(lines)


def activity_highlights(catalog: Any | None) -> list[str]:
    """The top findings and the busiest principals, from the activity tables (jobs/derived/activity.py), Iceberg tables
    read with pyiceberg and DuckDB (`catalog`: None, the lake has none yet)."""
    from jobs.iceberg.catalog import NAMESPACE, existing_table

    if catalog is None:
        return ["findings: none yet"]
    found, activity = (existing_table(catalog, f"{NAMESPACE}.{name}") for name in ("findings", "activity_hourly"))
    lines = [f"findings: {NAMESPACE}.findings"]
    if found is not None and found.current_snapshot() is not None:
        query = (
            "select rule_id, any_value(severity), any_value(rule_title), count(*) n from findings group by 1 order by n desc, 1 limit 10"
        )
        rows = found.scan(selected_fields=("rule_id", "severity", "rule_title")).to_duckdb("findings").execute(query).fetchall()
        lines.extend(f"  {rule:<9}{severity:<8}{count:>6}  {title}" for rule, severity, title, count in rows)
    if len(lines) == 1:
        lines.append("  none")
    if activity is not None and activity.current_snapshot() is not None:
        lines.append("busiest principals (events, errors):")
        query = ("select principal, sum(events) e, sum(errors) from hourly where principal is not null "
                 "group by 1 order by e desc, 1 limit 5")  # fmt: skip
        rows = activity.scan(selected_fields=("principal", "events", "errors")).to_duckdb("hourly").execute(query).fetchall()
        lines.extend(f"  {principal[:70]:<72}{events:>8}{errors:>8}" for principal, events, errors in rows)
    return lines


def published(lake: Lake, catalog_name: str | None, catalog: Any | None) -> list[str]:
    """The Iceberg tables as a reader elsewhere reads them: through the catalog, with pyiceberg (jobs/publishing/command.py)."""
    from jobs.iceberg.catalog import NAMESPACE, TABLE_NAMES

    if catalog is None:
        return ["Iceberg tables: not published yet (the DAGs' publish task, or python -m jobs.publish)"]
    lines = [f"Iceberg tables in {catalog_name or lake.iceberg_catalog} (namespace {NAMESPACE}), read through pyiceberg:"]
    for name in TABLE_NAMES.values():
        identifier = f"{NAMESPACE}.{name}"
        snapshot = catalog.load_table(identifier).current_snapshot() if catalog.table_exists(identifier) else None
        if snapshot is None:
            lines.append(f"  {identifier:<30} not published yet")
            continue
        lines.append(f"  {identifier:<30} snapshot {snapshot.snapshot_id}, {snapshot.summary.get('total-records')} rows")
    events = catalog.load_table(f"{NAMESPACE}.events") if catalog.table_exists(f"{NAMESPACE}.events") else None
    if events is not None and events.current_snapshot() is not None:
        busiest = max(events.inspect.partitions().to_pylist(), key=lambda row: row["record_count"], default=None)
        if busiest:
            where = f"{EVENT_DATE} = '{busiest['partition'][EVENT_DATE]}'"
            # event_date selected too: pyiceberg 0.12 filters a file lacking the column (an earlier release's) to no rows otherwise.
            scan = events.scan(row_filter=where, selected_fields=("eventName", EVENT_DATE))
            top = "select eventName, count(*) n from events group by 1 order by n desc, 1 limit 3"
            counts = scan.to_duckdb("events").execute(top).fetchall()
            lines.append(f"  catalog.load_table('{NAMESPACE}.events').scan(row_filter=\"{where}\"): "
                         f"{len(scan.plan_files())} files planned; top calls: " + ", ".join(f"{n} {c}" for n, c in counts))  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lake", type=Path, default=os.environ.get("CLOUDTRAIL_LAKE"))
    args = parser.parse_args(argv)
    print(summarize(Lake.at(args.lake)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
