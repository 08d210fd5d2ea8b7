"""What is in quarantine, as the lake page shows it: rows by reason and the day they arrived, the newest few of each
reason with their text cut short, and how to read a reason's rows again. Read in place with DuckDB, no Spark."""

from __future__ import annotations

import json
from dataclasses import dataclass

from jobs import duck
from jobs.lake import REASON, Lake
from jobs.spark.logs import local_path
from jobs.tables.quarantine_files import quarantine_source

# Text of a quarantined record shown on the page; the table holds all of it.
SAMPLE_CHARS = 200


@dataclass(frozen=True)
class QuarantinedRow:
    """One quarantined row as the page shows it: its text cut at SAMPLE_CHARS."""

    reason: str
    source_file: str  # a local path
    record_index: int | None  # None: the whole file
    record: str | None
    record_chars: int | None
    detail: str | None
    run_id: str
    ingested_at: str


@dataclass(frozen=True)
class Quarantined:
    by_reason_and_day: list[tuple[str, str, int]]  # reason, ingest date, rows
    samples: list[QuarantinedRow]


def quarantine(lake: Lake, samples_per_reason: int = 3) -> Quarantined:
    """What is in quarantine, by reason and the day it arrived, with the newest few rows of each reason."""
    source = quarantine_source(lake)
    if source is None:
        return Quarantined([], [])
    db = duck.connect(lake.root)
    counts = db.execute(
        f"select {REASON}, cast(cast(_ingest_time as date) as varchar) d, count(*) from {source} group by 1, 2 order by 2 desc, 1"
    ).fetchall()
    rows = db.execute(
        f"""select {REASON}, source_file, record_index, left(record, {SAMPLE_CHARS}), length(record), detail,
                   _ingest_run_id, cast(_ingest_time as varchar)
            from {source} qualify row_number() over (partition by {REASON} order by _ingest_time desc, source_file, record_index) <= ?
            order by {REASON}, _ingest_time desc""",
        [samples_per_reason],
    ).fetchall()
    samples = [QuarantinedRow(reason, local_path(path), *rest) for reason, path, *rest in rows]
    return Quarantined([tuple(row) for row in counts], samples)


def replay_command(reason: str) -> str:
    """How to read a reason's quarantined rows again (after a parser fix or a repair of the files)."""
    conf = json.dumps({"replay_quarantine": True, "replay_reason": reason})
    return f"airflow dags trigger cloudtrail_ingest --conf '{conf}'"
