"""Turn a landed file into text and its records, typed, or into a file-level quarantine reason.

The work runs in the JVM, in SQL functions that jobs/spark/session.py registers from build/cloudtrail.jar.
jobs/java/cloudtrail/LandingFile.java, called once per file by its path, decompresses (a truncated gzip file is
quarantined with its reason, where Spark's own readers fail the query or skip the file silently), checks that the
bytes are UTF-8 text and tells the container's shape from its first character. For a one-value container,
jobs/java/cloudtrail/Records.java then reads each record's text, which keys it has, and its typed values in one
pass over the tokens, as Spark's parser over the bytes reads them, so a nested value kept as text (requestParameters)
is the file's own text. Any other file takes the slow path of jobs/records/transforms.py; only a container Spark's
parser rejects is split record by record, by a third JVM function (jobs/java/cloudtrail/Salvage.java, ``salvage``).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.records.schema import KNOWN_FIELDS, RECORD_FIELDS, TYPED_RECORD

# Shapes the JVM side tells apart (see transforms.parse_containers).
SHAPE_OBJECT = "object"  # {"Records":[...]}, a single record, or JSON lines of records
SHAPE_ARRAY = "array"  # a bare JSON array of records

# Keys that make a JSON object a CloudTrail record rather than some other document.
RECORD_MARKERS = ["eventVersion", "eventID", "eventTime", "eventSource", "eventName"]
# The keys whose presence the pass (Records.java) reports per record: the ones whose typed parse may fail, so that
# their raw text needs rescuing (jobs/transforms.normalize_records), and the markers.
FLAGGED_KEYS = [name for name, _, kind in RECORD_FIELDS if kind == "json"] + RECORD_MARKERS
UNKNOWN_KEY = 1  # flag bit: the record has a key outside the schema


def key_flag(name: str) -> int:
    """The flag bit set when a record has the key `name` (one of FLAGGED_KEYS)."""
    return 1 << (FLAGGED_KEYS.index(name) + 1)


# A record as the records chain carries it to the explode, on either path (jobs/records/transforms.py): its typed
# values (null: parse `scan.text`), its text and key flags (null flags: the text is not one JSON object), or why it
# is quarantined.
PROBLEM = T.StructType([T.StructField("reason", T.StringType()), T.StructField("detail", T.StringType())])
SCAN = T.StructType([T.StructField("text", T.BinaryType()), T.StructField("flags", T.LongType())])
ITEM = T.StructType([T.StructField("typed", TYPED_RECORD), T.StructField("scan", SCAN), T.StructField("problem", PROBLEM)])

# The SQL functions (registered by jobs/spark/session.py) and what they return.
LANDING_FILE_FUNCTION = "cloudtrail_landing_file"
LANDING_FILE_TYPE = "struct<file_bytes: bigint, content: binary, shape: string, file_error: string, file_error_detail: string>"
SALVAGE_FUNCTION = "cloudtrail_salvage"
SALVAGE_TYPE = "array<struct<record: string, reason: string, detail: string>>"
KEY_FLAGS_FUNCTION = "cloudtrail_key_flags"
JVM_FUNCTIONS = {  # name: (class, type), registered as Java UDFs
    LANDING_FILE_FUNCTION: ("cloudtrail.LandingFile", LANDING_FILE_TYPE),
    SALVAGE_FUNCTION: ("cloudtrail.Salvage", SALVAGE_TYPE),
    KEY_FLAGS_FUNCTION: ("cloudtrail.KeyFlags", "bigint"),
}
# Functions whose class registers them (register(session, name)): compiled into the query, in Spark's own types.
RECORDS_FUNCTION = "cloudtrail_records"
JVM_EXPRESSIONS = {RECORDS_FUNCTION: "cloudtrail.Records"}


def _listed(names: list[str]) -> Column:
    """Keys as the JVM functions take them: one comma-separated string."""
    return F.lit(",".join(names))


def landing_file(path: Column) -> Column:
    """One landing file, read and checked in the JVM (LANDING_FILE_TYPE)."""
    return F.call_function(LANDING_FILE_FUNCTION, path)


def records(content: Column) -> Column:
    """A container's records as ITEMs, typed in the JVM in the pass that finds them; null when the file must be split
    the slow way (not one container of records; a bare array, only when some element has a RECORD_MARKERS key)."""
    return F.call_function(RECORDS_FUNCTION, content, F.lit(ITEM.json()), _listed(KNOWN_FIELDS), _listed(FLAGGED_KEYS),
                           _listed(RECORD_MARKERS))  # fmt: skip


def key_flags(keys: Column) -> Column:
    """The key flags of a record from its keys, as the pass sets them (jobs/java/cloudtrail/KeyFlags.java); null when
    `keys` is (the text is no JSON object)."""
    return F.call_function(KEY_FLAGS_FUNCTION, keys, _listed(KNOWN_FIELDS), _listed(FLAGGED_KEYS))


# A manifest's column naming where its file is read, where that is not `path` (an S3 landing's object: jobs/ingest/deliveries.py).
READ_FROM = "read_from"


def decode_files(manifest: DataFrame) -> DataFrame:
    """Manifest rows (jobs/ledger/store.py, MANIFEST_DDL; READ_FROM too where a file is read elsewhere than its
    path) -> one row per file: source_file, arrival_time,
    file_bytes, content (the text, as bytes), shape, file_error, file_error_detail,
    only_records (a replay's record positions; null: all) and items (each record as an ITEM, typed; null when the
    file must be split the slow way)."""
    return manifest.select(
        # As Hadoop names a local file (jobs/spark/logs.py, source_file): the table's _source_file keeps one form across versions.
        F.concat(F.lit("file:"), F.col("path")).alias("source_file"),
        F.timestamp_millis(F.col("arrival_ms")).alias("arrival_time"),
        landing_file(F.col(READ_FROM if READ_FROM in manifest.columns else "path")).alias("file"),
        "only_records",
    ).select("source_file", "arrival_time", "file.file_bytes", "file.content", "file.shape", "file.file_error",
             "file.file_error_detail", "only_records", records(F.col("file.content")).alias("items"))  # fmt: skip


def salvage(text: Column) -> Column:
    """A container Spark's parser rejected whole (a record too deep or with too long a string for Jackson, a NaN, a
    raw control character, a cut-off tail), split record by record in the JVM (SALVAGE_TYPE: each record's text, or
    why it is quarantined); null when the text holds no records array, anything follows the container, or no record
    parses."""
    return F.call_function(SALVAGE_FUNCTION, text, F.lit(",".join(RECORD_MARKERS)))
