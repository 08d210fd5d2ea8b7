"""DAG tests: import and parse time, policies, parameter checks, and dag.test with real Spark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobs.iceberg import catalog
from jobs.lake import ACTIVITY, DERIVED, OCSF, Lake
from tests.conftest import ROOT
from tests.helpers import DAY, deliver, derived_sql, event, events_of

DAG_FILES = [ROOT / "dags" / f"{name}.py" for name in ("cloudtrail_ingest", "cloudtrail_derived", "cloudtrail_compact")]
HEAVY_MODULES = ["pyspark", "great_expectations", "pandas", "duckdb", "pyarrow", "py4j"]


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(ROOT / "dags"))


@pytest.fixture(scope="module")
def dag(dagbag):
    return dagbag.dags["cloudtrail_ingest"]


def test_dagbag_imports_without_errors_and_each_file_parses_under_a_second(dagbag):
    assert dagbag.import_errors == {}
    assert {"cloudtrail_ingest", "cloudtrail_derived", "cloudtrail_compact"} <= set(dagbag.dag_ids)
    assert dagbag.dagbag_stats and all(stat.duration < timedelta(seconds=1) for stat in dagbag.dagbag_stats)


@pytest.mark.parametrize("dag_file", DAG_FILES, ids=lambda path: path.stem)
def test_the_dag_file_imports_nothing_heavy(dag_file):
    probe = (
        f"import runpy, sys; runpy.run_path({str(dag_file)!r}); "
        f"print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY_MODULES!r})))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=os.environ).stdout.strip()
    assert loaded == ""


def test_policies(dag):
    assert dag.max_active_runs == 1
    assert {"cloudtrail", "ingest"} <= set(dag.tags)
    assert dag.doc_md and "### CloudTrail ingest" in dag.doc_md
    assert [t.task_id for t in dag.topological_sort()][0] == "plan"
    assert {"rebuild_dry_run", "ingest"} <= dag.get_task("plan").downstream_task_ids, "plan branches: a dry run only lists"
    assert dag.get_task("choose_mode").upstream_task_ids == {"ingest", "plan"}
    assert dag.get_task("choose_mode").downstream_task_ids == {"rebuild", "rebuild_summary", "choose_gate"}
    assert dag.get_task("choose_gate").upstream_task_ids == {"plan", "choose_mode", "rebuild_summary"}
    assert dag.get_task("dq_gate").upstream_task_ids == {"plan", "choose_gate"}
    assert dag.get_task("announce").upstream_task_ids == {"choose_gate", "dq_gate"}, "after the ingest's gate or the gate's own"
    assert dag.get_task("publish").upstream_task_ids == {"plan", "choose_gate", "dq_gate"}, "the lake the plan checked"
    ingest = dag.get_task("ingest")
    assert ingest.retries >= 2 and ingest.retry_exponential_backoff
    writers = {task.task_id for task in dag.tasks if task.pool == "cloudtrail_lake"}
    assert writers == {"ingest", "rebuild"}, "every task that writes the lake queues for the pool's one slot"
    assert all(task.on_failure_callback for task in dag.tasks)
    assert dag.get_task("announce").outlets[0].name == "cloudtrail_events" and not dag.get_task("publish").outlets
    assert ingest._conn_id == "spark_default"


def test_the_derived_dag_runs_on_the_events_asset_and_queues_for_the_lake(dagbag):
    """One task per derived job, named after it, in DERIVED's order; the Asset and the publish after the last."""
    dag = dagbag.dags["cloudtrail_derived"]
    assert [asset.name for asset in dag.timetable.asset_condition.objects] == ["cloudtrail_events"]
    assert dag.max_active_runs == 1 and dag.doc_md and "### CloudTrail activity" in dag.doc_md
    before = "plan"
    for derived in DERIVED:
        job = dag.get_task(derived.job)
        assert job.pool == "cloudtrail_lake" and job.retries >= 2 and job.application.endswith(f"jobs/{derived.job}.py")
        assert job.upstream_task_ids == {"plan"} | {before}, derived.job
        before = derived.job
    assert dag.get_task("announce").upstream_task_ids == {before} and dag.get_task("publish").upstream_task_ids == {"plan", before}
    assert dag.get_task("announce").outlets[0].name == "cloudtrail_derived"


