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
import os
import shutil
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs import cli
from jobs.files import read_record, under
from jobs.iceberg.catalog import NAMESPACE, OWNER, TABLE_PROPERTIES, owned_by_another
from jobs.iceberg.embedded import Registered, registered, static_table
from jobs.iceberg.spark_tables import calling, staged_by, staged_overwrite, use_catalog
from jobs.lake import QUARANTINE, REASON, Lake, partition_value
from jobs.records.schema import QUARANTINE_SCHEMA
from jobs.spark.logs import local_path, sink_batch, sink_log
from jobs.spark.sinks import classic_jvm
from jobs.tables.quarantine import RECORD_FORMAT
from jobs.tables.quarantine_files import INGEST_BATCH, quarantine_location
from jobs.tables.sweep import sweep_table

log = logging.getLogger("quarantine")

# The snapshot summaries naming a commit's origin.
QUERY, BATCH, ROLLBACK, MOVED_IN = "cloudtrail.query", "cloudtrail.batch", "cloudtrail.rollback", "cloudtrail.moved-in"
# What a rebuild's swap journal holds for its staged quarantine snapshot (jobs/tables/partitions.py's `then`).
STAGED = "quarantine_snapshot"
NAME_MAPPING = "schema.name-mapping.default"
# The name a moved lake's table is registered under before it takes the table's.
REGISTERING = f"{QUARANTINE}_registering"
# Only the lake's commands write it, one at a time under the lake lock; a publish's expiry may overtake a commit.
# A rebuild stages its snapshot (`stage`).
PROPERTIES = TABLE_PROPERTIES | {"commit.retry.num-retries": "4", "write.wap.enabled": "true"}


class RollbackRefused(cli.Refused):
    """A rebuild's quarantine cannot be rolled back: the files it replaced expired with their snapshots."""


