"""The JVM decoder (jobs/java/cloudtrail/LandingFile.java, Records.java, Json.java and Salvage.java through jobs/records/decode.py),
file by file."""

import gzip
import json
import random
import re
import zlib

import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.ledger.store import MANIFEST_DDL
from jobs.records.decode import SHAPE_ARRAY, SHAPE_OBJECT, UNKNOWN_KEY, decode_files, key_flag, key_flags, salvage
from jobs.records.schema import TYPED_RECORD

pytestmark = pytest.mark.unit


def decode(spark, tmp_path, *contents: bytes | None, only_records=None):
    """Each content written to a file of its own (None: no file at all), decoded in the JVM, in order."""
    rows = []
    for index, content in enumerate(contents):
        path = tmp_path / f"f{index} #%é.json"
        if content is not None:
            path.write_bytes(content)
        rows.append((str(path), len(content or b""), 0, 1_000 * index, only_records, False))
    decoded = spark.createDataFrame(rows, MANIFEST_DDL).transform(decode_files)
    assert [row.source_file for row in decoded.collect()] == [f"file:{row[0]}" for row in rows]
    return decoded.collect()


def test_gzip_records_file_is_decompressed_sniffed_and_its_records_placed(spark, tmp_path):
    body = b'  {"Records":[{"eventID":"a","readOnly":true,"userIdentity":{}},{"eventID":"b","brandNew":1, "resources":null}]}\n'
    (row,) = decode(spark, tmp_path, gzip.compress(body))
    assert (row.shape, row.file_error, row.content) == (SHAPE_OBJECT, None, body.lstrip())
    assert row.file_bytes == len(gzip.compress(body))
    first, second = row.items
    assert first.scan.text == b'{"eventID":"a","readOnly":true,"userIdentity":{}}'
    assert first.scan.flags == key_flag("eventID") | key_flag("userIdentity")  # a flag (readOnly) is typed as text: it cannot fail
    assert second.scan.flags == UNKNOWN_KEY | key_flag("eventID") | key_flag("resources")
    assert (first.typed.eventID, first.typed.readOnly, second.typed.resources, first.problem) == ("a", "true", None, None)


def test_a_record_split_out_the_slow_way_gets_the_flags_the_scan_gives_it(spark, tmp_path):
    """key_flags (the slow path's, from a record's keys) and the scan's are one definition (KeyFlags.java)."""
    records = [{"eventID": "a", "readOnly": True, "userIdentity": {}}, {"brandNew": 1, "resources": None, "eventTime": "x"}, {}]
    (row,) = decode(spark, tmp_path, json.dumps({"Records": records}).encode())
    texts = spark.createDataFrame([(json.dumps(record),) for record in records] + [("[1]",)], "text string")
    slow = texts.select(key_flags(F.json_object_keys("text")).alias("flags")).collect()
    assert [r.flags for r in slow] == [item.scan.flags for item in row.items] + [None]
    assert slow[1].flags == UNKNOWN_KEY | key_flag("resources") | key_flag("eventTime")


def test_a_bare_array_and_concatenated_gzip_members(spark, tmp_path):
    array, members = decode(spark, tmp_path, b'\n[{"eventID":"a"}]', gzip.compress(b'{"Records":[{"eventID":"a"}') + gzip.compress(b"]}"))
    assert array.shape == SHAPE_ARRAY and len(array.items) == 1
    assert members.content == b'{"Records":[{"eventID":"a"}]}' and len(members.items) == 1


def test_damaged_gzip_binary_and_empty_files_get_their_reason(spark, tmp_path):
    whole = gzip.compress(b'{"Records":[' + b'{"eventID":"x"},' * 200 + b"]}")
    corrupt = bytearray(whole)
    corrupt[20:40] = b"\xff" * 20
    rows = decode(
        spark, tmp_path, whole[:-30], bytes(corrupt), bytes(range(256)), b"\xc3\x28 not utf-8", b"  \n", b"eventID,eventTime\n1,2"
    )
    reasons = [row.file_error for row in rows]
    assert reasons[0] == "truncated_gzip" and "ends early" in rows[0].file_error_detail
    assert reasons[1] in ("corrupt_gzip", "truncated_gzip")
    assert reasons[2:] == ["binary", "binary", "empty_file", "not_json"]
    assert all(row.content is None and row.items is None for row in rows)


