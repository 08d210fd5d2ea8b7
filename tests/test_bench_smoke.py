"""A tiny run of the benchmark harness (the real one is `make bench`): every measured system
runs and writes the same number of rows."""

import json

from bench import benchmark


def test_benchmark_harness_runs_each_system_on_a_tiny_zone():
    assert benchmark.main(["--smoke"]) == 0
    results = json.loads(benchmark.results_path(smoke=True).read_text())
    (size,) = results["sizes"]
    assert size["rows"] > 0 and size["records"] >= size["rows"]
    assert all(size[system]["wall_s"] > 0 for system in ("product", "spark_batch", "duckdb"))
    assert size["product"]["heap_mb"] > 0  # the driver's GC log was written and read
    assert size["product"]["heap_mb"] > 0  # the driver's GC log was written and read
    assert results["noop"]["ratio"] > 0 and len(results["queries"]) == 3
    assert results["incremental"]["incremental_s"] > 0 and results["incremental"]["fresh_s"] > 0
    assert results["daily"]["after_last"]["state"] > 0 and results["daily"]["after_last"]["events/_spark_metadata"] > 0
