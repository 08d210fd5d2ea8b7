"""Helpers for tests that run the ingest job as a stream."""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import os
import re
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
from pyspark.sql import functions as F

from jobs import COMMANDS, storage
from jobs.ingest.command import parse_args
from jobs.ingest.run import run
from jobs.lake import Lake
from jobs.landing.layout import delivery_path
from jobs.records.schema import EVENTS_SCHEMA
from jobs.reporting.report import RunReport
from jobs.spark.logs import batch_files, local_path, sink_log, sink_log_files
from jobs.spark.session import stop_state_stores
from jobs.tables.quarantine import Replay
from jobs.tables.quarantine_files import quarantine_source
from tools.generate_landing import write_delivery

DAY = datetime(2024, 3, 1, tzinfo=UTC)


# A directory reader in a loop, printing each count it reads of a partition folder (argv[1]): what a reader sees during a swap.
COUNT_LOOP = """
import sys, duckdb
from jobs.lake import Lake
from jobs.tables.events import events_source
db = duckdb.connect()
db.execute("SET enable_progress_bar = false")  # its bar goes to stdout, between the counts
db.execute("SET threads = 1")  # one core in a tight loop is reader enough; the other is the writer's
lake, day = Lake.at(sys.argv[1]), sys.argv[2]
while True:
    try:
        rows = db.execute(f"select count(*) from {events_source(lake, [day])}").fetchone()[0]
        print(f"count {rows}", flush=True)
    except Exception as exc:  # a file the table's metadata named, gone before it was read
        print("error", type(exc).__name__, flush=True)
"""


def counts_seen(transcript: Path) -> set[int]:
    """The counts a COUNT_LOOP reader printed. Its terminate can cut the last line short (an unbuffered stdout writes
    each piece of a print on its own), so only lines ending in a newline are read."""
    whole = transcript.read_text().split("\n")[:-1]
    return {int(words[1]) for words in map(str.split, whole) if words[:1] == ["count"]}


def ingest(spark, landing: Path | str, lake: Path, replay: Replay | None = None, run_id: str | None = None, **options: Any) -> RunReport:
    """One run, configured by the job's own command line (`options`: its long options, `settle="1 hour"` for
    --settle, `reconcile=True` for the flag --reconcile); files the test has just written are taken at once (no settle
    time) unless `settle` says otherwise."""
    argv = ["--landing", str(landing), "--lake", str(lake), "--run-id", run_id or f"test-{uuid.uuid4().hex[:8]}", "--settle", "0 seconds"]
    for name, value in options.items():
        flag = f"--{name.replace('_', '-')}"
        argv += [flag] if value is True else [flag, str(value)] if value is not None else []
    try:
        return run(dataclasses.replace(parse_args(argv), replay=replay), lambda: spark)
    finally:
        stop_state_stores(spark)  # as the run's process ends them


def run_command(spark, command: str, argv: list[str]) -> int:
    """A command of jobs.COMMANDS in this process, as its door runs it (its `main`); the ingest on the tests' session."""
    if command != "cloudtrail_ingest":
        return int(importlib.import_module(f"jobs.{command}").main(argv))
    try:
        run(parse_args(argv), lambda: spark)
        return 0
    finally:
        stop_state_stores(spark)


def run_cleanly(spark, caplog, command: str, argv: list[str]) -> None:
    """run_command, checked as `succeeded` checks a process: exit 0, and nothing logged at ERROR nor with a traceback
    (this process's log records; a JVM's own output is its process runs' to check)."""
    caplog.clear()
    assert run_command(spark, command, argv) == 0, command
    bad = [record for record in caplog.records if record.levelno >= logging.ERROR or record.exc_info]
    assert not bad, [f"{record.name}: {record.getMessage()}" for record in bad]


def run_every_command(spark, steps: list[tuple[str, ...]], but: tuple[str, ...] = ()) -> None:
    """Each step (a command of jobs.COMMANDS and its arguments) in order, in this process: every command among them
    (`but` those the test runs apart), each exiting 0."""
    assert {name for name, *_ in steps} | set(but) == set(COMMANDS)
    for name, *argv in steps:
        assert run_command(spark, name, argv) == 0, name


# What a stack trace prints, Python's or the JVM's: an operator should see neither on a run that succeeded or refused.
STACK_TRACE = re.compile(r"Traceback \(most recent call last\)|^\s+at [\w$.<>]+\(|^Exception in thread", re.MULTILINE)


