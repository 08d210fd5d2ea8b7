"""One owner per concept: the shared command line and its exit codes, the ingest's one config, the report
files, and the lake's folder names, each asked of its module and found nowhere else."""

from __future__ import annotations

import ast
import json
import logging
import re
import subprocess
import sys
from datetime import date, timedelta
from pathlib import Path

import pytest

from jobs import COMMANDS, cli, options
from jobs.ingest.command import parse_args
from jobs.lake import (
    ACCOUNT_ID,
    EVENT_DATE,
    EVENT_DAY,
    OCSF_API_ACTIVITY,
    REASON,
    REGION,
    VALIDATED,
    Lake,
    partition,
    partition_folders,
    partition_value,
)
from jobs.landing.layout import aws_logs
from jobs.ledger.planner import LedgerOptions
from jobs.lock import LakeBusyError
from jobs.quality import gate
from jobs.records.dedup import Dedup
from jobs.reporting.report import gate_report, read_report, read_reports, skipped_gate_report, verdict_of, write_json
from jobs.spark.logs import CheckpointError
from tests.conftest import ROOT

pytestmark = pytest.mark.unit


def test_the_failures_an_operator_acts_on_become_an_exit_code_and_one_line(caplog):
    def busy() -> int:
        raise LakeBusyError("another ingest run is writing to this lake")

    def damaged() -> int:
        raise CheckpointError("the checkpoint is missing")

    assert (cli.run(busy), cli.run(damaged), cli.run(lambda: cli.OK)) == (75, 2, 0)
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == [
        "another ingest run is writing to this lake",
        "the checkpoint is missing",
    ]
    with pytest.raises(RuntimeError):
        cli.run(lambda: (_ for _ in ()).throw(RuntimeError("a bug is a traceback, not a quiet exit code")))  # type: ignore[arg-type]


def test_the_ingest_arguments_become_one_config_with_parsed_durations(tmp_path: Path, monkeypatch):
    aws_logs(tmp_path / "landing").mkdir(parents=True)
    monkeypatch.setenv("CLOUDTRAIL_LANDING", str(tmp_path / "landing"))
    monkeypatch.setenv("CLOUDTRAIL_LAKE", str(tmp_path / "lake"))
    config = parse_args(["--dedup-horizon", "6 hours", "--settle", "0 seconds", "--max-files-per-trigger", "5", "--gate-from", "2024-03-01",
                         "--gate-to", "2024-03-02", "--clock-skew", "2 minutes"])  # fmt: skip
    assert config.landing == tmp_path / "landing" and config.lake == Lake.at(tmp_path / "lake")
    assert config.dedup == Dedup(timedelta(hours=6)) and config.clock_skew == timedelta(minutes=2)
    assert config.ledger == LedgerOptions(timedelta(days=7), timedelta(0), 5, None), "a file limit replaces the byte limit"
    assert config.gate_dates == (date(2024, 3, 1), date(2024, 3, 2))
    assert config.run_id.startswith("manual__") and parse_args([]).run_id != config.run_id, "unique to the microsecond"
    assert parse_args(["--watermark", "1 day"]).dedup.horizon == timedelta(days=1), "the deprecated alias still works"
    defaults = parse_args([])
    assert defaults.ledger.max_bytes == options.size(options.MAX_BYTES_PER_TRIGGER) and defaults.dedup.horizon == timedelta(days=2)


@pytest.mark.parametrize(
    "argv",
    [
        ["--dedup-horizon", "two days"],
        ["--gate-from", "2024-03-02", "--gate-to", "2024-03-01"],
        ["--gate-from", "2024-03-02"],
        ["--replay-from", "2024-03-02", "--replay-to", "2024-03-01"],
        ["--max-files-per-trigger", "0"],
        ["--run-id", " "],
    ],
)
def test_bad_arguments_exit_2_before_anything_runs(argv: list[str], tmp_path: Path, capsys):
    with pytest.raises(SystemExit) as refused:
        parse_args(["--landing", str(tmp_path), "--lake", str(tmp_path), *argv])
    assert refused.value.code == cli.USAGE and "error:" in capsys.readouterr().err


def test_the_dedup_policy_is_one_object():
    dedup = Dedup(timedelta(days=2))
    assert dedup.delay == timedelta(days=1) and dedup.key == "eventID"
    assert [options.duration_text(options.duration(text)) for text in ("2 days", "90 minutes", "1 hour", "0 seconds")] == [
        "2 days", "90 minutes", "1 hour", "0 seconds",
    ]  # fmt: skip


def test_a_failed_gate_ends_its_run_naming_each_failed_expectation(tmp_path: Path):
    lake = Lake.at(tmp_path)
    check = {"suite": "events_critical", "expectation": "expect_column_values_to_not_be_null", "kwargs": {"column": "eventSource"},
             "unexpected_count": 2, "sample_unexpected": ["<script>", None]}  # fmt: skip
    write_json(lake.gate_report("r1"), gate_report("r1", ["2024-03-01"], {"failed_critical": [check], "warnings": [], "suites": {}}))
    message = str(gate.failed(lake, "r1"))
    assert message.startswith("the quality gate failed: events_critical: expect_column_values_to_not_be_null on eventSource, 2 unexpected")
    assert 'sample: "<script>", null' in message and str(lake.gate_report("r1")) in message


