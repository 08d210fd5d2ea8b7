"""Move the ingest's de-duplication state to another number of partitions, keeping every key it holds.

    python -m jobs.rescale --lake DIR|s3://BUCKET/PREFIX [--catalog NAME] --state-partitions 16 [--run-id ID] [--lock-wait SECONDS]
    spark-submit --py-files build/jobs.zip jobs/rescale.py --lake DIR --state-partitions 16

Spark fixes a stateful query's partitions at its first run (the offset log keeps `spark.sql.shuffle.partitions`)
and hashes its state over them, so the ingest's `--state-partitions` cannot change a lake's. This command, under
the lake lock and on a settled checkpoint (a batch half done: run the ingest first), reads every key of the state
as the last committed batch left it, with its expiry (Spark's state data source), writes them through the same
de-duplication operator into a new state of `--state-partitions` partitions, checks that it holds the same keys
with the same expiries, and swaps it in with the offset log's partition count. A copy of an event seen before
the rescale is still dropped: no key is forgotten and no file read again. The old state is kept under
<lake>/_replaced/state/<run id>/. A rescale that dies part way leaves a note in the checkpoint (with how far its swap
got: in S3 a folder moves object by object), the ingest refuses to start while it is there, and running this command
again finishes the rescale. The note is written when the
swap begins: a rescale that fails or dies while it builds the new state leaves the lake as it was.
Exit codes (jobs/cli.py): 0 rescaled (or already that size), 1 the check failed (the old state is kept), 2 bad
arguments or a checkpoint with a batch half done, 75 another writer held the lake.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs import cli, options, storage
from jobs.lake import Lake
from jobs.ledger.store import verified_checkpoint
from jobs.lock import LakeLock
from jobs.records.dedup import Dedup, drop_copies
from jobs.spark.checkpoint import checkpoint_location
from jobs.spark.logs import CheckpointError, state_folder
from jobs.spark.session import STREAM_CONF, JobSession, spark_session, stop_state_stores
from jobs.spark.state import set_state_partitions, state_partitions, state_version_files
from jobs.storage import LakePath, read_record, write_record
from jobs.tables.tables_of_record import held_batches

# The rescale's note's format (jobs/storage.py's `record_body`): 1 since it named one.
NOTE_FORMAT = 1

log = logging.getLogger("cloudtrail_rescale")

KEY_SCHEMA = "_dedup_key string, _arrival_time timestamp"
# The ingest's, with no state maintenance: the rescale's one batch leaves no old version to delete, and in S3 a
# maintenance task lists a new partition's folder before anything is in it (jobs/spark/checkpoint.make_state_folders).
RESCALE_CONF = STREAM_CONF | {"spark.sql.streaming.stateStore.maintenanceInterval": "1h"}
# No event has it: an eventID never starts with "!", a quarantined row's key is "!<file>#<position>@<run>".
EXPIRED_KEY = "!rescale"


@dataclass(frozen=True)
class RescaleConfig:
    lake: Lake
    run_id: str
    partitions: int
    lock_wait: float = options.LOCK_WAIT_SECONDS


def parse_args(argv: list[str] | None = None) -> RescaleConfig:
    parser = cli.parser("rescale", __doc__)
    cli.add_lake(parser)
    cli.add_catalog(parser, namespace=False)
    cli.add_run_id(parser)
    cli.add_lock_wait(parser)
    parser.add_argument("--state-partitions", type=cli.positive_int, required=True, help="the state's new number of partitions")
    args = parser.parse_args(argv)
    lake = cli.lake(parser, args, existing=True)
    return RescaleConfig(lake, cli.run_id(args.run_id, "rescale"), args.state_partitions, args.lock_wait)


# How far a swap got, in its note: begun, or the old state set aside. In S3 a folder moves object by object (copies,
# then deletes), so a move cut short is done again from its phase; in a folder each move is one rename.
BEGUN, SET_ASIDE = "begun", "set-aside"


@dataclass(frozen=True)
class Rescale:
    """One rescale's places: its note in the checkpoint, the new state it builds, and where the old one goes."""

    lake: Lake
    run_id: str
    partitions: int
    version: int  # the state version the last committed batch wrote
    phase: str = BEGUN

    @property
    def work(self) -> LakePath:
        return self.lake.rescale_work(self.run_id)

    @property
    def seeded(self) -> LakePath:
        return self.work / "checkpoint"

    @property
    def old(self) -> LakePath:
        return self.lake.replaced_state(self.run_id)

    @property
    def state(self) -> LakePath:
        return state_folder(self.lake.checkpoint)

    def note(self, phase: str = BEGUN) -> Rescale:
        body = {"run_id": self.run_id, "partitions": self.partitions, "version": self.version, "phase": phase}
        write_record(self.lake.rescaling, NOTE_FORMAT, body)
        return dataclasses.replace(self, phase=phase)

    @classmethod
    def noted(cls, lake: Lake) -> Rescale | None:
        if not lake.rescaling.exists():
            return None
        body = read_record(lake.rescaling, NOTE_FORMAT)
        found = cls(lake, body["run_id"], int(body["partitions"]), int(body["version"]))
        # An earlier release's note names no phase: its moves were renames, so the old state set aside tells.
        return dataclasses.replace(found, phase=body.get("phase") or (SET_ASIDE if found.old.exists() else BEGUN))


