"""The one place SparkSessions are built, with the settings every job of the lake shares."""

from __future__ import annotations

import glob
import logging
import os
from collections.abc import Callable
from functools import reduce
from pathlib import Path
from typing import Any

import py4j
from pyspark import SparkContext
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from jobs import object_store, options
from jobs.records import layout
from jobs.records.decode import JVM_EXPRESSIONS, JVM_FUNCTIONS

# Every session: UTC dates, and file listing in the driver: past 32 paths Spark lists with a distributed job
# of one task per file, three times per batch, where the driver takes milliseconds (BENCHMARKS.md).
BASE_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "1000000000",
    # Executors start after the session is built, so they take it from here even under spark-submit.
    "spark.executor.defaultJavaOptions": options.JVM_OPTIONS,
    # Parquet as today's readers expect: timestamps as INT64 microseconds, which carry min/max statistics
    # (INT96 has none, so no reader could skip a file by eventTime), and zstd. Files written before (INT96,
    # snappy) stay readable beside them (tests/test_upgrade.py); sizes and write times in BENCHMARKS.md.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.parquet.compression.codec": "zstd",
    # PySpark records the Python call site of every DataFrame and Column function in the JVM, for error messages
    # only: 6,100 of the 11,150 calls into the JVM that build the ingest's plan, 0.5-1 s of a run (BENCHMARKS.md).
    "spark.python.sql.dataFrameDebugging.enabled": "false",
}

# The ingest stream's settings (docs/design.md, "Bounded metadata").
STREAM_CONF = {
    # RocksDB keeps de-duplication state off the JVM heap, so it is bounded by disk, not memory.
    "spark.sql.streaming.stateStore.providerClass": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    # A manifest is read in one split per core, each split's landing files read and decoded by one task,
    # with no shuffle: a file's open cost of a byte makes Spark cut a batch's manifest (a few hundred KB)
    # by its bytes per core (spark.sql.files.minPartitionNum, the cores by default). Smaller splits paid a
    # task's fixed work per handful of files (docs/design.md). `for_table_reads` gives the tables' Parquet
    # files Spark's own cost back.
    "spark.sql.files.openCostInBytes": "1",
    # The run report reads every batch's progress, not only the last 100.
    "spark.sql.streaming.numRecentProgressUpdates": "100000",
    # A replay needs only the last batch; a run is 1-2 batches plus a no-data batch.
    "spark.sql.streaming.minBatchesToRetain": "3",
    # Old log files go as soon as a compaction replaces them: only this job reads them, under the lake lock.
    "spark.sql.streaming.fileSink.log.cleanupDelay": "0",
    "spark.sql.streaming.fileSource.log.cleanupDelay": "0",
    # Each commit compacts RocksDB's files: the state's size stays flat over daily runs instead of growing
    # with every version (60 days against 10: 1.00x; no cost measured at 1M records, BENCHMARKS.md).
    "spark.sql.streaming.stateStore.rocksdb.compactOnCommit": "true",
    # Counting the state's rows costs a read of every key written; no report uses that count.
    "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows": "false",
    # State maintenance deletes old state versions; at the default 60 s a run of seconds never ran it.
    "spark.sql.streaming.stateStore.maintenanceInterval": "1s",
    # A maintenance task cut short is redone by the next run; the defaults (300 s, then 60 s after
    # cancelling) hold a JVM that exits through its shutdown hooks for minutes (see JobSession).
    "spark.sql.streaming.stateStore.maintenanceShutdownTimeout": "10s",
    "spark.sql.streaming.stateStore.maintenanceForceShutdownTimeout": "10s",
}


def helpers_jar() -> str:
    """The JVM helpers (jobs/java/, built by `make setup`): $CLOUDTRAIL_JAR, else build/cloudtrail.jar of
    the checkout this module is in, or of $CLOUDTRAIL_HOME when it was imported from jobs.zip."""
    return os.environ["CLOUDTRAIL_JAR"] if "CLOUDTRAIL_JAR" in os.environ else str(_build() / "cloudtrail.jar")


def _build() -> Path:
    """build/ of the checkout this module is in, or of $CLOUDTRAIL_HOME when it was imported from jobs.zip."""
    checkout = Path(__file__).resolve().parents[2]
    return (checkout if checkout.is_dir() else Path(os.environ.get("CLOUDTRAIL_HOME", "."))) / "build"


def dependency_jars() -> str:
    """The JVM dependencies the pyspark wheel lacks (S3A, Iceberg, Spark's cloud module: tools/jars/pom.xml, fetched by
    `make setup`) as a classpath entry: the folder $CLOUDTRAIL_JARS, else build/jars of the checkout this module is in,
    or of $CLOUDTRAIL_HOME when it was imported from jobs.zip."""
    return f"{os.environ['CLOUDTRAIL_JARS'] if 'CLOUDTRAIL_JARS' in os.environ else _build() / 'jars'}/*"