class QuarantineTable:
    """The lake's quarantine table, through the session's Iceberg catalog: created on first use, an earlier release's
    folder moved in, a moved lake's table registered where it is."""

    def __init__(self, spark: SparkSession, lake: Lake) -> None:
        self.spark, self.lake = spark, lake
        catalog = use_catalog(spark, lake, None)
        self.name = f"{catalog}.{NAMESPACE}.{QUARANTINE}"
        self.location = quarantine_location(lake)
        # Iceberg's own catalog behind Spark's: opened, created and claimed with no Spark job and no pyiceberg.
        lake.iceberg_warehouse.mkdir(parents=True, exist_ok=True)  # where the embedded catalog's file goes, and the table
        self.catalog = spark._jsparkSession.sessionState().catalogManager().catalog(catalog).icebergCatalog()
        iceberg = classic_jvm(spark).org.apache.iceberg
        self.identifier = iceberg.catalog.TableIdentifier.parse(f"{NAMESPACE}.{QUARANTINE}")
        self.registering = iceberg.catalog.TableIdentifier.parse(f"{NAMESPACE}.{REGISTERING}")
        entry = registered(lake, QUARANTINE)
        if entry is not None and entry.moved_from is not None:
            self._registered_here(entry)
        with calling(self.name, "opening the table"):
            if not self.catalog.tableExists(self.identifier) and self.catalog.tableExists(self.registering):
                self.catalog.renameTable(self.registering, self.identifier)  # a registration's last step
            elif not self.catalog.tableExists(self.identifier):
                self._create(self.identifier)
            else:
                self._claim()
        if lake.quarantine.is_dir():
            self._moved_in()

    def _create(self, identifier: Any) -> None:
        """The table, in one commit: its schema, partitioned by reason, at the lake's location, owned by the lake."""
        jvm = classic_jvm(self.spark)
        iceberg, namespace = jvm.org.apache.iceberg, identifier.namespace()
        if not self.catalog.namespaceExists(namespace):
            self.catalog.createNamespace(namespace)
        schema = iceberg.spark.SparkSchemaUtil.convert(jvm.org.apache.spark.sql.types.DataType.fromJson(QUARANTINE_SCHEMA.json()))
        properties = jvm.java.util.HashMap()
        for key, value in (PROPERTIES | {OWNER: self.lake.location}).items():
            properties.put(key, value)
        spec = iceberg.PartitionSpec.builderFor(schema).identity(REASON).build()
        created = self.catalog.newCreateTableTransaction(identifier, schema, spec, self.location, properties)
        # TableWriter's files carry no Iceberg field ids: every reader maps their columns by name.
        mapping = iceberg.mapping.NameMappingParser.toJson(iceberg.mapping.MappingUtil.create(created.table().schema()))
        created.updateProperties().set(NAME_MAPPING, mapping).commit()
        created.commitTransaction()

    def _claim(self) -> None:
        """The table is this lake's (`cloudtrail.lake`), or the command is refused (jobs/iceberg/catalog.py)."""
        table = self.java()
        owner = table.properties().get(OWNER)
        if owner is None:
            table.updateProperties().set(OWNER, self.lake.location).commit()
        elif owner != self.lake.location:
            raise owned_by_another(self.name, str(owner), self.lake)

    def java(self) -> Any:
        """The table as Iceberg's Java API has it now."""
        return self.catalog.loadTable(self.identifier)

    @property
    def data_folder(self) -> str:
        """Where the table's data files go (TableWriter writes a batch's there, a folder per reason)."""
        return f"{self.location}/data"

    def committed_batch(self) -> int | None:
        """The newest ingest batch the table holds."""
        value = self.java().properties().get(INGEST_BATCH)
        return None if value is None else int(value)

    def rows(self) -> DataFrame:
        return self.spark.table(self.name)

    def holding(self, replaced: Column) -> list[str]:
        """The data files holding a row `replaced` picks."""
        return sorted(row[0] for row in self.rows().where(replaced).select("_file").distinct().collect())

    def kept(self, files: list[str], replaced: Column) -> DataFrame:
        """The rows of `files` (data files of the table, each holding every column) that `replaced` does not pick."""
        return self.spark.read.schema(QUARANTINE_SCHEMA).parquet(*files).where(~replaced)

    def commit_batch(self, query_id: str, batch_id: int, files: list[str], replaced: list[str]) -> None:
        """One commit: the batch's files added and the `replaced` ones removed (a snapshot, when there are any), and the
        batch recorded as the newest the table holds."""
        with calling(self.name, f"committing batch {batch_id}"):
            _commit(self.spark, self.java(), files, replaced, {QUERY: query_id, BATCH: str(batch_id)}, str(batch_id))

    def stage(self, rows: DataFrame, reasons: list[str], tag: str) -> int:
        """The `reasons` partitions replaced by `rows`, as a snapshot staged by rebuild `tag` (jobs/iceberg/spark_tables.py,
        as the derived tables stage theirs) that readers see only once `publish_staged` makes it current, after the
        rebuild's event partitions are swapped; its id."""
        replaced = F.col(REASON).isin(sorted(reasons))
        rows = rows.select(*QUARANTINE_SCHEMA.fieldNames())
        return staged_overwrite(self.name, rows, replaced, (REASON,), tag, self.lake, {}, create=False).snapshot_id

    def roll_back(self, tag: str) -> bool:
        """Undo what rebuild `tag` changed, in one snapshot (`cloudtrail.rollback`): the files it added and the table still
        holds go, those it removed come back; rows other commits added since stay. False when it changed nothing here."""
        table = self.java()
        summaries = [(snapshot, dict(snapshot.summary())) for snapshot in table.snapshots()]
        if any(summary.get(ROLLBACK) == tag for _, summary in summaries):
            return True  # rolled back already, by a run that stopped after
        staged = [snapshot for snapshot, summary in summaries if staged_by(summary) == tag]
        current = table.currentSnapshot()
        snapshots = classic_jvm(self.spark).org.apache.iceberg.util.SnapshotUtil
        if not staged or current is None or not snapshots.isAncestorOf(table, current.snapshotId(), staged[-1].snapshotId()):
            return False
        io, added, removed = table.io(), staged[-1].addedDataFiles(table.io()), staged[-1].removedDataFiles(table.io())
        back = list(removed)
        gone = [str(f.location()) for f in back if not io.newInputFile(f.location()).exists()]
        if gone:
            raise RollbackRefused(f"{self.name}: the quarantine as it stood before {tag} expired ({gone[0]} is gone): not rolled back")
        with calling(self.name, f"rolling back {tag}"):
            change = table.newOverwrite()
            for data_file in _current(table, {str(f.location()) for f in added}):
                change = change.deleteFile(data_file)
            for data_file in back:
                change = change.addFile(data_file)
            change.set(ROLLBACK, tag).commit()
        return True

    def _registered_here(self, entry: Registered) -> None:
        """A table whose metadata names the lake's old path (the lake moved, or is a copy): registered anew at the lake's
        path under a name of its own, its current files in place and its ingest batch kept, then put in the old entry's
        place. A run that dies before that finds the old entry and starts over; one that dies in between finds the new
        table alone and gives it its name (`_opened`)."""
        old = static_table(self.lake, entry)
        files = [entry.mapped(task.file.file_path, self.lake) for task in old.scan().plan_files()] if old.current_snapshot() else []
        with calling(self.name, "registering the moved table"):
            if self.catalog.tableExists(self.registering):
                self.catalog.dropTable(self.registering, False)  # an earlier try's: only its entry goes, its files are these
            self._create(self.registering)
            table = self.catalog.loadTable(self.registering)
            _commit(self.spark, table, files, [], {MOVED_IN: entry.moved_from or ""}, old.properties.get(INGEST_BATCH))
            self.catalog.dropTable(self.identifier, False)  # only its entry: its files are the new table's
            self.catalog.renameTable(self.registering, self.identifier)
        log.warning("the lake moved from %s: its quarantine table is registered again at %s", entry.moved_from, self.location)

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
            found = sorted(folder.glob(f"{REASON}=*/*.parquet"))
            files = [str(p) for p in found if str(p) not in gone and not p.name.startswith(("_", "."))]
            if files:
                rows = self.spark.read.schema(QUARANTINE_SCHEMA).option("basePath", str(folder)).parquet(*files)
                with calling(self.name, "moving the quarantine folder in"):
                    rows.writeTo(self.name).option(f"snapshot-property.{MOVED_IN}", str(folder)).append()
        if held is not None and self.committed_batch() is None:  # the folder's log said which batches it holds
            self.java().updateProperties().set(INGEST_BATCH, str(held)).commit()
        aside = self.lake.replaced_tables(QUARANTINE) / "folder"
        aside.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(aside, ignore_errors=True)
        os.replace(folder, aside)
        log.info("the quarantine folder's rows are in the Iceberg table %s; the folder moved to %s", self.name, aside)


