"""The lake published as Iceberg tables (jobs/publishing/command.py): read back through pyiceberg, they equal the lake's
committed, gated rows, through ingest, rebuild, compaction and the derived jobs; a partition filter plans only
its partition's files; debris is never published; a failed gate holds its date back; a publish killed at any
point is completed by the next one; snapshots and unreferenced files are kept few."""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from jobs import options
from jobs.derived import activity, ocsf
from jobs.derived.derivation import DerivedConfig
from jobs.iceberg import upkeep
from jobs.iceberg.catalog import open_catalog
from jobs.iceberg.spark_tables import use_catalog
from jobs.lake import Lake
from jobs.publishing import command as publish
from jobs.quality import validate_events
from jobs.reporting.report import gate_report, write_json
from jobs.reporting.summary import publish_summary
from jobs.tables.events import all_files, date_files
from jobs.upkeep import rebuild
from jobs.upkeep.compact import CompactConfig
from jobs.upkeep.compact import run as compact_run
from tests.aws import glue_catalog
from tests.helpers import DAY, command, deliver, duckdb_rows, events_of, ingest, put_raw, quarantine_rows, succeeded
from tools import summary

NS = "cloudtrail"


def published(lake: Path, run_id: str = "p", now: datetime | None = None, **options) -> publish.PublishReport:
    config = dataclasses.replace(publish.parse_args(["--lake", str(lake), "--run-id", run_id]), **options)
    return publish.publish_tables(config, now)


def catalog(lake: Path):
    return open_catalog(Lake.at(lake), None)


def iceberg_rows(lake: Path, table: str = "events", row_filter: str | None = None, columns=("eventID", "event_date")):
    scan = catalog(lake).load_table(f"{NS}.{table}").scan(row_filter=row_filter or "True", selected_fields=columns)
    arrow = scan.to_arrow()
    return sorted(tuple(str(v) for v in row.values()) for row in arrow.to_pylist())


def planned_files(lake: Path, table: str, row_filter: str) -> list[str]:
    scan = catalog(lake).load_table(f"{NS}.{table}").scan(row_filter=row_filter)
    return sorted(task.file.file_path for task in scan.plan_files())


def dates_in_files(lake: Path) -> set[str]:
    """The event dates the events' data files hold in their own `event_date` column (a file without one: 'none')."""
    import pyarrow.parquet as pq

    found = set()
    for path in lake_files(lake):
        column = pq.read_table(path, columns=["event_date"]) if "event_date" in pq.read_schema(path).names else None
        found |= {str(day) for day in column["event_date"].to_pylist()} if column is not None else {"none"}
    return found


def date_filtered_names(lake: Path, day: str) -> int:
    """The rows a pyiceberg reader gets for one date when it filters on the date without selecting it."""
    scan = catalog(lake).load_table(f"{NS}.events").scan(row_filter=f"event_date = '{day}'", selected_fields=("eventName",))
    return scan.to_arrow().num_rows


def lake_files(lake: Path, day: str | None = None) -> list[Path]:
    """The events table of record's data files (of one date)."""
    return sorted(date_files(Lake.at(lake), day) if day else all_files(Lake.at(lake)))


def gated(spark, lake: Path, run_id: str | None, *days: date, threshold: float = options.QUARANTINE_THRESHOLD) -> str:
    """The events gate on `days`, as the DAG runs it after an ingest (None: without a run, as by hand): its verdict."""
    layout = Lake.at(lake)
    spark.catalog.clearCache()  # the gate caches the dates it reads: one application per gate in production
    config = validate_events.ValidateConfig(layout, run_id, days, threshold, layout.gate_report(f"{run_id or 'by-hand'}-{threshold}"))
    return validate_events.check(spark, config)["verdict"]


DAYS = (DAY.date(), DAY.date() + timedelta(days=1))


def two_days(spark, landing: Path, lake: Path) -> None:
    deliver(landing, events_of(40, DAY + timedelta(hours=1), "a"), DAY + timedelta(hours=2))
    deliver(landing, events_of(25, DAY + timedelta(days=1, hours=3), "b"), DAY + timedelta(days=1, hours=4))
    report = ingest(spark, landing, lake)
    assert gated(spark, lake, report.run_id, *DAYS) == "passed"