def around_stack(text: str) -> str:
    """What a failed assertion shows: the lines around the first stack trace (from the log line that printed it),
    else the end of the output."""
    found = STACK_TRACE.search(text)
    return text[max(0, found.start() - 2000) : found.start() + 2000] if found else text[-3000:]


def command(module: str, *args: object, timeout: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m <module> <args>` in its own process, as an operator runs it (the tests' environment: conftest.py;
    `env`, another)."""
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)


def refusal(result: subprocess.CompletedProcess[str]) -> str:
    """The one line a command that refused (exit 2) logged at ERROR, checked to be the only error and no stack trace."""
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    errors = [line for line in result.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and not STACK_TRACE.search(result.stderr), around_stack(result.stderr)
    return errors[0]


def succeeded(result: subprocess.CompletedProcess[str]) -> str:
    """The output of a command that exited 0, checked to hold no stack trace and no line logged at ERROR; its stderr."""
    assert result.returncode == 0, result.stderr[-3000:]
    assert not STACK_TRACE.search(result.stderr + result.stdout), around_stack(result.stderr + result.stdout)
    assert not [line for line in result.stderr.splitlines() if " ERROR " in line], result.stderr[-5000:]
    return result.stderr


def split_events(rows):
    """A chain's rows that belong in the events table, in table column order (the ingest writes them positionally,
    jobs/rows.table_rows): what a test compares with the events table."""
    return rows.where(F.col("_reason").isNull()).select(*EVENTS_SCHEMA.fieldNames())


def event(event_id: str, event_time: datetime, **extra: Any) -> dict[str, Any]:
    body = {
        "eventVersion": "1.08",
        "eventID": event_id,
        "eventTime": event_time.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "eventSource": "sts.amazonaws.com",
        "eventName": "AssumeRole",
        "awsRegion": "us-east-1",
        "recipientAccountId": "111122223333",
        "userIdentity": {"type": "IAMUser"},
    }
    body.update(extra)
    return body


def deliver(landing: Path, records: list[dict[str, Any]], delivered: datetime, name: str | None = None) -> Path:
    """One delivered file (Records shape, gzipped), its mtime at `delivered`."""
    path = delivery_path(landing, "111122223333", "us-east-1", delivered, name or uuid.uuid4().hex[:16])
    write_delivery(path, records, delivered)
    return path


def put_raw(landing: Path, content: bytes, delivered: datetime, suffix: str = ".json") -> Path:
    path = delivery_path(landing, "111122223333", "us-east-1", delivered, uuid.uuid4().hex[:16], suffix)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    os.utime(path, (delivered.timestamp(), delivered.timestamp()))
    return path


def with_nan(event_id: str) -> str:
    """A file of three records whose middle one holds a NaN, which no JSON parser should take."""
    records = [json.dumps(event(f"{event_id}-{i}", DAY)) for i in range(3)]
    records[1] = records[1][:-1] + ', "requestParameters": {"ratio": NaN}}'
    return '{"Records":[' + ",".join(records) + "]}"


def events_of(n: int, start: datetime, prefix: str) -> list[dict[str, Any]]:
    return [event(f"{prefix}-{i}", start + timedelta(minutes=i)) for i in range(n)]


def table_rows(spark, lake: Path | str, catalog: str | None = None) -> list[tuple[str, str]]:
    """(eventID, event_date) of every row the events table of record holds (its `ingest` branch), read by Spark through
    the lake's Iceberg catalog (`catalog`, a lake in S3's)."""
    from jobs.tables.events import event_dates, events_of_dates

    layout = Lake.at(lake, catalog)
    rows = events_of_dates(spark, layout, event_dates(layout))
    if rows is None:
        return []
    return sorted((r.eventID, str(r.event_date)) for r in rows.select("eventID", "event_date").collect())


def put_events(frame, lake: Path, tag: str = "test") -> None:
    """Rows (EVENTS_SCHEMA) put into the events table of record by hand, their dates replaced whole, as a rebuild
    commits: what a test builds a table from."""
    from jobs.tables.events_table import EventsTable

    table = EventsTable(frame.sparkSession, Lake.at(lake))
    _, files = table.stage(frame, tag)
    table.replace_dates({str(row[0]) for row in frame.select("event_date").distinct().collect()}, files, {})


def catalog_rows(lake: str, catalog: str, branch: str = "ingest") -> list[tuple[str, str]]:
    """(eventID, event_date) of the events table of record's rows on `branch`, read by pyiceberg through the catalog a
    lake in S3 names."""
    from jobs.iceberg.catalog import open_catalog

    table = open_catalog(Lake.at(lake, catalog), catalog).load_table("cloudtrail.events")
    head = table.metadata.snapshot_by_name(branch)
    if head is None:  # nothing committed on it yet
        return []
    rows = table.scan(snapshot_id=head.snapshot_id, selected_fields=("eventID", "event_date")).to_arrow().to_pylist()
    return sorted((row["eventID"], str(row["event_date"])) for row in rows)


def duckdb_rows(lake: Path) -> list[tuple[str, str]]:
    """The same, read from the table's files without Spark (DuckDB over the files its metadata names)."""
    from jobs.tables.events import events_source

    source = events_source(Lake.at(lake))
    if source is None:
        return []
    return sorted(duckdb.connect().execute(f"select eventID, cast(event_date as varchar) from {source}").fetchall())


def iceberg_table(lake: Path, name: str) -> Any:
    """A table of the lake's embedded Iceberg catalog (`activity_hourly`, `findings`, `ocsf_api_activity`, `events`) as
    its current snapshot holds it, read with pyiceberg (pyarrow); None when the table does not exist."""
    from pyiceberg.exceptions import NoSuchTableError

    from jobs.iceberg.catalog import NAMESPACE, open_catalog

    try:
        return open_catalog(Lake.at(lake), None).load_table(f"{NAMESPACE}.{name}").scan().to_arrow()
    except NoSuchTableError:
        return None


def derived_sql(lake: Path, name: str, query: str) -> list[tuple]:
    """`query` with DuckDB over a derived Iceberg table, named `rows` in it; no rows when the table does not exist."""
    rows = iceberg_table(lake, name)
    if rows is None:
        return []
    connection = duckdb.connect()
    connection.register("rows", rows)
    return connection.execute(query).fetchall()


def current_data_files(lake: Path, name: str) -> dict[str, dict[str, Any]]:
    """The data files of an embedded Iceberg table's current snapshot: path -> its partition's values."""
    from jobs.iceberg.catalog import NAMESPACE, open_catalog

    table = open_catalog(Lake.at(lake), None).load_table(f"{NAMESPACE}.{name}")
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary.get("total-data-files") == "0":  # pyiceberg's listing needs one file
        return {}
    files = table.inspect.files()
    return {row["file_path"]: row["partition"] for row in files.select(["file_path", "partition"]).to_pylist()}


def spark_table(spark, lake: Path, name: str):
    """An embedded Iceberg table as Spark reads it, through the lake's catalog (jobs/iceberg/spark_tables.py)."""
    from jobs.iceberg.spark_tables import spark_name, use_catalog

    return spark.table(spark_name(use_catalog(spark, Lake.at(lake), None), name))


def quarantine_rows(spark, lake: Path) -> list[tuple[str, str]]:
    """(source file name, reason) of every quarantined row, as the quarantine's Iceberg table holds it now."""
    source = quarantine_source(Lake.at(lake))
    if source is None:
        return []
    rows = duckdb.connect().execute(f"select source_file, reason from {source}").fetchall()
    return sorted((Path(path).name, reason) for path, reason in rows)


def committed_files(table: Path) -> list[Path]:
    """The data files a table's sink log lists as committed (what a reader through the log sees), read as Spark reads
    the log: the newest compaction, then every batch file after it, a later entry's action winning."""
    batches = batch_files(sink_log(storage.at(table)))
    start = max((batch_id for batch_id, path in batches if path.name.endswith(".compact")), default=-1)
    kept: dict[str, bool] = {}
    for batch_id, path in batches:
        if batch_id < start:
            continue
        for line in path.read_text().splitlines()[1:]:  # the first line is the log's version
            entry = json.loads(line)
            kept[entry["path"]] = entry.get("action", "add") != "delete"
    return sorted(Path(local_path(logged)) for logged, added in kept.items() if added)


def committed_batches(lake: Path) -> int:
    return len(sink_log_files(Lake.at(lake).events))


def written_batches(report: RunReport) -> list[int]:
    return [b.batch_id for b in report.batches if b.rows_written_per_event_date or b.quarantined_by_reason]
