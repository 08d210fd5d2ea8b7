"""Tiny runs of the benchmark harnesses (the real ones are `make bench`, `make bench-cost`, `make bench-ui`,
`make bench-history`, `make bench-publish` and `make bench-investigations`): every measured system runs on a
real-shaped zone and writes rows; the incremental and 60-day runs are `make bench`'s only. The lake page's runs in
`make test`; the others (marked `harness`, one to two minutes each) in `make test-harness`, which CI runs after it
(.ci/run)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import benchmark, cost, history, investigations, lake_page, publish, pyspark_versions, s3


@pytest.mark.unit
def test_a_full_benchmark_run_rewrites_only_its_own_section_of_benchmarks_md():
    """`make bench` wrote BENCHMARKS.md whole, from its table and a copy of the rest kept in bench/analysis.md."""
    document = (benchmark.ROOT / "BENCHMARKS.md").read_text()
    rendered = benchmark.with_section(document, "## The complete `make bench` (now)\n\nnew figures")
    start, end = (rendered.index(marker) for marker in benchmark.SECTION)
    assert "new figures" in rendered[start:end] and "f2871a6" not in rendered[start:end]
    assert rendered[:start] == document[: document.index(benchmark.SECTION[0])]
    assert rendered[end:] == document[document.index(benchmark.SECTION[1]) :]


@pytest.mark.harness
def test_benchmark_harness_runs_each_system_on_a_tiny_zone():
    # As `make bench` runs it: the venv's folder is not on PATH (the tests put it there), nor is PYSPARK_PYTHON set.
    venv = str(Path(sys.executable).parent)
    path = os.pathsep.join(folder for folder in os.environ["PATH"].split(os.pathsep) if folder != venv)
    env = {name: value for name, value in os.environ.items() if name not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    subprocess.run([sys.executable, "-m", "bench.benchmark", "--smoke"], check=True, cwd=benchmark.ROOT, env={**env, "PATH": path})
    results = json.loads(benchmark.results_path(smoke=True).read_text())
    (size,) = results["sizes"]
    assert size["rows"] > 0 and size["records"] >= size["rows"]
    assert all(size[system]["wall_s"] > 0 for system in ("product", "spark_batch", "recipe", "dedup", "duckdb"))
    assert size["recipe"]["rows"] > 0 and size["dedup"]["rows"] == size["rows"], (
        "the peers wrote the zone's events (the recipe less its late ones)"
    )
    assert size["product"]["heap_mb"] > 0  # the driver's GC log was written and read
    assert json.loads(benchmark.sizes_path(smoke=True).read_text())["sizes"] == results["sizes"], "kept for --reuse-sizes"
    assert results["noop"]["ratio"] > 0 and len(results["queries"]) == 3
    names = {name for name, _, _ in benchmark.targets(results)}
    assert "no-op run <= 1.2x bare spark-submit" in names and any(name.startswith("whole process >= 1.25x B") for name in names)
    assert any(name.startswith("whole process >= 1.0x DuckDB") for name in names), "issue #67's target against DuckDB is printed"


@pytest.mark.harness
def test_cost_harness_measures_each_way_on_an_hour_of_tiny_files():
    # A process of its own: the harness waits for every child it has, and this one has the tests' JVM.
    subprocess.run([sys.executable, "-m", "bench.cost", "--smoke"], check=True, cwd=benchmark.ROOT)
    results = json.loads(cost.results_path(smoke=True).read_text())
    assert results["files"] == 12 * len(cost.REGIONS)
    # A JVM's start alone is seconds of CPU: a figure under one means a process went uncounted.
    assert results["hourly_cpu_s"] > 1 and results["daily_cpu_s"] > 1 and results["baseline_a_cpu_s"] > 1
    assert results["stream"]["per_slice_cpu_s"] > 0 and results["stream"]["day_cpu_s"] > results["stream"]["start_and_first_slice_cpu_s"]


def test_lake_page_harness_times_every_view_on_a_week_of_reports():
    subprocess.run([sys.executable, "-m", "bench.lake_page", "--smoke"], check=True, cwd=benchmark.ROOT, capture_output=True)
    results = json.loads(lake_page.results_path(smoke=True).read_text())
    assert results["days"] == 7 and results["baseline_ms"] > 0
    assert len(results["cases"]) == 8 and all(case["median_ms"] > 0 for case in results["cases"].values())
    bucket = results["s3_landing"]
    assert (bucket["accounts"], bucket["regions"], bucket["days"]) == (2, 17, 2) and bucket["median_ms"] > 0 and "met" in bucket


@pytest.mark.harness
def test_history_harness_times_each_kind_of_run_on_a_small_zone():
    subprocess.run([sys.executable, "-m", "bench.history", "--smoke"], check=True, cwd=benchmark.ROOT, capture_output=True)
    results = json.loads(history.results_path(smoke=True).read_text())
    (row,) = results["rows"]  # the harness asserts each run took its way: nothing, one file, a full listing
    assert row["day_folders"] == 5 * len(history.REGIONS) and row["nothing_new"] > 0 and row["one_new_file"] > row["nothing_new"]
    # The bare-calls baseline replays the walk's own calls: at least a listing of each place's folder and a stat of its file.
    assert row["listed_folders"] > len(history.REGIONS) and row["stated_paths"] >= len(history.REGIONS) and row["bare_calls"] > 0
    assert history.floor_ratio(results) == 1.0  # one zone: the largest is the smallest
    assert [name for name, _, _ in history.targets(results)] == ["nothing_new", "one_new_file"]


def test_history_lines_read_a_falling_series_as_flat():
    rising = [{"accounts": 2, "s": 1.0}, {"accounts": 100, "s": 50.0}]
    falling = [{"accounts": 2, "s": 18.0}, {"accounts": 100, "s": 17.0}]
    assert history.line_at(rising, "s", 1_000) == 1.0 + 0.5 * 998 and history.line_at(falling, "s", 10_000) == 17.5


@pytest.mark.unit
def test_the_pyspark_table_gives_the_other_versions_speed_and_the_peer_ratios_under_each():
    this, other = Path("/here"), Path("/there")
    seconds = {("product", this): [40.0, 44.0], ("product", other): [30.0, 34.0], ("C", this): [33.0], ("C", other): [32.0]}
    seconds |= {("A", this): [21.0], ("A", other): [16.0]}
    rows = pyspark_versions.table({1000: seconds}, [this, other], {this: "pyspark 4.2.0", other: "pyspark 4.3.0"}).splitlines()
    assert "pyspark 4.3.0 speed" in rows[0]
    assert rows[2] == "| 1,000 | product | 40.0, 44.0 | 30.0, 34.0 | 1.31x |  |  |"  # 42 s against 32 s
    assert rows[3] == "| 1,000 | C | 33.0 | 32.0 | 1.03x | 0.79x | 1.00x |"  # C's seconds over the product's, per version
    assert rows[4] == "| 1,000 | A | 21.0 | 16.0 | 1.31x | 0.50x | 0.50x |"


@pytest.mark.harness
def test_s3_harness_measures_each_target_on_tiny_buckets():
    subprocess.run([sys.executable, "-m", "bench.s3", "--smoke"], check=True, cwd=benchmark.ROOT, capture_output=True)
    results = json.loads(s3.results_path(smoke=True).read_text())
    assert [run["places"] for run in results["per_run"]] == [17, 34]
    assert all(run["one_notification_s"] > 0 and run["empty_queue_listings"] == 0 for run in results["per_run"])
    assert all(cost["calls"] > 0 for run in results["per_run"] for cost in run["reconciliation"])
    assert results["backlog"]["fetch_mb_s"] > 0 and results["backlog"]["transfer_manager_mb_s"] > 0
    assert set(results["verdicts"]) == {"one_notification", "empty_queue", "fetch_against_transfer_manager"}


@pytest.mark.harness
def test_publish_harness_measures_each_figure_on_tiny_sizes():
    subprocess.run([sys.executable, "-m", "bench.publish", "--smoke"], check=True, cwd=benchmark.ROOT, capture_output=True)
    results = json.loads(publish.results_path(smoke=True).read_text())
    (run,) = results["one_file"]["runs"]
    assert run["ingest_s"] > 0 and run["publish_s"] > 0 and run["added"] >= 1
    assert run["calls"]["UpdateTable"] == 1 and run["calls"]["S3 PUT"] >= 1, "the events table's one commit, its objects"
    assert results["backfill"]["files_published"] >= 1 and results["backfill"]["landing_files"] == 4
    assert results["pruning"]["planned"] * results["pruning"]["dates"] == results["pruning"]["files"], "one date's files of all"
    assert results["metadata"]["after_expiry"]["snapshots"] == 1 and results["metadata"]["over_runs"][-1]["snapshots"] == 3


@pytest.mark.harness
def test_investigations_harness_measures_each_question_on_both_layouts_and_the_json(tmp_path):
    out = tmp_path / "investigations.json"
    argv = ["--records", "12000", "--days", "2", "--repeats", "1", "--writes", "2", "--out", str(out)]
    subprocess.run([sys.executable, "-m", "bench.investigations", *argv], check=True, cwd=benchmark.ROOT, capture_output=True)
    results = json.loads(out.read_text())
    assert all(len(writes) == 2 and all(w["ingest_s"] > 0 for w in writes) for writes in results["writes"].values())
    assert len(results["queries"]) == 12 and results["json_bytes"] > results["laid-out_bytes"] > 0
    for row in results["queries"].values():
        assert all(row[v]["bytes"] > 0 and 0 < row[v]["row_groups"] <= row[v]["row_groups_of"] for v in investigations.VARIANTS)
    assert "| access_key_activity |" in investigations.report(results)


@pytest.mark.harness
def test_s3_lake_harness_ingests_a_zone_into_a_folder_lake_and_a_lake_in_s3():
    subprocess.run([sys.executable, "-m", "bench.s3_lake", "--smoke"], check=True, cwd=benchmark.ROOT, capture_output=True)
    result = json.loads((benchmark.WORK / "s3_lake.json").read_text())
    (folder,), (s3,) = result["runs"]["folder"], result["runs"]["s3"]
    assert s3["files"] > 0 and s3["bytes"] > 0 and folder["bytes"] > 0, result
    assert s3["scratch_files_left"] == 0, "a folder landing into a lake in S3 leaves nothing on this machine"
    assert result["backfill_seconds_s3_over_folder"] > 0 and result["one_file_seconds_s3_over_folder"] > 0
    assert s3["one_file_requests"]["S3 PUT"] > 0 and folder["migration_requests"]["S3 PUT"] >= folder["migrated_objects"] > 0, result
    assert {name: len(seconds) for name, seconds in result["peers_seconds"].items()} == {"recipe": 1, "duckdb": 1}
    assert all(result[f"{peer}_over_{kind}_backfill"] > 0 for peer in ("recipe", "duckdb") for kind in ("folder", "s3")), result