def test_the_four_tables_equal_the_lake_and_a_date_filter_plans_only_its_files(spark, landing, lake):
    two_days(spark, landing, lake)
    activity.run(DerivedConfig(str(lake), None, "a1"), lambda: spark)
    ocsf.run(DerivedConfig(str(lake), None, "o1"), lambda: spark)
    report = published(lake)
    assert report.status == "succeeded", publish_summary(dataclasses.asdict(report))
    by_table = {t.table: t for t in report.tables}
    assert set(by_table) == {"events", "activity_hourly", "findings", "ocsf_api_activity", "quarantine"}, "the quarantine kept too"

    assert iceberg_rows(lake) == duckdb_rows(lake) != []
    day = "2024-03-02"
    assert iceberg_rows(lake, row_filter=f"event_date = '{day}'") == [r for r in duckdb_rows(lake) if r[1] == day]
    planned = planned_files(lake, "events", f"event_date = '{day}'")
    assert planned and all(f"/event_date={day}/" in path for path in planned)
    assert len(planned) == len(lake_files(lake, day))
    # The ingest's files hold their date: a reader filtering on it without selecting it reads the date's rows.
    assert dates_in_files(lake) == {str(day) for day in DAYS}
    assert date_filtered_names(lake, day) == 25
    # `make summary`'s reader scan of the busiest date: its calls counted, not none.
    (line,) = [line for line in summary.published(Lake.at(lake), None, catalog(lake)) if "top calls" in line]
    assert re.search(r"top calls: \w+ \d+", line), line

    hourly = iceberg_rows(lake, "activity_hourly", columns=("window_start", "principal", "events", "event_date"))
    assert sum(int(events) for _, _, events, _ in hourly) == len(duckdb_rows(lake)) != 0, "the activity job's own table"
    ocsf_rows = iceberg_rows(lake, "ocsf_api_activity", "eventDay = '20240302' and region = 'us-east-1' and accountId = '111122223333'",
                             columns=("metadata", "region", "accountId", "eventDay"))  # fmt: skip
    assert len(ocsf_rows) == 25
    assert {r[1:] for r in ocsf_rows} == {("us-east-1", "111122223333", "20240302")}

    # Nothing new: no snapshot, and the manifests are not read.
    again = {t.table: t for t in published(lake, "p2").tables}
    assert all(again[name].snapshot_id == by_table[name].snapshot_id for name in by_table)


def snapshots(lake: Path, table: str = "events") -> list:
    """The snapshots readers of the catalog have seen: the main branch's, oldest first."""
    from pyiceberg.table.snapshots import ancestors_of

    loaded = catalog(lake).load_table(f"{NS}.{table}")
    current = loaded.current_snapshot()
    return list(reversed(list(ancestors_of(current, loaded.metadata)))) if current else []


def test_a_late_file_a_compaction_and_a_rebuild_are_one_snapshot_each_and_debris_never_goes(spark, landing, lake):
    layout = Lake.at(lake)
    for hour in range(3):  # three runs: three files on the first date
        deliver(landing, events_of(5, DAY + timedelta(hours=hour), f"h{hour}"), DAY + timedelta(hours=hour, minutes=5))
        assert gated(spark, lake, ingest(spark, landing, lake).run_id, DAY.date()) == "passed"
    published(lake, "p1")
    committed = duckdb_rows(lake)
    assert iceberg_rows(lake) == committed and len(snapshots(lake)) == 1

    # Debris: a file no commit names, in the table's data folder (a crashed batch's): no reader's row, nothing held back.
    committed_file = lake_files(lake, "2024-03-01")[0]
    debris = committed_file.with_name("part-99999-debris.c000.zstd.parquet")
    debris.write_bytes(committed_file.read_bytes())
    report = published(lake, "p2")
    assert iceberg_rows(lake) == committed == duckdb_rows(lake), "a file no commit names is no row"
    assert report.tables[0].held_back == {} and len(snapshots(lake)) == 1
    debris.unlink()

    # Compaction: the old files out and the new one in, in one snapshot.
    written = len(lake_files(lake))
    assert compact_run(CompactConfig(layout, "c1", dates=(DAY.date(),))) == 0
    report = published(lake, "p3")
    events = report.tables[0]
    assert (events.added, events.removed, events.held_back) == (1, written, {}) and written > 1
    assert snapshots(lake)[-1].summary.operation.value == "overwrite" and len(snapshots(lake)) == 2
    assert iceberg_rows(lake) == duckdb_rows(lake)
    assert dates_in_files(lake) == {"2024-03-01"} and date_filtered_names(lake, "2024-03-01") == 15, "the compacted file holds its date"

    # A rebuild of the date swaps a new partition in: one more snapshot, the same rows.
    config = rebuild.RebuildConfig(str(landing), str(lake), (DAY.date(),), "r1")
    assert rebuild.run(config, lambda: spark).status == "succeeded"
    assert published(lake, "p4").tables[0].removed == 1 and len(snapshots(lake)) == 3
    assert iceberg_rows(lake) == duckdb_rows(lake)
    assert dates_in_files(lake) == {"2024-03-01"} and date_filtered_names(lake, "2024-03-01") == 15, "the rebuilt file holds its date"
    files = catalog(lake).load_table(f"{NS}.events").inspect.files()
    assert files.num_rows == len(lake_files(lake)), "one Iceberg data file per committed local file"


