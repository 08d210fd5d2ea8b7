"""A lake in S3 (moto's): the ingest, in a process of its own as an operator runs it, keeps its tables of record, its
checkpoint and de-duplication state, its ledger and its reports under the lake's prefix, its tables in the catalog
it names; each event once across runs."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from html import escape
from pathlib import Path

import boto3
import pytest

from jobs import storage
from jobs.iceberg.catalog import OwnedByAnotherLake, open_catalog
from jobs.lake import Lake
from jobs.reporting import tally
from jobs.status import lake_status
from jobs.upkeep import repair
from tests.aws import Trail, reach_from
from tests.conftest import own_airflow_home
from tests.helpers import catalog_rows, command, deliver, events_of, put_raw, refusal, run_command, succeeded, with_nan

pytestmark = pytest.mark.integration

DAY = datetime(2024, 3, 1, tzinfo=UTC)


def keys(url: str) -> list[str]:
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    pages = boto3.client("s3").get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/")
    return [item["Key"][len(prefix) + 1 :] for page in pages for item in page.get("Contents", [])]


def events_in(url: str, branch: str = "ingest") -> list[tuple[str, str]]:
    return catalog_rows(url, "records", branch)


@pytest.mark.harness  # four runs of real processes (over a minute): `make test-harness`; in-process S3 runs stay in make test
def test_an_ingest_into_a_lake_in_s3_takes_each_event_once_and_keeps_what_matters_there(s3_lake, landing, tmp_path):
    deliver(landing, events_of(30, DAY, "a"), DAY + timedelta(hours=1))
    deliver(landing, events_of(10, DAY, "a") + events_of(5, DAY + timedelta(days=1), "b"), DAY + timedelta(hours=2))
    run = ("jobs.cloudtrail_ingest", "--landing", landing, "--lake", s3_lake, "--settle", "0 seconds")
    succeeded(command(*run, "--run-id", "first", "--catalog", "records"))
    expected = sorted([(f"a-{i}", "2024-03-01") for i in range(30)] + [(f"b-{i}", "2024-03-02") for i in range(5)])
    assert events_in(s3_lake) == expected

    # A later file, and one delivered again: only the new events, the catalog taken from $CLOUDTRAIL_CATALOG.
    deliver(landing, events_of(5, DAY, "a") + events_of(3, DAY + timedelta(days=1), "c"), DAY + timedelta(hours=3))
    succeeded(command(*run, "--run-id", "second", env=os.environ | {"CLOUDTRAIL_CATALOG": "records"}))
    assert events_in(s3_lake) == sorted([*expected, *((f"c-{i}", "2024-03-02") for i in range(3))])

    # `make status` on it: the checkpoint, the freshness of the place delivered and the last run, read from the lake.
    shown = command("tools.status", "--lake", s3_lake, "--landing", landing, env=os.environ | {"CLOUDTRAIL_CATALOG": "records"})
    succeeded(shown)
    assert "PROBLEMS" not in shown.stdout and "backlog: 0 landing files" in shown.stdout, shown.stdout
    assert "checkpoint: batch " in shown.stdout and "111122223333" in shown.stdout and "second" in shown.stdout, shown.stdout
    lake = Lake.at(s3_lake, "records")  # and the lake page's rows per date, counted by the table's manifests
    assert [(day.event_date, day.rows) for day in lake_status.daily_rows(lake, tally.read(lake))] == [("2024-03-01", 30), ("2024-03-02", 8)]

    found = keys(s3_lake)
    for place in ("_checkpoints/ingest/commits/1", "_checkpoints/ingest/offsets/1", "_checkpoints/ingest/last_success.json",
                  "reports/ingest/first.json", "reports/ingest/second.json", "reports/tally.json"):  # fmt: skip
        assert place in found, place
    assert any(key.startswith("_checkpoints/ingest/state/0/") for key in found), "the de-duplication state"
    assert any(key.startswith("_checkpoints/ingest/manifests/") for key in found), "the ledger"
    assert any(key.startswith("iceberg/warehouse/cloudtrail/events/data/event_date=2024-03-02/") for key in found)
    assert any(key.startswith("iceberg/warehouse/cloudtrail/quarantine/metadata/") for key in found)
    assert not (tmp_path / "scratch").exists(), "a folder landing fetches nothing: this machine keeps nothing"

    # The gate of the second run, as the DAG runs it: its report in the lake, the dates it passed recorded there.
    succeeded(command("jobs.validate_events", "--lake", s3_lake, "--run-id", "second", env=os.environ | {"CLOUDTRAIL_CATALOG": "records"}))
    report = json.loads(storage.at(f"{s3_lake}/reports/dq/second.json").read_text())
    assert report["verdict"] == "passed", report
    assert set(json.loads(storage.at(f"{s3_lake}/reports/dq/_validated.json").read_text())["dates"]) == {"2024-03-02"}, "the date it wrote"

    # The publish: main, which every reader of the catalog reads, takes the gated date's files in place; the date no
    # gate passed (the first run's 2024-03-01) is held back, nothing copied.
    succeeded(command("jobs.publish", "--lake", s3_lake, "--run-id", "p1", env=os.environ | {"CLOUDTRAIL_CATALOG": "records"}))
    assert events_in(s3_lake, "main") == [row for row in events_in(s3_lake) if row[1] == "2024-03-02"]
    data = [key for key in keys(s3_lake) if key.startswith("iceberg/warehouse/cloudtrail/events/data/")]
    assert not [key for key in keys(s3_lake.rsplit("/", 2)[0] + "/warehouse") if "/data/" in key], "no copy in the warehouse"
    assert data, "the files published are the lake's"

    # An investigation reads what main holds of its dates, through the catalog, from the objects.
    found = command("jobs.investigate", "calls_by_region_api", "--lake", s3_lake, "--from-date", "2024-03-01", "--to-date", "2024-03-02",
                    "--format", "csv", env=os.environ | {"CLOUDTRAIL_CATALOG": "records"})  # fmt: skip
    succeeded(found)
    assert sum(int(line.rsplit(",", 1)[1]) for line in found.stdout.splitlines()[1:]) == 8, found.stdout


def airflow_dags_test(env: dict[str, str], *args: str) -> None:
    """`airflow dags test DAG [DATE]` in its own process, as `make run` runs it; a failed run's task logs shown."""
    ran = subprocess.run([sys.executable, "-m", "airflow", "dags", "test", *args], capture_output=True, text=True, timeout=900, env=env)
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-4000:]