def test_a_report_is_written_whole_and_read_back_and_every_gate_report_has_a_verdict(tmp_path: Path):
    lake = Lake.at(tmp_path)
    failed = gate_report("r1", [date(2024, 3, 1)], {"failed_critical": [{"suite": "s"}], "warnings": [], "suites": {}})
    passed = gate_report("r2", ["2024-03-02"], {"failed_critical": [], "warnings": [], "suites": {}}, rows_validated=3)
    write_json(lake.gate_report("r1"), failed)
    write_json(lake.gate_report("r2"), passed)
    write_json(lake.validated, {"2024-03-01": {}})
    (lake.gate_reports / "torn.json").write_text('{"run_id": "r3", "verd')  # a report damaged by hand
    assert [r["run_id"] for r in read_reports(lake.gate_reports)] == ["r1", "r2"], "the index and a damaged report are not reports"
    assert [verdict_of(r) for r in read_reports(lake.gate_reports)] == ["failed", "passed"]
    assert read_report(lake.gate_report("r2")) == json.loads(json.dumps(passed)) and passed["event_dates"] == ["2024-03-02"]
    assert verdict_of(skipped_gate_report("r4", [], "nothing new")) == "skipped"
    assert verdict_of({"failed_critical": [{"suite": "s"}]}) == "failed", "a rebuild's report from before gate_report"
    assert not list(lake.gate_reports.glob(".*")), "no partial file left behind"


def test_partition_folders_are_named_by_the_lake():
    lake = Lake.at("/lake")
    assert partition(lake.events, "2024-03-01") == Path(f"/lake/events/{EVENT_DATE}=2024-03-01")
    assert partition(lake.quarantine, "not_json") == Path(f"/lake/quarantine/{REASON}=not_json")
    assert partition(lake.staging("backfill__x") / "events", "2024-03-01").name == f"{EVENT_DATE}=2024-03-01"
    assert partition_value(Path(f"/lake/events/{EVENT_DATE}=2024-03-01")) == "2024-03-01"
    assert partition_folders(Path("/nonexistent/events")) == []
    assert lake.staging("..").parent == lake.staging_root and lake.ingest_report("..").parent == lake.ingest_reports


# How the lake's folder and file names would be spelled: a partition column's name (`reason` only as a folder,
# `reason=`: it is a word of other things too), the folders that only name folders, and the file names.
SPELLINGS = {
    EVENT_DATE: re.compile(rf"\b{EVENT_DATE}\b"),
    REASON: re.compile(rf"(?<![\w-]){REASON}="),
    **{name: re.compile(rf"\b{name}\b") for name in ("_staging", "_replaced", "_swept", "_checkpoints")},
    **{name: re.compile(rf"(^|/){re.escape(name)}(/|$)") for name in ("reports", "ingest.lock", VALIDATED)},
    # The OCSF table's folders: its own, and Security Lake's partition columns (`region` and `accountId` only as folders).
    EVENT_DAY: re.compile(rf"\b{EVENT_DAY}\b"),
    **{name: re.compile(rf"(?<![\w-]){name}=") for name in (REGION, ACCOUNT_ID)},
    **{name: re.compile(re.escape(name)) for name in (OCSF_API_ACTIVITY,)},
}
SOURCES = [p for folder in ("jobs", "plugins", "tools", "dags", "bench") for p in (ROOT / folder).rglob("*.py")]