def test_a_failed_gate_holds_its_date_back_until_a_gate_passes_it(spark, landing, lake):
    two_days(spark, landing, lake)
    published(lake, "p1")
    before = iceberg_rows(lake)

    # A batch for the second date whose gate fails (a file quarantined, over a 0.001 share): readers keep that date's
    # last published rows.
    late, delivered = DAY + timedelta(days=1, hours=9), DAY + timedelta(days=1, hours=10)
    deliver(landing, events_of(5, late, "c"), delivered)
    put_raw(landing, b"\x1f\x8b\x08\x00" + b"not a gzip stream" * 4, delivered, suffix=".json.gz")
    run = ingest(spark, landing, lake).run_id
    assert gated(spark, lake, run, DAYS[1], threshold=0.001) == "failed"
    report = published(lake, "p2")
    assert report.tables[0].held_back == {"2024-03-02": f"its gate failed in run {run}"}
    assert iceberg_rows(lake) == before
    assert "held back 2024-03-02: its gate failed" in "\n".join(publish_summary(dataclasses.asdict(report)))
    # A gate run by hand (no run id) that failed the date is named as such, never "run None".
    by_hand = gate_report(None, [DAYS[1]], {"failed_critical": [{"suite": "cloudtrail_events.critical"}]})
    write_json(Lake.at(lake).gate_report("adhoc-by-hand"), by_hand)
    (why,) = published(lake, "p2-by-hand").tables[0].held_back.values()
    assert why.startswith("its gate failed when run by hand at 20") and "None" not in why, why

    # The operator accepts the share (--quarantine-threshold 0.5): the gate run again passes the same files, and the
    # next publish takes the date.
    assert gated(spark, lake, run, DAYS[1], threshold=0.5) == "passed"
    report = published(lake, "p3")
    assert report.tables[0].held_back == {} and report.tables[0].added >= 1
    assert iceberg_rows(lake) == duckdb_rows(lake) == sorted([*before, *((f"c-{i}", "2024-03-02") for i in range(5))])