def test_a_new_derived_table_is_one_definition_the_dag_and_the_lake_page_follow(monkeypatch, tmp_path):
    """What a maintainer adds for a table computed from the events date by date, besides its module and suites: one
    entry of jobs/lake.py's DERIVED (here added in place, as an edit of the tuple would). The DAG gets its task, after
    the others and before the Asset is published, submitting jobs/<job>.py with the run form's arguments; the lake
    page and status.json get its section from the job's state."""
    from airflow.dag_processing.dagbag import DagBag
    from starlette.requests import Request

    from cloudtrail_airflow import lake_view
    from jobs import lake
    from jobs.derived.state import record_built

    toy = lake.Derived("toy", "Toy counts", {"toy_hourly": (lake.EVENT_DATE,)})
    for module in (lake, lake_view):
        monkeypatch.setattr(module, "DERIVED", (*lake.DERIVED, toy))
    dag = DagBag(dag_folder=str(ROOT / "dags" / "cloudtrail_derived.py")).dags["cloudtrail_derived"]
    task = dag.get_task("toy")
    assert task.upstream_task_ids == {"plan", DERIVED[-1].job} and dag.get_task("announce").upstream_task_ids == {"toy"}
    assert task.application.endswith("jobs/toy.py") and task.pool == "cloudtrail_lake"

    root = Path(os.environ["CLOUDTRAIL_LAKE"]) / f"toy-{tmp_path.name}"
    counts = {"toy_hourly": {"2024-03-01": 7}}, {"toy_hourly": {"2024-03-01": 1}}
    record_built(Lake(root), toy, {"2024-03-01": "built"}, *counts)
    monkeypatch.setenv("CLOUDTRAIL_LAKE", str(root))
    shown = lake_view.status_json()["derived_rows_per_event_date"]
    toy_rows = [{"event_date": "2024-03-01", "rows": {"toy_hourly": 7}, "folders": {"toy_hourly": 1}}]
    assert shown == {**{derived.job: [] for derived in DERIVED}, "toy": toy_rows}
    page = lake_view.lake_page(Request({"type": "http", "root_path": ""}), "").body.decode()
    assert "<h2>Toy counts: rows per event date (last 30 dates)</h2>" in page and "<th>toy_hourly rows</th>" in page


def test_the_compaction_dag_compacts_the_dates_closed_at_its_data_interval_end(dagbag):
    from cloudtrail_airflow.params import InvalidRunParams, plan_compact
    from cloudtrail_airflow.settings import load_settings

    dag = dagbag.dags["cloudtrail_compact"]
    assert dag.max_active_runs == 1 and dag.doc_md and "### CloudTrail compaction" in dag.doc_md
    assert dag.get_task("compact").pool == "cloudtrail_lake" and dag.get_task("compact").upstream_task_ids == {"plan"}
    settings = load_settings()
    lake = str(settings.lake / "x")
    end = datetime(2024, 3, 10, 1, tzinfo=UTC)
    assert plan_compact({"lake": lake}, settings, "r1", end)[:6] == ["--lake", lake, "--run-id", "r1", "--closed-at", "2024-03-10"]
    with pytest.raises(InvalidRunParams):
        plan_compact({"lake": "/etc"}, settings, "r1", end)


def test_on_a_lake_in_s3_every_task_is_handed_the_lake_and_its_catalog(monkeypatch):
    """CLOUDTRAIL_LAKE=s3://... was refused (before it, a folder named `s3:` the runs filled): each job of each DAG gets
    the lake and the catalog its tables of record are in; a run's `lake` is the configured one, and nothing else."""
    from airflow.dag_processing.dagbag import DagBag

    from cloudtrail_airflow.params import InvalidRunParams, dag_params, plan_compact, plan_derived, plan_run
    from cloudtrail_airflow.settings import load_settings

    lake = "s3://acme-security/lakes/org"
    monkeypatch.setenv("CLOUDTRAIL_LAKE", lake)
    with pytest.raises(ValueError, match=f"CLOUDTRAIL_LAKE={lake}: a lake in S3 names the catalog its tables are in"):
        load_settings()
    monkeypatch.setenv("CLOUDTRAIL_CATALOG", "records")
    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    assert bag.dags["cloudtrail_ingest"].get_task("announce").outlets[0].uri == f"{lake}/events"
    settings = load_settings()
    params = {name: param.value for name, param in dag_params(settings).items()}
    assert params["lake"] == lake
    planned = plan_run({**params, "mode": "rebuild"}, settings, "r", DAY, DAY + timedelta(days=1))
    for args in (planned["ingest_args"], planned["rebuild_args"], planned["validate_args"], plan_derived({"lake": lake}, settings, "r"),
                 plan_compact({"lake": lake + "/"}, settings, "r", DAY)):  # fmt: skip
        assert args[args.index("--lake") :][:4] == ["--lake", lake, "--catalog", "records"], args
    for other in ("s3://acme-security/lakes/other", "/tmp/lake"):
        with pytest.raises(InvalidRunParams, match=f"lake='{other}' is not the configured lake {lake}"):
            plan_run({**params, "lake": other}, settings, "r", DAY, DAY)
    monkeypatch.setenv("CLOUDTRAIL_LAKE", "gs://acme-security/lake")
    with pytest.raises(ValueError, match="a lake is a folder or s3://BUCKET/PREFIX"):
        load_settings()


