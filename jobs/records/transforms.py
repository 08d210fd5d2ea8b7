"""The records chain: pure DataFrame -> DataFrame steps from landing files to typed records (no I/O, no session state).

landing files --read_records------> one row per record or problem, typed, with its _reason; that is:
                 decode_files        (jobs/records/decode.py) each file's bytes, checked, its records found
                 parse_containers    one row per record (its JSON text) or per problem
                 normalize_records   typed event columns + _reason (a derived column: one entry of jobs/records/schema.py's DERIVED_FIELDS)
              --deduplicate--------> each event once within the de-duplication horizon (jobs/records/dedup.py)
              --table_rows---------> the late flag, then each row as the tables take it (jobs/records/rows.py)
The ingest stream, a rebuild and a replay of the quarantine all read records through read_records.
"""

from __future__ import annotations

import operator
from functools import reduce
from typing import cast

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.records.decode import (
    PROBLEM,
    RECORD_MARKERS,
    SHAPE_ARRAY,
    SHAPE_OBJECT,
    UNKNOWN_KEY,
    decode_files,
    key_flag,
    key_flags,
    salvage,
)
from jobs.records.schema import (
    DERIVED_FIELDS,
    EVENT_TIME_FORMAT,
    KNOWN_FIELDS,
    RAW_RECORD,
    RECORD_FIELDS,
    RECORD_TEXT_ARRAY,
    RECORD_TEXTS,
    TYPED_RECORD,
)

# File-level quarantine reasons (decode.py adds truncated_gzip, corrupt_gzip, too_large, binary,
# empty_file, not_json, unreadable_file) and record-level ones.
UNSUPPORTED_SHAPE = "unsupported_shape"
NOT_JSON = "not_json"
MALFORMED_RECORD = "malformed_record"
MISSING_EVENT_ID = "missing_event_id"
MISSING_EVENT_TIME = "missing_event_time"
UNPARSEABLE_EVENT_TIME = "unparseable_event_time"
UNSUPPORTED_SHAPE_DETAIL = 'valid JSON, but not {"Records":[...]}, an array of records, or JSON lines of records'


def _from_json(column: Column | str, data_type: T.DataType) -> Column:
    # from_json takes any DataType (maps too); its type stub lists only structs and arrays.
    return F.from_json(column, cast(T.StructType, data_type))


def _single_json_value(text: Column) -> Column:
    """True when text holds exactly one JSON value.

    from_json ignores anything after the first value, so '{...}\\n{...}' would silently
    lose the second object; wrapping the text in [ ] and counting elements (a tokenize-only
    pass) tells one value from several or from broken JSON.
    """
    return F.coalesce(F.json_array_length(F.concat(F.lit("["), text, F.lit("]"))) == 1, F.lit(False))


def _looks_like_record(keys: Column) -> Column:
    return F.coalesce(F.exists(keys, lambda key: key.isin(RECORD_MARKERS)), F.lit(False))


def _has_flag(flags: Column, flag: int) -> Column:
    return flags.bitwiseAND(F.lit(flag)) != 0


def _item(text: Column, flags: Column, reason: Column | None = None, detail: Column | None = None) -> Column:
    """A record of the slow path as decode.ITEM: its JSON text and key flags (null when the text is not one JSON
    object), or why it is quarantined; its typed parse is left to normalize_records."""
    problem = F.lit(None).cast(PROBLEM)
    if reason is not None and detail is not None:
        problem = F.when(reason.isNotNull(), F.struct(reason.alias("reason"), detail.alias("detail")))
    return F.struct(
        F.lit(None).cast(TYPED_RECORD).alias("typed"),
        F.struct(text.cast("binary").alias("text"), flags.alias("flags")).alias("scan"),
        problem.alias("problem"),
    )