def test_glue_and_an_s3_warehouse_on_moto_take_the_same_tables_and_expiry_keeps_them_small(spark, landing, lake, aws, monkeypatch):
    import boto3

    bucket = f"warehouse-{Path(lake).parent.name[-12:].lower().replace('_', '-')}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    for key, value in glue_catalog("athena", f"s3://{bucket}/iceberg").items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("CLOUDTRAIL_CATALOG", "athena")
    two_days(spark, landing, lake)
    report = published(lake, "g1", expire_after=timedelta(0), orphan_grace=timedelta(0))
    assert report.status == "succeeded" and report.catalog == "athena"
    glue = open_catalog(Lake.at(lake), "athena")
    table = glue.load_table(f"{NS}.events")
    assert table.location().startswith(f"s3://{bucket}/iceberg")
    assert boto3.client("glue").get_table(DatabaseName=NS, Name="events")["Table"]["Parameters"]["table_type"].upper() == "ICEBERG"
    rows = sorted(
        (r["eventID"], str(r["event_date"])) for r in table.scan(selected_fields=("eventID", "event_date")).to_arrow().to_pylist()
    )
    assert rows == duckdb_rows(lake)

    # More runs: each a snapshot; with no grace, expiry leaves the newest, and once past the orphan floor the bucket
    # holds only what the table references.
    for n in range(3):
        deliver(landing, events_of(3, DAY + timedelta(hours=12 + n), f"m{n}"), DAY + timedelta(hours=13 + n))
        assert gated(spark, lake, ingest(spark, landing, lake).run_id, DAY.date()) == "passed"
        events = published(lake, f"g{n + 2}", expire_after=timedelta(0), orphan_grace=timedelta(0)).tables[0]
        assert events.snapshots == 1 and events.added >= 1
    later = datetime.now(tz=UTC) + upkeep.ORPHAN_FLOOR + timedelta(hours=1)
    assert published(lake, "g5", later, expire_after=timedelta(0), orphan_grace=timedelta(0)).tables[0].orphans_deleted > 0
    table = glue.load_table(f"{NS}.events")
    objects = {
        f"s3://{bucket}/{o['Key']}"
        for o in boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix="iceberg/cloudtrail.db/events/")["Contents"]
        if not o["Key"].endswith("/")
    }  # a folder's marker object is no file
    assert objects == upkeep.referenced(table) | {table.metadata_location} - {None}
    assert sorted(
        (r["eventID"], str(r["event_date"])) for r in table.scan(selected_fields=("eventID", "event_date")).to_arrow().to_pylist()
    ) == duckdb_rows(lake)


def every_table_equals_the_lake(lake: Path) -> None:
    """The published events table holds one Iceberg data file per committed local file, and the events the lake holds."""
    assert iceberg_rows(lake) == duckdb_rows(lake)
    assert catalog(lake).load_table(f"{NS}.events").inspect.files().num_rows == len(lake_files(lake))


