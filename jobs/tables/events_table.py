"""The events, an Apache Iceberg table of record: `cloudtrail.events` in the lake's embedded catalog, at
<lake>/iceberg/warehouse/cloudtrail/events/, partitioned by event date.

Its commits go on the branch `ingest` (jobs/tables/record_table.py): every batch of the ingest, a rebuild's overwrite
of its dates, a compaction's rewrite, a repair. The table's main branch, which readers of the catalog read, takes a
date's files from `ingest` only once a gate passed them (jobs/publishing/): no reader sees a batch its gate has not
passed, and no row is kept twice.

A lake an earlier release wrote keeps its events in partition folders (<lake>/events/); the first command that opens
the table registers their committed files in place on `ingest`, in one snapshot (`cloudtrail.moved-in`), with the
newest batch the folder's log holds, so its rows are neither copied nor read again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import date
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs import storage
from jobs.iceberg.spark_tables import calling
from jobs.lake import EVENT_DATE, EVENTS, Lake
from jobs.records import layout
from jobs.records.rows import event_rows
from jobs.records.schema import EVENTS_SCHEMA
from jobs.spark.logs import local_path, sink_batch, sink_log
from jobs.spark.sinks import write_tables
from jobs.storage import LakePath
from jobs.tables.events import INGEST, REBUILD
from jobs.tables.record_table import RecordTable
from jobs.tables.sweep import sweep_table, table_files

log = logging.getLogger("events")

MOVED_IN = "cloudtrail.moved-in"


class EventsTable(RecordTable):
    """The lake's events table, through the session's Iceberg catalog: created on first use (or claimed: an earlier
    release published it), an earlier release's folder registered in place."""

    table, schema, partition, branch, order = EVENTS, EVENTS_SCHEMA, EVENT_DATE, INGEST, layout.SORT_COLUMNS

    def __init__(self, spark: SparkSession, lake: Lake, moving_from: Lake | None = None) -> None:
        super().__init__(spark, lake, moving_from)
        self.open()
        if sink_log(lake.events).is_dir() and not self.table_has_branch():
            self._moved_in()

    def table_has_branch(self) -> bool:
        return bool(self.java().refs().containsKey(INGEST))

    def _moved_in(self) -> None:
        """The committed files of the folder an earlier release wrote, registered in place on `ingest` in one snapshot
        (the main branch's files, published copies of them, leave `ingest` in the same one), with the folder log's
        newest batch. Their uncommitted neighbours are swept aside first, as the old ingest swept them."""
        folder = self.lake.events
        sweep_table(self.spark, self.lake, EVENTS, "moved-in")
        files = sorted(str(path) for path in table_files(folder) if path.suffix == ".parquet")
        table = self.java()
        held = sink_batch(folder)
        with calling(self.name, "registering the events folder"):
            published = [str(f.location()) for f in self.current(table)]  # before its first commit, ingest is main
            self.commit(table, files, published, {MOVED_IN: str(folder)}, None if held is None else str(held))
        log.info("the events folder's %d files are the Iceberg table %s's, in place", len(files), self.name)

    def stage(self, rows: DataFrame, tag: str) -> tuple[DataFrame, list[str]]:
        """`rows` (whole dates: a rebuild's, a compaction's) written as files in the table's data folder, under
        <data>/<tag>/, a folder per event date: no row of the table until `replace_dates` commits them. Read back as
        written, and the files."""
        folder = self._staged(tag)
        # The ingest's writer, not Spark's partitionBy, which leaves the date out of the files.
        written = write_tables(event_rows(rows), str(folder), str(folder), 0, events=True, quarantine=False)
        files = sorted(written.files[EVENTS])
        return rows.sparkSession.read.schema(rows.schema).parquet(*files) if files else rows.limit(0), files

    def stage_date(self, rows: DataFrame, tag: str, day: date) -> list[str]:
        """One date's rows (a compaction's, without the date column, which the files get) written as files under
        <data>/<tag>/<date folder>/, one a Spark partition of `rows`; the files."""
        folder = self._staged(tag) / f"{EVENT_DATE}={day}"
        rows.withColumn(EVENT_DATE, F.lit(day)).write.mode("overwrite").parquet(str(folder))
        return sorted(str(path) for path in folder.glob("*.parquet"))

    def discard(self, tag: str) -> None:
        """A staged write that is not committed (its gate failed), deleted."""
        storage.remove_tree(self._staged(tag))

    def _staged(self, tag: str) -> LakePath:
        return storage.at(self.data_folder) / tag.replace("/", "_")

    def replace_dates(self, dates: Iterable[date | str], files: list[str], summary: dict[str, str], branch: str = INGEST) -> None:
        """One snapshot on `branch`: every file the dates hold removed, `files` (staged) added; readers see the dates
        change at once."""
        table, wanted = self.java(), {f"{EVENT_DATE}={day}" for day in dates}
        held = [str(f.location()) for f in self.current(table, None, branch) if Path(local_path(str(f.location()))).parent.name in wanted]
        if files or held:
            with calling(self.name, f"replacing {len(wanted)} dates"):
                self.commit(table, files, held, summary, None, branch)

    def drop_dates(self, dates: Iterable[date | str], summary: dict[str, str]) -> None:
        """The dates gone from the table, for the lake's jobs and for the catalog's readers alike (retention)."""
        dates = list(dates)
        for branch in (INGEST, "main"):
            self.replace_dates(dates, [], summary, branch)

    def roll_back(self, tag: str) -> bool:
        """Undo what rebuild `tag` changed, in one snapshot; False when it changed nothing here."""
        return self.undo(lambda summary: summary.get(REBUILD) == tag, tag)
