"""The lake's layout (its files' storage is jobs/storage.py; the lock that keeps one writer on it, jobs/lock.py).

Every path under the lake root is named here and nowhere else (README, "Under the lake", says what each holds):

    events/event_date=D/                             the ingest's events table (its commit log in _spark_metadata/)
    quarantine/reason=R/                             an earlier release's quarantine, until its rows move into the
                                                     Iceberg table (jobs/tables/quarantine_table.py)
    _checkpoints/ingest/ (manifests/, late_files/, retired/, restamped.jsonl, reconciled/, last_success.json)
    _checkpoints/<job>.json, publish.json, rebuilds/<run>.json, ingest.lock, rescale/, migration.json
    _staging/<run>/<table>/, _swept/<table>/<time>/, _replaced/<table>/<tag>/   hidden from every reader
    landing/AWSLogs/...                              an S3 landing's objects, fetched (jobs/landing/bucket.py)
    notifications/{inbox,kept,outside,refused}/      the event-driven DAG's notifications (jobs/landing/sqs.py)
    reports/{ingest,reconcile,rebuild,publish,<job>,dq,dq/<job>}/<run id>.json, reports/dq/_validated.json, tally.json
    iceberg/catalog.db, iceberg/warehouse/<ns>/<table>/   the embedded Iceberg catalog and its tables (the
                                                     quarantine; the derived tables, which their jobs write; the
                                                     events' published copy)
    activity_hourly/, findings/, ocsf/api_activity/  an earlier release's derived tables, until their first run here
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from jobs import storage
from jobs.storage import LakePath

# Partition columns, which are also the tables' column names for those values.
EVENT_DATE = "event_date"
REASON = "reason"
# The tables the ingest job writes: the events through Spark's file sink, the quarantine as an Iceberg table.
EVENTS, QUARANTINE = "events", "quarantine"
REGION, ACCOUNT_ID, EVENT_DAY = "region", "accountId", "eventDay"


@dataclass(frozen=True)
class Derived:
    """A job that derives tables from the events table event date by event date (jobs/derived/derivation.py): its module
    jobs/<job>.py computes and checks the rows; the lake's paths, the derived DAG's task, the run form's plan,
    the lake page's section and the reports come from this definition. One name, `job`, for all of them."""

    job: str  # jobs/<job>.py; its task in the cloudtrail_derived DAG; reports/<job>/, reports/dq/<job>/, _checkpoints/<job>.json
    title: str  # what the lake page calls its tables
    tables: dict[str, tuple[str, ...]]  # folder -> partition columns, outermost first (the innermost holds the date)


# What the derived DAG builds, in the order it builds it. A table computed from the events date by date is a
# module like jobs/derived/ocsf.py (its transform, its checks), its suites in expectations/, and an entry here.
ACTIVITY = Derived("activity", "Activity and findings", {"activity_hourly": (EVENT_DATE,), "findings": (EVENT_DATE,)})
# The OCSF view of the events, partitioned as Amazon Security Lake partitions its sources: one folder per region,
# account and event day (YYYYMMDD, an event date's value in it: `event_day`).
OCSF = Derived("ocsf", "OCSF API Activity", {"ocsf/api_activity": (REGION, ACCOUNT_ID, EVENT_DAY)})
DERIVED = (ACTIVITY, OCSF)
ACTIVITY_HOURLY, FINDINGS = ACTIVITY.tables
(OCSF_API_ACTIVITY,) = OCSF.tables
# Each table's partition columns, outermost first; the innermost holds the value a run replaces (a date, a reason).
PARTITION_COLUMNS = {EVENTS: (EVENT_DATE,), QUARANTINE: (REASON,)} | {
    name: columns for derived in DERIVED for name, columns in derived.tables.items()
}
# The tables with one partition column, by it.
PARTITION_COLUMN = {name: columns[0] for name, columns in PARTITION_COLUMNS.items() if len(columns) == 1}
# The one file among the gate reports that is no report: the index of what the gates passed.
VALIDATED = "_validated.json"
# The streaming checkpoint's own file (jobs/spark/checkpoint.py): the last successful run's check time and batch.
LAST_SUCCESS = "last_success.json"
# The ledger's index of the landing files in retired delivery folders (jobs/ledger/planner.py), one file per delivery date.
RETIRED = "retired"
# In that index, the names of the manifests the ledger let go of: one Spark's log names that is gone and not here was lost.
LET_GO = "let_go.txt"
# The ledger's record of taken files whose times changed and whose content did not (jobs/ledger/planner.py).
RESTAMPED = "restamped.jsonl"
# The file ledger's manifests, one per batch, in the checkpoint: the folder the ingest's stream reads.
MANIFESTS = "manifests"
# A rescale of the de-duplication state under way (jobs/upkeep/rescale.py): the ingest does not start while it is there.
RESCALING = "rescaling.json"