def test_a_first_run_into_a_new_lake_in_s3_with_nothing_delivered_yet_succeeds(spark, s3_lake, landing):
    """No manifest yet, so no folder under the prefix for the stream to read (S3 has none until an object is there):
    the run failed ("Option 'basePath' not found"), as a schedule's first run before CloudTrail's first delivery would."""
    reach_from(spark)
    (landing / "AWSLogs").mkdir(parents=True)
    run = ["--landing", str(landing), "--lake", s3_lake, "--catalog", "records", "--settle", "0 seconds"]
    assert run_command(spark, "cloudtrail_ingest", run) == 0
    deliver(landing, events_of(4, DAY, "a"), DAY + timedelta(hours=1))
    assert run_command(spark, "cloudtrail_ingest", run) == 0
    assert events_in(s3_lake) == [(f"a-{i}", "2024-03-01") for i in range(4)]


def test_a_driver_machine_lost_between_runs_leaves_the_next_driver_all_it_needs(spark, s3_lake, trail, tmp_path, monkeypatch):
    """Everything the first driver's machine held (its fetched objects, its Spark folders) deleted; a driver with the
    same settings on a fresh machine takes the new file and nothing twice. (A driver killed mid-run, its machine then
    deleted, and two drivers at once: the harness.)"""
    reach_from(spark)
    now = datetime.now(tz=UTC).replace(microsecond=0)
    for n in range(2):
        trail.deliver(events_of(8, now - timedelta(hours=2), f"m{n}"), now - timedelta(minutes=20), f"m-{n}")
    run = ["--landing", trail.url, "--lake", s3_lake, "--catalog", "records", "--settle", "0 seconds"]
    monkeypatch.setenv("CLOUDTRAIL_SCRATCH", str(tmp_path / "machine-a"))
    assert run_command(spark, "cloudtrail_ingest", run) == 0
    assert any((tmp_path / "machine-a").rglob("*.json.gz")), "machine a fetched the objects"
    shutil.rmtree(tmp_path / "machine-a")
    trail.deliver(events_of(3, now - timedelta(hours=1), "later"), now - timedelta(minutes=10), "later")
    monkeypatch.setenv("CLOUDTRAIL_SCRATCH", str(tmp_path / "machine-b"))
    assert run_command(spark, "cloudtrail_ingest", run) == 0
    assert [event_id for event_id, _ in events_in(s3_lake)] == trail.oracle() and len(trail.oracle()) == 19


