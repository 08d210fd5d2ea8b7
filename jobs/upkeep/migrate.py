"""Move a folder lake to object storage (or to another folder): its tables of record, checkpoint, de-duplication
state, ledger and reports, exactly; the folder is left as it was, and refuses writers from then on.

    python -m jobs.migrate --lake DIR --to s3://BUCKET/PREFIX --catalog NAME [--lock-wait SECONDS]
    spark-submit --py-files build/jobs.zip jobs/migrate.py --lake DIR --to s3://BUCKET/PREFIX --catalog NAME

Under both lakes' locks, on a lake this release has run on (an earlier release's folders are refused, naming the
command that converts them) and a target that holds nothing yet:
1. a note at the target (`_checkpoints/migration.json`) says a migration is under way: no writer starts there;
2. every file of the lake is copied to its place under the target, but the embedded catalog (the target's tables
   are in --catalog), Hadoop's checksums, a landing's fetched objects (scratch, fetched again when needed) and the
   derived tables, which the derived jobs' next run builds anew from the events there;
3. Spark's log of read manifests names them where they are now (the stream reads none again);
4. the tables of record (the events, every branch, and the quarantine) are registered in the target's catalog with
   the files copied, each with the ingest batch it holds (their snapshot history starts at the migration); a table
   the folder lake published to that catalog is replaced by its table of record, a derived table its jobs wrote
   there is handed to the target;
5. the note moves to the folder lake: its writers refuse from then on, naming the target.
A migration that dies part way is finished by running the command again; once done, running it again does nothing.
Exit codes (jobs/cli.py): 0 moved (or moved before), 2 refused (nothing changed), 75 another writer held a lake.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs import cli, storage
from jobs.iceberg.catalog import OWNER, TABLE_NAMES, existing_table, open_catalog, owned_by_another
from jobs.iceberg.embedded import registered
from jobs.lake import ACTIVITY, DERIVED, EVENTS, PARTITION_COLUMNS, QUARANTINE, Lake
from jobs.lock import MIGRATION_FORMAT, LakeLock, migration
from jobs.options import NAMESPACE
from jobs.spark.logs import relocate_source_log
from jobs.spark.session import JobSession, spark_session
from jobs.tables.events_table import EventsTable
from jobs.tables.quarantine_table import QuarantineTable

log = logging.getLogger("cloudtrail_migrate")

DERIVED_TABLES = tuple(name for derived in DERIVED for name in derived.tables)


class MigrationRefused(cli.Refused):
    """The lake cannot be migrated as it is, or not to there: nothing was changed."""


@dataclass(frozen=True)
class MigrateConfig:
    lake: Lake
    target: Lake
    lock_wait: float = 0


def parse_args(argv: list[str] | None = None) -> MigrateConfig:
    parser = cli.parser("migrate", __doc__)
    cli.add_lake(parser)
    cli.add_catalog(parser, namespace=False)
    cli.add_lock_wait(parser)
    parser.add_argument("--to", required=True, help="where the lake goes: s3://BUCKET/PREFIX (its catalog: --catalog), or a folder")
    args = parser.parse_args(argv)
    catalog, args.catalog = args.catalog, None  # --catalog names the target's: the folder lake's is its own
    lake = cli.lake(parser, args, existing=True)
    if not storage.is_folder(lake.root):
        parser.error(f"--lake {args.lake}: a lake in S3 is where a migration goes, not where one starts")
    target = Lake.at(args.to, catalog)
    if not storage.is_folder(target.root) and target.catalog is None:
        parser.error(f"--to {args.to}: a lake in S3 names the catalog its tables are in (--catalog NAME or $CLOUDTRAIL_CATALOG)")
    if target.location == lake.location:
        parser.error(f"--to {args.to}: that is the lake itself")
    return MigrateConfig(lake, target, args.lock_wait)


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    return cli.run(lambda: migrate(config))


def migrate(config: MigrateConfig) -> int:
    lake, target = config.lake, config.target
    note = migration(lake)
    if note is not None and note["to"] == target.location and note["done"]:
        if migration(target) is not None:  # a migration that died as it ended: the target's note goes
            target.migration.unlink()
        log.info("%s moved to %s before: nothing to do", lake.root, target.location)
        return cli.OK
    if note is not None:
        raise MigrationRefused(f"{lake.root} moved to {note['to']} before: it is not moved again")
    refuse_earlier_release(lake)
    resuming = migration(target)
    if resuming is None and holds_anything(target.root):
        raise MigrationRefused(f"{target.location} holds files already: a lake migrates only to an empty location")
    if resuming is not None and resuming["from"] != lake.location:
        raise MigrationRefused(f"{target.location} takes a migration from {resuming['from']} that did not finish: finish that one first")
    refuse_another_lakes_tables(lake, target)
    with LakeLock(lake, "a migration", config.lock_wait, migrating=True), LakeLock(target, "a migration", config.lock_wait, migrating=True):
        body = {"from": lake.location, "to": target.location}
        storage.write_record(target.migration, MIGRATION_FORMAT, body | {"done": False})
        copied, size = copy_tree(lake, target.root)
        relocated = relocate_source_log(target.checkpoint, target.manifests)
        with JobSession(lambda: spark_session("cloudtrail_migrate")) as session:
            for table_of_record in (EventsTable, QuarantineTable):
                if registered(lake, table_of_record.table) is not None:
                    table_of_record(session(), target, moving_from=lake)
        handed = hand_over_derived(lake, target)
        storage.write_record(lake.migration, MIGRATION_FORMAT, body | {"done": True})
        target.migration.unlink()
    print(json.dumps({"moved_to": target.location, "files": copied, "bytes": size, "manifests_relocated": relocated,
                      "derived_tables_handed_over": handed}, indent=2))  # fmt: skip
    log.info("%s moved to %s: %d files, %d bytes; point --lake and --catalog there", lake.root, target.location, copied, size)
    return cli.OK


def refuse_earlier_release(lake: Lake) -> None:
    """An earlier release's folders, which this release's commands convert as they meet them (a lake in S3 never had
    them), and work under way that names the lake's own paths: refused, naming the command that finishes each."""
    before = lake.derived_state_before(ACTIVITY)
    folders = [name for name in DERIVED_TABLES if storage.listed(lake.table(name), f"{PARTITION_COLUMNS[name][0]}=*")]
    found = [
        (lake.quarantine.is_dir(), "its quarantine is a folder (the ingest moves it into the Iceberg table)"),
        (lake.events.is_dir() and registered(lake, EVENTS) is None, "its events are a folder (the ingest registers them as a table)"),
        (before is not None and before.exists(), "the activity job's state is downstream.json (run the activity job)"),
        (bool(folders), f"{', '.join(folders)}: a folder (run its derived job)"),
        (lake.rescaling.exists(), "a rescale did not finish (run python -m jobs.rescale again)"),
        (bool(storage.listed(lake.rebuilds, "*.json")), "a rebuild did not finish (run python -m jobs.rebuild again)"),
    ]
    reasons = [reason for there, reason in found if there]
    if reasons:
        raise MigrationRefused(f"{lake.root} is not ready to migrate: {'; '.join(reasons)}; then migrate")


