"""Iceberg tables Spark writes itself, through Iceberg's own SparkCatalog on the catalog pyiceberg's settings name
(jobs/iceberg/catalog.py), so one configuration serves the jobs and every reader.

Write, audit, publish: a run replaces some event dates of a table with one overwrite committed as a staged snapshot
(`write.wap.enabled`, `spark.wap.id` = the run), which the table's readers do not see; the run's gate reads that
snapshot (`Staged.rows`), and only when it passes is the snapshot cherry-picked into the table's history, where every
reader sees the dates change at once. A failed gate leaves the table as it was; the staged snapshot expires with the
others.

The catalog is Spark's under the name pyiceberg knows it by (a SQL catalog keys its tables by that name): the embedded
one as `lake`, a SQLite file; Glue, REST and SQLite catalogs from their pyiceberg settings, the AWS endpoint and region
from the AWS conventions (jobs/object_store.py) where those settings name none.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession

from jobs import cli, object_store
from jobs.iceberg.catalog import EMBEDDED, NAMESPACE, OWNER, TABLE_PROPERTIES, CatalogUnusable, claim, embedded_settings
from jobs.lake import Lake
from jobs.spark.sinks import classic_jvm

SPARK_CATALOG = "org.apache.iceberg.spark.SparkCatalog"
WAP_ID = "spark.wap.id"
# Where a staged snapshot's summary names the id it was staged under.
WAP_ID_SUMMARY = "wap.id"
# What a table Spark writes is created with, besides catalog.TABLE_PROPERTIES: its runs stage their snapshots, and a
# commit another one overtook (a publish's expiry) is retried, which for a whole-date overwrite changes nothing.
SPARK_TABLE_PROPERTIES = {"write.wap.enabled": "true", "commit.retry.num-retries": "4", "write.distribution-mode": "hash"}


def spark_catalog(lake: Lake, name: str | None) -> tuple[str, dict[str, str]]:
    """The Spark catalog's name and its `spark.sql.catalog.<name>.*` settings (keys after the prefix) for the catalog
    named (pyiceberg's settings), or the embedded one inside the lake."""
    if not name:
        settings = embedded_settings(lake)
        return EMBEDDED, {"type": "jdbc", "uri": _jdbc(settings["uri"]), "warehouse": settings["warehouse"]}
    from pyiceberg.utils.config import Config  # a named catalog's settings are pyiceberg's

    configured = {key: str(value) for key, value in (Config().get_catalog_config(name) or {}).items()}
    kind = configured.get("type", "rest")
    passed = {key: value for key, value in configured.items() if key.startswith(("s3.", "glue.", "rest.", "client."))}
    passed |= {key: configured[key] for key in ("warehouse", "credential", "token", "scope") if key in configured}
    if region := configured.get("glue.region") or configured.get("s3.region") or object_store.region():
        passed["client.region"] = region
    if (endpoint := object_store.endpoint()) and "s3.endpoint" not in passed:
        passed |= {"s3.endpoint": endpoint, "s3.path-style-access": "true"}
    # Iceberg's AWS clients default to the Apache 5 HTTP client, which the jars do not carry (tools/jars/pom.xml).
    passed.setdefault("http-client.type", "urlconnection")
    if kind == "glue":
        glue = os.environ.get("AWS_ENDPOINT_URL_GLUE") or os.environ.get("AWS_ENDPOINT_URL")
        return name, {"type": "glue", **({"glue.endpoint": glue} if glue and "glue.endpoint" not in passed else {}), **passed}
    if kind == "rest":
        return name, {"type": "rest", "uri": configured.get("uri", ""), **passed}
    if kind == "sql" and configured.get("uri", "").startswith("sqlite:///"):
        return name, {"type": "jdbc", "uri": _jdbc(configured["uri"]), **passed}
    raise CatalogUnusable(f"catalog {name!r} ({kind}, {configured.get('uri', 'no uri')}) cannot be used by the Spark jobs: "
                          "they reach Glue, REST and SQLite catalogs")  # fmt: skip


def _jdbc(sqlalchemy_uri: str) -> str:
    return "jdbc:sqlite:" + sqlalchemy_uri.removeprefix("sqlite:///")


def use_catalog(spark: SparkSession, lake: Lake, name: str | None) -> str:
    """The session's Spark catalog for the catalog named (or the embedded one), by its name, loaded anew: Spark loads a
    catalog once and keeps it, with its connection to an embedded catalog's file, which a lake restored from a backup
    replaces, and with the lake it was loaded for."""
    catalog, settings = spark_catalog(lake, name)
    wanted = {f"spark.sql.catalog.{catalog}": SPARK_CATALOG, f"spark.sql.catalog.{catalog}.cache-enabled": "false"}
    wanted |= {f"spark.sql.catalog.{catalog}.{key}": value for key, value in settings.items()}
    for key, value in wanted.items():
        spark.conf.set(key, value)
    spark._jsparkSession.sessionState().catalogManager().reset()
    return catalog


class TableUnwritable(cli.Refused):
    """A call of Iceberg's Spark runtime on a table failed (the catalog or the warehouse refused it, or cannot be
    reached): the run failed, in one line naming the table, the call and the cause."""

    exit_code = cli.FAILED


@contextmanager
def calling(table: str, call: str) -> Iterator[None]:
    """A call into Iceberg's Spark runtime on `table`: a Java exception out of it becomes one line naming the table,
    the call and the innermost cause (an S3 bucket that does not exist, a Glue permission), not Py4J's stack."""
    try:
        yield
    except Exception as exc:
        cause = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
        if cause is None:
            raise
        while cause.getCause() is not None and cause.getCause() != cause:
            cause = cause.getCause()
        message = " ".join(str(cause.getMessage() or "").split())[:500]
        raise TableUnwritable(f"{table}: {call} failed: {cause.getClass().getSimpleName()}: {message}") from None


@dataclass(frozen=True)
class Staged:
    """A run's overwrite of a table's dates, committed as a snapshot the table's readers do not see yet."""

    table: str  # catalog.namespace.table, as Spark names it
    snapshot_id: int

    def rows(self, spark: SparkSession) -> DataFrame:
        """The table as the staged snapshot holds it."""
        return spark.read.option("versionAsOf", self.snapshot_id).table(self.table)

    def publish(self, spark: SparkSession) -> None:
        """The staged snapshot made the table's current one (cherry-picked: readers see its dates change at once)."""
        with calling(self.table, f"publishing staged snapshot {self.snapshot_id}"):
            table = classic_jvm(spark).org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, self.table)
            table.manageSnapshots().cherrypick(self.snapshot_id).commit()