def test_a_lake_made_again_where_an_earlier_one_was_plans_none_of_its_landing_s_copies(spark, s3_lake, trail, tmp_path, monkeypatch):
    """The driver's landing cache is keyed by the lake's location: a lake deleted and made again there, reading another
    landing (a test trail's lake moved over to the production trail), walked the earlier lake's copies and took them."""
    reach_from(spark)
    now = datetime.now(tz=UTC).replace(microsecond=0)
    trail.deliver(events_of(8, now - timedelta(hours=2), "test-trail"), now - timedelta(minutes=20), "test")
    first = ["--landing", trail.url, "--lake", s3_lake, "--catalog", "records", "--settle", "0 seconds"]
    assert run_command(spark, "cloudtrail_ingest", first) == 0
    storage.remove_tree(storage.at(s3_lake))  # the lake deleted; its tables stay in their catalog, a new one is made
    bucket = s3_lake.removeprefix("s3://").split("/")[0]
    settings = {"TYPE": "sql", "URI": f"sqlite:///{tmp_path / 'afresh.db'}", "WAREHOUSE": f"s3://{bucket}/afresh"}
    for key, value in settings.items():
        monkeypatch.setenv(f"PYICEBERG_CATALOG__AFRESH__{key}", value)
    production = Trail.create()
    production.deliver(events_of(3, now - timedelta(hours=1), "production"), now - timedelta(minutes=10), "production")
    run = ["--landing", production.url, "--lake", s3_lake, "--catalog", "afresh", "--settle", "0 seconds"]
    assert run_command(spark, "cloudtrail_ingest", run) == 0
    assert [event_id for event_id, _ in catalog_rows(s3_lake, "afresh")] == production.oracle() == [f"production-{i}" for i in range(3)]


def test_a_second_lake_in_s3_pointed_at_the_first_lake_s_tables_is_refused_as_another_lake_s(spark, s3_lake, trail):
    """Its checkpoint was held against the other lake's tables: refused as "behind the tables", whose mend (jobs.repair)
    would have rolled the first lake's tables back to the second's checkpoint."""
    reach_from(spark)
    now = datetime.now(tz=UTC).replace(microsecond=0)
    trail.deliver(events_of(5, now - timedelta(hours=2), "first"), now - timedelta(minutes=20), "first")
    assert (
        run_command(
            spark, "cloudtrail_ingest", ["--landing", trail.url, "--lake", s3_lake, "--catalog", "records", "--settle", "0 seconds"]
        )
        == 0
    )
    second = f"{s3_lake}-second"
    refused = f"cloudtrail.events belongs to the lake at {s3_lake}, not to this one ({second})"
    assert refused in refusal(command("jobs.cloudtrail_ingest", "--landing", trail.url, "--lake", second, "--catalog", "records"))
    with pytest.raises(OwnedByAnotherLake, match=re.escape(refused)):  # the door (`main`) turns it into that line, exit 2
        repair.repair(repair.parse_args(["--lake", second, "--catalog", "records", "--landing", trail.url]))
    assert [event_id for event_id, _ in events_in(s3_lake)] == trail.oracle() == [f"first-{i}" for i in range(5)]