def state_keys(spark: SparkSession, checkpoint: LakePath) -> DataFrame:
    """Every key of the checkpoint's de-duplication state after its last committed batch, with its expiry (microseconds)."""
    # The state reader reports to the driver's StateStoreCoordinator, which Spark starts with the session's query
    # manager: in a process that has run no stream yet it is not there ("Cannot find endpoint: StateStoreCoordinator").
    spark.streams  # noqa: B018
    state = spark.read.format("statestore").load(str(checkpoint))
    return state.select(F.col("key._dedup_key").alias("_dedup_key"), F.col("value.expiresAtMicros").alias("expires_us"))


def with_arrivals(keys: DataFrame, dedup: Dedup) -> DataFrame:
    """Each key with the arrival that gives it its expiry again: de-duplication keeps a key until arrival + delay."""
    delay_us = int(dedup.delay.total_seconds() * 1_000_000)
    return keys.select("_dedup_key", F.timestamp_micros(F.col("expires_us") - delay_us).alias("_arrival_time"))


def same_keys(old: DataFrame, new: DataFrame) -> bool:
    """Both hold the same keys with the same expiries."""
    return old.exceptAll(new).isEmpty() and new.exceptAll(old).isEmpty()


@contextmanager
def _runtime_conf(spark: SparkSession, conf: dict[str, str]) -> Iterator[None]:
    before: dict[str, str | None] = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, earlier in before.items():
            spark.conf.unset(key) if earlier is None else spark.conf.set(key, earlier)


def seed(spark: SparkSession, keys: DataFrame, rescale: Rescale, dedup: Dedup) -> None:
    """Write `keys` through the de-duplication operator, one batch, into a new checkpoint of `rescale.partitions`
    partitions: its state version 1 holds each key with its expiry, hashed as the ingest's query hashes it."""
    source = rescale.work / "keys"
    with_arrivals(keys, dedup).write.mode("overwrite").parquet(str(source))
    # One batch and no other: a batch without data would evict keys by the seed's own watermark.
    conf = {"spark.sql.shuffle.partitions": str(rescale.partitions), "spark.sql.streaming.noDataMicroBatches.enabled": "false"}
    with _runtime_conf(spark, conf):
        rows = spark.readStream.schema(KEY_SCHEMA).parquet(str(source))
        query = (
            drop_copies(rows, dedup)
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint_location(spark, rescale.seeded))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"the state's keys could not be written anew: {query.exception()}")


