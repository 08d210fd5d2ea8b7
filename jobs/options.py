"""The defaults of the job's options and the forms their values take (stdlib only).

The ingest job's argparse and the DAG's run parameters (plugins/cloudtrail_airflow/params.py)
both take their defaults and patterns from here, so the form and the job never disagree.
The patterns are JSON-schema regular expressions as well as Python ones.
"""

from __future__ import annotations

import re
from datetime import date, timedelta

# How long after an event's first copy arrives a re-delivered copy is still recognised.
DEDUP_HORIZON = "2 days"
# CloudTrail compresses about 8-10:1: 512 MB of .json.gz is ~4.5 GB of JSON text (3M records) per batch, streamed
# through its tasks file by file, never held whole; each batch has a fixed cost (docs/design.md, "Batch size").
MAX_BYTES_PER_TRIGGER = "512m"
STATE_PARTITIONS = 4
# The JVM options every job's driver and executors start with (spark.{driver,executor}.defaultJavaOptions;
# extraJavaOptions stay the user's): the parallel collector, not G1, took 8-9% less CPU for the
# same ingest (BENCHMARKS.md, "Where the CPU goes"); and less inlining by the JIT's second tier, whose
# compiles took a fifth of a run's CPU on 2 cores (docs/design.md, "The JVM").
JVM_OPTIONS = "-XX:+UseParallelGC -XX:FreqInlineSize=150 -XX:InlineSmallCode=1000"
# The Hadoop settings (as Spark's spark.hadoop.* conf, driver and executors) every job's JVM starts with: file: paths
# go through jobs/java/cloudtrail/LocalFileSystem.java, for FileSystem's API and FileContext's (Spark's checkpoint
# logs), which start no chmod or readlink process per file written or renamed. Its class is on the driver's and the
# executors' classpath: Hadoop looks it up before Spark adds the jobs' jar.
LOCAL_FILE_SYSTEM = {
    "spark.hadoop.fs.file.impl": "cloudtrail.LocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "cloudtrail.LocalFileSystem$Context",
}
MAX_FILE_AGE = "3650d"
SOURCE_RETENTION = "7 days"
# How often a run lists every delivery folder, not only the retained ones and new folders: a file added to an
# older day folder is found by the next such listing (Auto Loader's backfill interval plays this part).
FULL_LISTING_INTERVAL = "1 day"
# A landing file written to this recently may still be being written: left for a later run.
SETTLE = "1 minute"
QUARANTINE_THRESHOLD = 0.01
# How long the partitions a rebuild replaced stay under <lake>/_replaced/, for a rollback.
KEEP_REPLACED = "30 days"
# How long a writer waits for the lake lock before giving up: a second writer queues, it does not fail.
LOCK_WAIT_SECONDS = 900
# The lake page and `make status` flag an account and region whose newest delivery or newest event is older than this.
FRESHNESS_THRESHOLD = "2 hours"
# Clocks differ: an event dated up to this much after the moment it is checked against still counts as on time;
# one dated later is future-dated (counted, never the newest event of its place).
CLOCK_SKEW = "15 minutes"
# An S3 landing's queue: messages one run takes at most; how often a run proves completeness against CloudTrail's
# digests (jobs/ledger/reconcile.py), and over how many delivery days back.
MAX_MESSAGES = 20_000
# How long a received notification stays hidden from other receivers: longer than a run takes to ledger its files.
VISIBILITY_SECONDS = 900
RECONCILE_INTERVAL = "1 day"
RECONCILE_DAYS = 5
# Run modes: ingest what is new, or rebuild the event dates of the run's data interval from the landing files.
MODES = ("incremental", "rebuild")
# The catalog namespace (a Glue database) of the lake's Iceberg tables.
NAMESPACE = "cloudtrail"

DURATION_PATTERN = r"^([0-9]+) +(second|minute|hour|day|week)s?$"
SIZE_PATTERN = r"^([0-9]+) *([kmgKMG]?)[bB]?$"


def duration(text: str) -> timedelta:
    """'2 days' -> timedelta(days=2): the forms Spark's withWatermark takes that this job accepts."""
    match = re.fullmatch(DURATION_PATTERN, text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a duration like '2 days' or '6 hours'")
    return timedelta(**{f"{match[2]}s": int(match[1])})


def duration_text(span: timedelta) -> str:
    """timedelta(days=2) -> '2 days': a duration as `duration` reads it, in its largest whole unit."""
    seconds = int(span.total_seconds())
    for unit, length in (("week", 604800), ("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        if seconds % length == 0 and (seconds or length == 1):
            count = seconds // length
            return f"{count} {unit}{'' if count == 1 else 's'}"
    raise AssertionError("a whole number of seconds always has a unit")


def size(text: str) -> int:
    """'128m' -> bytes (Spark's file source takes a plain byte count)."""
    match = re.fullmatch(SIZE_PATTERN, text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a size like '128m' or '1g'")
    return int(match[1]) << 10 * " kmg".index(match[2].lower() or " ")  # 1024 to the unit's power


def date_range(first: date, last: date) -> tuple[date, ...]:
    """Every date from first to last, both included."""
    return tuple(first + timedelta(days=n) for n in range((last - first).days + 1))