@pytest.mark.harness  # three DAG runs of real processes (about 3 minutes): `make test-harness`; their arguments: test_dag
def test_the_dags_run_on_a_lake_in_s3_and_the_lake_page_reads_it(s3_lake, tmp_path, airflow_db, jobs_zip, monkeypatch):
    """The ingest DAG (its ingest, gate and publish), the compaction DAG and the derived DAG with CLOUDTRAIL_LAKE=s3://...
    and its catalog: everything through the lake and its catalog, nothing on this machine; then the lake page, in the
    API server's process, on that lake."""
    from starlette.requests import Request

    from cloudtrail_airflow import gate_view, lake_view

    landing = tmp_path / "landing"
    lake_env = {"CLOUDTRAIL_LAKE": s3_lake, "CLOUDTRAIL_CATALOG": "records", "CLOUDTRAIL_LANDING": str(landing)}
    env = os.environ | lake_env | own_airflow_home(airflow_db, tmp_path / "airflow")
    deliver(landing, events_of(5, DAY, "cmd"), DAY + timedelta(minutes=10))  # by hand first: two runs of files
    nan = put_raw(landing, gzip.compress(with_nan("nan").encode()), DAY + timedelta(minutes=15), suffix=".json.gz")
    succeeded(command("jobs.cloudtrail_ingest", "--landing", landing, "--settle", "0 seconds", "--run-id", "by-hand", env=env))
    deliver(landing, events_of(20, DAY, "dag") + events_of(3, DAY, "dag"), DAY + timedelta(minutes=20))
    airflow_dags_test(env, "cloudtrail_ingest", "2024-03-01")
    expected = sorted([(f"cmd-{i}", "2024-03-01") for i in range(5)] + [(f"dag-{i}", "2024-03-01") for i in range(20)])
    expected = sorted([*expected, ("nan-0", "2024-03-01"), ("nan-2", "2024-03-01")])
    assert events_in(s3_lake, "main") == expected, "ingested, gated and published, each event once"
    (report,) = [key for key in keys(s3_lake) if key.startswith("reports/ingest/") and "by-hand" not in key]
    body = json.loads(storage.at(f"{s3_lake}/{report}").read_text())
    assert (body["status"], body["rows_written"], body["duplicates_dropped"]) == ("succeeded", 20, 3), body
    assert any(key.startswith("reports/publish/") for key in keys(s3_lake))

    assert len(data_files(s3_lake, "2024-03-01")) > 1, "a file a batch at least"
    airflow_dags_test(env, "cloudtrail_compact", "2024-04-01")
    assert len(data_files(s3_lake, "2024-03-01")) == 1 and events_in(s3_lake) == expected, "compacted, every event kept"
    airflow_dags_test(env, "cloudtrail_derived")
    catalog = open_catalog(Lake.at(s3_lake, "records"), "records")
    assert len(catalog.load_table("cloudtrail.ocsf_api_activity").scan().to_arrow()) == 27
    assert catalog.load_table("cloudtrail.activity_hourly").location().startswith(f"{s3_lake}/iceberg/")
    assert not (tmp_path / "airflow" / "lake").exists() and not (tmp_path / "scratch").exists(), "nothing on this machine"

    for name, value in lake_env.items():
        monkeypatch.setenv(name, value)
    shown = lake_view.status_json()
    assert shown["problems"] == [] and shown["backlog"]["files"] == 0, shown
    assert [(day["event_date"], day["rows"]) for day in shown["rows_per_event_date"]] == [("2024-03-01", 27)]
    assert shown["checkpoint"]["committed_batch"] is not None and shown["checkpoint"]["state_bytes"] > 0, shown["checkpoint"]
    assert [verdict["verdict"] for verdict in shown["gate_verdicts"]][-1] == "passed", shown["gate_verdicts"]
    assert [row["rows"]["ocsf/api_activity"] for row in shown["derived_rows_per_event_date"]["ocsf"]] == [27]
    request = Request({"type": "http", "root_path": ""})
    page = lake_view.lake_page(request, "").body.decode()
    assert f"lake {s3_lake}" in page and "cannot be read" not in page and "27 rows, 0 late" in page, page[:3000]
    assert body["run_id"] in gate_view.gates_page(request).body.decode()
    found = lake_view.lake_page(request, "2024-03-01").body.decode()
    assert found.count("<td>ingested</td>") == 2 and "<td>ingested and quarantined</td>" in found, "the file ledger, searched"
    assert "cannot be read" not in found and "<h3>invalid_json</h3>" in found, "the quarantine, read in place"
    run = lake_view.run_page("cloudtrail_ingest", body["run_id"]).body.decode()
    assert f"run {escape(body['run_id'])}: succeeded" in run, run[:2000]

    # The record repaired by hand and replayed from the quarantine, which the replay reads in place.
    nan.write_bytes(gzip.compress(with_nan("nan").replace("NaN", "0.5").encode()))
    replay = ("jobs.replay_quarantine", "--landing", landing, "--reason", "invalid_json", "--settle", "0 seconds")
    succeeded(command(*replay, env=env))
    assert events_in(s3_lake) == sorted([*expected, ("nan-1", "2024-03-01")])


