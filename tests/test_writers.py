"""One writer per file on disk (issue #58): every file a lake holds after each operator command has run, and the one
module of jobs/ that writes it.

Python's writes are seen through an audit hook (`open` for writing, `os.rename`/`os.replace`): the writer is the
innermost module of jobs/ on the stack, jobs/storage.py's helpers aside. Spark writes the tables, its checkpoint and
its logs from the JVM: those files are the module's that runs the query or the write (SPARK_WRITES). Where an
operator command edits one of Spark's files (rescale's state partitions in an offsets file, a lost stream metadata
file, a moved lake's source log), jobs/spark/logs.py does, and the hook sees that module; that such a file also had
Spark as its writer, the JVM does not tell. A file seen neither way fails the test, as does a file two modules write."""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Any

from tests.helpers import DAY, deliver, duckdb_rows, events_of, put_raw, run_every_command

ROOT = Path(__file__).resolve().parents[1]
JOBS = ROOT / "jobs"
HELPERS = {JOBS / "files.py"}  # write a file whole for whoever asks: the asker is the writer
# Files the JVM writes, by pattern (see `pattern`), and the module whose query or write it is.
SPARK_WRITES = {
    r"(events|quarantine)/[^/]*=\*/[^/]*": "Spark: jobs/ingest/stream.py's sink, jobs/tables/staging.py's partitions",
    r"(events|quarantine)/_spark_metadata/[^/]*": "Spark: jobs/ingest/stream.py's sink",
    r"_checkpoints/ingest/((offsets|commits)/\*|sources/\*/\*|state/.*|metadata|\.metadata\.crc)": "Spark: jobs/ingest/stream.py's query",
    # pyiceberg writes the embedded catalog (SQLite) and the tables' metadata and data files from C and Arrow; Iceberg's
    # Spark runtime the derived tables' (jobs/iceberg/spark_tables.py).
    r"iceberg/.*": "pyiceberg: jobs/publishing/command.py's catalog; Spark: jobs/iceberg/spark_tables.py",
}

written: dict[str, set[str]] = defaultdict(set)  # absolute path -> writer modules
watching: list[Path] = []  # the lake the hook records writes under (none: it records nothing)


def writer(frame: FrameType | None) -> str:
    while frame is not None:
        path = Path(frame.f_code.co_filename)
        if path.is_relative_to(JOBS) and path not in HELPERS:
            return path.relative_to(ROOT).as_posix()
        frame = frame.f_back
    return "not jobs/"


def audit(event: str, args: tuple[Any, ...]) -> None:
    if not watching:
        return
    if event == "open" and isinstance(args[0], (str, Path)) and (args[1] or "r") != "r" and any(c in str(args[1]) for c in "wax+"):
        target = args[0]
    elif event in ("os.rename", "os.replace"):
        target = args[1]
    else:
        return
    path = Path(str(target)).absolute()
    if path.is_relative_to(watching[0]):
        written[str(path)].add(writer(sys._getframe(1)))


sys.addaudithook(audit)


def pattern(path: Path, lake: Path) -> str:
    """A lake file's place with what varies from run to run (ids, dates, numbers) as *."""
    parts = path.relative_to(lake).parts
    return "/".join(re.sub(r"=.*", "=*", part) if "=" in part else ("*" if re.search(r"\d", part) else part) for part in parts)


def test_every_file_of_a_lake_has_one_writer(spark, landing, lake, tmp_path):
    for day in range(3):
        deliver(landing, events_of(400, DAY + timedelta(days=day, hours=1), f"w{day}"), DAY + timedelta(days=day, hours=2))
    put_raw(landing, b"{not json", DAY + timedelta(hours=3))
    watching.append(lake)
    try:
        lake_args, landing_args = ("--lake", str(lake)), ("--landing", str(landing))
        # Every command of the product (jobs.COMMANDS), the ingest twice.
        run_every_command(spark, [
            ("cloudtrail_ingest", *landing_args, *lake_args, "--run-id", "first", "--settle", "0 seconds"),
            ("validate_events", *lake_args, "--run-id", "first", "--dates", "2024-03-01"),
            ("activity", *lake_args, "--run-id", "derived"),
            ("ocsf", *lake_args, "--run-id", "derived"),
            ("compact", *lake_args, "--closed-at", "2024-04-01", "--run-id", "compact"),
            ("rebuild", *landing_args, *lake_args, "--from-date", "2024-03-02", "--to-date", "2024-03-02"),
            ("repair", *lake_args, *landing_args),
            ("rescale", *lake_args, "--state-partitions", "3"),
            ("replay_quarantine", *landing_args, *lake_args, "--settle", "0 seconds"),
            ("publish", *lake_args),
            ("investigate", "iam_changes", "--from-date", "2024-03-01", "--to-date", "2024-03-03", *lake_args),
            ("cloudtrail_ingest", *landing_args, *lake_args, "--run-id", "second", "--settle", "0 seconds"),
            ("migrate", *lake_args, "--to", str(tmp_path / "moved")),  # last: the lake refuses writers after it
        ])  # fmt: skip
    finally:
        watching.clear()
    assert duckdb_rows(tmp_path / "moved") == duckdb_rows(lake), "the lake moved to another folder whole"

    places: dict[str, set[str]] = defaultdict(set)  # a file's place (`pattern`) -> its files' writers
    wrong = {}
    for path in sorted(p for p in lake.rglob("*") if p.is_file()):
        place = pattern(path, lake)
        spark_writer = next((module for regex, module in SPARK_WRITES.items() if re.fullmatch(regex, place)), None)
        # A file in a folder moved into place (a replaced partition, an old state) is the mover's.
        moved = next((written[str(folder)] for folder in path.absolute().parents if str(folder) in written), None)
        writers = written.get(str(path.absolute())) or moved or {spark_writer or "nobody seen"}
        places[place] |= writers
        if len(writers) != 1 or "nobody seen" in writers:
            wrong[str(path.relative_to(lake))] = sorted(writers)
    table = "\n".join(f"  {place:<64} {', '.join(sorted(modules))}" for place, modules in sorted(places.items()))
    print(f"every file of the lake, by place, and its writers:\n{table}")
    assert not wrong, f"files with other than one writer: {wrong}"
