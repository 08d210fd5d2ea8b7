"""The lake's JSON records name their format version, and one reader per record takes older formats up (issue #68)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from jobs.storage import FORMAT, NewerFormat, record_body, write_record

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
# write_record itself; Spark's own files, which Spark reads: their formats are Spark's (written as Spark does).
EXEMPT = {"jobs/storage.py", "jobs/spark/logs.py", "jobs/spark/state.py"}


def test_a_record_names_its_format_and_its_reader_takes_older_ones_up(tmp_path):
    path = write_record(tmp_path / "state.json", 3, {"dates": {"2024-03-01": "x"}})
    assert json.loads(path.read_text()) == {FORMAT: 3, "dates": {"2024-03-01": "x"}}
    upgrades = {1: lambda dates: {"dates": dates}, 2: lambda body: {**body, "seen": True}}
    assert record_body(json.loads(path.read_text()), 3, upgrades, path) == {"dates": {"2024-03-01": "x"}}
    assert record_body({"2024-03-01": "x"}, 3, upgrades, path) == {"dates": {"2024-03-01": "x"}, "seen": True}, "no format: 1"
    assert record_body({FORMAT: 2, "dates": {}}, 3, upgrades, path) == {"dates": {}, "seen": True}
    with pytest.raises(NewerFormat, match="state.json is of format 4, newer than this release's 3"):
        record_body({FORMAT: 4, "dates": {}}, 3, upgrades, path)


def test_every_json_record_of_jobs_is_written_with_its_format():
    """No module of jobs/ writes JSON into a file but through write_record (Spark's own files aside)."""
    bare = []
    for path in sorted((ROOT / "jobs").rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in ("write_whole", "write_text"):
                dumped = any(
                    isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "dumps" for arg in node.args for n in ast.walk(arg)
                )
                if dumped and where not in EXEMPT:
                    bare.append(f"{where}:{node.lineno}")
    assert bare == []