def data_files(url: str, day: str) -> list[str]:
    """The data files of the events' date on `ingest`, as the catalog names them."""
    table = open_catalog(Lake.at(url, "records"), "records").load_table("cloudtrail.events")
    tasks = table.scan(snapshot_id=table.metadata.snapshot_by_name("ingest").snapshot_id, row_filter=f"event_date = '{day}'").plan_files()
    return sorted(task.file.file_path for task in tasks)


@pytest.mark.harness  # minutes of commands, each its own process: `make test-harness`, which CI runs
def test_a_compaction_and_the_derived_jobs_run_on_a_lake_in_s3(s3_lake, landing):
    """A compaction rewrites a date's files into one, keeping every event; the derived tables are built from the events
    into the lake's catalog, their files in the lake."""
    run = ("jobs.cloudtrail_ingest", "--landing", landing, "--lake", s3_lake, "--settle", "0 seconds", "--catalog", "records")
    for hour in (1, 2, 3):
        deliver(landing, events_of(20, DAY, f"r{hour}"), DAY + timedelta(hours=hour))
        succeeded(command(*run, "--run-id", f"run{hour}"))
    before, files = events_in(s3_lake), data_files(s3_lake, "2024-03-01")
    assert len(before) == 60 and len(files) >= 3, files

    compacted = command("jobs.compact", "--lake", s3_lake, "--closed-at", "2024-04-01", "--run-id", "c1", "--catalog", "records")
    succeeded(compacted)
    summary = json.loads(compacted.stdout)
    assert summary["swapped"] is True and summary["dates"]["2024-03-01"]["files_after"] == 1, summary
    assert events_in(s3_lake) == before
    after = data_files(s3_lake, "2024-03-01")
    assert len(after) == 1 and after[0].startswith(f"{s3_lake}/iceberg/") and after[0] not in files, after

    for job in ("activity", "ocsf"):
        succeeded(command(f"jobs.{job}", "--lake", s3_lake, "--run-id", f"{job}1", "--catalog", "records"))
    catalog = open_catalog(Lake.at(s3_lake, "records"), "records")
    hourly = catalog.load_table("cloudtrail.activity_hourly")
    assert sum(row["events"] for row in hourly.scan().to_arrow().to_pylist()) == 60
    assert len(catalog.load_table("cloudtrail.ocsf_api_activity").scan().to_arrow()) == 60
    for name in ("activity_hourly", "ocsf_api_activity"):
        location = catalog.load_table(f"cloudtrail.{name}").location()
        assert location.startswith(f"{s3_lake}/iceberg/"), location
    assert not [key for key in keys(s3_lake.rsplit("/", 2)[0] + "/warehouse") if "/data/" in key], "nothing in the catalog's warehouse"

    # A rebuild of the date from the landing: one overwrite, the same events; its rollback puts the compacted file back.
    rebuild = ("jobs.rebuild", "--lake", s3_lake, "--catalog", "records")
    succeeded(command(*rebuild, "--landing", landing, "--from-date", "2024-03-01", "--to-date", "2024-03-01", "--run-id", "b1"))
    assert events_in(s3_lake) == before and data_files(s3_lake, "2024-03-01") != after
    succeeded(command(*rebuild, "--rollback", "b1"))
    assert events_in(s3_lake) == before and data_files(s3_lake, "2024-03-01") == after