def parse_containers(decoded: DataFrame) -> DataFrame:
    """Decoded files -> one row per record, or one row per file or line that cannot be read.

    Shapes: {"Records":[...]}, a bare JSON array of records, a single record object, and
    JSON lines of records; a file with `only_records` set yields those positions only. Output
    columns: source_file, arrival_time, record_index, record (the record's JSON text, or the
    bad line), flags (decode.py's key flags), typed (the typed record; null: parse `record`),
    _reason, _detail.

    A container the JVM took (decode.py: one JSON value, every record an object, the delivered
    shape) comes with its records typed. Any other file takes the slow path, in which each
    record is split out as text and its keys listed.
    """
    return (
        # Only a file the fast path did not take needs its text: every projection up to the explode copies what it
        # carries (BENCHMARKS.md, "Projections outside generated code").
        decoded.withColumn("text", F.when(F.col("items").isNull(), F.col("content").cast("string")))
        .transform(_split_items)
        .transform(_salvaged_items)
        .transform(_file_problems)
        .transform(_records)
    )


def _is_object() -> Column:
    return F.col("shape") == SHAPE_OBJECT


def _is_array() -> Column:
    return F.col("shape") == SHAPE_ARRAY


def _first_line() -> Column:
    return F.col("lines").getItem(0)


def _split_items(files: DataFrame) -> DataFrame:
    """The slow path: a file the pass did not take, split into items as one JSON value (a container of records, or
    one record) or as JSON lines. Each step is its own projection so every from_json runs once per file."""
    slow = F.col("items").isNull() & F.col("text").isNotNull()
    files = files.withColumn("single_value", F.when(slow, _single_json_value(F.col("text"))))
    files = files.withColumn(
        "record_texts",
        F.when(_is_object() & F.col("single_value"), _from_json("text", RECORD_TEXTS).getField("Records")).when(
            _is_array() & F.col("single_value"), _from_json("text", RECORD_TEXT_ARRAY)
        ),
    )
    files = files.withColumn(
        "single_keys", F.when(_is_object() & F.col("single_value") & F.col("record_texts").isNull(), F.json_object_keys("text"))
    )
    lines = F.filter(F.split("text", r"\r?\n"), lambda line: F.trim(line) != "")
    files = files.withColumn("lines", F.when(_is_object() & ~F.col("single_value"), lines))
    first_line_ok = _single_json_value(_first_line()) & _looks_like_record(F.json_object_keys(_first_line()))
    json_lines = F.transform("lines", lambda line: _item(line, key_flags(F.when(_single_json_value(line), F.json_object_keys(line)))))
    with_keys = F.transform("record_texts", lambda text: F.struct(text.alias("text"), F.json_object_keys(text).alias("keys")))
    files = files.withColumn("record_keys", with_keys)
    record_items = F.transform("record_keys", lambda record: _item(record["text"], key_flags(record["keys"])))
    record_array = F.exists("record_keys", lambda record: _looks_like_record(record["keys"]))
    return files.withColumn(
        "items",
        F.coalesce(
            F.col("items"),
            F.when(_is_object() & F.col("record_keys").isNotNull(), record_items)
            .when(_is_array() & record_array, record_items)
            .when(_looks_like_record(F.col("single_keys")), F.array(_item(F.col("text"), key_flags(F.col("single_keys")))))
            .when(first_line_ok, json_lines),
        ),
    )


def _salvaged_items(files: DataFrame) -> DataFrame:
    """A container the parser rejected whole (a record too deep or with too long a string for Jackson, a NaN, a raw
    control character) is split record by record (decode.salvage): one bad record costs one record. Only such a
    container is split; the when() keeps the function from running on any other file."""
    unparsed = F.col("items").isNull() & F.col("file_error").isNull()
    files = files.withColumn("salvaged", F.when(unparsed, salvage(F.col("text"))))
    salvaged = F.transform(
        "salvaged",
        lambda s: _item(s["record"], key_flags(F.when(s["reason"].isNull(), F.json_object_keys(s["record"]))), s["reason"], s["detail"]),
    )
    return files.withColumn("items", F.coalesce(F.col("items"), salvaged))


