"""The quarantine is a waiting room: rows leave it when a later read of their file replaces them.

A file read again (it changed after it was read, or a replay asked for it) replaces the quarantine rows of its earlier
reads: all of them, or, for a replay of quarantined records, those at the replayed positions. Which rows a batch's
reads replace, and which files a replay reads, are decided here; the table itself, and the one snapshot in which a
batch adds its rows and removes the files holding replaced ones, are jobs/tables/quarantine_table.py's.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from functools import reduce

from pyspark.sql import Column
from pyspark.sql import functions as F

from jobs import storage
from jobs.lake import Lake
from jobs.landing.layout import delivery_date
from jobs.ledger.store import Entry, read_manifest
from jobs.spark.logs import local_path, read_source_log, source_file, source_offset


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


def entries_to_replay(quarantined: Iterable[tuple[str, str, int | None]], replay: Replay) -> list[Entry]:
    """The landing files (or records of them) that quarantined rows (source file, reason, record index) name for
    `replay`; a file gone from the landing zone is left."""
    whole: set[str] = set()
    records: dict[str, set[int]] = {}
    for path, reason, index in quarantined:
        if replay.wants(reason, path):
            if index is None:
                whole.add(path)  # the whole file was quarantined: it is read whole
            else:
                records.setdefault(path, set()).add(index)
    wanted = {path: None for path in whole} | {path: sorted(indexes) for path, indexes in records.items() if path not in whole}
    return [Entry.of(path, indexes, supersedes=True) for path, indexes in sorted(wanted.items()) if os.path.exists(path)]


def replaced_rows(entries: Sequence[Entry]) -> Column:
    """Quarantine rows the entries' reads replace."""
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
    return [entry for path in manifests for entry in read_manifest(storage.at(path)).entries]


# The replacement record an earlier release wrote per batch (jobs/storage.py's `record_body`): 2 = {"files": [...]}; 1 the
# list. A lake it wrote may still hold one (jobs/tables/quarantine_table.py reads it when it moves the folder in).
RECORD_FORMAT = 2