@pytest.mark.harness  # minutes of commands, each its own process: `make test-harness`, which CI runs
def test_a_rescale_of_a_lake_in_s3_keeps_every_key_and_a_swap_cut_short_is_finished(s3_lake, landing):
    run = ("jobs.cloudtrail_ingest", "--landing", landing, "--lake", s3_lake, "--settle", "0 seconds", "--catalog", "records")
    seen = events_of(10, DAY, "a")
    deliver(landing, seen, DAY + timedelta(hours=1))
    succeeded(command(*run, "--run-id", "first"))

    succeeded(command("jobs.rescale", "--lake", s3_lake, "--state-partitions", "3", "--catalog", "records", "--run-id", "r3"))
    state = {key.split("/")[4] for key in keys(s3_lake) if key.startswith("_checkpoints/ingest/state/0/") and key.count("/") > 4}
    assert state == {"0", "1", "2", "_metadata"}, state
    assert any(key.startswith("_replaced/state/r3/0/3/") for key in keys(s3_lake)), "the old state, its four partitions, kept"

    # The events seen before the rescale come again beside new ones: the copies are dropped.
    deliver(landing, seen + events_of(4, DAY, "b"), DAY + timedelta(hours=2))
    succeeded(command(*run, "--run-id", "second"))
    assert events_in(s3_lake) == sorted((f"{prefix}-{i}", "2024-03-01") for prefix, n in (("a", 10), ("b", 4)) for i in range(n))


def copy_prefix(bucket: str, source: str, target: str) -> None:
    s3 = boto3.client("s3")
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=source):
        for item in page.get("Contents", []):
            s3.copy_object(Bucket=bucket, Key=target + item["Key"][len(source) :], CopySource={"Bucket": bucket, "Key": item["Key"]})


def delete_prefix(bucket: str, prefix: str) -> None:
    s3 = boto3.client("s3")
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            s3.delete_object(Bucket=bucket, Key=item["Key"])


@pytest.mark.harness  # minutes of commands, each its own process: `make test-harness`, which CI runs
def test_a_repair_of_a_lake_in_s3_rolls_the_tables_back_to_a_checkpoint_put_back_from_a_backup(s3_lake, landing):
    run = ("jobs.cloudtrail_ingest", "--landing", landing, "--lake", s3_lake, "--settle", "0 seconds", "--catalog", "records")
    deliver(landing, events_of(6, DAY, "a"), DAY + timedelta(hours=1))
    succeeded(command(*run, "--run-id", "first"))
    bucket, _, prefix = s3_lake.removeprefix("s3://").partition("/")
    copy_prefix(bucket, f"{prefix}/_checkpoints/", f"{prefix}-backup/_checkpoints/")
    deliver(landing, events_of(4, DAY, "b") + events_of(2, DAY, "a"), DAY + timedelta(hours=2))
    succeeded(command(*run, "--run-id", "second"))
    expected = events_in(s3_lake)
    assert len(expected) == 10

    delete_prefix(bucket, f"{prefix}/_checkpoints/")  # the checkpoint put back as the first run left it
    copy_prefix(bucket, f"{prefix}-backup/_checkpoints/", f"{prefix}/_checkpoints/")
    assert "has committed batches up to" in refusal(command(*run, "--run-id", "refused"))
    succeeded(command("jobs.repair", "--lake", s3_lake, "--landing", landing, "--catalog", "records"))
    assert {event_id[0] for event_id, _ in events_in(s3_lake)} == {"a"}, "the second run's batches out of the tables"
    succeeded(command(*run, "--run-id", "third"))
    assert events_in(s3_lake) == expected, "read again, once"


def test_a_swap_of_the_state_cut_short_in_s3_is_finished_by_the_next_rescale(aws):
    """In S3 a folder moves object by object: a rescale killed while setting the old state aside left part of it in
    each place, which the next run took for a swap done (the old state there) and left the lake on the old state."""
    from jobs.upkeep import rescale

    bucket = f"lake-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    lake = Lake.at(f"s3://{bucket}/lake", "records")
    (lake.checkpoint / "offsets" / "4").write_text('v1\n{"conf":{"spark.sql.shuffle.partitions":"2"}}\n{}')
    old = {f"0/{p}/5.zip": f"old {p}" for p in range(2)}
    new = {f"0/{p}/5.zip": f"new {p}" for p in range(3)}
    noted = rescale.Rescale(lake, "cut", 3, 5)
    for name, text in old.items():
        (noted.state / name).write_text(text)
    for name, text in new.items():
        (noted.seeded / "state" / name).write_text(text)
    noted.note()
    storage.move(noted.state / "0" / "0", noted.old / "0" / "0")  # the move, killed after its first partition

    assert rescale.Rescale.noted(lake).phase == rescale.BEGUN
    rescale.swap(rescale.Rescale.noted(lake))
    assert {name: (noted.old / name).read_text() for name in old} == old, "the whole old state set aside"
    assert sorted(str(p.relative_to(noted.state)) for p in noted.state.rglob("*.zip")) == sorted(new), "the new state, alone"
    assert all((noted.state / name).read_text() == text for name, text in new.items())
    assert not lake.rescaling.exists() and not noted.work.exists()
    assert '"spark.sql.shuffle.partitions":"3"' in (lake.checkpoint / "offsets" / "4").read_text()


