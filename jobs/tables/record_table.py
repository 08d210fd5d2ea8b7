"""A table of record: an Apache Iceberg table of the lake's embedded catalog that the lake's commands write through
Iceberg's Java API behind Spark's catalog (no Spark job, no pyiceberg on the ingest's path), one writer at a time
under the lake lock: the events (jobs/tables/events_table.py) and the quarantine (jobs/tables/quarantine_table.py).

Files are written by jobs/java/cloudtrail/TableWriter.java (a batch's) or by Spark (a rebuild's, a compaction's) into
the table's data folder, a folder per partition value, and become the table's rows only when a commit names them:
files of a crashed write are no row of it, and go with the table's orphans (jobs/iceberg/upkeep.py). An ingest batch
commits as one snapshot naming the stream's query and the batch (`cloudtrail.query`, `cloudtrail.batch`), with the
table property `cloudtrail.ingest-batch` (the newest batch committed) in the same commit: a batch replayed after a
crash commits nothing twice. A table written on a branch (the events' `ingest`, which readers of the catalog do not
see until a gate passes its dates) takes every commit there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from jobs import cli, storage
from jobs.iceberg.catalog import NAMESPACE, OWNER, TABLE_PROPERTIES, owned_by_another
from jobs.iceberg.embedded import moved, registered, static_table
from jobs.iceberg.spark_tables import calling, use_catalog
from jobs.lake import Lake, partition_value
from jobs.spark.logs import local_path
from jobs.spark.sinks import classic_jvm
from jobs.tables.record_files import INGEST_BATCH, record_location

# A snapshot's summary: the stream's query and batch it commits; the rebuild it rolls back.
QUERY, BATCH, ROLLBACK = "cloudtrail.query", "cloudtrail.batch", "cloudtrail.rollback"
NAME_MAPPING = "schema.name-mapping.default"
# A snapshot of a table registered anew where a moved lake is names the lake's old path.
MOVED_FROM = "cloudtrail.moved-in"
# What a moved lake's table is registered under (after its name) before it takes its name.
REGISTERING = "_registering"
# Only the lake's commands write it, one at a time under the lake lock; a publish's expiry may overtake a commit.
log = logging.getLogger("tables")

PROPERTIES = TABLE_PROPERTIES | {"commit.retry.num-retries": "4", "write.wap.enabled": "true"}


class RollbackRefused(cli.Refused):
    """A rebuild's change cannot be rolled back: the files it replaced expired with their snapshots."""