def build(spark: SparkSession, rescale: Rescale, dedup: Dedup) -> bool:
    """The new state, under the rescale's work folder, at the version the ingest's next batch reads; whether it
    holds the same keys and expiries as the checkpoint's. The checkpoint is not touched: a build that fails or dies
    leaves the lake as it was, able to ingest."""
    storage.remove_tree(rescale.lake.rescale_work_root)  # and what an earlier build that died left
    # An earlier rescale's placeholder stays in the state until a batch's watermark passes it: it is no event's key.
    old = state_keys(spark, rescale.lake.checkpoint).where(F.col("_dedup_key") != EXPIRED_KEY).cache()
    # A state with no key still needs every partition's store: one key that expired before any batch ran.
    expired = spark.createDataFrame([(EXPIRED_KEY, int(dedup.delay.total_seconds() * 1_000_000) + 1)], old.schema)
    seed(spark, old.unionByName(expired), rescale, dedup)
    new = state_keys(spark, rescale.seeded).where(F.col("_dedup_key") != EXPIRED_KEY)
    checked = same_keys(old, new)
    old.unpersist()
    # The seeding query's state stores keep a maintenance task listing their folders: stopped before they are renamed
    # (it found a partition's folder gone mid-list and printed a stack trace on a rescale that succeeded).
    stop_state_stores(spark)
    if checked:
        state_version_files(rescale.seeded, 1, rescale.version)
    return checked


def swap(rescale: Rescale) -> None:
    """Old state aside, new state in, the offset log's partition count changed, the note removed: each step done
    again until its end is noted (a move cut short in S3 left objects in both places), so a rescale that died part
    way is finished by running it again."""
    if rescale.phase == BEGUN:
        if rescale.state.exists():  # else a folder's rename was done, not yet noted
            storage.move(rescale.state, rescale.old)
        rescale = rescale.note(SET_ASIDE)
    if state_folder(rescale.seeded).exists():  # else moved in whole
        storage.move(state_folder(rescale.seeded), rescale.state)
    set_state_partitions(rescale.lake.checkpoint, rescale.partitions)
    storage.remove_tree(rescale.work)
    rescale.lake.rescaling.unlink()


def rescale_state(config: RescaleConfig, session: JobSession) -> int:
    """Under the lake lock: finish a rescale that died part way, or rescale the state as asked."""
    noted = Rescale.noted(config.lake)
    if noted is not None:  # noted when its swap began: its new state was complete and checked
        log.warning("finishing rescale %s of %s to %d partitions", noted.run_id, config.lake.root, noted.partitions)
        swap(noted)
        return cli.OK if noted.partitions == config.partitions else rescale_state(config, session)
    checkpoint = verified_checkpoint(config.lake, held_batches(config.lake))
    if checkpoint.commit.batch_id is None:
        log.info("%s has no state yet: its first ingest run takes --state-partitions %d", config.lake.root, config.partitions)
        return cli.OK
    if not checkpoint.settled:
        raise CheckpointError(f"{config.lake.checkpoint} has a batch not yet swept: run the ingest once, then rescale")
    current = state_partitions(config.lake.checkpoint)
    if current == config.partitions:
        log.info("the state of %s already has %d partitions", config.lake.root, current)
        config.lake.rescaling.unlink(missing_ok=True)
        return cli.OK
    rescale = Rescale(config.lake, config.run_id, config.partitions, checkpoint.commit.batch_id + 1)
    if not build(session(), rescale, Dedup()):
        log.error("the new state does not hold the old one's keys: nothing swapped, the state keeps %d partitions", current)
        storage.remove_tree(rescale.work)
        return cli.FAILED
    swap(rescale.note())  # from here the rescale is finished, by this call or the next
    log.info(
        "the state of %s moved from %d to %d partitions; the old state is in %s", config.lake.root, current, config.partitions, rescale.old
    )
    return cli.OK


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    return cli.run(lambda: run(config))


def run(config: RescaleConfig) -> int:
    with LakeLock(config.lake, f"a rescale ({config.run_id})", wait_seconds=config.lock_wait):
        with JobSession(lambda: spark_session("cloudtrail_rescale", RESCALE_CONF)) as session:
            return rescale_state(config, session)
