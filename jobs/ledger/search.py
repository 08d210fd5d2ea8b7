"""The lake page's file ledger: what became of a landing file (or of a day's deliveries), read from the ledger's
manifests, Spark's source log and the tables themselves (no Spark)."""

from __future__ import annotations

import functools
import gzip
import json
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

from jobs import duck, storage
from jobs.lake import REASON, Lake
from jobs.landing.layout import day_folders, delivery_date, log_files_in
from jobs.ledger.store import MANIFESTS, late_files, read_manifest
from jobs.spark.logs import last_commit, local_path, read_source_log, source_file, source_offset

# The events' rows of some event dates as a DuckDB table function, None when they hold none.
EventsSource = Callable[[list[date]], str | None]

# Hits a ledger search shows (each one costs a look into the tables and the file itself).
LEDGER_HITS = 20


# The ledger counts a file's records (for its duplicates) up to this size: CloudTrail's files are a few MB.
COUNT_RECORDS_UP_TO = 64 * 2**20


@dataclass(frozen=True)
class LedgerHit:
    path: str
    status: str  # ingested, quarantined, ingested and quarantined, taken (not committed yet), not seen
    size: int | None
    source_batch: int | None  # the source log's offset that read its manifest
    runs: tuple[str, ...]
    rows_written: int
    quarantined: dict[str, int]
    details: tuple[str, ...]
    records_in_file: int | None
    duplicates_dropped: int | None


@functools.lru_cache(maxsize=100_000)
def _manifest(path: str, mtime_ns: int) -> tuple[tuple[tuple[str, int | None, bool], ...], date | None]:
    """A manifest's files (path, size, taken whole) and their newest delivery date.

    A manifest is written whole and never changed (jobs/ledger/planner.py): a long-lived process (the
    API server) reads each one once; a week of them names tens of thousands of files."""
    entries = tuple((e.path, e.size, e.only_records is None) for e in read_manifest(storage.at(path)).entries)
    return entries, max((d for d in (delivery_date(p) for p, _, _ in entries) if d), default=None)


def manifests(lake: Lake) -> list[tuple[str, tuple[tuple[str, int | None, bool], ...], date | None]]:
    """Every manifest of the ledger, oldest first: its path, files and newest delivery date."""
    found = []
    for path in storage.listed(lake.manifests, MANIFESTS):
        try:
            found.append((str(path), *_manifest(str(path), path.stat().st_mtime_ns)))
        except FileNotFoundError:
            continue  # let go by a run as we listed (jobs/ledger/planner.py): its files are retired
    return found


def _records_in(path: str) -> int | None:
    """How many records the file holds, if it reads as CloudTrail JSON (None when it does not: it is in quarantine)."""
    try:
        if os.path.getsize(path) > COUNT_RECORDS_UP_TO:
            return None
        raw = Path(path).read_bytes()
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        records = json.loads(text).get("Records")
    except (OSError, ValueError, EOFError, AttributeError, zlib.error):
        return None
    return len(records) if isinstance(records, list) else None


def search_ledger(lake: Lake, landing: Path, query: str, events: EventsSource, quarantine: str | None) -> list[LedgerHit]:
    """Landing files whose path holds `query` (or, for a YYYY-MM-DD query, that were delivered that day), with what became of
    each; `events` gives the events' rows of some dates as a DuckDB table function (jobs/tables/events.py), `quarantine`
    is the quarantine's rows as one (jobs/tables/quarantine_files.py)."""
    query = query.strip()
    try:
        day: date | None = date.fromisoformat(query)
    except ValueError:
        day = None
    offsets = {entry.path: entry.batch_id for entry in read_source_log(lake.checkpoint, lake.manifests).entries}
    committed = source_offset(lake.checkpoint, last_commit(lake.checkpoint).batch_id)
    taken: dict[str, tuple[int | None, int | None]] = {}
    for manifest, entries, _ in manifests(lake):  # oldest first: the newest read of a file wins
        for path, size, whole in entries:
            if whole or path not in taken:
                taken[path] = (size, offsets.get(manifest))
    in_landing = [
        file.path for d, folder in day_folders(landing, day) if day is None or d == day for file in log_files_in(folder)
    ] if day is not None or query else []  # fmt: skip
    paths = sorted({p for p in [*taken, *in_landing] if (day is not None and delivery_date(p) == day) or (day is None and query in p)})
    paths = paths[:LEDGER_HITS]
    written, quarantined, runs, details = _table_rows(lake, paths, events, quarantine)
    hits = []
    for path in paths:
        size, source_batch = taken.get(path, (None, None))
        rows, held = written.get(path, 0), quarantined.get(path, {})
        if path not in taken and not rows and not held:
            status = "not seen"
        elif source_batch is None or committed is None or source_batch > committed:
            status = "taken, not committed yet" if not rows and not held else "ingested"
        else:
            status = " and ".join(s for s, n in (("ingested", rows), ("quarantined", held)) if n) or "ingested (only duplicates)"
        records = _records_in(path) if os.path.exists(path) else None
        duplicates = records - rows - sum(held.values()) if records is not None and status != "not seen" else None
        hits.append(
            LedgerHit(
                path,
                status,
                size,
                source_batch,
                tuple(sorted(runs.get(path, ()))),
                rows,
                held,
                tuple(details.get(path, ())),
                records,
                duplicates,
            )  # fmt: skip
        )
    return hits


def _table_rows(
    lake: Lake, paths: list[str], events_of: EventsSource, held: str | None
) -> tuple[dict[str, int], dict[str, dict[str, int]], dict[str, set[str]], dict[str, list[str]]]:
    """Rows of these files in the events table and the quarantine (`held`, a DuckDB table function), and the runs that
    wrote them.

    The events table is read only where a file's events can be: up to two days before its
    delivery date, and the dates its late events went to (jobs/ledger/planner.py's late files)."""
    written: dict[str, int] = {}
    quarantined: dict[str, dict[str, int]] = {}
    runs: dict[str, set[str]] = {}
    details: dict[str, list[str]] = {}
    if not paths:
        return written, quarantined, runs, details
    db = duck.connect(lake.root)
    days = {d - timedelta(days=back) for d in (delivery_date(p) for p in paths) if d is not None for back in range(3)}
    named = [source_file(path) for path in paths]
    days |= {d for d, files in late_files(lake.late_files).items() if files & set(named)}
    events = events_of(sorted(days))
    if events is not None:
        query = f"select _source_file, _ingest_run_id, count(*) from {events} where _source_file in (select unnest(?)) group by 1, 2"
        for name, run, count in db.execute(query, [named]).fetchall():
            path = local_path(name)
            written[path] = written.get(path, 0) + count
            runs.setdefault(path, set()).add(run)
    if held is not None:
        query = (f"select source_file, {REASON}, _ingest_run_id, count(*), min(detail) from {held} "
                 "where source_file in (select unnest(?)) group by 1, 2, 3")  # fmt: skip
        for name, reason, run, count, detail in db.execute(query, [named]).fetchall():
            path = local_path(name)
            quarantined.setdefault(path, {})[reason] = quarantined.get(path, {}).get(reason, 0) + count
            runs.setdefault(path, set()).add(run)
            details.setdefault(path, []).append(f"{reason}: {detail}")
    return written, quarantined, runs, details
