"""Put the tables and the ledger back in step with the checkpoint, so that ingestion continues exactly.

    python -m jobs.repair --lake DIR|s3://BUCKET/PREFIX [--catalog NAME] --landing DIR [--dry-run]

The ingest refuses (exit 2) a checkpoint older than the tables: one restored from a backup on
its own, one whose newest batches were deleted by hand. Its next batches would reuse batch ids
the tables have committed, and their rows would be lost. This command puts each table back as
it stood after the checkpoint's last planned batch: the events' data files of the later batches
move to <lake>/_replaced/events/repair-<time>/ and its commit log is written again as it stood
then; the quarantine's leave its Iceberg table in one snapshot. An events file that names no
batch (a compaction's, a rebuild's) loses the rows the runs that wrote those batches wrote,
known from the runs' reports (a quarantine file that names none holding such rows is refused).
The landing files those batches read are not taken in the checkpoint's ledger (or their batch
is replayed), so the next ingest reads them again, once, de-duplicated against the
checkpoint's own state. First it checks that each of those landing files is still there: if one
is gone (a lifecycle rule), it changes nothing and names it.

The ingest refuses tables older than the checkpoint too (put back from an older backup): the rows of the batches
after theirs are missing and no run would read their files again. This command puts the checkpoint back to the
newest batch every table holds (its later offsets, commits and state versions deleted), when it still keeps that
batch's de-duplication state (the last 3 batches) and the later batches' landing files are there; the next ingest
reads them again, once, on the state that batch left.

The ingest also refuses when manifests of the ledger that batches read are gone (deleted by hand,
a partial restore): the files they named would be taken again. This command finds those files
again from the tables: a landing file the ledger does not hold is taken when every record of it
is in the events table (by eventID) or it is named in the quarantine, and is written into the
newest lost manifest; every other file is left for the next ingest, which reads it once. It
prints what it found and did.
Exit codes (jobs/cli.py): 0 repaired or nothing to repair, 2 cannot be repaired exactly, 75 the lake is busy.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from jobs import cli, storage
from jobs.lake import EVENTS, QUARANTINE, Lake
from jobs.landing.layout import relative
from jobs.ledger.store import read_manifest
from jobs.lock import LakeLock
from jobs.reporting.report import written_batches
from jobs.spark.checkpoint import forget_batch
from jobs.spark.logs import CheckpointError, last_commit, planned_batch_id, read_source_log, source_offset
from jobs.spark.session import spark_session
from jobs.spark.state import WRITTEN_BY_BATCH, missing_for_rollback, rollback_checkpoint
from jobs.storage import LakePath
from jobs.tables.events import all_files, events_batch
from jobs.tables.events_table import EventsTable
from jobs.tables.quarantine_files import quarantine_batch
from jobs.tables.quarantine_repair import QuarantineRollback
from jobs.tables.record_table import ROLLBACK
from jobs.tables.sources import RUN_COLUMN, landing_files
from jobs.upkeep.repair_ledger import plan_ledger

log = logging.getLogger("cloudtrail_repair")


@dataclass(frozen=True)
class RepairConfig:
    lake: Lake
    landing: Path
    dry_run: bool = False
    lock_wait: float = 0


def parse_args(argv: list[str] | None = None) -> RepairConfig:
    parser = cli.parser("repair", __doc__)
    cli.add_lake(parser)
    cli.add_catalog(parser, namespace=False)
    cli.add_landing(parser)
    cli.add_lock_wait(parser)
    parser.add_argument("--dry-run", action="store_true", help="print what would be done, change nothing")
    args = parser.parse_args(argv)
    lake = cli.lake(parser, args, existing=True)
    cli.required(parser, args, "landing")
    return RepairConfig(lake, Path(args.landing).absolute(), args.dry_run, args.lock_wait)


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    return cli.run(lambda: repair(config))


def repair(config: RepairConfig) -> int:
    with LakeLock(config.lake, "a repair", wait_seconds=config.lock_wait):
        behind = plan_checkpoint(config.lake, config.landing)
        found = plan_repair(config.lake, behind.through if behind else planned_batch_id(config.lake.checkpoint))
        lost = plan_ledger(config.lake, config.landing)
        print(json.dumps({**behind_summary(behind), **summary(found), **({"ledger": lost.summary()} if lost else {})}, indent=2))
        if not behind and not found and not lost:
            log.info("the tables and the checkpoint %s agree and no manifest is lost: nothing to repair", config.lake.checkpoint)
            return cli.OK
        check_landing(found, config.landing)
        if not config.dry_run:
            if behind:
                behind.apply(config.lake)
            apply(config.lake, found)
            if lost:
                lost.apply(config.lake)
    return cli.OK


@dataclass(frozen=True)
class CheckpointRepair:
    """The tables are older than the checkpoint (put back from an older backup): the checkpoint goes back to the newest
    batch every table holds, and the next ingest runs the later batches' manifests again, once, on the state that
    batch left. A table holding more (the other one) is then rolled back to it like any table ahead."""

    through: int
    committed: int

    def apply(self, lake: Lake) -> None:
        rollback_checkpoint(lake.checkpoint, self.through)
        forget_batch(lake.checkpoint)
        log.info("checkpoint back from batch %d to %d: the next ingest reads the later batches again", self.committed, self.through)


def plan_checkpoint(lake: Lake, landing: Path) -> CheckpointRepair | None:
    """How to put the checkpoint back to the tables when they are older than it; None when they are not. Refused when
    the checkpoint no longer keeps that batch's state, or a landing file of the batches to run again is gone."""
    committed = last_commit(lake.checkpoint).batch_id
    if committed is None:
        return None
    held = [events_batch(lake), quarantine_batch(lake)]
    through = min(-1 if batch is None else batch for batch in held)
    if through >= committed:
        return None
    missing = missing_for_rollback(lake.checkpoint, through) if through >= 0 else ["a table with no batch at all"]
    if missing:
        raise CheckpointError(
            f"the tables stop at batch {through}, older than the checkpoint's {committed}, and the checkpoint no longer keeps "
            f"what going back to it needs ({', '.join(missing[:3])}): its de-duplication state keeps the last 3 batches. Nothing was "
            "changed. Restore the whole lake (tables and checkpoint) from one backup (README, 'Recovering a checkpoint')."
        )
    offset = source_offset(lake.checkpoint, through)
    again = [e.path for e in read_source_log(lake.checkpoint, lake.manifests).entries if offset is None or e.batch_id > offset]
    files = [entry.path for path in again if storage.at(path).exists() for entry in read_manifest(storage.at(path)).entries]
    gone = sorted(path for path in files if not (landing / relative(path)).exists())
    if gone:
        raise CheckpointError(
            f"{len(gone)} landing files of the batches after {through}, which the tables lack, are gone ({', '.join(gone[:3])}): "
            "going back would not find their events again. Nothing was changed. Restore the whole lake from one backup "
            "(README, 'Recovering a checkpoint')."
        )
    return CheckpointRepair(through, committed)