class RecordTable:
    """One table of record, through the session's Iceberg catalog for the lake: created on first use, or claimed."""

    table: str  # its name in the catalog's namespace
    schema: StructType
    partition: str  # its one partition column (identity)
    branch: str | None = None  # where its commits go (None: main)
    order: tuple[str, ...] = ()  # the columns its writers sort a partition's rows by (its declared sort order)

    def __init__(self, spark: SparkSession, lake: Lake, moving_from: Lake | None = None) -> None:
        self.spark, self.lake = spark, lake
        self.moving_from = moving_from  # a lake migrating here (jobs/upkeep/migrate.py): its table is registered here
        catalog = use_catalog(spark, lake, lake.catalog)
        self.name = f"{catalog}.{NAMESPACE}.{self.table}"
        self.location = record_location(lake, self.table)
        if storage.is_folder(lake.iceberg_warehouse):  # where the embedded catalog's file goes, and the table
            lake.iceberg_warehouse.mkdir(parents=True, exist_ok=True)
        self.catalog = spark._jsparkSession.sessionState().catalogManager().catalog(catalog).icebergCatalog()
        self.iceberg = classic_jvm(spark).org.apache.iceberg
        self.identifier = self.iceberg.catalog.TableIdentifier.parse(f"{NAMESPACE}.{self.table}")

    def open(self) -> None:
        """The table, created, or claimed; registered anew where the lake is when its metadata names an old path."""
        registering = self.iceberg.catalog.TableIdentifier.parse(f"{NAMESPACE}.{self.table}{REGISTERING}")
        source = self.moving_from
        if source is not None and self._owner() != self.lake.location:
            if (entry := registered(source, self.table)) is not None:
                self._registered_here(static_table(source, entry), str(source.root), registering)
        elif (entry := registered(self.lake, self.table)) is not None and entry.moved_from is not None:
            self._registered_here(static_table(self.lake, entry), entry.moved_from, registering)
        with calling(self.name, "opening the table"):
            if not self.catalog.tableExists(self.identifier) and self.catalog.tableExists(registering):
                self.catalog.renameTable(registering, self.identifier)  # a registration's last step
            elif not self.catalog.tableExists(self.identifier):
                self.create(self.identifier)
            else:
                self._claim()

    def _owner(self) -> str | None:
        """The lake the catalog's table is owned by (None: no such table); refused when it is neither this lake nor the
        one migrating here (whose publish put a copy of it in this catalog)."""
        if not self.catalog.tableExists(self.identifier):
            return None
        owner = self.java().properties().get(OWNER)
        if owner is not None and owner not in (self.lake.location, self.moving_from and self.moving_from.location):
            raise owned_by_another(self.name, str(owner), self.lake)
        return None if owner is None else str(owner)

    def _registered_here(self, old: Any, old_root: str, registering: Any) -> None:
        """A table whose metadata names the lake's old path (the lake moved, is a copy, or migrated here from
        `old_root`), `old` as that metadata holds it: registered anew at the lake's path under a name of its own, each
        branch's files in place and its ingest batch kept, then put in the old entry's place. A run that dies before
        that finds the old entry and starts over; one that dies in between finds the new table alone and gives it its
        name (`open`)."""
        ours = self.branch or "main"
        with calling(self.name, "registering the moved table"):
            if self.catalog.tableExists(registering):
                self.catalog.dropTable(registering, False)  # an earlier try's: only its entry goes, its files are these
            self.create(registering)
            for branch in sorted({"main", ours}, key=lambda name: name == "main"):  # the branch first: it starts from main
                head = old.metadata.snapshot_by_name(branch)
                scan = old.scan(snapshot_id=head.snapshot_id).plan_files() if head else []
                files = [moved(task.file.file_path, old_root, str(self.lake.root)) for task in scan]
                batch = old.properties.get(INGEST_BATCH) if branch == ours else None
                table = self.catalog.loadTable(registering)
                self.commit(table, files, [], {MOVED_FROM: old_root}, batch, branch)
            self.catalog.dropTable(self.identifier, False)  # only its entry: its files are the new table's
            self.catalog.renameTable(registering, self.identifier)
        log.warning("the lake moved from %s: its %s table is registered again at %s", old_root, self.table, self.location)

    def create(self, identifier: Any) -> None:
        """The table, in one commit: its schema, partitioned by its column, at the lake's location, owned by the lake."""
        jvm = classic_jvm(self.spark)
        namespace = identifier.namespace()
        if not self.catalog.namespaceExists(namespace):
            self.catalog.createNamespace(namespace)
        schema = self.iceberg.spark.SparkSchemaUtil.convert(jvm.org.apache.spark.sql.types.DataType.fromJson(self.schema.json()))
        properties = jvm.java.util.HashMap()
        for key, value in (PROPERTIES | {OWNER: self.lake.location}).items():
            properties.put(key, value)
        spec = self.iceberg.PartitionSpec.builderFor(schema).identity(self.partition).build()
        order = self.iceberg.SortOrder.builderFor(schema)
        for column in self.order:  # Spark's ascending order: nulls first
            order = order.asc(column, self.iceberg.NullOrder.NULLS_FIRST)
        created = (
            self.catalog.buildTable(identifier, schema).withPartitionSpec(spec).withSortOrder(order.build())
            .withLocation(self.location).withProperties(properties).createTransaction()
        )  # fmt: skip
        # TableWriter's files carry no Iceberg field ids: every reader maps their columns by name.
        mapping = self.iceberg.mapping.NameMappingParser.toJson(self.iceberg.mapping.MappingUtil.create(created.table().schema()))
        created.updateProperties().set(NAME_MAPPING, mapping).commit()
        created.commitTransaction()

    def _claim(self) -> None:
        """The table is this lake's (`cloudtrail.lake`), or the command is refused (jobs/iceberg/catalog.py); it gains
        the columns the lake's rows have and it lacks (an earlier release's table, a column CloudTrail added)."""
        table = self.java()
        owner = table.properties().get(OWNER)
        if owner is None:
            table.updateProperties().set(OWNER, self.lake.location).commit()
        elif owner != self.lake.location:
            raise owned_by_another(self.name, str(owner), self.lake)
        held = {str(field.name()) for field in table.schema().columns()}
        missing = [field for field in self.schema.fields if field.name not in held]
        if missing:
            jvm = classic_jvm(self.spark)
            wider = self.iceberg.spark.SparkSchemaUtil.convert(jvm.org.apache.spark.sql.types.DataType.fromJson(StructType(missing).json()))
            table.updateSchema().unionByNameWith(wider).commit()
            table = self.java()
            mapping = self.iceberg.mapping.NameMappingParser.toJson(self.iceberg.mapping.MappingUtil.create(table.schema()))
            table.updateProperties().set(NAME_MAPPING, mapping).commit()

    def java(self) -> Any:
        """The table as Iceberg's Java API has it now."""
        return self.catalog.loadTable(self.identifier)

    @property
    def data_folder(self) -> str:
        """Where the table's data files go (a folder per partition value)."""
        return f"{self.location}/data"

    def committed_batch(self) -> int | None:
        """The newest ingest batch the table holds."""
        value = self.java().properties().get(INGEST_BATCH)
        return None if value is None else int(value)

    def commit_batch(self, query_id: str, batch_id: int, files: list[str], replaced: list[str]) -> None:
        """One commit: the batch's files added and the `replaced` ones removed (a snapshot, when there are any), and the
        batch recorded as the newest the table holds."""
        with calling(self.name, f"committing batch {batch_id}"):
            self.commit(self.java(), files, replaced, {QUERY: query_id, BATCH: str(batch_id)}, str(batch_id))

    def commit(
        self, table: Any, files: list[str], replaced: list[str], summary: dict[str, str], batch: str | None, branch: str | None = None
    ) -> None:
        """`files` added to `table` and `replaced` removed, in one snapshot stating `summary` on the table's branch (or
        `branch`), and the table property of the newest ingest batch set to `batch` in the same commit."""
        branch = branch or self.branch
        transaction = table.newTransaction()
        if files or replaced:
            change = transaction.newOverwrite() if replaced else transaction.newAppend()
            for data_file in self.data_files(table, files):
                change = change.addFile(data_file) if replaced else change.appendFile(data_file)
            for data_file in self.current(table, set(replaced), branch):
                change = change.deleteFile(data_file)
            for key, value in summary.items():
                change = change.set(key, value)
            (change.toBranch(branch) if branch else change).commit()
        if batch is not None:
            transaction.updateProperties().set(INGEST_BATCH, batch).commit()
        transaction.commitTransaction()

    def data_files(self, table: Any, paths: list[str]) -> list[Any]:
        """Manifest entries for Parquet files in the table's partition folders, from their footers (no field ids: the
        table's name mapping maps their columns)."""
        jvm = classic_jvm(self.spark)
        mapping = self.iceberg.mapping.NameMappingParser.fromJson(table.properties().get(NAME_MAPPING))
        metrics = self.iceberg.MetricsConfig.forTable(table)
        found = []
        for path in paths:
            source = table.io().newInputFile(path)
            values = jvm.java.util.List.of(partition_value(storage.at(path).parent))
            found.append(
                self.iceberg.DataFiles.builder(table.spec()).withInputFile(source).withFormat(self.iceberg.FileFormat.PARQUET)
                .withPartitionValues(values).withMetrics(self.iceberg.parquet.ParquetUtil.fileMetrics(source, metrics, mapping))
                .build()
            )  # fmt: skip
        return found

    def head(self, table: Any, branch: str | None = None) -> Any:
        """The snapshot the table's commits go on (None before the first): its branch's (or `branch`'s) newest, or main's
        while the branch does not exist (Iceberg makes the branch there on its first commit)."""
        name = branch or self.branch or "main"
        if not table.refs().containsKey(name):
            return table.currentSnapshot()
        return table.snapshot(table.refs().get(name).snapshotId())

    def current(self, table: Any, paths: set[str] | None = None, branch: str | None = None) -> list[Any]:
        """The data files the table's head (or `branch`'s) holds (among `paths`, when given), as its manifests hold them."""
        head = self.head(table, branch)
        if (paths is not None and not paths) or head is None:
            return []
        wanted = None if paths is None else {local_path(path) for path in paths}  # a path, or a file URI of it
        found, tasks = [], table.newScan().useSnapshot(head.snapshotId()).planFiles().iterator()
        while tasks.hasNext():
            data_file = tasks.next().file()
            if wanted is None or local_path(str(data_file.location())) in wanted:
                found.append(data_file)
        return found

    def undo(self, changed_by: Callable[[dict[str, str]], bool], tag: str) -> bool:
        """Undo the change of the snapshots `changed_by(summary)` picks (a rebuild's), in one snapshot stating
        `cloudtrail.rollback`: the files it added that the table still holds go, those it removed come back; rows other
        commits added since stay. False when it changed nothing here."""
        table = self.java()
        summaries = [(snapshot, dict(snapshot.summary())) for snapshot in table.snapshots()]
        if any(summary.get(ROLLBACK) == tag for _, summary in summaries):
            return True  # rolled back already, by a run that stopped after
        changed = [snapshot for snapshot, summary in summaries if changed_by(summary)]
        head, lineage = self.head(table), self.iceberg.util.SnapshotUtil
        if not changed or head is None or not lineage.isAncestorOf(table, head.snapshotId(), changed[-1].snapshotId()):
            return False
        io, added, removed = table.io(), changed[-1].addedDataFiles(table.io()), changed[-1].removedDataFiles(table.io())
        back = list(removed)
        gone = [str(f.location()) for f in back if not io.newInputFile(f.location()).exists()]
        if gone:
            raise RollbackRefused(f"{self.name}: the table as it stood before {tag} expired ({gone[0]} is gone): not rolled back")
        with calling(self.name, f"rolling back {tag}"):
            change = table.newOverwrite()
            for data_file in self.current(table, {str(f.location()) for f in added}):
                change = change.deleteFile(data_file)
            for data_file in back:
                change = change.addFile(data_file)
            change = change.set(ROLLBACK, tag)
            (change.toBranch(self.branch) if self.branch else change).commit()
        return True
