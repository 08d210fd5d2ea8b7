"""The quarantine is a waiting room: rows leave it when a later read of their file replaces them.

A file read again (it changed after it was read, or a replay asked for it) replaces the
quarantine rows of its earlier reads: all of them, or, for a replay of quarantined records,
those at the replayed positions. The batch that reads it writes, through the quarantine's
file sink, its own quarantine rows plus the rows it keeps from every quarantine data file
holding a replaced row; once that is committed, those data files move to
<lake>/_replaced/quarantine/batch-<id>/. What the batch will move is written down first
(<checkpoint>/replacements/<batch id>.json), so a run that dies in between finishes the move
when Spark replays the batch (its commit log does not hold it yet): a reader sees replaced
rows only between the commit and the move, never a row lost.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from functools import reduce
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.files import read_record, under, write_record
from jobs.lake import REASON, Lake
from jobs.landing.layout import delivery_date
from jobs.ledger.store import Entry, read_manifest
from jobs.records.schema import QUARANTINE_SCHEMA
from jobs.spark.logs import local_path, read_source_log, source_file, source_offset
from jobs.tables.sweep import move_aside


@dataclass(frozen=True)
class Replay:
    """Which quarantined files and records to read again: by reason, and by delivery date."""

    reasons: tuple[str, ...] = ()
    first: date | None = None
    last: date | None = None

    def wants(self, reason: str, path: str) -> bool:
        delivered = delivery_date(path)
        return (
            (not self.reasons or reason in self.reasons)
            and (self.first is None or (delivered is not None and delivered >= self.first))
            and (self.last is None or (delivered is not None and delivered <= self.last))
        )


def replay_entries(lake: Lake, replay: Replay) -> list[Entry]:
    """The landing files (or records of them) the quarantine holds for `replay`; a file gone from the landing zone is left."""
    if not any(lake.quarantine.glob("*/*.parquet")):
        return []
    import pyarrow.dataset as ds  # brings pandas: paid by a replay, not by every run

    rows = ds.dataset(str(lake.quarantine), format="parquet", partitioning="hive").to_table(columns=["source_file", "record_index", REASON])
    whole: set[str] = set()
    records: dict[str, set[int]] = {}
    for row in rows.to_pylist():
        path = local_path(row["source_file"])
        if replay.wants(row[REASON], path):
            if row["record_index"] is None:
                whole.add(path)  # the whole file was quarantined: it is read whole
            else:
                records.setdefault(path, set()).add(row["record_index"])
    wanted = {path: None for path in whole} | {path: sorted(indexes) for path, indexes in records.items() if path not in whole}
    return [Entry.of(path, indexes, supersedes=True) for path, indexes in sorted(wanted.items()) if os.path.exists(path)]


def _replaced(entries: Sequence[Entry]) -> Column:
    """Quarantine rows an entry's read replaces."""
    rows = [
        (F.col("source_file") == source_file(entry.path))
        & (F.lit(entry.only_records is None) | F.col("record_index").isin(entry.only_records or []))
        for entry in entries
    ]
    return reduce(lambda a, b: a | b, rows)


def batch_entries(lake: Lake, batch_id: int) -> list[Entry]:
    """The manifest entries query batch `batch_id` reads: the source's log entries past the previous batch's offset."""
    offset, previous = source_offset(lake.checkpoint, batch_id), source_offset(lake.checkpoint, batch_id - 1)
    if offset is None or offset == previous:
        return []
    logged = {local_path(e.path) for e in read_source_log(lake.checkpoint, lake.manifests).entries if e.batch_id == offset}
    manifests = sorted(path for path in logged if os.path.dirname(path) == str(lake.manifests))  # not a pre-ledger landing file
    return [entry for path in manifests for entry in read_manifest(Path(path)).entries]


# A batch's replacement record's format (jobs/files.py's `record_body`): 2 = {"files": [...]}; format 1 was the list.
RECORD_FORMAT = 2


class Replacement:
    """The quarantine data files one batch replaces, and the rows it keeps from them."""

    def __init__(self, spark: SparkSession, lake: Lake, batch_id: int, committed: bool) -> None:
        self.lake, self.batch_id = lake, batch_id
        self.record = lake.replacements / f"{batch_id}.json"
        self.files: list[Path] = []
        self.kept: DataFrame | None = None
        if self.record.exists():
            body = read_record(self.record, RECORD_FORMAT, {1: under("files")})
            self.files = [Path(p) for p in body["files"]]
        if committed:
            return  # the batch's output is written: only the move may be left to do
        entries = [entry for entry in batch_entries(lake, batch_id) if entry.supersedes]
        if not entries or not any(lake.quarantine.glob("*/*.parquet")):
            return
        quarantine = spark.read.schema(QUARANTINE_SCHEMA).parquet(str(lake.quarantine))
        hits = quarantine.where(_replaced(entries)).select(F.input_file_name().alias("file")).distinct().collect()
        self.files = sorted(Path(local_path(row.file)) for row in hits)
        if self.files:
            paths = [str(path) for path in self.files]
            read = spark.read.schema(QUARANTINE_SCHEMA).option("basePath", str(lake.quarantine)).parquet(*paths)
            self.kept = read.where(~_replaced(entries))
            write_record(self.record, RECORD_FORMAT, {"files": paths})

    def finish(self) -> None:
        """After the batch's quarantine output is committed: move the replaced files aside."""
        quarantine = self.lake.quarantine
        move_aside(quarantine, [f for f in self.files if f.exists()], self.lake.replaced(quarantine, f"batch-{self.batch_id}"))
        self.record.unlink(missing_ok=True)
