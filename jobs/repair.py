"""Put the tables back in step with an older checkpoint, so that ingestion continues exactly.

    python -m jobs.repair --lake DIR --landing DIR [--dry-run]

The ingest refuses (exit 2) a checkpoint older than the tables: one restored from a backup on
its own, one whose newest batches were deleted by hand. Its next batches would reuse batch ids
the tables have committed, and their rows would be lost. This command puts each table back as
it stood after the checkpoint's last planned batch: the data files of the later batches move to
<lake>/_replaced/<table>/repair-<time>/, and the table's commit log is written again as it stood
then. The landing files those batches read are not taken in the checkpoint's ledger (or their
batch is replayed), so the next ingest reads them again, once, de-duplicated against the
checkpoint's own state. First it checks that each of those landing files is still there: if one
is gone (a lifecycle rule), it changes nothing and names it. It prints what it found and did.
Exit codes (jobs/cli.py): 0 repaired or nothing to repair, 2 cannot be repaired exactly, 75 the lake is busy.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq

from jobs import cli
from jobs.lake import QUARANTINE, TABLES, Lake, LakeLock, in_table
from jobs.landing import relative
from jobs.spark_logs import WRITTEN_BY_BATCH, CheckpointError, SinkRollback, local_path, planned_batch_id, sink_rollback
from jobs.sweep import data_files

log = logging.getLogger("cloudtrail_repair")

# The column that names a row's landing file, per table.
SOURCE_COLUMN = {QUARANTINE: "source_file"}
DEFAULT_SOURCE_COLUMN = "_source_file"


@dataclass(frozen=True)
class RepairConfig:
    lake: Lake
    landing: Path
    dry_run: bool = False
    lock_wait: float = 0


def parse_args(argv: list[str] | None = None) -> RepairConfig:
    parser = cli.parser("repair", __doc__)
    cli.add_lake(parser)
    cli.add_landing(parser)
    cli.add_lock_wait(parser)
    parser.add_argument("--dry-run", action="store_true", help="print what would be done, change nothing")
    args = parser.parse_args(argv)
    cli.required(parser, args, "lake", "landing")
    return RepairConfig(Lake.at(args.lake), Path(args.landing).absolute(), args.dry_run, args.lock_wait)


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    return cli.run(lambda: repair(config))


def repair(config: RepairConfig) -> int:
    with LakeLock(config.lake, "a repair", wait_seconds=config.lock_wait):
        found = plan(config.lake)
        print(json.dumps(summary(found), indent=2))
        if not found:
            log.info("the tables are not ahead of the checkpoint %s: nothing to repair", config.lake.checkpoint)
            return cli.OK
        check_landing(found, config.landing)
        if not config.dry_run:
            apply(config.lake, found)
    return cli.OK


@dataclass(frozen=True)
class TableRepair:
    rollback: SinkRollback
    files: list[Path]  # the data files of the later batches, where they are now


def plan(lake: Lake) -> dict[str, TableRepair]:
    """Per table ahead of the checkpoint, how to roll it back to the checkpoint's last planned batch."""
    planned = planned_batch_id(lake.checkpoint)
    through = -1 if planned is None else planned
    found = {}
    for name in TABLES:
        rollback = sink_rollback(lake.table(name), through)
        if rollback is not None:
            found[name] = TableRepair(rollback, later_files(lake.table(name), rollback))
    return found


def later_files(table: Path, rollback: SinkRollback) -> list[Path]:
    """The data files of the batches after `rollback.through`: those the log lists, and those that aged out of it
    (TableWriter's names carry the batch); with no batch kept, every data file of the table."""
    files = {table / in_table(path) for path in rollback.later}  # the log names the path the lake had then
    for path in data_files(table):
        marked = WRITTEN_BY_BATCH.search(path.name)
        if rollback.through < 0 or (marked and int(marked[1]) > rollback.through):
            files.add(path)
    return sorted(path for path in files if path.exists())


def landing_files(table: str, repair: TableRepair) -> set[str]:
    """The landing files the rows of the later batches came from."""
    column = SOURCE_COLUMN.get(table, DEFAULT_SOURCE_COLUMN)
    found: set[str] = set()
    for path in repair.files:
        found.update(local_path(value) for value in pq.read_table(path, columns=[column]).column(column).to_pylist() if value)
    return found


def check_landing(found: dict[str, TableRepair], landing: Path) -> None:
    """Refuse when a landing file the rolled-back rows came from is gone: the next run could not read it again."""
    read = {path for table, repair in found.items() for path in landing_files(table, repair)}
    gone = sorted(path for path in read if not (landing / relative(path)).exists())
    if gone:
        raise CheckpointError(
            f"{len(gone)} landing files that the rows to roll back came from are gone ({', '.join(gone[:3])}"
            f"{', ...' if len(gone) > 3 else ''}): rolling back would lose their events. Nothing was changed. "
            "Restore the whole lake from one backup instead (README, 'Recovering a checkpoint')."
        )


def apply(lake: Lake, found: dict[str, TableRepair]) -> None:
    """Each log first, then its later data files aside: a repair that dies between them leaves files the next sweep moves."""
    tag = "repair-" + datetime.now(tz=UTC).strftime("%Y%m%dT%H%M%S%fZ")
    for name, repair in found.items():
        table, aside = lake.table(name), lake.replaced(lake.table(name), tag)
        repair.rollback.apply()
        for path in repair.files:
            moved = aside / path.relative_to(table)
            moved.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(path, moved)
        log.info("%s rolled back to batch %d: %d data files moved to %s", name, repair.rollback.through, len(repair.files), aside)


def summary(found: dict[str, TableRepair]) -> dict[str, object]:
    return {
        name: {"back_to_batch": repair.rollback.through, "data_files": len(repair.files), "landing_files": len(landing_files(name, repair))}
        for name, repair in found.items()
    }


if __name__ == "__main__":
    raise SystemExit(main())