def behind_summary(behind: CheckpointRepair | None) -> dict[str, object]:
    return {"checkpoint": {"back_to_batch": behind.through, "from_batch": behind.committed}} if behind else {}


@dataclass(frozen=True)
class TableRepair:
    through: int
    files: list[LakePath]  # the data files of the later batches
    # Files that name no batch (a compaction's, a rebuild's) holding rows of the later batches: those rows go.
    mixed: dict[LakePath, int]
    runs: frozenset[str]  # the ingest runs that wrote the later batches


def plan_repair(lake: Lake, planned: int | None) -> dict[str, TableRepair | QuarantineRollback]:
    """Per table ahead of the checkpoint, how to roll it back to the checkpoint's last planned batch (`planned`)."""
    through = -1 if planned is None else planned
    found: dict[str, TableRepair | QuarantineRollback] = {}
    held = events_batch(lake)
    if held is not None and held > through:
        files = sorted(all_files(lake))
        found[EVENTS] = TableRepair(through, later_files(files, through), *mixed_files(files, *later_runs(lake, through)))
    quarantine = QuarantineRollback.plan(lake, through, later_runs(lake, through)[0])
    if quarantine is not None:
        found[QUARANTINE] = quarantine
    return found


def later_runs(lake: Lake, through: int) -> tuple[frozenset[str], frozenset[str]]:
    """The ingest runs that wrote batches after `through` (their reports list the batches they wrote), and those of them
    that also wrote batches up to it."""
    batches: dict[str, list[int]] = {}
    for run_id, batch in written_batches(lake):
        batches.setdefault(run_id, []).append(batch["batch_id"])
    later = {run_id for run_id, ids in batches.items() if max(ids) > through}
    return frozenset(later), frozenset(run_id for run_id in later if min(batches[run_id]) <= through)