def _file_problems(files: DataFrame) -> DataFrame:
    """Why a file as a whole is quarantined (_file_reason, _file_detail), beside its items. The reasons come before
    the explode, in a projection of their own: an expression on `items` next to the explode would make every
    record's row carry its whole file's items."""
    file_reason = F.coalesce(
        F.col("file_error"),
        F.when(
            F.col("items").isNull(),
            F.when(F.col("single_value") | _single_json_value(_first_line()), F.lit(UNSUPPORTED_SHAPE)).otherwise(F.lit(NOT_JSON)),
        ),
    )
    file_detail = F.coalesce(
        F.col("file_error_detail"),
        F.when(file_reason == UNSUPPORTED_SHAPE, F.lit(UNSUPPORTED_SHAPE_DETAIL)),
        F.when(file_reason == NOT_JSON, F.lit("not valid JSON (or several JSON values where one was expected)")),
    )
    return files.select("source_file", "arrival_time", "only_records", file_reason.alias("_file_reason"),
                        file_detail.alias("_file_detail"), "items")  # fmt: skip


def _records(files: DataFrame) -> DataFrame:
    """One row per item (a replay of quarantined records: those positions only), or per file that has none."""
    exploded = files.select(
        "source_file", "arrival_time", "only_records", "_file_reason", "_file_detail",
        F.posexplode_outer("items").alias("record_index", "item"),
    ).where(F.col("item").isNotNull() | F.col("_file_reason").isNotNull())  # fmt: skip
    # The file's other records are in the table already.
    exploded = exploded.where(
        F.col("only_records").isNull() | F.col("_file_reason").isNotNull() | F.array_contains("only_records", F.col("record_index"))
    )
    bad_item = F.col("item").isNotNull() & F.col("item.scan.flags").isNull() & F.col("item.problem").isNull()
    return exploded.select(
        "source_file",
        "arrival_time",
        F.when(F.col("_file_reason").isNull(), F.col("record_index")).alias("record_index"),
        F.col("item.scan.text").cast("string").alias("record"),
        F.col("item.scan.flags").alias("flags"),
        F.col("item.typed").alias("typed"),
        F.coalesce(F.col("_file_reason"), F.col("item.problem.reason"), F.when(bad_item, F.lit(MALFORMED_RECORD))).alias("_reason"),
        F.coalesce(F.col("_file_detail"), F.col("item.problem.detail"), F.when(bad_item, F.lit("not one JSON object"))).alias("_detail"),
    )


# A known field whose value does not fit its type: its key, when it misfits, and its raw text.
Misfit = tuple[str, Column, Column]


def _unknown_field(key: Column) -> Column:
    return ~key.isin(KNOWN_FIELDS)


def normalize_records(items: DataFrame, run_id: str) -> DataFrame:
    """Records (JSON text) -> typed event columns, _rescued, and a quarantine _reason.

    Unknown top-level keys, and known ones whose value does not fit the documented type,
    are kept in _rescued as a JSON object of key -> raw text. A record without an eventID,
    or whose eventTime is missing or not ISO-8601, gets a _reason and goes to quarantine;
    rows that already carry a file- or line-level _reason keep it.

    Each record is parsed once, into the typed schema (on the fast path, with its whole
    container). Only a record with an unknown key, or with a typed field null where its key
    is present, is parsed again as a map of key -> raw text, to rescue what the typed parse
    could not hold.
    """
    parsed = items.transform(_parsed)
    typed, raw = F.col("typed"), F.col("raw")
    event_time_raw = typed.getField("eventTime")
    event_time = F.try_to_timestamp(event_time_raw, F.lit(EVENT_TIME_FORMAT))
    typed_columns, misfits = _typed_fields(typed, raw, event_time)
    reason = _record_reason(typed.getField("eventID"), event_time_raw, event_time)
    detail = F.coalesce(
        F.col("_detail"),
        F.when(reason == UNPARSEABLE_EVENT_TIME, F.concat(F.lit("eventTime not ISO-8601: "), event_time_raw)),
    )
    rescued = _rescued(raw, misfits)
    return parsed.select(
        *(column.alias(name) for name, column in typed_columns.items()),
        F.when(F.size(rescued) > 0, F.to_json(rescued)).alias("_rescued"),
        F.col("source_file").alias("_source_file"),
        F.lit(run_id).alias("_ingest_run_id"),
        *(derive(typed_columns.__getitem__).alias(name) for name, _, derive in DERIVED_FIELDS),
        F.col("arrival_time").alias("_arrival_time"),
        F.col("record_index").alias("_record_index"),
        # Only quarantined rows keep their text: carrying every record's text would double what the de-duplication shuffles.
        F.when(reason.isNotNull(), F.col("record")).alias("_record_text"),
        reason.alias("_reason"),
        detail.alias("_detail"),
    )