def test_a_gzip_bomb_is_quarantined_as_too_large_and_the_heap_holds_at_most_the_cap(spark, tmp_path):
    """A GiB of zeros in a MB: decompression stops at 256 MiB, named; the file beside it decodes."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = b"".join(packer.compress(b"\0" * (1 << 20)) for _ in range(1024)) + packer.flush()
    bombed, fine = decode(spark, tmp_path, bomb, gzip.compress(b'{"Records":[{"eventID":"ok"}]}'))
    assert bombed.file_error == "too_large" and bombed.file_error_detail == "decompresses to over 256 MiB"
    assert fine.file_error is None and len(fine.items) == 1


def test_the_text_check_finds_a_bad_byte_wherever_it_lies_in_ascii_text(spark, tmp_path):
    """The check reads ASCII 8 bytes at a time: a NUL or a broken sequence is found at any place in or across those
    words, and valid UTF-8 among them passes."""
    body = b'{"Records":[{"eventID":"' + b"a" * 20
    places = range(len(body) - 17, len(body) + 1)
    nul = [body[:at] + b"\x00" + body[at:] + b'"}]}' for at in places]
    broken = [body[:at] + b"\xc3\x28" + body[at:] + b'"}]}' for at in places]
    valid = [body[:at] + "é€😀".encode() + body[at:] + b'"}]}' for at in places]
    rows = decode(spark, tmp_path, *nul, *broken, *valid)
    assert [row.file_error_detail for row in rows[: len(places)]] == ["contains NUL bytes"] * len(places)
    assert [row.file_error_detail for row in rows[len(places) : 2 * len(places)]] == [
        f"not UTF-8: invalid continuation byte at byte {at}" for at in places
    ]
    assert [row.file_error for row in rows[2 * len(places) :]] == [None] * len(places)
    assert all(len(row.items) == 1 for row in rows[2 * len(places) :])


def test_files_are_read_by_path_in_order_and_a_missing_one_is_unreadable(spark, tmp_path):
    rows = decode(spark, tmp_path, b"hello", b'{"Records":[]}', None, only_records=[0])
    assert [row.file_error for row in rows] == ["not_json", None, "unreadable_file"]
    assert rows[2].file_error_detail.startswith("NoSuchFileException")
    assert [row.arrival_time.timestamp() for row in rows] == [0, 1, 2] and rows[1].only_records == [0]
    assert [row.file_bytes for row in rows] == [5, 14, 0]


def test_a_byte_order_mark_and_leading_whitespace_are_skipped(spark, tmp_path):
    (row,) = decode(spark, tmp_path, b'\xef\xbb\xbf \n{"Records":[]}')
    assert (row.content, row.shape, row.items) == (b'{"Records":[]}', SHAPE_OBJECT, [])


@pytest.mark.parametrize(
    "content",
    [
        b'{"Records":[{"eventID":"a"}]}{"Records":[]}',  # a second container must not be dropped
        b'{"Records":[{"eventID":"a"}, 1]}',  # Spark's typed parse would drop the whole array
        b'{"Records":[{"eventID":"a"}],"Records":[{"eventID":"b"}]}',  # Spark keeps the last "Records"
        b'{"Records":[{"eventID":NaN}]}',
        b'{"eventID":"a"}\n{"eventID":"b"}',
        b'{"digest":true}',
        b'[{"a":1},{"eventid":"not a marker"}]',  # a bare array is records only when some element looks like one
        b"[]",
    ],
)
def test_the_scan_leaves_what_it_cannot_place_to_the_slow_path(spark, tmp_path, content):
    (row,) = decode(spark, tmp_path, content)
    assert row.file_error is None and row.items is None


ODD_CONTAINERS = [
    # nested values as text: numbers, escapes and white space
    b'{"Records":[{"eventID":"a","requestParameters":{"n":[1.50,1e5,-0,12345678901234567890123],"s":"\\u00e9\\/\\n"}}]}',
    b'{\n  "Records": [\n    {\n      "eventID": "a",\n      "responseElements": { "k": [ 1, { "z": null } ] }\n    }\n  ]\n}',
    # values of the wrong type: partial records
    b'{"Records":[{"eventID":"a","userIdentity":"root"},{"eventID":"b","resources":{"ARN":"x"}},{"eventID":"c","eventTime":{"t":1}}]}',
    b'{"Records":[{"eventID":{"id":1},"readOnly":[true],"userIdentity":{"sessionContext":7}}]}',
    # keys around the records array, one holding a "Records" of its own; two "Records" (the last is kept)
    b'{"a":{"Records":[{"eventID":"no"}]},"Records":[{"eventID":"yes","extra":[1,{"b":2}]}],"z":[[]]}',
    b'{"Records":[{"eventID":"first"}],"Records":[{"eventID":"last"}]}',
    # broken JSON; an element that is no object
    b'{"Records":[{"eventID":"a"},{"eventID":}]}',
    b'[{"eventID":"a","eventID":"b"},{}, 5]',
]


def as_parsed(value):
    """A value with its nested JSON texts read, and a number's text as its value: over bytes Spark keeps them as the
    file holds them, from_json writes them anew (1.50 as 1.5)."""
    if hasattr(value, "asDict"):
        return {key: as_parsed(item) for key, item in value.asDict().items()}
    if isinstance(value, list):
        return [as_parsed(item) for item in value]
    if isinstance(value, str) and (value[:1] in ("{", "[") or NUMBER.fullmatch(value)):
        return json.loads(value)
    return value


NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")


def typed_records(spark, tmp_path, *contents: bytes) -> list:
    """Each container's records as the one pass types them (None: left to the slow path), beside from_json's over its
    text (Spark's parser, through a Reader)."""
    rows = decode(spark, tmp_path, *contents)
    records = T.ArrayType(TYPED_RECORD)
    container = T.StructType([T.StructField("Records", records)])
    texts = spark.createDataFrame([(content.decode(),) for content in contents], "text string")
    reader = texts.select(
        F.when(F.col("text").startswith("{"), F.from_json("text", container).getField("Records")).otherwise(F.from_json("text", records))
    ).collect()
    typed = [None if row.items is None else [item.typed for item in row.items] for row in rows]
    return list(zip(typed, [row[0] for row in reader], strict=True))


@pytest.mark.parametrize("content", ODD_CONTAINERS)
def test_the_pass_types_records_as_sparks_parser_but_keeps_nested_values_as_written(spark, tmp_path, content):
    """Records.java reads each record as Spark's parser over the bytes does: the values from_json gives over the text,
    partial records and nulls included (a value of the wrong type: Spark's own parse, Json.java), except that a nested
    value kept as text is the file's own text, which from_json writes anew."""
    ((typed, reader),) = typed_records(spark, tmp_path, content)
    if content in ODD_CONTAINERS[-3:]:
        assert typed is None  # two "Records", broken JSON, an element that is no object: the slow path's
        return
    assert as_parsed(typed) == as_parsed(reader)
    nested = [value for record in typed if record for value in (record.requestParameters, record.responseElements) if value]
    assert all(value.encode() in content for value in nested)
    assert len(nested) == (1 if content in ODD_CONTAINERS[:2] else 0)


# Generated records follow the typed schema, with what a hostile file adds: every JSON type where text is expected
# (kept as its text), strings with escapes, quotes and brackets, unknown and repeated keys, and now and then a value of
# the wrong type where a struct or an array is expected (Spark keeps a partial record: its own parse types it).
STRINGS = ["", "plain", r"a \"quoted\" ] }, [{", r"\u00e9\u2603 caf\u00e9", "caf\u00e9 \u2603", r"tab\tnew\nline", r"\ud83d\ude00",
           r"\\/slash"]  # fmt: skip


def _any(rng: random.Random, depth: int = 0) -> str:
    kind = rng.choice(["string"] * 6 + ["number", "bool", "null", "object", "array"])
    if kind == "string" or depth > 2:
        return '"' + rng.choice(STRINGS) + '"'
    if kind == "number":
        return rng.choice(["0", "-7", "1.5", "2.25e3", "-0.125", "12345678901"])
    if kind in ("bool", "null"):
        return rng.choice(["true", "false"] if kind == "bool" else ["null"])
    if kind == "array":
        return "[" + ", ".join(_any(rng, depth + 1) for _ in range(rng.randrange(3))) + "]"
    return "{" + ", ".join(f'"k{i}": {_any(rng, depth + 1)}' for i in range(rng.randrange(3))) + "}"


def _value(rng: random.Random, data_type: T.DataType) -> str:
    if isinstance(data_type, T.StringType):
        return _any(rng)
    if rng.random() < 0.04:
        return rng.choice(["null", '"text"', '""', "7", "[]" if isinstance(data_type, T.StructType) else "{}"])
    if isinstance(data_type, T.ArrayType):
        return "[" + ", ".join("null" if rng.random() < 0.1 else _value(rng, data_type.elementType) for _ in range(rng.randrange(3))) + "]"
    assert isinstance(data_type, T.StructType)
    return _object(rng, data_type, 3)


def _object(rng: random.Random, data_type: T.StructType, most: int) -> str:
    fields = rng.sample(data_type.fields, min(len(data_type.fields), rng.randrange(most + 1)))
    pairs = [(field.name, _value(rng, field.dataType)) for field in fields]
    if rng.random() < 0.2:
        pairs.append((rng.choice(["brandNew", "EventID", "x"]), _any(rng)))  # unknown, or known but for its case
    if pairs and rng.random() < 0.1:
        pairs.append((pairs[0][0], _value(rng, fields[0].dataType) if fields else _any(rng)))  # a repeated key: the last counts
    rng.shuffle(pairs)
    return "{" + rng.choice([",", ", ", ",\n  "]).join(f'"{key}"{rng.choice([":", " : "])}{value}' for key, value in pairs) + "}"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_generated_containers_are_typed_as_sparks_parser_types_them(spark, tmp_path, seed):
    """300 containers of records with every key of the schema (and unknown ones, repeated ones) given values of every
    JSON type: the pass's typed records are from_json's, whether it reads them itself or hands a container with a
    value of the wrong type to Spark's parser."""
    rng = random.Random(seed)
    contents = []
    for _ in range(300):
        records = [_object(rng, TYPED_RECORD, 12) for _ in range(rng.randrange(1, 5))]
        body = "[" + ", ".join(records) + "]"
        contents.append((body if rng.random() < 0.3 else '{"Records": ' + body + "}").encode())
    compared = typed_records(spark, tmp_path, *contents)
    for content, (typed, reader) in zip(contents, compared, strict=True):
        if typed is not None:
            assert as_parsed(typed) == as_parsed(reader), content
    # Most are read by the pass, some handed to Spark's parser; a bare array with no marker key goes the slow way.
    assert sum(typed is not None for typed, _ in compared) > 200


def salvaged(spark, text: str) -> list[tuple[str, str | None, str | None]] | None:
    (row,) = spark.range(1).select(salvage(F.lit(text)).alias("records")).collect()
    return None if row.records is None else [(r.record, r.reason, r.detail) for r in row.records]


def test_only_a_lone_container_with_records_is_split_by_hand(spark):
    record = json.dumps({"eventID": "a", "eventTime": "2024-01-01T00:00:00Z"}, separators=(",", ":"))
    assert salvaged(spark, '{"Records":[' + record + ',{"eventID":NaN}]}') == [
        (record, None, None),
        ('{"eventID":NaN}', "invalid_json", "NaN is not a JSON value"),
    ]
    assert salvaged(spark, '{"Records":[' + record + ',{"x":NaN}]}{"Records":[]}') is None  # a second container must not be dropped
    assert salvaged(spark, '{"Records":[' + record + ',{"x":NaN}]} trailing') is None
    assert salvaged(spark, '{"other":[' + record + "]}") is None and salvaged(spark, "[1, NaN]") is None


def test_the_split_reads_strings_whole_and_says_what_each_bad_record_breaks(spark):
    record = json.dumps({"eventID": "a", "note": 'a "quoted" ] }, and [{'})  # structure inside a string is text
    cut = '{"eventID":"b","eventTime":'
    assert salvaged(spark, " \u00a0[" + record + "," + cut) == [
        (record, None, None),
        (cut, "invalid_json", "Unexpected end-of-input within/between Object entries at: line 1 column 28 (char 27)"),
    ]
    control, glued = '{"eventID":"c","userAgent":"a\x01b"}', '{"eventID":"d"} {"eventID":"e"}'
    assert salvaged(spark, f'[{record},{control},{glued},{{"b":-Infinity}}]')[1:] == [
        (control, "invalid_json", "Invalid control character (code 1) at: line 1 column 30 (char 29)"),
        (glued, "invalid_json", "Extra data after the value, at char 16"),
        ('{"b":-Infinity}', "invalid_json", "-Infinity is not a JSON value"),
    ]
    assert salvaged(spark, '{"Records":["unclosed, ' + record + "]}") is None  # a quote that never closes hides the array