def writable(table: Any, lake: Lake, properties: dict[str, str]) -> None:
    """A table (pyiceberg's) about to be written by Spark: this lake's (`claim`), its runs' snapshots staged (a table
    an earlier release published is given the settings Spark's writes need), stating `properties`."""
    claim(table, lake)
    wanted = SPARK_TABLE_PROPERTIES | properties
    if missing := {key: value for key, value in wanted.items() if table.properties.get(key) != value}:
        with table.transaction() as tx:
            tx.set_properties(missing)


def staged_overwrite(
    table: str,
    rows: DataFrame,
    replaced: Column,
    partitioned_by: tuple[str, ...],
    run_id: str,
    lake: Lake,
    properties: dict[str, str],
    create: bool,
    location: str | None = None,
) -> Staged:
    """`rows` replace those of `table` where `replaced` holds (whole partitions: Iceberg drops their files), as a
    snapshot staged by run `run_id`; with `create`, the table is created first (at `location`, else where its catalog
    puts it), partitioned by `partitioned_by`, owned by `lake`, stating `properties`. Each write stages under an id of
    its own: Iceberg publishes one staged id once, and a retried run writes again."""
    from pyspark.sql import functions as F

    spark = rows.sparkSession
    if create:
        writer = rows.limit(0).writeTo(table).partitionedBy(*(F.col(c) for c in partitioned_by))
        placed = {} if location is None else {"location": location}
        for key, value in (TABLE_PROPERTIES | SPARK_TABLE_PROPERTIES | properties | placed | {OWNER: lake.location}).items():
            writer = writer.tableProperty(key, value)
        with calling(table, "creating the table"):
            writer.create()
    wap_id = f"{run_id}.{uuid.uuid4().hex[:8]}"
    spark.conf.set(WAP_ID, wap_id)
    try:
        with calling(table, "writing the run's rows"):
            rows.writeTo(table).option("merge-schema", "true").overwrite(replaced)
    finally:
        spark.conf.unset(WAP_ID)
    found = spark.table(f"{table}.snapshots").where(F.col("summary")[WAP_ID_SUMMARY] == wap_id).select("snapshot_id").collect()
    return Staged(table, found[0][0])


def staged_by(summary: dict[str, str]) -> str | None:
    """The run that staged a snapshot (`staged_overwrite`), from its summary; None for a snapshot none staged."""
    wap_id = summary.get(WAP_ID_SUMMARY)
    return wap_id.rsplit(".", 1)[0] if wap_id else None


def spark_name(catalog: str, table: str, namespace: str = NAMESPACE) -> str:
    """A table's name as Spark's catalog knows it."""
    return f"{catalog}.{namespace}.{table}"
