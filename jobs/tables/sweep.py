"""An earlier release's table folder made whole before its files are registered in its Iceberg table
(jobs/tables/events_table.py, jobs/tables/quarantine_table.py): data files that no committed batch lists moved aside.

A batch that crashed after writing data files but before committing them to
<table>/_spark_metadata leaves those files in the partition folders, where every
directory reader (DuckDB, Athena, Trino, pyarrow, Spark with the log ignored) would see
them. The sweep moves each such file to <lake>/_swept/<table>/<time>/, keeping its
relative path (nothing is deleted). It runs under the lake lock, so it never races a writer.

The log keeps entries for its retention only, so "not in the log" alone does not mean
"uncommitted". A file is swept only if it is also at least as new as the oldest entry the
log still holds (or, with no entries, newer than the newest log file): a committed file
that aged out is older than every retained entry, while debris of a crashed batch is
newer than every committed one. Files a rebuild swapped in are listed in their partition's
marker (jobs/tables/partitions.py) and stay.
"""

from __future__ import annotations

import logging
import os
from urllib.parse import unquote, urlparse

from pyspark.sql import SparkSession

from jobs import storage
from jobs.lake import Lake, in_table
from jobs.spark.checkpoint import checkpoint_location
from jobs.spark.logs import sink_log, sink_log_files
from jobs.spark.sinks import classic_jvm
from jobs.storage import LakePath
from jobs.tables.partitions import rebuilt_files

log = logging.getLogger("sweep")


def modified_ms(path: LakePath) -> int:
    """Modification time in whole milliseconds, as Hadoop's local file system reports it."""
    return path.stat().st_mtime_ns // 1_000_000


def logged_files(spark: SparkSession, table: LakePath) -> dict[LakePath, int]:
    """The data files `table`'s sink log lists (those within retention), with the modification time (ms) it recorded:
    read by the log's own class, which knows its compactions."""
    jvm = classic_jvm(spark)
    sink = jvm.org.apache.spark.sql.execution.streaming.sinks.FileStreamSink(
        spark._jsparkSession,
        checkpoint_location(spark, table),  # the log read with the checkpoint manager of its storage
        jvm.org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat(),
        jvm.org.apache.spark.api.python.PythonUtils.toSeq([]),
        jvm.org.apache.spark.api.python.PythonUtils.toScalaMap({}),
    )
    return {storage.at(unquote(urlparse(entry.path()).path)): entry.modificationTime() for entry in sink.fileLog().allFiles()}


def uncommitted_files(spark: SparkSession, table: LakePath) -> list[LakePath]:
    """Data files that no committed batch, and no rebuild, wrote (see the module docstring for the horizon)."""
    logged = logged_files(spark, table)
    if logged:
        horizon = min(logged.values())
    else:
        horizon = max((modified_ms(p) for p in sink_log_files(table)), default=-1) + 1
    # The log names files by absolute path: a lake moved since lists them under its old root.
    committed = {in_table(path) for path in logged} | {in_table(path) for path in rebuilt_files(table)}
    return sorted(p for p in table_files(table) if in_table(p) not in committed and modified_ms(p) >= horizon)


def table_files(table: LakePath) -> set[LakePath]:
    """Every data file under the table folder (hidden and _-prefixed entries are not data)."""
    found: set[LakePath] = set()
    for folder, subfolders, names in os.walk(storage.folder(table)):
        subfolders[:] = [d for d in subfolders if not d.startswith(("_", "."))]
        found.update(storage.at(folder) / n for n in names if not n.startswith(("_", ".")))
    return found


def sweep_table(spark: SparkSession, lake: Lake, name: str, stamp: str) -> list[LakePath]:
    table = lake.table(name)
    if not sink_log(table).is_dir():
        return []  # not written by the sink (yet): no log to tell committed files apart
    strays = uncommitted_files(spark, table)
    move_aside(table, strays, lake.swept(name, stamp))
    return strays


def move_aside(table: LakePath, files: list[LakePath], target: LakePath) -> None:
    """Move data files of `table` under `target`, keeping their relative paths (nothing is deleted)."""
    for file in files:
        moved = target / file.relative_to(str(table))
        moved.parent.mkdir(parents=True, exist_ok=True)
        storage.move(file, moved)
        checksum = file.with_name(f".{file.name}.crc")  # Hadoop's checksum file travels with its data file
        if checksum.exists():
            storage.move(checksum, moved.with_name(checksum.name))
        log.info("moved %s -> %s", file, moved)
