"""Turn a landed file into text and its records' places, or into a file-level quarantine reason.

The work runs in the JVM: jobs/java/cloudtrail/LandingFile.java, a SQL function that
jobs/session.py registers from build/cloudtrail.jar. Called once per file by its path, it
decompresses (a truncated gzip file is quarantined with its reason, where Spark's own readers
fail the query or skip the file silently), checks that the bytes are UTF-8 text, tells the
container's shape from its first character, and for a one-value container scans its tokens
for each record's text and which keys it has, so Spark parses each record once, straight
into the typed schema (jobs/transforms.py). Only a container Spark's parser rejects comes back
to Python, to be split record by record (``salvage_records``).
"""

from __future__ import annotations

import json
import re

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.schema import KNOWN_FIELDS, RECORD_FIELDS

# Shapes the JVM side tells apart (see transforms.parse_containers).
SHAPE_OBJECT = "object"  # {"Records":[...]}, a single record, or JSON lines of records
SHAPE_ARRAY = "array"  # a bare JSON array of records

# Keys that make a JSON object a CloudTrail record rather than some other document.
RECORD_MARKERS = ["eventVersion", "eventID", "eventTime", "eventSource", "eventName"]
# The keys whose presence the scan reports per record: the ones whose typed parse may fail, so that
# their raw text needs rescuing (jobs/transforms.normalize_records), and the markers.
FLAGGED_KEYS = [name for name, _, kind in RECORD_FIELDS if kind == "json"] + RECORD_MARKERS
UNKNOWN_KEY = 1  # flag bit: the record has a key outside the schema


def key_flag(name: str) -> int:
    """The flag bit set when a record has the key `name` (one of FLAGGED_KEYS)."""
    return 1 << (FLAGGED_KEYS.index(name) + 1)


# The SQL function (registered by jobs/session.py) and what it returns for a file.
LANDING_FILE_FUNCTION = "cloudtrail_landing_file"
LANDING_FILE_CLASS = "cloudtrail.LandingFile"
LANDING_FILE_TYPE = (
    "struct<file_bytes: bigint, content: binary, shape: string, file_error: string, file_error_detail: string, "
    "records: array<struct<text: binary, flags: bigint>>>"
)


def landing_file(path: Column) -> Column:
    """One landing file, read and checked in the JVM (LANDING_FILE_TYPE)."""
    return F.call_function(LANDING_FILE_FUNCTION, path, F.lit(",".join(KNOWN_FIELDS)), F.lit(",".join(FLAGGED_KEYS)))


def decode_files(manifest: DataFrame) -> DataFrame:
    """Manifest rows (ledger.MANIFEST_DDL) -> one row per file: source_file, arrival_time,
    file_bytes, content (the text, as bytes), shape, file_error, file_error_detail,
    only_records (a replay's record positions; null: all) and records (each record's text and
    key flags; null when the container must be split the slow way)."""
    return manifest.select(
        # As Hadoop names a local file (spark_logs.source_file): the table's _source_file keeps one form across versions.
        F.concat(F.lit("file:"), F.col("path")).alias("source_file"),
        F.timestamp_millis(F.col("arrival_ms")).alias("arrival_time"),
        landing_file(F.col("path")).alias("file"),
        "only_records",
    ).select("source_file", "arrival_time", "file.file_bytes", "file.content", "file.shape", "file.file_error",
             "file.file_error_detail", "only_records", "file.records")  # fmt: skip


# What a record may hold: what Spark's JSON parser (Jackson) takes inside a {"Records":[...]}
# container, whose two levels count towards Jackson's 1000 (docs/design.md, "Record limits").
MAX_RECORD_DEPTH = 998
MAX_STRING_CHARS = 20_000_000
# A JSON string (escapes included) or one structural character.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{},:]', re.S)


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON value")


def _check_record(text: str, depth: int, longest: int) -> tuple[str | None, str | None, str | None]:
    """(record text, None, None) for a record to parse, or (text, reason, detail) for one to quarantine."""
    if depth > MAX_RECORD_DEPTH:
        return text, "record_too_deep", f"nested {depth} levels; a record may nest {MAX_RECORD_DEPTH}"
    if longest > MAX_STRING_CHARS:
        return text, "record_too_large", f"holds a string of {longest} characters; a record's strings may hold {MAX_STRING_CHARS}"
    try:
        json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        return text, "invalid_json", str(exc)[:300]
    return text, None, None


def _records_start(text: str) -> tuple[int, int] | None:
    """Where the elements of the records array begin (after the '[' of {"Records":[ or of a bare
    array), and how deep that array is: 1 in an object, 0 bare."""
    depth, last_two = 0, ("", "")
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token == "[" and (depth == 0 or (depth == 1 and last_two == ('"Records"', ":"))):
            return match.end(), depth
        depth += (token in "{[") - (token in "}]")
        last_two = (last_two[1], token)
    return None


def _one_value_after(text: str, position: int, depth: int) -> bool:
    """Whether the container closes after `position` (at `depth`) with nothing but white space after
    it: a second value, as in two concatenated containers, must not be dropped."""
    for match in _TOKENS.finditer(text, position) if depth else ():
        depth += (match.group() in "{[") - (match.group() in "}]")
        if depth == 0:
            position = match.end()
            break
    return depth == 0 and not text[position:].strip()


def salvage_records(text: str | None) -> list[tuple[str | None, str | None, str | None]] | None:
    """Split a container Spark's parser rejected into its records, each to parse or to quarantine with its reason.

    Runs only for such files (a record nested too deep or holding too long a string for
    Jackson, a NaN, a raw control character, a cut-off tail), so one bad record costs one
    record. None when the text holds no records array, or no record in it parses.
    """
    found = _records_start(text) if text else None
    if text is None or found is None:
        return None
    start, container_depth = found
    records: list[tuple[str | None, str | None, str | None]] = []
    depth = deepest = longest = 0
    begin = start

    def close(end: int) -> None:
        element = text[begin:end].strip()
        if element:
            records.append(_check_record(element, deepest, longest))

    for match in _TOKENS.finditer(text, start):
        token = match.group()
        if token[0] == '"':
            longest = max(longest, len(token) - 2)
        elif token in "{[":
            depth += 1
            deepest = max(deepest, depth)
        elif token in "}]":
            if depth == 0:  # the end of the records array
                close(match.start())
                if not _one_value_after(text, match.end(), container_depth):
                    return None
                break
            depth -= 1
        elif token == "," and depth == 0:
            close(match.start())
            begin, deepest, longest = match.end(), 0, 0
    else:
        close(len(text))  # cut off before the array closed: what is there, record by record
    # With no record to save (a missing comma glues them all into one), the file keeps its file-level reason.
    if not any(reason is None and _looks_like_record(record) for record, reason, _ in records):
        return None
    return records


def _looks_like_record(text: str | None) -> bool:
    """A JSON object with a key only CloudTrail records have."""
    body = json.loads(text) if text else None
    return isinstance(body, dict) and any(key in body for key in RECORD_MARKERS)