def _strings(tree: ast.AST) -> list[tuple[int, str]]:
    """Every string constant of a module but its docstrings (f-strings' literal parts included)."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef)
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }  # fmt: skip
    constants = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]
    return [(n.lineno, n.value) for n in constants]


def test_each_folder_name_and_exit_code_is_spelled_in_one_module():
    spelled: list[str] = []
    for path in SOURCES:
        tree = ast.parse(path.read_text())
        where = path.relative_to(ROOT).as_posix()
        if where != "jobs/lake.py":
            for line, text in _strings(tree):
                spelled += [f"{where}:{line}: {name}" for name, spelling in SPELLINGS.items() if spelling.search(text)]
        if where != "jobs/cli.py":
            spelled += [f"{where}:{n.lineno}: exit code 75" for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value == 75]
    assert spelled == [], "\n".join(spelled)


def test_the_pre_commit_hooks_run_what_make_lint_runs():
    import yaml

    config = ROOT / ".pre-commit-config.yaml"
    subprocess.run([str(Path(sys.executable).with_name("pre-commit")), "validate-config", str(config)], check=True, capture_output=True)
    entries = [hook["entry"].removeprefix(".venv/bin/") for repo in yaml.safe_load(config.read_text())["repos"] for hook in repo["hooks"]]
    lint = (ROOT / "Makefile").read_text().split("\nlint:", 1)[1].split("\n\n", 1)[0]
    commands = [line.strip() for line in lint.splitlines()[1:]]
    assert [entry.split(" ")[:2] for entry in entries] == [command.split(" ")[:2] for command in commands] == [
        ["ruff", "check"], ["ruff", "format"], ["mypy", "jobs"],
    ]  # fmt: skip


def test_the_ingest_command_imports_pandas_and_gx_only_when_a_run_needs_them():
    """A run with nothing new starts no JVM; its cost is its imports (BENCHMARKS.md, 'A year of history')."""
    heavy = {"pandas", "great_expectations", "pyarrow"}
    probe = f"import sys, jobs.cloudtrail_ingest; print(sorted({{m.split('.')[0] for m in sys.modules}} & {heavy!r}))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT).stdout.strip()
    assert loaded == "[]"


def test_last_success_has_one_writer():
    """jobs/spark/checkpoint.py writes last_success.json; the ledger hands back what to record, the ingest and repair ask
    the checkpoint module (issue #58: it had three writers in two modules)."""
    named = sorted(
        path.relative_to(ROOT).as_posix()
        for path in ROOT.glob("jobs/**/*.py")
        if any(isinstance(n, ast.Name | ast.alias) and "LAST_SUCCESS" in (getattr(n, "id", None), getattr(n, "name", None))
               for n in ast.walk(ast.parse(path.read_text())))
    )  # fmt: skip
    assert named == ["jobs/lake.py", "jobs/spark/checkpoint.py"]
    writers = [path.relative_to(ROOT).as_posix() for path in ROOT.glob("jobs/**/*.py") if "last_success.json" in path.read_text()]
    assert set(writers) <= {"jobs/spark/checkpoint.py", "jobs/lake.py"}, writers


@pytest.mark.unit
def test_runtime_checks_in_jobs_raise_errors_not_asserts():
    """`python -O` strips asserts: a check the product relies on is an error it raises (issue #58)."""
    asserts = [f"{path.relative_to(ROOT)}:{node.lineno}" for path in ROOT.glob("jobs/**/*.py")
               for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Assert)]  # fmt: skip
    assert asserts == []


# Each command that needs a lake, with what else it needs: all but the ingest and a rebuild from the landing, which make
# one, and the replay (an ingest run). A rebuild's rollback needs one.
ON_A_LAKE = {
    "validate_events": ["--run-id", "r"], "rebuild": ["--rollback", "tag"],
    "repair": ["--landing", "x"], "rescale": ["--state-partitions", "2"], "compact": [], "activity": [], "ocsf": [],
    "publish": [], "investigate": ["iam_changes", "--from-date", "2024-01-01", "--to-date", "2024-01-01"],
    "migrate": ["--to", "s3://acme-security/elsewhere"],
}  # fmt: skip


@pytest.mark.parametrize("command", sorted(ON_A_LAKE))
def test_a_lake_that_is_not_there_is_refused_not_made(command, tmp_path, capsys):
    """A mistyped --lake was a new, empty lake: a gate of nothing passed, a compaction found nothing to do."""
    import importlib

    missing = tmp_path / "no-such-lake"
    with pytest.raises(SystemExit) as refused:
        importlib.import_module(f"jobs.{command}").main(["--lake", str(missing), *ON_A_LAKE[command]])
    assert refused.value.code == cli.USAGE
    assert f"--lake {missing}: no lake there" in capsys.readouterr().err.splitlines()[-1]
    assert not missing.exists()
    assert set(ON_A_LAKE) | {"cloudtrail_ingest", "replay_quarantine"} == set(COMMANDS)


@pytest.mark.unit
def test_an_error_is_named_by_its_first_line_or_its_type():
    """An exception with no message named no line at all: a run's report of it raised an IndexError of its own."""
    assert cli.first_line(RuntimeError("refused\n  at a.b.C(C.java:1)")) == "refused"
    assert cli.first_line(KeyError()) == "KeyError" and cli.first_line(RuntimeError("")) == "RuntimeError"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_lake_in_object_storage_is_never_taken_for_a_folder(command, tmp_path, monkeypatch, capsys):
    """`--lake s3://...` was a relative folder named `s3:`, which the ingest filled and every other command read. Every
    command runs on a lake in S3 (README, "A lake in S3"), and asks for the catalog such a lake names."""
    import importlib

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CLOUDTRAIL_CATALOG", raising=False)
    argv = ["--lake", "s3://acme-security/lake", *ON_A_LAKE.get(command, ["--landing", str(tmp_path)])]
    with pytest.raises(SystemExit) as refused:
        importlib.import_module(f"jobs.{command}").main(argv)
    assert refused.value.code == cli.USAGE
    why = capsys.readouterr().err.splitlines()[-1]
    assert "s3://acme-security/lake: a lake in S3 names the catalog its tables are in (--catalog NAME" in why, why
    assert list(tmp_path.iterdir()) == []
