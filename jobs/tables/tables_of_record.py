"""The lake's tables of record opened together, as every command that writes them opens them, and the newest ingest
batch each holds, which the checkpoint must agree with (jobs/spark/checkpoint.py): read without Spark, for the lake
page too."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobs.iceberg.embedded import registered
from jobs.lake import EVENTS, QUARANTINE, Lake
from jobs.tables import partitions
from jobs.tables.events import events_batch, events_location, unfinished_rebuild
from jobs.tables.quarantine_files import quarantine_batch, quarantine_location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jobs.tables.events_table import EventsTable
    from jobs.tables.quarantine_table import QuarantineTable


@dataclass(frozen=True)
class RecordTables:
    events: EventsTable
    quarantine: QuarantineTable

    @classmethod
    def opened(cls, spark: SparkSession, lake: Lake) -> RecordTables:
        """Both tables, created, claimed, or moved in from an earlier release's folders."""
        from jobs.tables.events_table import EventsTable
        from jobs.tables.quarantine_table import QuarantineTable

        return cls(EventsTable(spark, lake), QuarantineTable(spark, lake))


def tables_moved(lake: Lake) -> bool:
    """Whether a table of record's metadata names the lake's old path (it moved, or is a copy): the next command that
    opens the tables registers them where they are."""
    return any((entry := registered(lake, name)) is not None and entry.moved_from is not None for name in (EVENTS, QUARANTINE))


def held_batches(lake: Lake) -> dict[str, int | None]:
    """The newest ingest batch each table of record holds, by where it is."""
    return {events_location(lake): events_batch(lake), quarantine_location(lake): quarantine_batch(lake)}


def finish_rebuild(lake: Lake) -> None:
    """What a rebuild that died left to do, done before anything reads the tables: an earlier release's partition swap
    finished (jobs/tables/partitions.py), and a rebuild's staged quarantine made current after its events' commit
    (jobs/upkeep/rebuild.py)."""
    from jobs.tables.quarantine_repair import publish_staged

    partitions.recover(lake, functools.partial(publish_staged, lake))
    staged = unfinished_rebuild(lake)
    if staged is not None:
        from jobs.tables.quarantine_table import STAGED

        publish_staged(lake, {STAGED: staged})