def _commit(spark: SparkSession, table: Any, files: list[str], replaced: list[str], summary: dict[str, str], batch: str | None) -> None:
    """`files` added to `table` (Iceberg's Java API) and `replaced` removed, in one snapshot stating `summary`, and the
    table property of the newest ingest batch set to `batch` in the same commit."""
    transaction = table.newTransaction()
    if files or replaced:
        change = transaction.newOverwrite() if replaced else transaction.newAppend()
        for data_file in _data_files(spark, table, files):
            change = change.addFile(data_file) if replaced else change.appendFile(data_file)
        for data_file in _current(table, set(replaced)):
            change = change.deleteFile(data_file)
        for key, value in summary.items():
            change = change.set(key, value)
        change.commit()
    if batch is not None:
        transaction.updateProperties().set(INGEST_BATCH, batch).commit()
    transaction.commitTransaction()


def _data_files(spark: SparkSession, table: Any, paths: list[str]) -> list[Any]:
    """Manifest entries for Parquet files in the table's partition folders, from their footers (no field ids: the
    table's name mapping maps their columns)."""
    jvm = classic_jvm(spark)
    iceberg = jvm.org.apache.iceberg
    mapping = iceberg.mapping.NameMappingParser.fromJson(table.properties().get(NAME_MAPPING))
    metrics = iceberg.MetricsConfig.forTable(table)
    found = []
    for path in paths:
        source = table.io().newInputFile(path)
        values = jvm.java.util.List.of(partition_value(Path(local_path(path)).parent))
        found.append(
            iceberg.DataFiles.builder(table.spec()).withInputFile(source).withFormat(iceberg.FileFormat.PARQUET)
            .withPartitionValues(values).withMetrics(iceberg.parquet.ParquetUtil.fileMetrics(source, metrics, mapping)).build()
        )  # fmt: skip
    return found


def _current(table: Any, paths: set[str]) -> list[Any]:
    """The current data files among `paths`, as the table's manifests hold them."""
    if not paths:
        return []
    found, tasks = [], table.newScan().planFiles().iterator()
    while tasks.hasNext():
        data_file = tasks.next().file()
        if str(data_file.location()) in paths:
            found.append(data_file)
    return found


def _pending_replacements(lake: Lake, held: int | None) -> set[str]:
    """Files an earlier release's batch replaced and did not move aside before it died (its commit made, the move not)."""
    gone: set[str] = set()
    for record in sorted(lake.replacements.glob("*.json")) if lake.replacements.is_dir() else []:
        if held is not None and int(record.stem) <= held:
            gone.update(read_record(record, RECORD_FORMAT, {1: under("files")})["files"])
        record.unlink()
    return gone