def test_activity_parameters_are_checked_before_spark_starts(tmp_path):
    from cloudtrail_airflow.params import InvalidRunParams, plan_derived
    from cloudtrail_airflow.settings import load_settings

    settings = load_settings()
    lake = str(settings.lake / "x")
    assert plan_derived({"lake": lake}, settings, "r1")[:4] == ["--lake", lake, "--run-id", "r1"]
    dated = {"lake": lake, "from_date": "2024-03-01", "to_date": "2024-03-02"}
    assert plan_derived(dated, settings, "r1")[4:8] == ["--from-date", "2024-03-01", "--to-date", "2024-03-02"]
    backwards = {"lake": lake, "from_date": "2024-03-02", "to_date": "2024-03-01"}
    for bad in ({"lake": "/etc"}, {"lake": lake, "from_date": "2024-03-02"}, backwards):
        with pytest.raises(InvalidRunParams):
            plan_derived(bad, settings, "r1")


def test_run_parameters_are_checked_before_spark_starts(tmp_path):
    from cloudtrail_airflow.params import InvalidRunParams, plan_run, rebuild_dates
    from cloudtrail_airflow.settings import load_settings

    settings = load_settings()
    base = {"landing": str(settings.landing), "lake": str(settings.lake), "dedup_horizon": "2 days", "max_bytes_per_trigger": "64m"}
    plan = plan_run(base, settings, "manual__1", DAY, DAY)
    assert plan["rebuild_args"] == [], "incremental is the default"
    assert plan["ingest_args"][-8:-6] == ["--max-bytes-per-trigger", "64m"]
    assert plan["ingest_args"][-6:-2] == ["--gate-from", "2024-03-01", "--gate-to", "2024-03-01"], "the ingest gates what it wrote"
    by_files = plan_run({**base, "max_files_per_trigger": 10}, settings, "r", DAY, DAY)["ingest_args"]
    assert by_files[-8:-6] == ["--max-files-per-trigger", "10"]
    with pytest.raises(InvalidRunParams, match="lake='/etc' is outside"):
        plan_run({**base, "lake": "/etc"}, settings, "r", DAY, DAY)
    with pytest.raises(InvalidRunParams, match="outside"):
        plan_run({**base, "landing": str(settings.landing / ".." / "elsewhere")}, settings, "r", DAY, DAY)
    with pytest.raises(InvalidRunParams, match="after validate_to"):
        plan_run({**base, "validate_from": "2024-03-02", "validate_to": "2024-03-01"}, settings, "r", DAY, DAY)
    with pytest.raises(InvalidRunParams, match="not a date"):
        plan_run({**base, "validate_from": "yesterday"}, settings, "r", DAY, DAY)
    replay = {**base, "replay_quarantine": True, "replay_reason": "invalid_json", "replay_from": "2024-03-01"}
    assert plan_run(replay, settings, "r", DAY, DAY)["ingest_args"][-11:-8] == [
        "--replay-quarantine", "--replay-reason=invalid_json", "--replay-from=2024-03-01",
    ]  # fmt: skip
    rebuilding = plan_run({**base, "mode": "rebuild"}, settings, "r", DAY, DAY + timedelta(days=1))
    assert "--gate-from" not in rebuilding["ingest_args"], "a rebuild's run gates after the rebuild, in dq_gate"
    daily = rebuilding["rebuild_args"]
    assert daily[daily.index("--from-date") :][:4] == ["--from-date", "2024-03-01", "--to-date", "2024-03-01"]
    assert plan_run({**base, "mode": "rebuild"}, settings, "r", DAY, DAY + timedelta(hours=1))["rebuild_args"] == []
    assert rebuild_dates(DAY + timedelta(hours=23), DAY + timedelta(days=1)) == [DAY.date()], "the hourly run that ends the day"
    assert rebuild_dates(DAY, DAY + timedelta(days=3)) == [DAY.date() + timedelta(days=n) for n in range(3)]
    with pytest.raises(InvalidRunParams, match="mode='repair' must be one of incremental, rebuild"):
        plan_run({**base, "mode": "repair"}, settings, "r", DAY, DAY)
    with pytest.raises(InvalidRunParams, match="replay_from 2024-03-02 is after replay_to 2024-03-01"):
        plan_run({**replay, "replay_from": "2024-03-02", "replay_to": "2024-03-01"}, settings, "r", DAY, DAY)


