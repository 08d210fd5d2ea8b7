import gzip

import pyarrow as pa

from jobs.decode import SHAPE_ARRAY, SHAPE_OBJECT, decode_batches, decode_file


def test_gzip_records_file_is_decompressed_and_sniffed_as_object():
    assert decode_file(gzip.compress(b'  {"Records":[]}')) == (b'{"Records":[]}', SHAPE_OBJECT, None, None)


def test_plain_array_is_sniffed_as_array():
    assert decode_file(b'\n[{"eventID":"a"}]')[1] == SHAPE_ARRAY


def test_multi_member_gzip_keeps_every_member():
    text, _, error, _ = decode_file(gzip.compress(b'{"a":1}\n') + gzip.compress(b'{"b":2}\n'))
    assert error is None and text == b'{"a":1}\n{"b":2}\n'


def test_truncated_gzip_is_a_file_error():
    _, _, error, detail = decode_file(gzip.compress(b'{"Records":[' + b'{"eventID":"x"},' * 200 + b"]}")[:-30])
    assert error == "truncated_gzip" and "ends early" in detail


def test_corrupt_gzip_body_is_a_file_error():
    data = bytearray(gzip.compress(b'{"Records":[]}' * 50))
    data[20:30] = b"\xff" * 10
    assert decode_file(bytes(data))[2] in ("corrupt_gzip", "truncated_gzip")


def test_binary_and_non_utf8_content_are_file_errors():
    assert decode_file(bytes(range(256)))[2] == "binary"
    assert decode_file(b"\xc3\x28 not utf-8")[2] == "binary"


def test_empty_and_non_json_text_are_file_errors():
    assert decode_file(b"  \n")[2] == "empty_file"
    assert decode_file(b"eventID,eventTime\n1,2")[2] == "not_json"


def test_decode_batches_reads_each_file_by_its_path_and_keeps_order(tmp_path):
    names = ["a:b.json.gz", "sp ace#%[{*?é.json", "gone.json"]
    (tmp_path / names[0]).write_bytes(b"hello")
    (tmp_path / names[1]).write_bytes(b'{"Records":[]}')
    paths = [str(tmp_path / name) for name in names]
    manifest = {
        "path": paths,
        "size": [5, 14, 1],
        "mtime_ms": [0, 1, 2],
        "arrival_ms": [0, 1_000, 2_000],
        "only_records": [None, [0], None],
    }
    batch = pa.RecordBatch.from_pydict(manifest)
    (out,) = list(decode_batches(iter([batch])))
    assert out.column("source_file").to_pylist() == [f"file:{path}" for path in paths]
    assert out.column("file_error").to_pylist() == ["not_json", None, "unreadable_file"]
    assert out.column("file_error_detail").to_pylist()[2].startswith("FileNotFoundError")
    assert out.column("shape").to_pylist() == [None, "object", None]
    assert out.column("file_bytes").to_pylist() == [5, 14, 0]
    assert out.column("arrival_time").cast(pa.int64()).to_pylist() == [0, 1_000_000, 2_000_000]


def test_a_byte_order_mark_and_leading_whitespace_are_skipped():
    assert decode_file(b'\xef\xbb\xbf \n{"Records":[]}') == (b'{"Records":[]}', SHAPE_OBJECT, None, None)


def test_only_a_lone_container_with_records_is_split_by_hand():
    from jobs.decode import salvage_records

    record = '{"eventID":"a","eventTime":"2024-01-01T00:00:00Z"}'
    assert salvage_records('{"Records":[' + record + ',{"eventID":NaN}]}') == [
        (record, None, None),
        ('{"eventID":NaN}', "invalid_json", "NaN is not a JSON value"),
    ]
    assert salvage_records('{"Records":[' + record + ',{"x":NaN}]}{"Records":[]}') is None  # a second container must not be dropped
    assert salvage_records('{"Records":[' + record + ',{"x":NaN}]} trailing') is None
    assert salvage_records('{"other":[' + record + "]}") is None and salvage_records("[1, NaN]") is None