def _safe(run_id: str) -> str:
    """A run id as a file or folder name: Airflow's run ids hold ':' and '+', one given to --run-id anything
    (a leading dot is replaced too: '..' must not name the folder above)."""
    return re.sub(r"[^A-Za-z0-9._-]|^\.", "_", run_id)


def _file_name(run_id: str) -> str:
    return f"{_safe(run_id)}.json"


@dataclass(frozen=True)
class Lake:
    root: LakePath
    # The catalog its tables of record are in (pyiceberg's settings name it); None: the embedded one in its folder.
    catalog: str | None = None

    def __post_init__(self) -> None:
        # A lake made from a plain path (tests, tools) is the same lake as `Lake.at` makes of it.
        object.__setattr__(self, "root", storage.at(self.root))

    @classmethod
    def at(cls, root: str | os.PathLike[str] | LakePath, catalog: str | None = None) -> Lake:
        """The lake at `root`: in S3, its tables of record in `catalog`; in a folder, always in its embedded one (a
        catalog named beside a folder lake is where the publish copies to and the derived jobs write)."""
        path = storage.at(root)
        return cls(path, None if storage.is_folder(path) else catalog)

    @property
    def location(self) -> str:
        """The lake's location as a URI: what its Iceberg tables record as their owner (jobs/iceberg/catalog.py)."""
        return self.root.as_uri()

    def table(self, name: str) -> LakePath:
        return self.root / name

    @property
    def events(self) -> LakePath:
        return self.table(EVENTS)

    @property
    def quarantine(self) -> LakePath:
        return self.table(QUARANTINE)

    @property
    def checkpoints(self) -> LakePath:
        return self.root / "_checkpoints"

    @property
    def checkpoint(self) -> LakePath:
        return self.checkpoints / "ingest"

    @property
    def last_success(self) -> LakePath:
        return self.checkpoint / LAST_SUCCESS

    @property
    def rescaling(self) -> LakePath:
        return self.checkpoint / RESCALING

    @property
    def manifests(self) -> LakePath:
        return self.checkpoint / MANIFESTS

    @property
    def late_files(self) -> LakePath:
        """Per batch, the landing files that held late events and their event dates (a rebuild reads them too)."""
        return self.checkpoint / "late_files"

    def derived_state(self, derived: Derived) -> LakePath:
        """Per event date, what a derived job's rows were built from, and how many (jobs/derived/state.py)."""
        return self.checkpoints / f"{derived.job}.json"

    def derived_state_before(self, derived: Derived) -> LakePath | None:
        """Where a lake written before the state files took their job's name keeps it (the activity job's was
        downstream.json; None for a job whose state always had its name); jobs/derived/state.py reads it there until its
        first write moves it."""
        return self.checkpoints / "downstream.json" if derived == ACTIVITY else None

    @property
    def lock(self) -> LakePath:
        return self.checkpoints / "ingest.lock"

    @property
    def migration(self) -> LakePath:
        """A migration's note (jobs/upkeep/migrate.py): in the lake it copies to until done, then in the lake it left."""
        return self.checkpoints / "migration.json"

    @property
    def landing_cache(self) -> Path:
        """An S3 landing's objects, fetched: scratch, in a folder lake's own folder, else on this machine's disk."""
        return self.root / "landing" if storage.is_folder(self.root) else storage.scratch(self.location) / "landing"

    @property
    def reconciled(self) -> LakePath:
        """CloudTrail digests a reconciliation proved complete, one file per digest date (jobs/ledger/reconcile.py)."""
        return self.checkpoint / "reconciled"

    @property
    def inbox(self) -> LakePath:
        return self.root / "notifications" / "inbox"

    @property
    def kept_messages(self) -> LakePath:
        return self.root / "notifications" / "kept"

    @property
    def outside_messages(self) -> LakePath:
        return self.root / "notifications" / "outside"

    @property
    def refused_keys(self) -> LakePath:
        return self.root / "notifications" / "refused"

    def swept(self, table: str, stamp: str) -> LakePath:
        return self.root / "_swept" / table / stamp

    @property
    def replaced_root(self) -> LakePath:
        return self.root / "_replaced"

    def replaced_tables(self, name: str) -> LakePath:
        """Every version of table `name`'s files or partitions that a later write replaced."""
        return self.replaced_root / name

    def replaced(self, table: LakePath, tag: str) -> LakePath:
        """Where files of `table` (one of this lake's) that a later write replaced are kept."""
        name = table.relative_to(str(self.root)).as_posix() if table.is_relative_to(str(self.root)) else table.name
        return self.replaced_tables(name) / tag

    def replaced_by_run(self, table: LakePath, run_id: str) -> LakePath:
        """Where a rebuild run keeps the partitions of `table` it replaced."""
        return self.replaced(table, _safe(run_id))

    def rescale_work(self, run_id: str) -> LakePath:
        """Where a rescale builds the new de-duplication state: beside the checkpoint, where no sweep or recovery
        of staged partitions looks (it must outlive a rescale that dies, which the next call finishes)."""
        return self.rescale_work_root / _safe(run_id)

    @property
    def rescale_work_root(self) -> LakePath:
        return self.checkpoints / "rescale"

    def replaced_state(self, run_id: str) -> LakePath:
        """Where a rescale keeps the de-duplication state it replaced."""
        return self.replaced_root / "state" / _safe(run_id)

    def staging(self, run_id: str) -> LakePath:
        """Where a rebuild run writes its partitions, outside every table folder (same file system, so a rename moves them)."""
        return self.staging_root / _safe(run_id)

    @property
    def staging_root(self) -> LakePath:
        return self.root / "_staging"

    @property
    def rebuilds(self) -> LakePath:
        return self.checkpoints / "rebuilds"

    def rebuild_journal(self, run_id: str) -> LakePath:
        return self.rebuilds / _file_name(run_id)

    def rebuild_report(self, tag: str) -> LakePath:
        return self.reports / "rebuild" / _file_name(tag)

    def rebuild_reports(self, run_id: str) -> list[LakePath]:
        """The reports of every rebuild run `run_id` made (its retries have suffixed tags), oldest first."""
        folder, name = self.reports / "rebuild", _safe(run_id)
        found = [folder / f"{name}.json", *folder.glob(f"{name}.[0-9]*.json")] if folder.is_dir() else []
        return sorted((p for p in found if p.exists()), key=lambda p: p.stat().st_mtime_ns)

    @property
    def replacements(self) -> LakePath:
        """What an earlier release's batch would move aside once its quarantine output was committed, one file per
        batch (jobs/tables/quarantine_table.py reads what one left)."""
        return self.checkpoint / "replacements"

    @property
    def reports(self) -> LakePath:
        return self.root / "reports"

    @property
    def tally(self) -> LakePath:
        """The ingest runs' running tallies (jobs/reporting/tally.py)."""
        return self.reports / "tally.json"

    def derived_reports(self, job: str) -> LakePath:
        """The reports of the runs of a derived job (a `Derived`'s job: `activity`, `ocsf`)."""
        return self.reports / job

    def derived_report(self, job: str, run_id: str) -> LakePath:
        return self.derived_reports(job) / _file_name(run_id)

    @property
    def ingest_reports(self) -> LakePath:
        return self.reports / "ingest"

    def ingest_report(self, run_id: str) -> LakePath:
        return self.ingest_reports / _file_name(run_id)

    @property
    def reconcile_reports(self) -> LakePath:
        return self.reports / "reconcile"

    def reconcile_report(self, run_id: str) -> LakePath:
        return self.reconcile_reports / _file_name(run_id)

    @property
    def gate_reports(self) -> LakePath:
        return self.reports / "dq"

    def gate_report(self, run_id: str) -> LakePath:
        return self.gate_reports / _file_name(run_id)

    def derived_gate_reports(self, job: str) -> LakePath:
        """The gate reports of a derived job (a `Derived`'s job: `activity`, `ocsf`)."""
        return self.gate_reports / job

    def derived_gate_report(self, job: str, run_id: str) -> LakePath:
        return self.derived_gate_reports(job) / _file_name(run_id)

    @property
    def validated(self) -> LakePath:
        return self.gate_reports / VALIDATED

    @property
    def publish_reports(self) -> LakePath:
        return self.reports / "publish"

    def publish_report(self, run_id: str) -> LakePath:
        return self.publish_reports / _file_name(run_id)

    @property
    def publish_state(self) -> LakePath:
        return self.checkpoints / "publish.json"

    @property
    def iceberg_catalog(self) -> LakePath:
        return self.root / "iceberg" / "catalog.db"

    @property
    def iceberg_warehouse(self) -> LakePath:
        return self.root / "iceberg" / "warehouse"


def partition(table: LakePath, value: object) -> LakePath:
    """A table's partition folder, Hive style (`table` is one of the lake's tables, or a staged copy of one)."""
    return table / f"{PARTITION_COLUMN[table.name]}={value}"


def event_day(day: object) -> str:
    """An event date as the OCSF table's `eventDay` (`2024-03-01` -> `20240301`)."""
    return str(day).replace("-", "")


def in_table(data_file: LakePath) -> Path:
    """A data file's place inside its table, wherever the lake is: its partition folder and name (one partition column each)."""
    return Path(*data_file.parts[-2:])


def partition_folders(table: LakePath) -> list[LakePath]:
    """A table's partition folders, in order of their values' text."""
    return sorted(folder for folder in table.glob(f"{PARTITION_COLUMN[table.name]}=*") if folder.is_dir())


def partition_value(folder: LakePath) -> str:
    """The value a partition folder holds, as text (`event_date=2024-03-01` -> `2024-03-01`)."""
    return folder.name.split("=", 1)[1]
