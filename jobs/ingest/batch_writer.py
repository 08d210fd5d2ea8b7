"""The streaming query's foreachBatch body: one batch into both tables in one Spark job, its figures counted on
the way (jobs/spark/sinks.write_tables), then each table's commit, exactly once per batch id: the quarantine's Iceberg
snapshot (with the rows it keeps from the files holding rows its reads replace, which the snapshot removes:
jobs/tables/quarantine_table.py), then the events' sink log."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from jobs.ingest.config import IngestConfig
from jobs.lake import EVENTS, QUARANTINE
from jobs.landing.layout import place
from jobs.ledger.store import record_late_files
from jobs.records.rows import kept_rows, table_rows
from jobs.reporting.report import BatchStats, RunReport
from jobs.spark.checkpoint import make_state_folders
from jobs.spark.logs import batch_time, local_path, stream_id
from jobs.spark.sinks import write_tables
from jobs.tables.quarantine import batch_entries, replaced_rows
from jobs.tables.record_table import RecordTable
from jobs.tables.tables_of_record import RecordTables

EPOCH = date(1970, 1, 1)  # an event date as the write counts it: days since


@dataclass
class BatchFigures:
    """What one batch holds, as its write counted it."""

    written: Counter[str] = field(default_factory=Counter)  # rows per event date
    quarantined: Counter[str] = field(default_factory=Counter)  # rows per reason
    late: int = 0
    implausible: int = 0
    late_per_date: Counter[str] = field(default_factory=Counter)
    late_files: dict[str, set[str]] = field(default_factory=dict)  # per event date, the files that held its late events
    newest: dict[str, str] = field(default_factory=dict)  # per "account/region", the newest plausible eventTime written
    future: Counter[str] = field(default_factory=Counter)  # per "account/region", events dated after the batch (+ skew)

    def stats(self, batch_id: int, already_committed: bool) -> BatchStats:
        return BatchStats(
            batch_id, dict(self.written), dict(self.quarantined), already_committed, late_events=self.late,
            implausible_event_times=self.implausible, late_per_event_date=dict(self.late_per_date),
            newest_event_times=self.newest, future_dated_events=dict(self.future),
        )  # fmt: skip


def batch_figures(groups: list[list[Any]]) -> BatchFigures:
    """The batch's figures from what the write counted per (reason, event date, source file) (jobs/sinks.Written)."""
    figures = BatchFigures()
    for reason, days, source, rows, late, implausible, future_dated, newest_us in groups:
        day = str(EPOCH + timedelta(days=days)) if days is not None else None
        figures.late += late
        figures.implausible += implausible
        if late and day is not None:
            figures.late_files.setdefault(day, set()).add(source)
            figures.late_per_date[day] += late
        if reason is not None:
            figures.quarantined[reason] += rows
            continue
        figures.written[str(day)] += rows
        where = place(local_path(source))
        if where is None:
            continue
        key = "/".join(where)
        if newest_us is not None:
            newest = datetime.fromtimestamp(newest_us // 1_000_000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            figures.newest[key] = max(newest, figures.newest.get(key, newest))
        figures.future[key] += future_dated
    figures.future = +figures.future  # places with none are left out
    return figures


class BatchWriter:
    """foreachBatch body: both tables' files in one Spark job (the batch is computed once, not cached), then each
    table's commit, the quarantine's first; a table that has the batch already is not written again."""

    def __init__(self, spark: SparkSession, config: IngestConfig, report: RunReport, tables: RecordTables) -> None:
        self.spark, self.lake, self.report = spark, config.lake, report
        self.events, self.quarantine = tables.events, tables.quarantine
        self.clock_skew = config.clock_skew

    def __call__(self, rows: DataFrame, batch_id: int) -> None:
        if batch_id == 0:
            make_state_folders(self.spark, self.lake.checkpoint)
        events_done, quarantine_done = (self._has(table, batch_id) for table in (self.events, self.quarantine))
        replaced, kept = ([], None) if quarantine_done else self.replaced(batch_id)
        batch = table_rows(rows, batch_time(self.lake.checkpoint, batch_id), self.clock_skew)
        if kept is not None:
            batch = batch.unionByName(kept_rows(kept))
        folders = self.events.data_folder, self.quarantine.data_folder
        written = write_tables(batch, *folders, batch_id, events=not events_done, quarantine=not quarantine_done)
        figures = batch_figures(written.groups)
        query = stream_id(self.lake.checkpoint)
        if not quarantine_done:
            self.quarantine.commit_batch(query, batch_id, written.files[QUARANTINE], replaced)
        record_late_files(self.lake.late_files, batch_id, {day: sorted(files) for day, files in figures.late_files.items()})
        if not events_done:
            self.events.commit_batch(query, batch_id, written.files[EVENTS], [])
        self.report.batches.append(figures.stats(batch_id, events_done and quarantine_done))

    @staticmethod
    def _has(table: RecordTable, batch_id: int) -> bool:
        held = table.committed_batch()
        return held is not None and held >= batch_id

    def replaced(self, batch_id: int) -> tuple[list[str], DataFrame | None]:
        """The quarantine's data files holding rows the batch's reads replace, and the rows it keeps from them."""
        entries = [entry for entry in batch_entries(self.lake, batch_id) if entry.supersedes]
        if not entries:
            return [], None
        files = self.quarantine.holding(replaced_rows(entries))
        return files, self.quarantine.kept(files, replaced_rows(entries)) if files else None