def test_a_publish_killed_anywhere_is_completed_by_the_next_and_takes_no_file_twice(spark, landing, lake, monkeypatch, tmp_path):
    import random
    import shutil
    import signal
    import subprocess
    import sys
    import time

    from pyiceberg.table import Transaction

    two_days(spark, landing, lake)
    activity.run(DerivedConfig(str(lake), None, "a1"), lambda: spark)
    ocsf.run(DerivedConfig(str(lake), None, "o1"), lambda: spark)

    # Dead before the commit: nothing is published, and nothing was copied (the events are published where they are).
    record = sorted(p.name for p in (lake / "iceberg" / "warehouse" / NS / "events").rglob("*.parquet"))
    with monkeypatch.context() as patched:
        patched.setattr(Transaction, "commit_transaction", lambda self: (_ for _ in ()).throw(RuntimeError("killed before the commit")))
        report = published(lake, "dead")
    errors = {t.table: t.error for t in report.tables}
    assert report.status == "failed" and "killed before the commit" in (errors.pop("events") or ""), errors
    assert set(errors.values()) == {None}, "the derived tables, their jobs' own, are only kept small"
    assert sorted(p.name for p in (lake / "iceberg" / "warehouse" / NS / "events").rglob("*.parquet")) == record, "no copy"

    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    for attempt in range(5):
        if attempt == 2:  # the lake changes between kills: a compaction replaces the first date's files
            assert compact_run(CompactConfig(Lake.at(lake), "c1", dates=(DAY.date(),))) == 0
        process = subprocess.Popen([sys.executable, "-m", "jobs.publish", "--lake", str(lake), "--run-id", f"k{attempt}"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        time.sleep(rng.uniform(0.3, 2.5))
        process.send_signal(signal.SIGKILL)
        process.wait()
    result = command("jobs.publish", "--lake", lake, "--run-id", "last")
    succeeded(result)
    assert "succeeded  run last to embedded" in result.stdout, f"seed {seed}"
    every_table_equals_the_lake(lake)
    again = json.loads(Lake.at(lake).publish_report("last").read_text())
    assert {t["table"]: t["local_commit"] for t in again["tables"]}["events"] is not None

    # The lake copied to another path, its embedded catalog with it: its next ingest registers the events table where
    # it is, and the command publishes there, from its own files, the events the landing files hold (the catalog of the
    # lake it came from untouched). The path holds a space: an earlier release wrote tables' files beside the lake, in
    # a folder named with the `%20` of the path's URI.
    copy = tmp_path / "else where" / "lake"
    shutil.copytree(lake, copy)
    ingest(spark, landing, copy)
    succeeded(command("jobs.publish", "--lake", copy, "--run-id", "moved"))
    delivered = sorted([*((f"a-{i}", "2024-03-01") for i in range(40)), *((f"b-{i}", "2024-03-02") for i in range(25))])
    assert iceberg_rows(copy) == delivered == iceberg_rows(lake)
    assert catalog(copy).load_table(f"{NS}.events").location().startswith(str(copy / "iceberg"))
    assert sorted(p.name for p in tmp_path.iterdir() if "%" in p.name) == [], "nothing written outside the lake"
    assert catalog(lake).load_table(f"{NS}.events").location().removeprefix("file://").startswith(str(lake / "iceberg"))


def test_a_derived_date_whose_rows_fail_their_gate_keeps_its_published_version_and_is_named(spark, landing, lake, monkeypatch):
    two_days(spark, landing, lake)
    ocsf.run(DerivedConfig(str(lake), None, "o1"), lambda: spark)
    published(lake, "p1")
    before = iceberg_rows(lake, "ocsf_api_activity", columns=("metadata", "eventDay"))

    late, delivered = DAY + timedelta(days=1, hours=9), DAY + timedelta(days=1, hours=10)
    deliver(landing, events_of(5, late, "c"), delivered)
    assert gated(spark, lake, ingest(spark, landing, lake).run_id, DAYS[1]) == "passed"
    right = ocsf.DERIVATION

    def twice(events):  # every row twice: the OCSF suites fail, nothing is swapped in
        rows = right.build(events)[ocsf.OCSF_API_ACTIVITY]
        return {ocsf.OCSF_API_ACTIVITY: rows.unionByName(rows)}

    monkeypatch.setattr(ocsf, "DERIVATION", dataclasses.replace(right, build=twice))
    assert ocsf.run(DerivedConfig(str(lake), None, "bad"), lambda: spark).status == "gate_failed"
    tables = {t.table: t for t in published(lake, "p2").tables}
    assert tables["ocsf_api_activity"].held_back == {
        "2024-03-02": "the rows of run bad failed their gate; readers keep the last good version"
    }
    assert iceberg_rows(lake, "ocsf_api_activity", columns=("metadata", "eventDay")) == before
    assert tables["events"].added >= 1 and iceberg_rows(lake) == duckdb_rows(lake), "the events table goes on"

    monkeypatch.setattr(ocsf, "DERIVATION", right)
    assert ocsf.run(DerivedConfig(str(lake), None, "good"), lambda: spark).status == "succeeded"
    tables = {t.table: t for t in published(lake, "p3").tables}
    assert tables["ocsf_api_activity"].held_back == {}
    assert len(iceberg_rows(lake, "ocsf_api_activity", columns=("metadata", "eventDay"))) == len(duckdb_rows(lake)) == 70


def test_a_publish_that_another_overtakes_computes_its_difference_again(spark, landing, lake, monkeypatch):
    from jobs.publishing import in_place

    two_days(spark, landing, lake)
    files = in_place._files
    overtaken = []

    def overtaken_once(table, snapshot_id):  # while this publish reads the table, another one commits the same files
        if not overtaken:
            overtaken.append(True)
            published(lake, "other")
        return files(table, snapshot_id)

    monkeypatch.setattr(in_place, "_files", overtaken_once)
    report = published(lake, "first")
    assert report.status == "succeeded" and overtaken and report.tables[0].added == 0, "the other publish added them"
    assert iceberg_rows(lake) == duckdb_rows(lake)
    assert catalog(lake).load_table(f"{NS}.events").inspect.files().num_rows == len(lake_files(lake)), "no file twice"


def test_a_catalog_that_is_not_configured_is_refused_in_one_line(tmp_path):
    (tmp_path / "lake").mkdir()
    result = command("jobs.publish", "--lake", tmp_path / "lake", "--catalog", "nosuch")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if " ERROR " in line]
    assert "catalog 'nosuch' cannot be used" in line and "PYICEBERG_CATALOG__NOSUCH__" in line


def test_an_in_flight_commit_s_files_outlive_any_orphan_grace(spark, landing, lake):
    """A file written into a table's location for a commit not made yet is no orphan until the floor has passed,
    whatever grace is asked for: with a grace of seconds it was deleted, and the commit that followed left the table
    unreadable. The quarantine's files, which the ingest commits by `file:` URI, are the table's, not orphans."""
    two_days(spark, landing, lake)
    put_raw(landing, b"not json", DAY + timedelta(hours=5))
    ingest(spark, landing, lake)
    held = quarantine_rows(spark, lake)
    assert held and published(lake, "first").status == "succeeded"
    table = catalog(lake).load_table(f"{NS}.events")
    committed = next((Path(table.location().removeprefix("file://")) / "data").rglob("*.parquet"))
    in_flight = committed.with_name("in-flight.parquet")
    in_flight.write_bytes(committed.read_bytes())
    report = published(lake, "second", datetime.now(tz=UTC) + timedelta(hours=12), orphan_grace=timedelta(seconds=1))
    assert report.status == "succeeded" and in_flight.exists()
    now = datetime.now(tz=UTC)
    assert upkeep.delete_orphans(table, now, now) == 0 and in_flight.exists(), "no grace, and still within the floor"
    report = published(lake, "third", datetime.now(tz=UTC) + upkeep.ORPHAN_FLOOR + timedelta(days=1), orphan_grace=timedelta(0))
    assert not in_flight.exists() and report.tables[0].orphans_deleted >= 1, "past the floor, an orphan goes"
    assert iceberg_rows(lake) == duckdb_rows(lake)
    quarantine = catalog(lake).load_table(f"{NS}.quarantine").scan().to_arrow()  # its metadata and files all there
    assert quarantine.num_rows == len(held) and quarantine_rows(spark, lake) == held, "the quarantine's files were no orphans"


def test_a_second_lake_pointed_at_the_first_lake_s_tables_is_refused_in_one_line(spark, landing, lake, tmp_path, monkeypatch):
    """Two lakes publishing to one catalog and namespace: the second is refused, the first lake's rows stay its own."""

    shared = {"TYPE": "sql", "URI": f"sqlite:///{tmp_path}/shared.db", "WAREHOUSE": (tmp_path / "warehouse").as_uri()}
    for key, value in shared.items():
        monkeypatch.setenv(f"PYICEBERG_CATALOG__SHARED__{key}", value)
    (tmp_path / "warehouse").mkdir()
    two_days(spark, landing, lake)
    first = command("jobs.publish", "--lake", lake, "--catalog", "shared", "--run-id", "first")
    succeeded(first)
    other_landing, other_lake = tmp_path / "other-landing", tmp_path / "other-lake"
    deliver(other_landing, events_of(7, DAY + timedelta(hours=5), "x"), DAY + timedelta(hours=6))
    assert gated(spark, other_lake, ingest(spark, other_landing, other_lake).run_id, DAY.date()) == "passed"
    second = command("jobs.publish", "--lake", other_lake, "--catalog", "shared", "--run-id", "second")
    assert second.returncode == 1 and "Traceback" not in second.stderr, second.stderr[-2000:]
    errors = [line for line in second.stderr.splitlines() if " ERROR " in line]
    assert errors and all("belongs to the lake at" in line and Lake.at(lake).location in line for line in errors), errors
    events = open_catalog(Lake.at(lake), "shared").load_table(f"{NS}.events").scan(selected_fields=("eventID", "event_date"))
    assert sorted((r["eventID"], str(r["event_date"])) for r in events.to_arrow().to_pylist()) == duckdb_rows(lake)


def test_a_namespace_that_exists_is_not_created_again():
    """A Glue role may read its database and not create one: the namespace is created only when it is missing."""
    from pyiceberg.exceptions import NoSuchNamespaceError

    from jobs.iceberg.catalog import ensure_namespace

    class Catalog:
        def __init__(self, exists: bool) -> None:
            self.exists, self.created = exists, []

        def load_namespace_properties(self, namespace):
            if not self.exists:
                raise NoSuchNamespaceError(namespace)
            return {}

        def create_namespace_if_not_exists(self, namespace):
            self.created.append(namespace)

    existing, missing = Catalog(True), Catalog(False)
    ensure_namespace(existing, NS)
    ensure_namespace(missing, NS)
    assert existing.created == [] and missing.created == [NS]


def test_a_bucket_or_catalog_that_fails_ends_the_publish_in_one_line(spark, landing, lake, aws, monkeypatch):
    """A warehouse bucket that does not exist fails its tables, each named in one line (exit 1); a catalog that
    cannot be reached refuses the publish in one line (exit 2); neither prints a traceback."""
    for key, value in glue_catalog("gone", "s3://no-such-bucket-for-the-tables/iceberg").items():
        monkeypatch.setenv(key, value)
    two_days(spark, landing, lake)
    # A namespace of its own: the server's Glue catalog is the session's, other tests' lakes own their tables.
    failed = command("jobs.publish", "--lake", lake, "--catalog", "gone", "--namespace", "nobucket", "--run-id", "no-bucket")
    assert failed.returncode == 1 and "Traceback" not in failed.stderr, failed.stderr[-3000:]
    errors = [line for line in failed.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and "table nobucket.events could not be published" in errors[0] and "no-such-bucket" in errors[0], errors
    # A REST catalog (S3 Tables, Polaris) where nothing listens. (A Glue endpoint that refuses takes pyiceberg's
    # ten tries with backoff, a minute, and ends the same way.)
    monkeypatch.setenv("PYICEBERG_CATALOG__GONE__TYPE", "rest")
    monkeypatch.setenv("PYICEBERG_CATALOG__GONE__URI", "http://127.0.0.1:9")
    unreachable = command("jobs.publish", "--lake", lake, "--catalog", "gone", "--run-id", "no-catalog", timeout=120)
    assert unreachable.returncode == 2 and "Traceback" not in unreachable.stderr, unreachable.stderr[-3000:]
    (line,) = [line for line in unreachable.stderr.splitlines() if " ERROR " in line]
    assert "catalog 'gone' cannot be used" in line and "127.0.0.1" in line, line


def test_make_status_gives_the_pyiceberg_settings_that_read_the_embedded_catalog(spark, landing, lake, tmp_path):
    """Tried as a new user would: the settings `make status` prints, put in a .pyiceberg.yaml, open the embedded
    catalog in plain pyiceberg (under another name it held no table)."""
    import os
    import subprocess
    import sys

    two_days(spark, landing, lake)
    assert published(lake, "status").status == "succeeded"
    status = command("tools.status", "--lake", lake, "--landing", landing)
    succeeded(status)
    shown = status.stdout.splitlines()
    start = next(i for i, line in enumerate(shown) if line.startswith("Iceberg tables in the embedded catalog"))
    settings = [line[2:] for line in shown[start + 1 :] if line.startswith("  ")][:5]
    (tmp_path / ".pyiceberg.yaml").write_text("\n".join(settings) + "\n")
    read = "from pyiceberg.catalog import load_catalog as c; print(c('lake').load_table('cloudtrail.events').scan().to_arrow().num_rows)"
    env = {**os.environ, "PYICEBERG_HOME": str(tmp_path)}
    rows = subprocess.run([sys.executable, "-c", read], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert rows.returncode == 0 and int(rows.stdout) == len(duckdb_rows(lake)), rows.stderr[-2000:]


def test_a_column_whose_type_differs_from_the_table_s_is_conformed_and_blocks_nothing(spark, landing, lake, tmp_path, monkeypatch):
    """Another catalog's events table took `readOnly` as text (an earlier release's files): later files, whose `readOnly`
    is a flag, publish into it as text, where every later publish of the events failed on the type change; a value that
    cannot take the table's type is kept in `_rescued`."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.catalog import load_catalog

    from jobs.iceberg import catalog as iceberg_catalog
    from jobs.iceberg.columns import conformed
    from jobs.publishing.gated import events_published

    settings = {"type": "sql", "uri": f"sqlite:///{tmp_path}/other.db", "warehouse": (tmp_path / "warehouse").as_uri()}
    for key, value in settings.items():
        monkeypatch.setenv(f"PYICEBERG_CATALOG__OTHER__{key.upper()}", value)
    (tmp_path / "warehouse").mkdir()
    two_days(spark, landing, lake)
    layout = Lake.at(lake)
    first = next(iter(events_published(layout).files.values()))[0]
    schema = publish.published_schema(first)
    as_text = schema.set(schema.get_field_index("readOnly"), pa.field("readOnly", pa.string()))
    other = load_catalog("other", **settings)
    other.create_namespace(NS)
    iceberg_catalog.open_table(other, f"{NS}.events", ("event_date",), [as_text], None, layout)
    succeeded(command("jobs.publish", "--lake", lake, "--catalog", "other", "--run-id", "typed"))
    report = json.loads(layout.publish_report("typed").read_text())
    assert report["tables"][0]["added"] >= 1, report["tables"][0]["error"]
    table = other.load_table(f"{NS}.events")
    assert str(table.schema().find_field("readOnly").field_type) == "string"
    assert sorted(
        (r["eventID"], str(r["event_date"])) for r in table.scan(selected_fields=("eventID", "event_date")).to_arrow().to_pylist()
    ) == duckdb_rows(lake)
    flags = {r["readOnly"] for r in table.scan(selected_fields=("readOnly",)).to_arrow().to_pylist()}
    lake_flags = {str(v).lower() if v is not None else None for v in pq.read_table(first.path, columns=["readOnly"]).column(0).to_pylist()}
    assert flags >= lake_flags - {None}, (flags, lake_flags)

    # The other way: text where the table holds a flag; what is no flag goes to _rescued.
    rows = pa.table({"readOnly": pa.array(["true", "maybe", None]), "_rescued": pa.array([None, '{"x": "1"}', None])})
    fixed = conformed(rows, pa.schema([pa.field("readOnly", pa.bool_()), pa.field("_rescued", pa.large_string())]))
    assert fixed.column("readOnly").to_pylist() == [True, None, None]
    assert [json.loads(r) if r else r for r in fixed.column("_rescued").to_pylist()] == [None, {"x": "1", "readOnly": '"maybe"'}, None]


def test_spark_reads_and_writes_the_published_tables_through_iceberg_s_own_catalog(spark, landing, lake):
    """The versions work together (README, "Versions"): on the pinned pyspark, Iceberg's Spark runtime addresses the
    embedded catalog pyiceberg wrote (jobs/iceberg/spark_tables.py), reads a table the publish committed, and commits
    to it (on Spark 4.2 its SparkCatalog failed to load)."""
    two_days(spark, landing, lake)
    assert published(lake).status == "succeeded"
    name = use_catalog(spark, Lake.at(lake), None)
    rows = spark.sql(f"SELECT eventID, CAST(event_date AS STRING) FROM {name}.{NS}.events").collect()
    assert sorted(tuple(row) for row in rows) == iceberg_rows(lake) != []
    spark.sql(f"CREATE TABLE {name}.{NS}.spark_written (id STRING) USING iceberg")
    spark.sql(f"INSERT INTO {name}.{NS}.spark_written VALUES ('a'), ('b')")
    assert catalog(lake).load_table(f"{NS}.spark_written").scan().to_arrow().num_rows == 2


def test_a_lake_quiet_for_longer_than_the_expiry_keeps_the_head_its_writers_commit_to(spark, landing, lake):
    """Main's publishes are newer than the branch `ingest`'s head, which every expiry keeps: a quiet lake publishes on."""
    two_days(spark, landing, lake)
    assert published(lake, "p1").status == "succeeded"
    report = published(lake, "p2", datetime.now(tz=UTC) + timedelta(days=30))
    assert report.status == "succeeded", publish_summary(dataclasses.asdict(report))
    table = catalog(lake).load_table(f"{NS}.events")
    assert table.metadata.snapshot_by_name("ingest") is not None and len(table.metadata.snapshots) == 2
    assert iceberg_rows(lake) == duckdb_rows(lake)
    deliver(landing, events_of(2, DAY + timedelta(hours=5), "q"), DAY + timedelta(hours=6))
    assert gated(spark, lake, ingest(spark, landing, lake).run_id, DAY.date()) == "passed"
    assert published(lake, "p3").status == "succeeded" and iceberg_rows(lake) == duckdb_rows(lake)
