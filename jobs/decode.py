"""Turn the raw bytes of a landed file into text, or into a file-level quarantine reason.

This is the only Python that touches every byte: it runs inside ``mapInArrow`` on the
executors, because Spark's own readers either fail the whole query on a truncated gzip
file or skip it silently (``ignoreCorruptFiles``); neither is acceptable here.
JSON parsing stays in the JVM (``from_json``); this step only decompresses, checks that
the bytes are text, and sniffs the container shape from the first character. Only a
container the JVM parser rejects comes back here, to be split record by record
(``salvage_records``).
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute

GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"
WHITESPACE = b" \t\r\n"

# Shapes the JVM side knows how to parse (see transforms.parse_containers).
SHAPE_OBJECT = "object"  # {"Records":[...]} or JSON lines of records
SHAPE_ARRAY = "array"  # a bare JSON array of records

DECODED_SCHEMA = pa.schema(
    [
        ("source_file", pa.string()),
        ("arrival_time", pa.timestamp("us", tz="UTC")),
        ("file_bytes", pa.int64()),
        ("text", pa.large_string()),
        ("shape", pa.string()),
        ("file_error", pa.string()),
        ("file_error_detail", pa.string()),
        ("only_records", pa.list_(pa.int64())),  # only these record positions (a replay); null: all
    ]
)
DECODED_DDL = (
    "source_file string, arrival_time timestamp, file_bytes long, text string, shape string, file_error string, "
    "file_error_detail string, only_records array<long>"
)


def gunzip(data: bytes) -> bytes:
    """Decompress every gzip member; raise EOFError when the stream is cut short."""
    out = []
    while data:
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        out.append(inflater.decompress(data))
        if not inflater.eof:
            raise EOFError(f"gzip stream ends early after {len(data)} compressed bytes")
        data = inflater.unused_data
    return b"".join(out)


def decode_file(content: bytes) -> tuple[bytes | None, str | None, str | None, str | None]:
    """Return (UTF-8 text as bytes, shape, error_reason, error_detail) for one file's bytes.

    The text stays bytes: Arrow takes bytes with one copy and checks UTF-8 in C++, faster than
    converting Python strings (docs/design.md, "Parsing").
    """
    if content[:2] == GZIP_MAGIC:
        try:
            content = gunzip(content)
        except EOFError as exc:
            return None, None, "truncated_gzip", str(exc)
        except zlib.error as exc:
            return None, None, "corrupt_gzip", str(exc)
    if b"\x00" in content:
        return None, None, "binary", "contains NUL bytes"
    try:
        content.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, None, "binary", f"not UTF-8: {exc.reason} at byte {exc.start}"
    stripped = content.lstrip(WHITESPACE)
    if stripped.startswith(UTF8_BOM):
        stripped = stripped[len(UTF8_BOM) :].lstrip(WHITESPACE)
    if not stripped:
        return None, None, "empty_file", "no content"
    first = stripped[:1]
    if first == b"{":
        return stripped, SHAPE_OBJECT, None, None
    if first == b"[":
        return stripped, SHAPE_ARRAY, None, None
    return None, None, "not_json", f"starts with {stripped[:4].decode('utf-8', 'ignore')[:1]!r}, not a JSON object or array"


# What a record may hold: what Spark's JSON parser (Jackson) takes inside a {"Records":[...]}
# container, whose two levels count towards Jackson's 1000 (docs/design.md, "Record limits").
MAX_RECORD_DEPTH = 998
MAX_STRING_CHARS = 20_000_000
RECORD_MARKERS = ("eventVersion", "eventID", "eventTime", "eventSource", "eventName")
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


def read_file(path: str) -> tuple[bytes | None, str | None]:
    """A landing file's bytes, or why they cannot be read (gone since it was listed, no permission)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(), None
    except OSError as exc:
        return None, f"{type(exc).__name__}: {exc.strerror or exc}"


def decode_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: manifest rows (ledger.MANIFEST_DDL) -> DECODED_SCHEMA, each file read by its path."""
    for batch in batches:
        decoded, lengths = [], []
        for path in batch.column("path").to_pylist():
            content, problem = read_file(path)
            lengths.append(len(content) if content is not None else 0)
            decoded.append(decode_file(content) if content is not None else (None, None, "unreadable_file", problem))
        text, shape, error, detail = (list(column) for column in zip(*decoded, strict=True)) if decoded else ([], [], [], [])
        yield pa.RecordBatch.from_arrays(
            [
                # As Hadoop names a local file ("file:/a b/c"): the table's _source_file keeps one form across versions.
                pa.array([f"file:{path}" for path in batch.column("path").to_pylist()], pa.string()),
                pa.compute.multiply(batch.column("arrival_ms"), 1000).cast(pa.timestamp("us", tz="UTC")),
                pa.array(lengths, pa.int64()),
                pa.array(text, pa.large_binary()).cast(pa.large_string()),  # already checked as UTF-8 above
                pa.array(shape, pa.string()),
                pa.array(error, pa.string()),
                pa.array(detail, pa.string()),
                batch.column("only_records"),
            ],
            schema=DECODED_SCHEMA,
        )