def test_a_run_without_a_logical_date_stands_for_the_moment_it_was_due():
    from types import SimpleNamespace

    from cloudtrail_airflow.params import run_interval

    triggered = {"dag_run": SimpleNamespace(run_after=DAY + timedelta(hours=5))}  # POST dagRuns with "logical_date": null
    assert run_interval(triggered) == (DAY + timedelta(hours=5), DAY + timedelta(hours=5))
    scheduled = {"data_interval_start": DAY, "data_interval_end": DAY + timedelta(hours=1), **triggered}
    assert run_interval(scheduled) == (DAY, DAY + timedelta(hours=1))


def states(run) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}


def test_invalid_params_fail_the_run_before_spark(dag, dag_roots):
    run = dag.test(logical_date=datetime(2024, 3, 2, tzinfo=UTC), run_conf={"lake": "/etc"})
    assert str(run.state) == "failed"
    assert states(run)["plan"] == "failed" and states(run)["ingest"] == "upstream_failed"


def test_dag_run_end_to_end_with_real_spark(dag, dag_roots):
    landing, lake = dag_roots
    deliver(landing, events_of(50, DAY, "dag") + events_of(5, DAY, "dag"), DAY + timedelta(minutes=20))
    run = dag.test(logical_date=datetime(2024, 3, 1, tzinfo=UTC), run_conf={"landing": str(landing), "lake": str(lake)})
    assert str(run.state) == "success", states(run)
    assert len(table_rows_via_files(lake)) == 50
    report = json.loads(next((lake / "reports" / "ingest").glob("*.json")).read_text())
    assert report["run_id"] == run.run_id and report["rows_written"] == 50 and report["duplicates_dropped"] == 5
    gate = json.loads(Lake(lake).gate_report(run.run_id).read_text())
    assert gate["verdict"] == "passed" and gate["event_dates"] == ["2024-03-01"]
    assert states(run)["dq_gate"] == "skipped" and states(run)["announce"] == "success", "gated in the ingest's application"
    assert states(run)["publish"] == "success"
    events = catalog.open_catalog(Lake.at(lake), None).load_table("cloudtrail.events").scan(selected_fields=("eventID",)).to_arrow()
    assert events.num_rows == 50, "the gated date is in the embedded Iceberg catalog"

    quiet = dag.test(logical_date=datetime(2024, 3, 1, tzinfo=UTC), run_conf={"landing": str(landing), "lake": str(lake)})
    assert str(quiet.state) == "success", states(quiet)
    assert states(quiet)["dq_gate"] == "skipped" and states(quiet)["announce"] == "skipped", "nothing new: no Spark at all"
    assert states(quiet)["publish"] == "success", "a publish an earlier run could not finish is finished"
    skipped = json.loads(Lake(lake).gate_report(quiet.run_id).read_text())
    assert skipped["verdict"] == "skipped" and run.run_id in skipped["reason"]


@pytest.mark.harness  # the derived DAG's every task on real Spark (about a minute): `make test-harness`; on S3 there too
def test_the_derived_dag_builds_the_derived_tables_with_real_spark(dagbag, dag_roots, spark):
    from tests.helpers import ingest

    landing, lake = dag_roots
    deliver(landing, [*events_of(20, DAY, "act"), event("stop", DAY, eventSource="cloudtrail.amazonaws.com", eventName="StopLogging")],
            DAY + timedelta(minutes=20))  # fmt: skip
    ingest(spark, landing, lake)
    run = dagbag.dags["cloudtrail_derived"].test(run_conf={"lake": str(lake)})
    assert str(run.state) == "success", states(run)
    report = json.loads(Lake(lake).derived_report(ACTIVITY.job, run.run_id).read_text())
    assert report["dates"] == ["2024-03-01"] and report["rows"]["findings"] == {"2024-03-01": 1}
    assert sum(report["rows"]["activity_hourly"].values()) > 0 and report["counts"] == {"findings by rule": {"cis-4.5": 1}}
    built = json.loads(Lake(lake).derived_report(OCSF.job, run.run_id).read_text())
    assert (built["status"], built["gate"], built["rows"]) == ("succeeded", "passed", {"ocsf/api_activity": {"2024-03-01": 21}})
    tables = {t["table"]: t for t in json.loads(Lake(lake).publish_report(run.run_id).read_text())["tables"]}
    assert tables["findings"]["snapshot_id"] and tables["ocsf_api_activity"]["snapshot_id"], "the jobs' own Iceberg tables"
    assert derived_sql(lake, "findings", "select rule_id, eventID from rows") == [("cis-4.5", "stop")]


