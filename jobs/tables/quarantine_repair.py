"""The quarantine's changes that need no Spark session of their own: a repair's rollback to a batch, and the staged
snapshot a rebuild that died after its swap left to be made current (jobs/tables/quarantine_table.py owns the table)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from jobs import storage
from jobs.iceberg.catalog import NAMESPACE, open_catalog
from jobs.iceberg.embedded import registered
from jobs.lake import QUARANTINE, Lake
from jobs.spark.logs import CheckpointError, local_path
from jobs.spark.state import WRITTEN_BY_BATCH
from jobs.tables.quarantine_files import quarantine_batch, quarantine_data_files
from jobs.tables.quarantine_table import STAGED, QuarantineTable
from jobs.tables.record_files import INGEST_BATCH
from jobs.tables.record_table import ROLLBACK

log = logging.getLogger("quarantine")


@dataclass(frozen=True)
class QuarantineRollback:
    """The quarantine put back as it stood after batch `through` (jobs/upkeep/repair.py): the data files the later
    batches wrote (TableWriter's names carry the batch) leave it in one snapshot."""

    lake: Lake
    through: int
    files: list[str]  # local paths

    @classmethod
    def plan(cls, lake: Lake, through: int, runs: frozenset[str]) -> QuarantineRollback | None:
        """None when the table holds no batch after `through`. A file naming no batch (a rebuild's, a moved-in
        folder's) that holds rows of the later batches' `runs` cannot be cut: CheckpointError."""
        held = quarantine_batch(lake)
        if held is None or held <= through or registered(lake, QUARANTINE) is None:
            return None

        from jobs.tables.sources import RUN_COLUMN  # pyarrow's: a repair's, not every ingest's import

        later, mixed = [], []
        for path in quarantine_data_files(lake):
            marked = WRITTEN_BY_BATCH.search(path.name)
            if marked and int(marked[1]) > through:
                later.append(str(path))
            elif not marked and runs and set(storage.read_parquet(path, [RUN_COLUMN]).column(RUN_COLUMN).to_pylist()) & runs:
                mixed.append(str(path))
        if mixed:
            raise CheckpointError(
                f"{mixed[0]} holds quarantine rows of the runs that wrote batches after {through} in a file that names no batch "
                "(a rebuild's): they cannot be told apart. Nothing was changed. Restore the whole lake from one backup "
                "(README, 'Recovering a checkpoint')."
            )
        return cls(lake, through, later)

    def apply(self, spark: Callable[[], SparkSession]) -> None:
        """The rollback, in one snapshot; a moved lake's table is registered where it is first (with `spark`'s session)."""
        entry = registered(self.lake, QUARANTINE)
        if entry is not None and entry.moved_from is not None:
            QuarantineTable(spark(), self.lake)
        table = open_catalog(self.lake, self.lake.catalog).load_table(f"{NAMESPACE}.{QUARANTINE}")
        gone = set(self.files)
        with table.transaction() as tx:
            if gone:
                with tx.update_snapshot(snapshot_properties={ROLLBACK: f"batch {self.through}"}).overwrite() as change:
                    for task in table.scan().plan_files():
                        if local_path(task.file.file_path) in gone:
                            change.delete_data_file(task.file)
            tx.set_properties({INGEST_BATCH: str(self.through)})


def publish_staged(lake: Lake, then: dict[str, Any]) -> None:
    """Make a rebuild's staged quarantine snapshot the table's current one (what its swap journal left to do:
    jobs/tables/partitions.py); nothing when it is already. No other commit can come between (the lake lock)."""
    snapshot = int(then[STAGED])
    entry = registered(lake, QUARANTINE)
    table = open_catalog(lake, lake.catalog).load_table(f"{NAMESPACE}.{QUARANTINE}") if entry and not entry.moved_from else None
    if table is None or table.snapshot_by_id(snapshot) is None:
        log.warning("a rebuild's staged quarantine (snapshot %d) is gone (the lake moved since): its reasons keep their rows", snapshot)
        return
    from pyiceberg.table.snapshots import ancestors_of

    if snapshot not in {found.snapshot_id for found in ancestors_of(table.current_snapshot(), table.metadata)}:
        table.manage_snapshots().set_current_snapshot(snapshot).commit()