def _parsed(items: DataFrame) -> DataFrame:
    """`typed`: each record in the typed schema; `raw`: the record as a map of key -> raw text, only where the
    typed parse may have lost something (an unknown key, a flagged key whose typed field is null)."""
    # A record of the fast path comes typed; one of the slow path is parsed here, once. The when()
    # also keeps the parse whole: on a bare from_json whose fields are read one by one, Spark's
    # JSON optimizer gives each field a parse of its own (docs/design.md, "Parsing").
    parsed = items.withColumn("typed", F.when(F.col("_reason").isNull(), F.coalesce("typed", _from_json("record", TYPED_RECORD))))
    typed, flags = F.col("typed"), F.col("flags")
    checked = [name for name, _, kind in RECORD_FIELDS if kind == "json"]
    typed_failed = [typed.getField(name).isNull() & _has_flag(flags, key_flag(name)) for name in checked]
    needs_raw = reduce(operator.or_, typed_failed, _has_flag(flags, UNKNOWN_KEY))
    return parsed.withColumn("raw", F.when(typed.isNotNull() & needs_raw, _from_json("record", RAW_RECORD)))


def _typed_fields(typed: Column, raw: Column, event_time: Column) -> tuple[dict[str, Column], list[Misfit]]:
    """Every documented field in its type, by name, and the misfits of the fields that can have one."""
    columns: dict[str, Column] = {}
    misfits: list[Misfit] = []
    for name, data_type, kind in RECORD_FIELDS:
        value = typed.getField(name)
        if kind == "timestamp":  # eventTime, the one timestamp field
            value = event_time
        elif kind == "bool":
            # The flag's text: JSON true, or a string "true"/"True", is a boolean here.
            misfits.append((name, value.isNotNull() & value.try_cast("boolean").isNull(), value))
            value = value.try_cast("boolean")
        elif kind == "json":
            misfits.append((name, raw.getItem(name).isNotNull() & value.isNull(), raw.getItem(name)))
        columns[name] = value.cast(data_type)
    return columns, misfits


def _rescued(raw: Column, misfits: list[Misfit]) -> Column:
    """Unknown keys and misfits, key -> raw text (null when the record has none)."""
    entries = [F.when(when, F.struct(F.lit(name).alias("key"), text.alias("value"))) for name, when, text in misfits]
    failed = F.map_from_entries(F.filter(F.array(*entries), lambda entry: entry.isNotNull()))
    unknown = F.coalesce(F.map_filter(raw, lambda key, _value: _unknown_field(key)), F.create_map().cast(RAW_RECORD))
    return F.when(reduce(operator.or_, [when for _, when, _ in misfits], raw.isNotNull()), F.map_concat(unknown, failed))


def _record_reason(event_id: Column, event_time_raw: Column, event_time: Column) -> Column:
    """Why a record is quarantined: its file's or line's reason, or a missing eventID or eventTime."""
    return F.coalesce(
        F.col("_reason"),
        F.when(event_id.isNull() | (F.trim(event_id) == ""), F.lit(MISSING_EVENT_ID))
        .when(event_time_raw.isNull(), F.lit(MISSING_EVENT_TIME))
        .when(event_time.isNull(), F.lit(UNPARSEABLE_EVENT_TIME)),
    )


def read_records(files: DataFrame, run_id: str) -> DataFrame:
    """Landing files (a manifest's rows: path, size, mtime_ms, arrival_ms, only_records) -> one row per record,
    typed, or per problem with its _reason: the chain every reader of the landing zone goes through."""
    return files.transform(decode_files).transform(parse_containers).transform(normalize_records, run_id)