# The JVM's lines about the class archive: one per class it cannot archive as it writes one, and a warning when one
# does not fit (which the JVM then passes over).
CLASS_ARCHIVE_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def class_archive() -> Path:
    """The classes an ingest loads beyond the JDK's own (Spark's, Hadoop's, Parquet's, RocksDB's), archived for the
    JVM's class data sharing by `make setup` (tools/class_archive.py) in the checkout's build/."""
    return Path(__file__).resolve().parents[2] / "build" / "spark-classes.jsa"


def class_archive_size(archive: Path) -> Path:
    """Where tools/class_archive.py records the archive's size once it is whole."""
    return archive.with_name(f"{archive.name}.bytes")


def driver_java_options() -> str:
    """options.JVM_OPTIONS, and the class archive when there is one: the driver maps the classes from it instead of
    loading them one by one (3.7 s of a 33 s run at 200k records, BENCHMARKS.md). An archive that does not fit this
    JVM or classpath is passed over by the JVM (-Xshare:auto), unlogged; one cut short would crash it
    (a read past the end of the mapped file), so an archive is used only at the size its writer recorded."""
    archive = class_archive()
    try:
        whole = archive.stat().st_size == int(class_archive_size(archive).read_text())
    except (OSError, ValueError):
        whole = False
    if not whole or " " in str(archive):  # the launcher splits the options at spaces
        return options.JVM_OPTIONS
    return f"{options.JVM_OPTIONS} -XX:SharedArchiveFile={archive} {CLASS_ARCHIVE_QUIET}"


