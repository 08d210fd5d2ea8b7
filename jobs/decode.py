"""Turn the raw bytes of a landed file into text, or into a file-level quarantine reason.

This is the only Python that touches every byte: it runs inside ``mapInArrow`` on the
executors, because Spark's own readers either fail the whole query on a truncated gzip
file or skip it silently (``ignoreCorruptFiles``); neither is acceptable here.
JSON parsing stays in the JVM (``from_json``); this step only decompresses, checks that
the bytes are text, and sniffs the container shape from the first character.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import pyarrow as pa

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
    ]
)
DECODED_DDL = (
    "source_file string, arrival_time timestamp, file_bytes long, text string, shape string, file_error string, file_error_detail string"
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


def decode_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: binaryFile rows (path, modificationTime, length, content) -> DECODED_SCHEMA."""
    for batch in batches:
        decoded = [decode_file(content) for content in batch.column("content").to_pylist()]
        text, shape, error, detail = (list(column) for column in zip(*decoded, strict=True)) if decoded else ([], [], [], [])
        yield pa.RecordBatch.from_arrays(
            [
                batch.column("path"),
                batch.column("modificationTime").cast(pa.timestamp("us", tz="UTC")),
                batch.column("length"),
                pa.array(text, pa.large_binary()).cast(pa.large_string()),  # already checked as UTF-8 above
                pa.array(shape, pa.string()),
                pa.array(error, pa.string()),
                pa.array(detail, pa.string()),
            ],
            schema=DECODED_SCHEMA,
        )
