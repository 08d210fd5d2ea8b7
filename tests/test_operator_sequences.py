"""Random sequences of what operators and CloudTrail do to a lake, checked against an oracle after every step
(hypothesis's stateful testing): deliveries (new, late, re-delivered), ingests, an ingest killed with SIGKILL, a
compaction, a rebuild of a date range, a repair, a rescale, a copy of the lake to another path, the checkpoint or
the tables put back from an earlier copy, a gated publish to the Iceberg catalog and one killed with SIGKILL. After
each step the events table equals the oracle, read by a directory reader and by Spark, or the step's command refused
with exit 2 and one line and the documented mend brought it back; the Iceberg table never holds an event twice or
one never delivered, and right after a publish it equals the oracle.

`make test` runs two scripted sequences that take every rule, and $TORTURE_EXAMPLES (3) generated ones of the
seed $TORTURE_SEED; `make torture` runs many generated ones of a new seed each time. The same machine runs on lakes
in S3 (moto's, each sequence's tables in a catalog of its own) in the harness, and in `make torture-s3`: every rule
but the copy of the lake to another place (for a lake in S3, a migration), its backups being copies of its prefix, of
its warehouse's and of its catalog's file.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from jobs import storage
from jobs.iceberg.catalog import open_catalog
from jobs.ingest.command import main as ingest_main
from jobs.lake import Lake
from jobs.publishing import command as publish
from jobs.quality import validate_events
from jobs.spark.session import stop_state_stores
from jobs.upkeep import compact, rebuild, repair, rescale
from tests.aws import copy_prefix, reach_from
from tests.helpers import DAY, catalog_rows, deliver, duckdb_rows, event, table_rows

EXAMPLES = int(os.environ.get("TORTURE_EXAMPLES", "3"))
STEPS = int(os.environ.get("TORTURE_STEPS", "12"))
SEED = os.environ.get("TORTURE_SEED", "1")  # "random": new sequences each run
HORIZON = timedelta(days=2)  # the ingest's default de-duplication horizon: copies within it collapse


class OperatorSequences(RuleBasedStateMachine):
    """The lake and landing zone of one sequence, and the oracle: every event delivered, by eventID, with its date."""

    spark: Any = None
    root: Path = Path()
    bucket: str | None = None  # a lake in S3 (moto's) under this bucket, each sequence's tables in a catalog of its own

    def __init__(self) -> None:
        super().__init__()
        name = f"seq-{time.monotonic_ns()}"
        folder = self.root / name
        self.name, self.landing, self.lake = name, folder / "landing", folder / "lake"
        (self.landing / "AWSLogs").mkdir(parents=True)
        self.catalog: str | None = None
        if self.bucket:
            self.lake, self.catalog = f"s3://{self.bucket}/{name}/lake", name.replace("-", "")  # pyiceberg reads "_" in a name as "-"
            sql = {"TYPE": "sql", "URI": f"sqlite:///{folder / 'catalog.db'}", "WAREHOUSE": f"s3://{self.bucket}/{name}/warehouse"}
            os.environ.update({f"PYICEBERG_CATALOG__{self.catalog.upper()}__{key}": value for key, value in sql.items()})
        else:
            self.lake.mkdir()  # as an operator makes it (make run): only the ingest makes a lake, the other commands need one
        self.made = not self.bucket  # a prefix is a lake once something is written under it
        self.clock = DAY + timedelta(hours=1)  # arrival time of the next delivery
        self.delivered: dict[str, str] = {}  # eventID -> event date, of every event delivered
        self.files: list[tuple[datetime, list[dict[str, Any]]]] = []  # each delivery: arrival, records
        self.expected: list[tuple[str, str]] = []  # the table after the last successful ingest
        # False after a kill, whether the run finished first or not: crash debris stays visible until the next run
        # sweeps. A precondition that read the kill's outcome (timing) would make hypothesis's draws differ on replay.
        self.clean = True
        self.ingested = False  # the lake exists: a run succeeded
        self.backups: list[Path] = []
        self.serial = 0
        self.log: list[str] = []
        self.mends: list[str] = []  # how each refusal after a restore was mended

    # What CloudTrail does.

    def _deliver(self, records: list[dict[str, Any]]) -> None:
        deliver(self.landing, records, self.clock)
        self.files.append((self.clock, records))
        self.clock += timedelta(minutes=20)

    def _events(self, n: int, start: datetime) -> list[dict[str, Any]]:
        self.serial += 1
        records = [event(f"s{self.serial}-{i}", start + timedelta(minutes=i)) for i in range(n)]
        self.delivered.update((r["eventID"], r["eventTime"][:10]) for r in records)
        return records

    @rule(n=st.integers(1, 6))
    def deliver_new(self, n: int) -> None:
        self.log.append(f"deliver_new({n})")
        self._deliver(self._events(n, self.clock - timedelta(minutes=30)))

    @rule(n=st.integers(1, 4), days=st.integers(1, 6))
    def deliver_late(self, n: int, days: int) -> None:
        self.log.append(f"deliver_late({n}, {days})")
        self._deliver(self._events(n, self.clock - timedelta(days=days)))

    @precondition(lambda self: bool(self.files))
    @rule(pick=st.integers(0, 1000))
    def redeliver(self, pick: int) -> None:
        """A copy of a delivery within the horizon of its first arrival (CloudTrail's at-least-once delivery)."""
        recent = [records for arrived, records in self.files if self.clock - arrived < HORIZON - timedelta(hours=6)]
        if recent:
            self.log.append("redeliver")
            self._deliver(recent[pick % len(recent)])

    @rule(hours=st.integers(1, 30))
    def time_passes(self, hours: int) -> None:
        self.log.append(f"time_passes({hours})")
        self.clock += timedelta(hours=hours)

    # What operators run.

    def _ingest(self) -> int:
        argv = ["--landing", str(self.landing), *self._lake_args(), "--settle", "0 seconds", "--max-files-per-trigger", "3"]
        try:
            return ingest_main(argv)
        finally:
            stop_state_stores(self.spark)  # as the run's process would

    def _lake_args(self) -> list[str]:
        return ["--lake", str(self.lake), *(["--catalog", self.catalog] if self.catalog else [])]

    @property
    def layout(self) -> Lake:
        return Lake.at(self.lake, self.catalog)

    def _ingested(self) -> None:
        assert self._ingest() == 0, self.log
        self.expected = sorted(self.delivered.items())
        self.clean = self.ingested = self.made = True

    @rule()
    def ingest(self) -> None:
        self.log.append("ingest")
        self._ingested()

    @rule(after=st.floats(0.5, 12))
    def ingest_killed(self, after: float) -> None:
        """A run killed with SIGKILL at a random moment (its own process); the next run takes up from there."""
        self.log.append(f"ingest_killed({after:.1f})")
        command = [sys.executable, "-m", "jobs.cloudtrail_ingest", "--landing", str(self.landing), *self._lake_args()]
        job = subprocess.Popen(
            [*command, "--settle", "0 seconds", "--max-files-per-trigger", "1"],
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            job.wait(timeout=after)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
        else:
            assert job.returncode == 0, self.log
        self.clean, self.made = False, self.made or self.layout.checkpoint.exists()

    @precondition(lambda self: self.clean and self.made)
    @rule()
    def compact(self) -> None:
        self.log.append("compact")
        assert compact.main([*self._lake_args(), "--closed-at", "2024-06-01"]) == 0, self.log

    @precondition(lambda self: self.clean and bool(self.expected))
    @rule(first=st.integers(0, 1000), span=st.integers(0, 2))
    def rebuild(self, first: int, span: int) -> None:
        dates = sorted({day for _, day in self.expected})
        start = datetime.fromisoformat(dates[first % len(dates)]).date()
        self.log.append(f"rebuild({start}, {span})")
        days = tuple(start + timedelta(days=n) for n in range(span + 1))
        run_id = f"rebuild-{self.serial}-{time.monotonic_ns()}"
        config = rebuild.RebuildConfig(str(self.landing), str(self.lake), days, run_id, catalog=self.catalog)
        assert rebuild.run(config, lambda: self.spark).status == "succeeded", self.log

    @precondition(lambda self: self.clean and self.made)
    @rule()
    def repair(self) -> None:
        self.log.append("repair")
        assert repair.main([*self._lake_args(), "--landing", str(self.landing)]) == 0, self.log

    @precondition(lambda self: self.clean and bool(self.expected))
    @rule(partitions=st.integers(1, 5))
    def rescale(self, partitions: int) -> None:
        self.log.append(f"rescale({partitions})")
        assert rescale.main([*self._lake_args(), "--state-partitions", str(partitions)]) == 0, self.log

    # A lake's copies. A copy of a lake in S3 to another prefix is a migration (jobs.migrate): its tables stay in the
    # catalog, which names the old prefix. Its backup is its prefix, its warehouse's and its catalog's entries.
    @precondition(lambda self: not self.bucket)
    @rule()
    def copy_lake(self) -> None:
        """The lake copied to another disk, and used there from now on."""
        self.log.append("copy_lake")
        copy = self.lake.parent / f"lake-{len(self.log)}"
        shutil.copytree(self.lake, copy, symlinks=True) if self.lake.exists() else None
        self.lake = copy

    @precondition(lambda self: self.clean and self.ingested)
    @rule()
    def back_up(self) -> None:
        self.log.append("back_up")
        backup = self.root / self.name / f"backup-{len(self.log)}"
        if self.bucket:
            for part in ("lake", "warehouse"):
                copy_prefix(self.bucket, f"{self.name}/{part}", f"{self.name}/{backup.name}/{part}")
            shutil.copyfile(self.root / self.name / "catalog.db", backup.with_suffix(".db"))
        else:
            shutil.copytree(self.lake, backup, symlinks=True)
        self.backups.append(backup)

    def _restore(self, part: str) -> None:
        """The newest backup's `checkpoint`, `tables` (with their catalog's entries) or `whole` lake put back."""
        backup = self.backups[-1]
        if not self.bucket:
            if part == "whole":
                shutil.rmtree(self.lake)
                shutil.copytree(backup, self.lake, symlinks=True)
            else:  # the checkpoints, or the tables of record with their catalog
                now, saved = (Lake(self.lake).checkpoints, Lake(backup).checkpoints) if part == "checkpoint" else (
                    Lake(self.lake).root / "iceberg", Lake(backup).root / "iceberg")  # fmt: skip
                shutil.rmtree(now, ignore_errors=True)
                shutil.copytree(saved, now, symlinks=True) if saved.exists() else None
            return
        parts = {"checkpoint": ["lake/_checkpoints"], "tables": ["warehouse"], "whole": ["lake", "warehouse"]}[part]
        for prefix in parts:
            storage.remove_tree(storage.at(f"s3://{self.bucket}/{self.name}/{prefix}"))
            copy_prefix(self.bucket, f"{self.name}/{backup.name}/{prefix}", f"{self.name}/{prefix}")
        if "warehouse" in parts:
            shutil.copyfile(backup.with_suffix(".db"), self.root / self.name / "catalog.db")

    def _mend(self, refused: int) -> None:
        """After a restore: the ingest refuses (2) or goes on (0); refused, `jobs.repair` mends it (or, when it
        refuses too, the whole lake comes back from the backup, as the refusal says), and the next ingest is exact."""
        assert refused in (0, 2), self.log
        if refused == 2:
            mended = repair.main([*self._lake_args(), "--landing", str(self.landing)])
            assert mended in (0, 2), self.log
            self.mends.append("repair" if mended == 0 else "whole lake")
            if mended == 2:
                self.log.append("restore the whole lake")
                self._restore("whole")
        self._ingested()

    @precondition(lambda self: self.clean and bool(self.backups))
    @rule()
    def restore_checkpoint(self) -> None:
        """The checkpoint alone put back from the newest backup."""
        self.log.append("restore_checkpoint")
        self._restore("checkpoint")
        self._mend(self._ingest())

    @precondition(lambda self: self.clean and bool(self.backups))
    @rule()
    def restore_tables(self) -> None:
        """The tables alone put back from the newest backup."""
        self.log.append("restore_tables")
        self._restore("tables")
        self._mend(self._ingest())

    # What readers elsewhere see: the Iceberg tables (jobs/publishing/command.py).

    def _publish(self) -> int:
        return publish.main([*self._lake_args(), "--orphan-grace", "0 seconds"])

    @precondition(lambda self: self.clean and self.ingested)
    @rule()
    def publish(self) -> None:
        """The gate on every date the lake holds, then a publish: the Iceberg table equals the oracle."""
        self.log.append("publish")
        layout = self.layout
        days = tuple(sorted({datetime.fromisoformat(day).date() for _, day in self.expected}))
        if days:
            self.spark.catalog.clearCache()  # the gate caches what it reads: one application per gate in production
            config = validate_events.ValidateConfig(layout, None, days, 0.5, layout.gate_report(f"seq-gate-{len(self.log)}"))
            assert validate_events.check(self.spark, config)["verdict"] == "passed", self.log
        assert self._publish() == 0, self.log
        assert self.published() == self.expected, self.log

    @precondition(lambda self: self.ingested)
    @rule(after=st.floats(0.3, 3))
    def publish_killed(self, after: float) -> None:
        """A publish killed with SIGKILL at a random moment (its own process): the next one completes it."""
        self.log.append(f"publish_killed({after:.1f})")
        job = subprocess.Popen([sys.executable, "-m", "jobs.publish", *self._lake_args()], start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            job.wait(timeout=after)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()

    def published(self) -> list[tuple[str, str]]:
        catalog = open_catalog(self.layout, self.catalog)
        if not catalog.table_exists("cloudtrail.events"):
            return []
        rows = catalog.load_table("cloudtrail.events").scan(selected_fields=("eventID", "event_date")).to_arrow().to_pylist()
        return sorted((row["eventID"], str(row["event_date"])) for row in rows)

    @invariant()
    def the_published_table_holds_each_event_once(self) -> None:
        """Whatever ran or died, readers of the Iceberg table never see an event twice or one never delivered."""
        if self.bucket or self.layout.iceberg_catalog.exists():
            seen = self.published()
            assert len({event_id for event_id, _ in seen}) == len(seen) and set(seen) <= set(self.delivered.items()), self.log

    @invariant()
    def the_table_equals_the_oracle(self) -> None:
        if not self.clean:
            return
        if self.bucket:  # read through its catalog by pyiceberg, and by Spark
            assert (catalog_rows(str(self.lake), self.catalog) if self.ingested else []) == self.expected, self.log
        else:
            assert duckdb_rows(self.lake) == self.expected, self.log
        if self.expected:
            assert table_rows(self.spark, self.lake, self.catalog) == self.expected, self.log


def test_generated_operator_sequences_keep_the_table_equal_to_the_oracle(spark, tmp_path, caplog):
    caplog.set_level(logging.CRITICAL)  # the refusals' lines: what matters is their exit codes
    OperatorSequences.spark, OperatorSequences.root = spark, tmp_path
    run_state_machine_as_test(
        OperatorSequences if SEED == "random" else seed(int(SEED))(OperatorSequences),
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
            print_blob=True,
        ),
    )


# Two sequences an operator's week could hold, every rule in them; each step followed by the invariant.
SCRIPTS = {
    "backups and restores": [
        ("deliver_new", {"n": 5}), ("deliver_late", {"n": 2, "days": 3}), ("ingest", {}), ("back_up", {}),
        ("deliver_new", {"n": 4}), ("redeliver", {"pick": 1}), ("ingest", {}), ("time_passes", {"hours": 20}),
        ("deliver_new", {"n": 3}), ("ingest", {}), ("compact", {}), ("restore_checkpoint", {}),
        ("deliver_new", {"n": 2}), ("ingest", {}), ("publish", {}), ("back_up", {}), ("deliver_new", {"n": 3}),
        ("ingest", {}), ("publish_killed", {"after": 1.5}), ("restore_tables", {}), ("repair", {}), ("publish", {}),
    ],
    "kills, copies, rebuilds and rescales": [
        ("deliver_new", {"n": 6}), ("deliver_new", {"n": 6}), ("deliver_late", {"n": 3, "days": 5}),
        ("ingest_killed", {"after": 9.0}), ("ingest", {}), ("copy_lake", {}), ("redeliver", {"pick": 0}),
        ("deliver_new", {"n": 2}), ("ingest", {}), ("rescale", {"partitions": 3}), ("redeliver", {"pick": 3}),
        ("ingest", {}), ("rebuild", {"first": 0, "span": 2}), ("time_passes", {"hours": 30}), ("deliver_new", {"n": 4}),
        ("ingest", {}), ("publish", {}), ("compact", {}), ("rebuild", {"first": 1, "span": 0}), ("publish_killed", {"after": 2.0}),
        ("copy_lake", {}), ("repair", {}), ("publish", {}),
    ],
}  # fmt: skip


def test_every_rule_is_scripted():
    scripted = {name for steps in SCRIPTS.values() for name, _ in steps}
    rules = {name for name, method in vars(OperatorSequences).items() if hasattr(method, "hypothesis_stateful_rule")}
    assert scripted == rules and len(rules) == 16


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_scripted_sequence_keeps_the_table_equal_to_the_oracle(spark, tmp_path, caplog, script):
    caplog.set_level(logging.CRITICAL)
    OperatorSequences.spark, OperatorSequences.root = spark, tmp_path
    machine = OperatorSequences()
    for name, arguments in SCRIPTS[script]:
        getattr(machine, name)(**arguments)
        machine.the_table_equals_the_oracle()
    machine.ingest()
    machine.the_table_equals_the_oracle()
    assert len(machine.expected) == len(machine.delivered) > 0
    if script == "backups and restores":
        assert machine.mends == ["repair", "repair"], "each restore was refused, then mended by jobs.repair"


# The rule a lake in S3 skips: a copy of its prefix leaves its tables in the catalog, which names the old prefix.
FOLDER_ONLY = {"copy_lake"}


def in_s3(spark, s3_lake: str, tmp_path: Path) -> type[OperatorSequences]:
    """The machine on lakes in S3 (moto's): each sequence's lake under the bucket, its tables in a catalog of its own."""
    reach_from(spark)
    bucket = s3_lake.removeprefix("s3://").split("/")[0]
    return type("InS3", (OperatorSequences,), {"spark": spark, "root": tmp_path, "bucket": bucket})


@pytest.mark.harness
@pytest.mark.parametrize("script", SCRIPTS)
def test_a_scripted_sequence_on_a_lake_in_s3_keeps_the_table_equal_to_the_oracle(spark, s3_lake, tmp_path, caplog, script):
    caplog.set_level(logging.CRITICAL)
    machine = in_s3(spark, s3_lake, tmp_path)()
    for name, arguments in SCRIPTS[script]:
        if name not in FOLDER_ONLY:
            getattr(machine, name)(**arguments)
            machine.the_table_equals_the_oracle()
            machine.the_published_table_holds_each_event_once()
    machine.ingest()
    machine.the_table_equals_the_oracle()
    assert len(machine.expected) == len(machine.delivered) > 0 and machine.published(), "published, and every event in"
    if script == "backups and restores":
        assert machine.mends == ["repair", "repair"], "each restore of a part of the lake in S3 was refused, then repaired"


@pytest.mark.harness
def test_generated_operator_sequences_on_a_lake_in_s3_keep_the_table_equal_to_the_oracle(spark, s3_lake, tmp_path, caplog):
    caplog.set_level(logging.CRITICAL)
    machine = in_s3(spark, s3_lake, tmp_path)
    run_state_machine_as_test(
        machine if SEED == "random" else seed(int(SEED))(machine),
        settings=settings(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, database=None,
                          suppress_health_check=list(HealthCheck), print_blob=True),
    )  # fmt: skip
