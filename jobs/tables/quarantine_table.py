"""The quarantine, an Apache Iceberg table of record: `cloudtrail.quarantine` in the lake's embedded catalog, at
<lake>/iceberg/warehouse/cloudtrail/quarantine/, partitioned by reason.

Every writer holds the lake lock:
- the ingest: a batch's quarantine files, which jobs/java/cloudtrail/TableWriter.java writes into the table's data
  folder, are committed through Iceberg's Java API as one snapshot naming the stream's query and the batch
  (`cloudtrail.query`, `cloudtrail.batch`), with the table property `cloudtrail.ingest-batch` (the newest batch
  committed) in the same commit: a batch replayed after a crash commits nothing twice. A read that replaces earlier
  quarantine rows (a file read again, a replay) removes the files holding them in that same snapshot, their other rows
  written again with the batch's: no reader sees a replaced row beside its replacement, nor neither.
- a rebuild: the reasons it changes, overwritten in one snapshot staged under its tag (`wap.id`) before its event
  partitions are swapped and made current after (its swap journal says so until then: a rebuild that dies between
  is finished by the next ingest or rebuild); a rollback undoes it in one snapshot.
- a repair: the table back as it stood after a batch (jobs/upkeep/repair.py).
A crashed batch's files, which no snapshot names, are no row of the table; the publish deletes them with the table's
expired snapshots (jobs/iceberg/upkeep.py). A lake an earlier release wrote keeps its quarantine folder
(<lake>/quarantine/) until the first command that opens the table moves its rows in; a lake moved to another path is
registered anew where it is, its files in place (jobs/tables/quarantine_files.py reads it meanwhile).
"""

from __future__ import annotations

import logging

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs import storage
from jobs.iceberg.spark_tables import calling, staged_by, staged_overwrite
from jobs.lake import QUARANTINE, REASON, Lake
from jobs.records.schema import QUARANTINE_SCHEMA
from jobs.spark.logs import sink_batch, sink_log
from jobs.storage import read_record, under
from jobs.tables.quarantine import RECORD_FORMAT
from jobs.tables.record_files import INGEST_BATCH
from jobs.tables.record_table import RecordTable
from jobs.tables.sweep import sweep_table

log = logging.getLogger("quarantine")

# The snapshot summaries naming a commit's origin.
MOVED_IN = "cloudtrail.moved-in"
# What a rebuild's swap journal holds for its staged quarantine snapshot (jobs/tables/partitions.py's `then`).
STAGED = "quarantine_snapshot"


class QuarantineTable(RecordTable):
    """The lake's quarantine table, through the session's Iceberg catalog: created on first use, an earlier release's
    folder moved in, a moved lake's table registered where it is."""

    table, schema, partition = QUARANTINE, QUARANTINE_SCHEMA, REASON

    def __init__(self, spark: SparkSession, lake: Lake, moving_from: Lake | None = None) -> None:
        super().__init__(spark, lake, moving_from)
        self.open()
        if lake.quarantine.is_dir():
            self._moved_in()

    def rows(self) -> DataFrame:
        return self.spark.table(self.name)

    def holding(self, replaced: Column) -> list[str]:
        """The data files holding a row `replaced` picks."""
        return sorted(row[0] for row in self.rows().where(replaced).select("_file").distinct().collect())

    def kept(self, files: list[str], replaced: Column) -> DataFrame:
        """The rows of `files` (data files of the table, each holding every column) that `replaced` does not pick."""
        return self.spark.read.schema(QUARANTINE_SCHEMA).parquet(*files).where(~replaced)

    def stage(self, rows: DataFrame, reasons: list[str], tag: str) -> int:
        """The `reasons` partitions replaced by `rows`, as a snapshot staged by rebuild `tag` (jobs/iceberg/spark_tables.py,
        as the derived tables stage theirs) that readers see only once `publish_staged` makes it current, after the
        rebuild's event partitions are swapped; its id."""
        replaced = F.col(REASON).isin(sorted(reasons))
        rows = rows.select(*QUARANTINE_SCHEMA.fieldNames())
        return staged_overwrite(self.name, rows, replaced, (REASON,), tag, self.lake, {}, create=False).snapshot_id

    def roll_back(self, tag: str) -> bool:
        """Undo what rebuild `tag` changed (its staged snapshot), in one snapshot; False when it changed nothing here."""
        return self.undo(lambda summary: staged_by(summary) == tag, tag)

    def _moved_in(self) -> None:
        """The rows of a quarantine folder an earlier release wrote, appended in one snapshot, then the folder moved to
        <lake>/_replaced/quarantine/folder/. A run that dies in between finds the snapshot and only moves the folder."""
        folder = self.lake.quarantine
        held = sink_batch(folder)
        done = self.spark.table(f"{self.name}.snapshots").where(F.col("summary")[MOVED_IN] == str(folder)).count()
        if not done:
            if sink_log(folder).is_dir():
                sweep_table(self.spark, self.lake, QUARANTINE, "moved-in")  # its uncommitted files, as the old ingest swept them
            gone = _pending_replacements(self.lake, held)
            found = storage.listed(folder, f"{REASON}=*/*.parquet")
            files = [str(p) for p in found if str(p) not in gone and not p.name.startswith(("_", "."))]
            if files:
                rows = self.spark.read.schema(QUARANTINE_SCHEMA).option("basePath", str(folder)).parquet(*files)
                with calling(self.name, "moving the quarantine folder in"):
                    rows.writeTo(self.name).option(f"snapshot-property.{MOVED_IN}", str(folder)).append()
        if held is not None and self.committed_batch() is None:  # the folder's log said which batches it holds
            self.java().updateProperties().set(INGEST_BATCH, str(held)).commit()
        aside = self.lake.replaced_tables(QUARANTINE) / "folder"
        aside.parent.mkdir(parents=True, exist_ok=True)
        storage.remove_tree(aside)
        storage.move(folder, aside)
        log.info("the quarantine folder's rows are in the Iceberg table %s; the folder moved to %s", self.name, aside)


def _pending_replacements(lake: Lake, held: int | None) -> set[str]:
    """Files an earlier release's batch replaced and did not move aside before it died (its commit made, the move not)."""
    gone: set[str] = set()
    for record in storage.listed(lake.replacements, "*.json"):
        if held is not None and int(record.stem) <= held:
            gone.update(read_record(record, RECORD_FORMAT, {1: under("files")})["files"])
        record.unlink()
    return gone