def spark_session(
    app_name: str, conf: dict[str, str] | None = None, master: str | None = None, *, dumping_classes: bool = False
) -> SparkSession:
    """A session with BASE_CONF, options.LOCAL_FILE_SYSTEM, object storage's settings (jobs/object_store.py), the
    events' layout (jobs/records/layout.py) and `conf`.

    Under spark-submit the master, driver memory, the driver's JVM options and jars are spark-submit's
    (plugins/cloudtrail_airflow/operators.py); started by `python -m`, Spark runs embedded on `master`,
    $CLOUDTRAIL_SPARK_MASTER or local[*], with the helpers' jar, the dependencies (S3A, Iceberg) and
    driver_java_options(). Hadoop looks up the local file system's class before Spark adds the jar: the JVM finds it,
    and the dependencies, at the end of its classpath, past Spark's jars, so that the class archive, written by a JVM
    without them (`dumping_classes`: tools/class_archive.py, which therefore keeps Hadoop's own file system), fits
    whatever paths they are given (its JVM loads them as `spark.jars`).
    """
    builder = SparkSession.builder.appName(app_name)
    # spark-submit hands Python a running JVM through this variable.
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        builder = builder.master(master or os.environ.get("CLOUDTRAIL_SPARK_MASTER", "local[*]"))
        builder = builder.config("spark.driver.memory", os.environ.get("CLOUDTRAIL_DRIVER_MEMORY", "2g"))
        builder = builder.config("spark.driver.defaultJavaOptions", driver_java_options())
        # The archive's JVM loads the dependencies through Spark's own class loader: the ingest needs Iceberg's, and a
        # class it loads so is not archived, so the archive names no path of theirs.
        dependencies = sorted(glob.glob(dependency_jars())) if dumping_classes else []
        builder = builder.config("spark.jars", ",".join([helpers_jar(), *dependencies]))
        if not dumping_classes:
            # Spark's launcher puts $SPARK_DIST_CLASSPATH last on the JVM's classpath (extraClassPath goes first).
            launch = [entry for entry in os.environ.get("SPARK_DIST_CLASSPATH", "").split(os.pathsep) if entry]
            added = [helpers_jar(), dependency_jars()]
            os.environ["SPARK_DIST_CLASSPATH"] = os.pathsep.join(dict.fromkeys([*launch, *added]))
            builder = builder.config("spark.executor.extraClassPath", os.pathsep.join(added))
    local = {} if dumping_classes else options.LOCAL_FILE_SYSTEM
    for key, value in {**BASE_CONF, **local, **object_store.spark_conf(), **layout.spark_conf(), **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    hint = f"build it (`make setup`) and submit with --jars {helpers_jar()}"
    for name, (java_class, data_type) in JVM_FUNCTIONS.items():
        try:
            spark.udf.registerJavaFunction(name, java_class, data_type)
        except AnalysisException as exc:
            raise RuntimeError(f"{java_class} is not on the classpath: {hint}") from exc
    for name, java_class in JVM_EXPRESSIONS.items():
        # Compiled into queries (a StaticInvoke, in Spark's own types), so registered in the JVM by the class itself.
        registrar: Any = reduce(getattr, java_class.split("."), spark.sparkContext._jvm)
        try:
            registrar.register(spark._jsparkSession, name)
        except TypeError as exc:  # py4j names a class it cannot find a package, which cannot be called
            raise RuntimeError(f"{java_class} is not on the classpath: {hint}") from exc
    return spark


class JobSession:
    """A job's session, built on first call (a run with nothing to do starts no JVM) and stopped on
    leaving the `with` block if this job built it (a session that already ran, a test's, is the caller's).

    Stopped here, not by the JVM's shutdown hooks: there, after a long stream, the state store's
    maintenance waited on a driver already torn down, and the JVM outlived the job by 7.5 minutes
    (SPARK-51397; docs/design.md, "Stopping the session").
    """

    def __init__(self, build: Callable[[], SparkSession]) -> None:
        self._build = build
        self._session: SparkSession | None = None
        self._owned = False

    def __call__(self) -> SparkSession:
        if self._session is None:
            self._owned = SparkSession.getActiveSession() is None
            self._session = self._build()
        return self._session

    def __enter__(self) -> JobSession:
        return self

    def __exit__(self, *_: object) -> None:
        if self._session is not None and self._owned:
            stop_state_stores(self._session)
            gateway = getattr(self._session.sparkContext, "_gateway", None)
            quiet_heartbeats(self._session)
            self._session.stop()
            release_jvm(gateway)


def quiet_heartbeats(spark: SparkSession) -> None:
    """The local executor's logger at ERROR while the session stops: SparkContext.stop ends the driver's heartbeat
    receiver before the executor's heartbeater, and a beat due in between logged a WARN with its stack after the job's
    success ("Could not find HeartbeatReceiver"), harmless there. A cluster's executors log in their own processes."""
    jvm = spark.sparkContext._jvm
    if jvm is None:  # a session whose JVM is gone already
        return
    log4j = jvm.org.apache.logging.log4j
    log4j.core.config.Configurator.setLevel("org.apache.spark.executor.Executor", log4j.Level.ERROR)


class _Py4JChatter(logging.Filter):
    """Drops what Py4J's own code logs below WARNING through the root logger."""

    PACKAGE = os.path.dirname(py4j.__file__) + os.sep

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or not record.pathname.startswith(self.PACKAGE)


PY4J_CHATTER = _Py4JChatter()


def release_jvm(gateway: Any) -> None:
    """Let the JVM this process launched exit now, its session stopped, while the interpreter exits.

    A JDK 17 JVM waits up to 300 ms at exit for its threads inside native code, and Py4J's gateway keeps one
    there (accepting connections): every job spent 0.4 s exiting after its Python had, 0.1 s with the gateway
    shut down first (docs/design.md, "Stopping the session"). A JVM this process did not launch (spark-submit's,
    whose Python it runs) is its launcher's to end. A later session in this process launches a JVM of its own."""
    launched = getattr(gateway, "proc", None)
    if launched is None:
        return
    # Py4J logs a call whose socket the shutdown closes under it at INFO with its traceback ("a normal exception", its
    # own comment), some through its own logger, some through the root logger (`logging.info`): a job's log showed a
    # stack after its success whenever another thread was calling the JVM (a listener, a progress reporter).
    logging.getLogger("py4j").setLevel(logging.WARNING)
    if PY4J_CHATTER not in logging.getLogger().filters:
        logging.getLogger().addFilter(PY4J_CHATTER)
    gateway.shutdown()
    launched.stdin.close()  # the JVM exits on its standard input's end
    SparkContext._gateway = SparkContext._jvm = None


# Seconds to wait for the maintenance task that submits work to finish submitting: it lists the loaded providers.
MAINTENANCE_STOP_SECONDS = 30


def stop_state_stores(spark: SparkSession) -> None:
    """Stop the state stores' maintenance, then unload them, as a process's exit would. Left running past the
    session's stop, a maintenance task found SparkEnv gone and printed a stack trace on a run that succeeded; in a
    session that goes on (the tests'), it went on deleting old state versions under a copy of the checkpoint. Spark's
    own StateStore.stop() waits on a maintenance task that waits on its lock (jobs/java/cloudtrail/StateStores.java):
    20 s and an ERROR after success; the helper stops maintenance first, with no lock held."""
    jvm = spark.sparkContext._jvm
    if jvm is not None:
        jvm.cloudtrail.StateStores.stop(MAINTENANCE_STOP_SECONDS)


def for_table_reads(spark: SparkSession) -> SparkSession:
    """The ingest's session once its stream is done, reading the table in Spark's default splits."""
    spark.conf.unset("spark.sql.files.openCostInBytes")
    return spark
