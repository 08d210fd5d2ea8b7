"""Property: whatever records and containers land, no run fails, every valid record is in the table
once, every other record is in quarantine with the reason that names its problem, and DuckDB reads
both tables. `make test` runs a few examples; `make fuzz` runs $FUZZ_EXAMPLES (300) with more files each.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from collections import Counter
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from jobs.landing.layout import delivery_path
from tests.helpers import DAY, duckdb_rows, ingest, quarantine_rows

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "4"))
MAX_FILES = 8 if EXAMPLES > 10 else 4
OFFSETS = {"Z": timedelta(0), "+05:30": timedelta(hours=5, minutes=30), "-08:00": timedelta(hours=-8), "+14:00": timedelta(hours=14)}
KNOWN_ODD = ["resources", "readOnly", "userIdentity", "requestParameters", "tlsDetails", "sourceIPAddress", "errorCode"]

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


@st.composite
def event_times(draw) -> tuple[str, date]:
    """An ISO-8601 eventTime with a fraction of 0-6 digits and an offset, and its UTC date."""
    local = draw(st.datetimes(min_value=datetime(2014, 1, 1), max_value=datetime(2030, 12, 31)))
    offset = draw(st.sampled_from(sorted(OFFSETS)))
    digits = draw(st.integers(0, 6))
    fraction = f".{local.microsecond:06d}"[: digits + 1] if digits else ""
    return f"{local:%Y-%m-%dT%H:%M:%S}{fraction}{offset}", (local - OFFSETS[offset]).date()


@st.composite
def records(draw, event_id: str, hostile: bool) -> tuple[str, str | None, date | None]:
    """(record JSON text, the quarantine reason it must get or None, its event date when valid)."""
    time_text, day = draw(event_times())
    body: dict[str, Any] = {"eventVersion": "1.08", "eventID": event_id, "eventTime": time_text, "eventSource": "s3.amazonaws.com"}
    body.update({f"x_{key}": value for key, value in draw(st.dictionaries(st.text(max_size=8), values, max_size=3)).items()})
    body.update(draw(st.dictionaries(st.sampled_from(KNOWN_ODD), values, max_size=2)))
    kinds = ["valid", "no_id", "bad_time", "no_time"] + (["nan", "too_deep"] if hostile else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "no_id":
        body["eventID"] = draw(st.sampled_from([None, "", "  "]))
        return json.dumps(body), "missing_event_id", None
    if kind == "bad_time":
        body["eventTime"] = draw(st.sampled_from(["yesterday", "2024-13-01T00:00:00Z", "2024-03-01 10:00:00", "1709287200"]))
        return json.dumps(body), "unparseable_event_time", None
    if kind == "no_time":
        del body["eventTime"]
        return json.dumps(body), "missing_event_time", None
    if kind == "nan":
        return json.dumps(body)[:-1] + ', "x_nan": NaN}', "invalid_json", None
    if kind == "too_deep":
        return json.dumps(body)[:-1] + ', "x_deep": ' + "[" * 1200 + "]" * 1200 + "}", "record_too_deep", None
    return json.dumps(body), None, day


@st.composite
def landing_files(draw) -> list[tuple[str, bool, list[tuple[str, str | None, date | None]]]]:
    """Files as (shape, gzipped, records); eventIDs unique across the zone."""
    files = []
    for index in range(draw(st.integers(1, MAX_FILES))):
        shape = draw(st.sampled_from(["records", "array", "lines", "single"]))
        count = 1 if shape == "single" else draw(st.integers(1, 6))
        hostile = shape in ("records", "array")
        files.append((shape, draw(st.booleans()), [draw(records(f"e{index}-{n}", hostile)) for n in range(count)]))
    return files


def container(shape: str, texts: list[str]) -> str:
    if shape == "records":
        return '{"Records":[' + ",".join(texts) + "]}"
    if shape == "array":
        return "[" + ",".join(texts) + "]"
    return "\n".join(texts) + "\n"


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=EXAMPLES <= 10,  # the CI part is the same every run
    database=None,
    # Each example runs the job: shrinking would take longer than the run; the failing example is printed whole.
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
@given(files=landing_files())
def test_every_record_lands_once_in_the_table_or_in_quarantine_with_its_reason(spark, files):
    with tempfile.TemporaryDirectory() as scratch:
        landing, lake = Path(scratch) / "landing", Path(scratch) / "lake"
        expected_rows, expected_quarantine = [], Counter()
        for index, (shape, gzipped, content) in enumerate(files):
            delivered = DAY + timedelta(minutes=index)
            path = delivery_path(landing, "111122223333", "us-east-1", delivered, f"f{index}", ".json.gz" if gzipped else ".json")
            path.parent.mkdir(parents=True, exist_ok=True)
            body = container(shape, [text for text, _, _ in content]).encode()
            path.write_bytes(gzip.compress(body) if gzipped else body)
            os.utime(path, (delivered.timestamp(), delivered.timestamp()))
            if all(reason in ("invalid_json", "record_too_deep") for _, reason, _ in content):
                expected_quarantine[(path.name, "not_json")] += 1  # no record parses: nothing to save, the file is quarantined whole
                continue
            for text, reason, day in content:
                if reason is None:
                    expected_rows.append((json.loads(text)["eventID"], str(day)))
                else:
                    expected_quarantine[(path.name, reason)] += 1

        report = ingest(spark, landing, lake)
        assert report.status == "succeeded"
        assert duckdb_rows(lake) == sorted(expected_rows)
        found: Counter = Counter(quarantine_rows(spark, lake))
        assert found == expected_quarantine