def test_a_new_checkpoint_in_s3_has_a_folder_for_each_state_partition_as_its_first_batch_starts(spark, aws):
    """Spark's state maintenance may list a partition's folder before the partition's first version is written; in S3 no
    folder is there until something is in it, so the list failed and a clean run logged a stack trace."""
    from jobs.spark.checkpoint import make_state_folders

    bucket = f"lake-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    # The shared session's JVM started before moto and its keys: this bucket's S3A is pointed at it.
    conf = spark._jsc.hadoopConfiguration()
    moto = {"endpoint": os.environ["AWS_ENDPOINT_URL"], "path.style.access": "true", "connection.ssl.enabled": "false",
            "aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
            "access.key": os.environ["AWS_ACCESS_KEY_ID"], "secret.key": os.environ["AWS_SECRET_ACCESS_KEY"]}  # fmt: skip
    for key, value in moto.items():
        conf.set(f"fs.s3a.bucket.{bucket}.{key}", value)
    checkpoint = storage.at(f"s3://{bucket}/lake/_checkpoints/ingest")
    (checkpoint / "offsets" / "0").write_text('v1\n{"conf":{"spark.sql.shuffle.partitions":"3"}}\n{}')  # batch 0 planned

    make_state_folders(spark, checkpoint)
    fs = spark._jvm.org.apache.hadoop.fs
    for partition in range(3):
        folder = fs.Path(f"{checkpoint}/state/0/{partition}")
        assert len(folder.getFileSystem(conf).listStatus(folder)) == 0, "an empty folder, listed without an error"
    assert not fs.Path(f"{checkpoint}/state/0/3").getFileSystem(conf).exists(fs.Path(f"{checkpoint}/state/0/3"))