def mixed_files(files: list[LakePath], runs: frozenset[str], both: frozenset[str]) -> tuple[dict[LakePath, int], frozenset[str]]:
    """The data files among `files` that name no batch and hold rows the later batches' runs wrote, with how many. A run
    that wrote batches on both sides of the checkpoint cannot be told apart there: CheckpointError."""
    mixed = {}
    for path in files:
        if WRITTEN_BY_BATCH.search(path.name) or not runs:
            continue
        column = storage.read_parquet(path, [RUN_COLUMN]).column(RUN_COLUMN).to_pylist()
        written = [run for run in column if run in runs]
        if set(written) & both:
            raise CheckpointError(
                f"{path} holds rows of run {sorted(set(written) & both)[0]}, which wrote batches on both sides of the checkpoint: "
                "which of them the checkpoint lacks cannot be told in a file that names no batch (a compaction's). Nothing "
                "was changed. Restore the whole lake from one backup (README, 'Recovering a checkpoint')."
            )
        if written:
            mixed[path] = len(written)
    return mixed, runs


def later_files(files: list[LakePath], through: int) -> list[LakePath]:
    """The data files among `files` of the batches after `through` (TableWriter's names carry the batch); with no batch
    kept, every one."""
    return [path for path in files if through < 0 or ((marked := WRITTEN_BY_BATCH.search(path.name)) and int(marked[1]) > through)]


def check_landing(found: dict[str, TableRepair | QuarantineRollback], landing: Path) -> None:
    """Refuse when a landing file the rolled-back rows came from is gone: the next run could not read it again."""
    read = {path for table, repair in found.items() for path in landing_files(table, [storage.at(f) for f in repair.files])}
    read |= {
        path
        for table, repair in found.items()
        if isinstance(repair, TableRepair)
        for path in landing_files(table, repair.mixed, repair.runs)
    }
    gone = sorted(path for path in read if not (landing / relative(path)).exists())
    if gone:
        raise CheckpointError(
            f"{len(gone)} landing files that the rows to roll back came from are gone ({', '.join(gone[:3])}"
            f"{', ...' if len(gone) > 3 else ''}): rolling back would lose their events. Nothing was changed. "
            "Restore the whole lake from one backup instead (README, 'Recovering a checkpoint')."
        )


def apply(lake: Lake, found: dict[str, TableRepair | QuarantineRollback]) -> None:
    """Each table put back, in one snapshot: the events' later data files out, the files naming no batch rewritten
    without the later runs' rows; the quarantine's later batches out."""
    tag = "repair-" + datetime.now(tz=UTC).strftime("%Y%m%dT%H%M%S%fZ")
    for name, repair in found.items():
        if isinstance(repair, QuarantineRollback):
            repair.apply(lambda: spark_session("cloudtrail_repair"))
            log.info("%s rolled back to batch %d: %d data files of the later batches left it", name, repair.through, len(repair.files))
            continue
        events = EventsTable(spark_session("cloudtrail_repair"), lake)
        folder = storage.at(events.data_folder) / tag
        rewritten = [str(without_runs(path, repair.runs, folder / path.parent.name / path.name)) for path in repair.mixed]
        gone = [str(path) for path in [*repair.files, *repair.mixed]]
        events.commit(events.java(), rewritten, gone, {ROLLBACK: f"batch {repair.through}"}, str(repair.through))
        log.info(
            "%s rolled back to batch %d: %d data files of the later batches left it, their rows taken out of %d more",
            name, repair.through, len(repair.files), len(repair.mixed),
        )  # fmt: skip


def without_runs(path: LakePath, runs: frozenset[str], target: LakePath) -> LakePath:
    """A data file's rows but those `runs` wrote, written to `target`."""
    rows = storage.read_parquet(path)
    kept = rows.filter(pc.invert(pc.is_in(rows[RUN_COLUMN], value_set=pa.array(sorted(runs), pa.string()))))
    return storage.write_parquet(kept, target, compression="zstd")


def summary(found: dict[str, TableRepair | QuarantineRollback]) -> dict[str, object]:
    return {
        name: {
            "back_to_batch": repair.through,
            "data_files": len(repair.files),
            "rows_out_of_files_naming_no_batch": sum(repair.mixed.values()) if isinstance(repair, TableRepair) else 0,
            "landing_files": len(landing_files(name, [storage.at(f) for f in repair.files])),
        }
        for name, repair in found.items()
    }
