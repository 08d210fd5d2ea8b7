"""Publish the lake's committed, gated events as an Apache Iceberg table through a catalog, and keep every table of
the catalog small.

    python -m jobs.publish --lake DIR [--catalog NAME] [--namespace NS] [--run-id ID]
        [--expire-after '7 days'] [--orphan-grace '3 days']

The ingest keeps writing the events into the lake's folder; this publishes exactly what its gates passed, so readers
elsewhere (Athena, Trino, Spark, DuckDB, pyiceberg) read the committed rows through a catalog as
<namespace>.events (partitioned by event_date). The derived tables (activity_hourly, findings, ocsf_api_activity)
are Iceberg tables their jobs write themselves (jobs/iceberg/spark_tables.py): a publish expires their snapshots and
removes their orphans only.

The catalog is pyiceberg's (`.pyiceberg.yaml`, `PYICEBERG_CATALOG__<NAME>__<PROPERTY>`), named by --catalog or
$CLOUDTRAIL_CATALOG: Glue for Athena, a REST catalog, SQL. Without a name: the embedded default, a SQLite catalog
and a warehouse folder inside the lake (<lake>/iceberg/).

Which local files the events table publishes, per partition, is jobs/publishing/gated.py's: a date's files when they are
the very files its gate passed, a date changed since held back with why; debris never.

Each file is copied once into the table's location, the partition columns written into it (the lake keeps them
in folder names only, which Iceberg readers would read as NULL), under a name made of the local file's name,
size and time: a publish killed at any point and run again writes the same objects and commits the same
difference. One snapshot per table per publish: the files the local table no longer holds (a rebuild's swap, a
compaction's rewrite) are removed and the new ones added in the same snapshot. The snapshot records the local
commit it reflects (`cloudtrail.local-commit`, a hash of the published file set): a publish that finds it
current reads no manifest. Then snapshots older than --expire-after are expired (the newest kept), and files no
snapshot or metadata references, older than --orphan-grace, are deleted from the table's location.

Report: <lake>/reports/publish/<run id>.json (the lake page reads the newest). Exit codes (jobs/cli.py): 0
published (held-back dates are named, not failures), 1 a table could not be published (the others were),
2 bad arguments or a catalog that is not configured.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from jobs import cli, options
from jobs.iceberg import upkeep
from jobs.iceberg.catalog import (
    NAMESPACE,
    TABLE_NAMES,
    CatalogUnusable,
    claim,
    commit_files,
    current_files,
    existing_table,
    open_catalog,
    open_table,
)
from jobs.iceberg.columns import conformed, with_partition_columns
from jobs.iceberg.embedded import registered
from jobs.lake import EVENTS, PARTITION_COLUMNS, QUARANTINE, Lake
from jobs.publishing.gated import LocalFile, Published, derived_held_back, events_published
from jobs.publishing.in_place import in_place, publish_in_place, registered_folder
from jobs.records import layout
from jobs.reporting.report import now_iso, write_json
from jobs.reporting.summary import publish_summary
from jobs.storage import LakePath
from jobs.tables.events import date_fingerprint

log = logging.getLogger("publish")

EXPIRE_AFTER = "7 days"
ORPHAN_GRACE = "3 days"
# The snapshot properties a publish writes: the local commit the snapshot reflects, and when that was committed.
LOCAL_COMMIT, LOCAL_COMMIT_TIME, RUN_ID = "cloudtrail.local-commit", "cloudtrail.local-commit-time", "cloudtrail.publish-run"
# Tries of one table's publish when other publishes keep committing first.
COMMIT_ATTEMPTS = 3
# Files copied at once: each is read, given its partition columns and written (pyarrow releases the GIL).
COPIERS = 4


@dataclass(frozen=True)
class PublishConfig:
    lake: Lake
    run_id: str
    catalog: str | None  # None: the embedded SQLite catalog inside the lake
    namespace: str = NAMESPACE
    expire_after: timedelta = options.duration(EXPIRE_AFTER)
    orphan_grace: timedelta = options.duration(ORPHAN_GRACE)


def parse_args(argv: list[str] | None = None) -> PublishConfig:
    parser = cli.parser("python -m jobs.publish", __doc__)
    cli.add_lake(parser)
    cli.add_run_id(parser)
    cli.add_catalog(parser)
    parser.add_argument(
        "--expire-after", type=cli.duration, default=EXPIRE_AFTER, help="snapshots older than this expire (the newest stays)"
    )
    parser.add_argument("--orphan-grace", type=cli.duration, default=ORPHAN_GRACE,
                        help="files no snapshot references are deleted once this old")  # fmt: skip
    args = parser.parse_args(argv)
    lake = cli.lake(parser, args, existing=True)
    return PublishConfig(lake, cli.run_id(args.run_id), args.catalog, args.namespace, args.expire_after, args.orphan_grace)


def published_schema(file: LocalFile) -> Any:
    """The columns a local file has once published (its footer read, not its rows)."""
    import pyarrow.parquet as pq

    return with_partition_columns(pq.read_schema(file.path).empty_table(), file.partition).schema


def _copy(file: LocalFile, target: Any) -> tuple[LocalFile, bytes]:
    """A local file with its partition columns, in the types of the table's schema `target` (pyarrow), as Parquet bytes
    (zstd, as the lake writes), its rows in their order, with the events' bloom filters and row groups
    (jobs/records/layout.py)."""
    import pyarrow.parquet as pq

    rows = with_partition_columns(pq.read_table(file.path, coerce_int96_timestamp_unit="us"), file.partition)
    rows = conformed(rows, target)
    sink = io.BytesIO()
    pq.write_table(rows, sink, compression="zstd", **layout.pyarrow_options(rows))
    return file, sink.getvalue()


def _data_file(table: Any, path: str, body: bytes) -> Any:
    """The manifest entry of a copied file, from its own footer (no read back from the warehouse)."""
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import compute_statistics_plan, data_file_statistics_from_parquet_metadata, parquet_path_to_id_mapping
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    metadata, schema = table.metadata, table.schema()
    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=pq.read_metadata(io.BytesIO(body)),
        stats_columns=compute_statistics_plan(schema, metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema),
    )
    return DataFile.from_args(
        content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET,
        partition=statistics.partition(metadata.spec(), schema), file_size_in_bytes=len(body), sort_order_id=None,
        spec_id=metadata.default_spec_id, equality_ids=None, key_metadata=None, **statistics.to_serialized_dict(),
    )  # fmt: skip


# --- one table ---------------------------------------------------------------------------------------------------


@dataclass
class TableOutcome:
    """What one publish did to one table (a report's entry, and a row of the lake page)."""

    table: str
    snapshot_id: int | None = None
    local_commit: str | None = None  # the local commit the current snapshot reflects
    local_commit_time: str | None = None
    lag_seconds: float = 0.0  # the newest local file's time less the published local commit's
    added: int = 0
    removed: int = 0
    held_back: dict[str, str] = field(default_factory=dict)  # event date -> why
    snapshots: int = 0
    expired: int = 0
    orphans_deleted: int = 0
    error: str | None = None


def publish_table(catalog: Any, config: PublishConfig, name: str, now: datetime) -> TableOutcome:
    """Bring table `name`'s Iceberg table to what the lake publishes of it, in one snapshot; then keep it small."""
    lake, outcome, identifier = config.lake, TableOutcome(TABLE_NAMES[name]), f"{config.namespace}.{TABLE_NAMES[name]}"
    entry = registered(lake, EVENTS)
    if in_place(config.lake, config.catalog, config.namespace) and entry is not None and entry.moved_from is not None:
        log.warning("the lake moved from %s: its events table is registered where it is by the next ingest first", entry.moved_from)
        return outcome
    found = events_published(lake)
    outcome.held_back = dict(sorted(found.held_back.items()))
    table = existing_table(catalog, identifier)
    if table is not None:
        claim(table, lake)
    if not found.files and table is None:
        return outcome  # nothing to publish yet: no empty table to create
    wanted = found.local_commit()
    snapshot = table.current_snapshot() if table is not None else None
    if snapshot is not None and snapshot.summary.get(LOCAL_COMMIT) == wanted and not found.held_back:
        return _kept(table, config, outcome, found, now)  # the current snapshot is this local commit: no manifest read
    if table is not None and in_place(config.lake, config.catalog, config.namespace):
        outcome.added, outcome.removed = publish_in_place(table, found, _properties(config, found, wanted))
        return _kept(table, config, outcome, found, now)
    current = current_files(table) if table is not None else {}
    added = [f for files in found.files.values() for f in files if f.key not in current]
    # A partition held back keeps what readers have; any other file the lake no longer holds goes.
    listed = found.keys()
    removed = [key for key in current if key not in listed and _partition(key) not in found.kept]
    if not added and not removed:
        return outcome if table is None else _kept(table, config, outcome, found, now)
    order = layout.SORT_COLUMNS if name == EVENTS else ()
    table = open_table(catalog, identifier, PARTITION_COLUMNS[name], [published_schema(f) for f in added], table, lake, order)
    location = f"{table.location().rstrip('/')}/data/"
    copied = {}
    for local, body in _copies(added, table.schema().as_arrow()):
        path = location + local.key
        with table.io.new_output(path).create(overwrite=True) as out:
            out.write(body)
        copied[local.key] = _data_file(table, path, body)
    # A partition that changed while its files were copied waits for the next publish: its new files are not these.
    changed = {part for part, before in found.prints.items() if date_fingerprint(lake, part.split("=", 1)[1]) != before}
    chosen = [data_file for key, data_file in copied.items() if _partition(key) not in changed]
    gone = [current[key] for key in removed if _partition(key) not in changed]
    properties = _properties(config, found, f"partial-{wanted}" if changed else wanted)
    commit_files(table, gone, chosen, properties, merge=True)
    outcome.added, outcome.removed = len(chosen), len(gone)
    for part in changed:
        outcome.held_back[part.rsplit("=", 1)[1]] = "changed while it was published; the next publish takes it"
    log.info("%s: one snapshot, %d files added and %d removed (local commit %s)", identifier, len(chosen), len(gone), wanted)
    return _kept(table, config, outcome, found, now)  # the table took its new snapshot as it committed


def _properties(config: PublishConfig, found: Published, local_commit: str) -> dict[str, str]:
    properties = {LOCAL_COMMIT: local_commit, RUN_ID: config.run_id}
    if found.newest():
        properties[LOCAL_COMMIT_TIME] = datetime.fromtimestamp(found.newest() // 1_000_000_000, tz=UTC).isoformat()
    return properties


def published_table(catalog: Any, config: PublishConfig, name: str, now: datetime) -> TableOutcome:
    """`publish_table` for the events, `kept_table` for a derived table, again from the start when another writer
    committed to the table first (the ingest DAG's publish, the derived DAG's, a derived job's commit): the difference
    is computed anew, the copies already written are written again under the same names."""
    from pyiceberg.exceptions import CommitFailedException

    body = publish_table if name == EVENTS else kept_table
    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        try:
            return body(catalog, config, name, now)
        except CommitFailedException:
            if attempt == COMMIT_ATTEMPTS:
                raise
            log.warning("%s: another writer committed first; publishing again (attempt %d)", TABLE_NAMES[name], attempt + 1)
    raise AssertionError("unreachable")


def _partition(key: str) -> str:
    return key.rsplit("/", 1)[0]


def _copies(files: list[LocalFile], target: Any) -> Iterator[tuple[LocalFile, bytes]]:
    with ThreadPoolExecutor(COPIERS) as pool:
        yield from pool.map(lambda file: _copy(file, target), files)


def kept_table(catalog: Any, config: PublishConfig, name: str, now: datetime) -> TableOutcome:
    """A table its job writes itself (a derived table), kept small: its snapshots expired, its orphans removed."""
    table = existing_table(catalog, f"{config.namespace}.{TABLE_NAMES[name]}")
    outcome = TableOutcome(TABLE_NAMES[name], held_back=derived_held_back(config.lake, name))
    return outcome if table is None else _kept(claim(table, config.lake), config, outcome, Published(), now)


def kept_quarantine(config: PublishConfig, now: datetime) -> TableOutcome:
    """The quarantine, a table of record in the lake's embedded catalog (jobs/tables/quarantine_table.py), kept small like the
    others; left alone while it waits to be registered at a lake's new path by the next ingest."""
    outcome = TableOutcome(QUARANTINE)
    entry = registered(config.lake, QUARANTINE)
    if entry is None or entry.moved_from is not None:
        return outcome
    table = existing_table(open_catalog(config.lake, config.lake.catalog), f"{NAMESPACE}.{QUARANTINE}")
    return outcome if table is None else _kept(claim(table, config.lake), config, outcome, Published(), now)


def _kept(table: Any, config: PublishConfig, outcome: TableOutcome, found: Published, now: datetime) -> TableOutcome:
    """Expiry and orphan deletion (in the events' registered folder too), then the table's figures for the report."""
    outcome.expired = upkeep.expire(table, now - config.expire_after)
    if upkeep.cleaning_due(config.lake.publish_state, table.location(), now):
        legacy = registered_folder(table, config.lake) if in_place(config.lake, config.catalog, config.namespace) else None
        outcome.orphans_deleted = upkeep.delete_orphans(table, now - config.orphan_grace, now, legacy)
        upkeep.cleaned(config.lake.publish_state, table.location(), now)
    snapshot = table.current_snapshot()
    outcome.snapshots = len(table.metadata.snapshots)
    if snapshot is not None:
        outcome.snapshot_id = snapshot.snapshot_id
        outcome.local_commit = snapshot.summary.get(LOCAL_COMMIT)
        outcome.local_commit_time = snapshot.summary.get(LOCAL_COMMIT_TIME)
        if outcome.local_commit_time and found.newest():  # whole seconds on both sides
            published = datetime.fromisoformat(outcome.local_commit_time).timestamp()
            outcome.lag_seconds = max(0.0, float(found.newest() // 1_000_000_000) - published)
    return outcome


# --- the run --------------------------------------------------------------------------------------------------------


@dataclass
class PublishReport:
    run_id: str
    started_at: str
    catalog: str
    namespace: str
    status: str = "running"
    tables: list[TableOutcome] = field(default_factory=list)
    seconds: float | None = None

    def write(self, lake: Lake) -> LakePath:
        return write_json(lake.publish_report(self.run_id), asdict(self))


def publish_tables(config: PublishConfig, now: datetime | None = None) -> PublishReport:
    """Every table the lake has, published; a table that fails is named and the others go on."""
    started = time.monotonic()
    report = PublishReport(config.run_id, now_iso(), config.catalog or f"embedded ({config.lake.iceberg_catalog})", config.namespace)
    try:
        catalog = open_catalog(config.lake, config.catalog, config.namespace)
        for name in TABLE_NAMES:
            try:
                report.tables.append(published_table(catalog, config, name, now or datetime.now(tz=UTC)))
            except Exception as exc:  # one table's failure (a catalog unreachable, a schema it cannot take) is named
                error = _one_line(exc)
                log.error("table %s.%s could not be published: %s", config.namespace, TABLE_NAMES[name], error)
                report.tables.append(TableOutcome(TABLE_NAMES[name], error=error))
        report.tables.append(kept_quarantine(config, now or datetime.now(tz=UTC)))
        report.status = "failed" if any(t.error for t in report.tables) else "succeeded"
    except Exception as exc:
        report.status = "failed"
        report.tables.append(TableOutcome("*", error=_one_line(exc)))
        raise
    finally:
        report.seconds = round(time.monotonic() - started, 1)
        report.write(config.lake)
    return report


def _one_line(exc: Exception) -> str:
    """An error as the report and the log name it: its type and its message's first line."""
    return f"{type(exc).__name__}: {cli.first_line(exc)[:500]}"


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    return cli.run(lambda: run(config))


def run(config: PublishConfig) -> int:
    try:
        report = publish_tables(config)
    except CatalogUnusable as exc:
        log.error("%s", exc)
        return cli.USAGE
    print("\n".join(publish_summary(asdict(report))))
    return cli.FAILED if report.status == "failed" else cli.OK