@pytest.mark.harness
def test_the_chaos_harness_kills_ingests_of_a_lake_in_s3_and_every_event_stays_once(tmp_path):
    """`make chaos-s3`'s smoke run: two SIGKILLs at random phases, then runs until done; the table through its catalog."""
    argv = [sys.executable, "-m", "tests.chaos", "--kills", "2", "--seed", "3", "--work", str(tmp_path), "--s3"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "every event once" in result.stdout.splitlines()[-1]


def driver_machine(tmp_path: Path, name: str) -> dict[str, str]:
    """The environment of a driver on a machine of its own: its scratch and temporary folders; a dead driver's lease
    lapses in 6 s (by default 2 minutes)."""
    folders = {"CLOUDTRAIL_SCRATCH": str(tmp_path / name / "scratch"), "TMPDIR": str(tmp_path / name / "tmp")}
    (tmp_path / name / "tmp").mkdir(parents=True, exist_ok=True)
    return os.environ | folders | {"CLOUDTRAIL_LEASE": "6 seconds"}


def queue_job(trail: Trail, lake: str) -> list[str]:
    """An ingest of an S3 landing on its queue into the lake, a file per batch."""
    return ["--landing", trail.url, "--lake", lake, "--catalog", "records", "--queue-url", trail.queue_url, "--visibility-timeout", "2",
            "--reconcile-interval", "3650 days", "--max-files-per-trigger", "1", "--settle", "0 seconds"]  # fmt: skip


@pytest.mark.harness  # two drivers' processes (about 50 s): `make test-harness`, which CI runs; between runs: make test's above
def test_a_driver_machine_lost_mid_run_leaves_the_next_run_on_a_fresh_machine_exact(s3_lake, trail, tmp_path):
    """An S3 landing into a lake in S3: the driver is killed while a batch reads its files, and everything its machine
    held is deleted (its fetched objects, its Spark folders); a fresh machine with the same settings but a scratch folder
    of its own runs next: each event once, nothing a machine kept needed."""
    from tests.aws import cloudtrail_sns

    now = datetime.now(tz=UTC).replace(microsecond=0)
    delivered = [trail.deliver(events_of(30, now - timedelta(hours=2), f"a{n}"), now, f"a-{n}") for n in range(3)]
    trail.notify_many([cloudtrail_sns(trail.bucket, [key]) for key in delivered])
    job = queue_job(trail, s3_lake)
    argv = [sys.executable, "-m", "tests.fault_runner", "reading", "1", "--", *job, "--run-id", "killed"]
    killed = subprocess.run(argv, start_new_session=True, capture_output=True, text=True, timeout=600, env=driver_machine(tmp_path, "a"))
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert any(key.startswith("_checkpoints/ingest/offsets/1") for key in keys(s3_lake)), "killed with batch 1 planned"
    assert not any(key.startswith("_checkpoints/ingest/commits/1") for key in keys(s3_lake)), "and not committed"
    assert (tmp_path / "a" / "scratch").exists(), "machine a fetched the objects"
    shutil.rmtree(tmp_path / "a")

    time.sleep(2.5)  # the messages the killed run received and did not delete come back
    again = [trail.deliver(events_of(10, now - timedelta(hours=1), "b"), now, "b-0"), delivered[0]]  # one new, one again
    trail.notify_many([cloudtrail_sns(trail.bucket, [key]) for key in again])
    succeeded(command("jobs.cloudtrail_ingest", *job, "--run-id", "fresh", env=driver_machine(tmp_path, "b")))
    assert [event_id for event_id, _ in events_in(s3_lake)] == trail.oracle() and len(trail.oracle()) == 100, "each event once"
    fresh = json.loads(storage.at(f"{s3_lake}/reports/ingest/fresh.json").read_text())
    assert fresh["deliveries"]["fetched_again"]["files"] == 2, "batch 1's file, which the dead run planned, and batch 2's"
    assert trail.waiting() == 0


@pytest.mark.harness  # three drivers' processes (about a minute): `make test-harness`, which CI runs
def test_two_drivers_at_once_on_a_lake_in_s3_never_run_together(s3_lake, trail, tmp_path):
    """Two drivers start at once on two machines (two deployments by mistake): one runs, the other refuses in one line
    naming it; then the one left takes what the first did not. Each event once."""
    from tests.aws import cloudtrail_sns

    now = datetime.now(tz=UTC).replace(microsecond=0)
    job = queue_job(trail, s3_lake)
    trail.notify(
        cloudtrail_sns(trail.bucket, [trail.deliver(events_of(30, now - timedelta(hours=2), f"a{n}"), now, f"a-{n}") for n in range(3)])
    )
    first = subprocess.Popen([sys.executable, "-m", "jobs.cloudtrail_ingest", *job, "--run-id", "on-c"], env=driver_machine(tmp_path, "c"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    lease = storage.at(f"{s3_lake}/_checkpoints/ingest.lock")
    deadline = time.monotonic() + 120
    while not (lease.exists() and '"released": false' in (held := storage.read_whole(lease)) and "on-c" in held):
        assert first.poll() is None and time.monotonic() < deadline, "machine c never took the lake"
        time.sleep(0.2)
    second = command("jobs.cloudtrail_ingest", *job, "--run-id", "on-d", "--lock-wait", "0", env=driver_machine(tmp_path, "d"))
    errors = [line for line in second.stderr.splitlines() if " ERROR " in line]
    assert second.returncode == 75 and len(errors) == 1 and "ingest run on-c (pid" in errors[0], second.stderr[-3000:]
    assert "Traceback" not in second.stderr
    _, stderr = first.communicate(timeout=600)
    assert first.returncode == 0, stderr[-3000:]
    trail.notify(cloudtrail_sns(trail.bucket, [trail.deliver(events_of(5, now, "d"), now, "d-0")]))
    succeeded(command("jobs.cloudtrail_ingest", *job, "--run-id", "on-d-again", env=driver_machine(tmp_path, "d")))
    assert [event_id for event_id, _ in events_in(s3_lake)] == trail.oracle() and len(trail.oracle()) == 95, "nothing twice"
    assert trail.waiting() == 0