def test_a_dry_run_lists_and_writes_nothing(dag_roots):
    from airflow.dag_processing.dagbag import DagBag

    # a DAG object of its own: dag.test() leaves the run's conf in the params of the DAG it ran
    dag = DagBag(dag_folder=str(ROOT / "dags")).dags["cloudtrail_ingest"]
    landing, lake = dag_roots
    deliver(landing, events_of(5, DAY, "dry"), DAY + timedelta(minutes=20))
    conf = {"landing": str(landing), "lake": str(lake), "mode": "rebuild", "dry_run": True}
    run = dag.test(logical_date=datetime(2024, 3, 9, tzinfo=UTC), run_conf=conf)
    assert str(run.state) == "success", states(run)
    assert states(run)["rebuild_dry_run"] == "success" and states(run)["ingest"] == "skipped"
    assert states(run)["choose_gate"] == "skipped", "plan's branch skips everything after the ingest"
    assert states(run)["dq_gate"] == "skipped" and states(run)["announce"] == "skipped" == states(run)["publish"]
    assert not lake.exists(), "a dry run writes nothing"


def test_a_failing_gate_fails_the_run(dag, dag_roots):
    landing, lake = dag_roots
    deliver(landing, [event("no-source", DAY, eventSource=None), *events_of(5, DAY, "fine")], DAY + timedelta(minutes=20))
    run = dag.test(logical_date=datetime(2024, 3, 1, tzinfo=UTC), run_conf={"landing": str(landing), "lake": str(lake)})
    assert str(run.state) == "failed"
    assert states(run)["ingest"] == "success" and states(run)["choose_gate"] == "failed", "the ingest's gate failed"
    assert states(run)["announce"] == "upstream_failed" == states(run)["publish"], "a date whose gate failed is not published"
    gate = json.loads(next((lake / "reports" / "dq").glob("*.json")).read_text())
    assert ("expect_column_values_to_not_be_null", "eventSource") in {
        (f["expectation"], f["kwargs"]["column"]) for f in gate["failed_critical"]
    }


def table_rows_via_files(lake: Path) -> list:
    """The table as a directory reader sees it (the DAG's Spark ran in another process)."""
    import duckdb

    from jobs.lake import Lake
    from jobs.tables.events import events_source

    source = events_source(Lake.at(lake))
    return duckdb.connect().execute(f"select eventID from {source}").fetchall() if source else []


def test_with_a_queue_the_ingest_runs_when_cloudtrail_delivers_and_on_its_cron_as_the_fallback(monkeypatch):
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import DagSerialization

    from cloudtrail_airflow.params import InvalidRunParams, dag_params, plan_run
    from cloudtrail_airflow.settings import load_settings

    queue_url = "https://sqs.us-east-1.amazonaws.com/111122223333/cloudtrail-deliveries"
    monkeypatch.setenv("CLOUDTRAIL_LANDING", "s3://trail-bucket/org")
    monkeypatch.setenv("CLOUDTRAIL_QUEUE_URL", queue_url)
    bag = DagBag(dag_folder=str(ROOT / "dags" / "cloudtrail_ingest.py"))
    assert bag.import_errors == {}
    dag = bag.dags["cloudtrail_ingest"]
    asset = dag.timetable.asset_condition
    (watcher,) = asset.watchers
    assert watcher.trigger.serialize() == (
        "cloudtrail_airflow.triggers.NotificationsWaiting",
        {"queue_url": queue_url, "aws_conn_id": "aws_default", "poll_seconds": 5.0, "refire_seconds": 60.0},
    )
    assert DagSerialization.to_dict(dag)["dag"]["timetable"]  # the scheduler can store it
    settings = load_settings()
    params = {name: param.value for name, param in dag_params(settings).items()}
    hour = (datetime(2024, 3, 1, tzinfo=UTC), datetime(2024, 3, 1, 1, tzinfo=UTC))
    planned = plan_run(params, settings, "run", *hour)
    args = planned["ingest_args"]
    assert args[args.index("--landing") + 1] == "s3://trail-bucket/org" and args[args.index("--queue-url") + 1] == queue_url
    with pytest.raises(InvalidRunParams, match="not the configured bucket"):
        plan_run(
            {**params, "landing": "s3://another-bucket/"},
            settings,
            "run",
            datetime(2024, 3, 1, tzinfo=UTC),
            datetime(2024, 3, 1, tzinfo=UTC),
        )