def holds_anything(root: storage.LakePath) -> bool:
    if storage.is_folder(root):
        return root.is_dir() and any(root.iterdir())
    return bool(root.fs.find(root.path, maxdepth=None, withdirs=False)[:1]) if root.exists() else False


def not_copied(lake: Lake) -> tuple[str, ...]:
    """The paths in the lake whose files are not copied: the embedded catalog, the lock and the note, a landing's fetched
    objects, the derived tables (built anew in the target)."""
    root = storage.folder(lake.root)
    places = [lake.iceberg_catalog, lake.lock, lake.migration]
    folders = [lake.landing_cache, *(lake.iceberg_warehouse / NAMESPACE / TABLE_NAMES[name] for name in DERIVED_TABLES)]
    inside = [storage.folder(p).relative_to(root).as_posix() for p in places]
    return (*inside, *(f"{storage.folder(p).relative_to(root).as_posix()}/" for p in folders))


def copy_tree(lake: Lake, target: storage.LakePath) -> tuple[int, int]:
    """Every file of the lake, at its place under `target` (again, when a migration is finished), but Hadoop's checksums,
    files half written and those `not_copied` names: the files, and their bytes."""
    source, skipped, pairs = storage.folder(lake.root), not_copied(lake), []
    for folder, _, names in os.walk(source):
        for name in names:
            relative = (Path(folder) / name).relative_to(source).as_posix()
            if not name.endswith((".crc", ".partial")) and not relative.startswith(skipped):
                pairs.append((Path(folder) / name, relative))
    size = sum(path.stat().st_size for path, _ in pairs)
    if storage.is_folder(target):
        for path, relative in pairs:
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target / relative)
    elif pairs:  # s3fs puts many at once
        target.fs.put([str(path) for path, _ in pairs], [f"{target.path}/{relative}" for _, relative in pairs])
    return len(pairs), size


def target_tables(target: Lake, names: list[str]) -> dict[str, Any]:
    """The lake's tables `names` the target's catalog holds already, by name (none in a folder's, which is new)."""
    if target.catalog is None:
        return {}
    catalog = open_catalog(target, target.catalog)
    found = {name: existing_table(catalog, f"{NAMESPACE}.{name}") for name in names}
    return {name: table for name, table in found.items() if table is not None}


def refuse_another_lakes_tables(lake: Lake, target: Lake) -> None:
    """A table of the target's catalog that belongs to a third lake is never taken over (jobs/iceberg/catalog.py)."""
    names = [EVENTS, QUARANTINE, *(TABLE_NAMES[name] for name in DERIVED_TABLES)]
    for name, table in target_tables(target, names).items():
        if table.properties.get(OWNER) not in (None, lake.location, target.location):
            raise owned_by_another(f"{NAMESPACE}.{name}", table.properties[OWNER], target)


def hand_over_derived(lake: Lake, target: Lake) -> list[str]:
    """The derived tables the folder lake's jobs wrote to the target's catalog (a folder lake beside a named one),
    handed to the target: their files stay where that catalog keeps them."""
    handed = []
    for name, table in target_tables(target, [TABLE_NAMES[name] for name in DERIVED_TABLES]).items():
        if table.properties.get(OWNER) == lake.location:
            with table.transaction() as tx:
                tx.set_properties({OWNER: target.location})
            handed.append(name)
    return handed
