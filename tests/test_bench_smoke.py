"""A tiny run of the benchmark harness (the real one is `make bench`): every measured system
runs on a real-shaped zone and writes rows; the incremental and 60-day runs are `make bench`'s only."""

import json

from bench import benchmark


def test_benchmark_harness_runs_each_system_on_a_tiny_zone():
    assert benchmark.main(["--smoke"]) == 0
    results = json.loads(benchmark.results_path(smoke=True).read_text())
    (size,) = results["sizes"]
    assert size["rows"] > 0 and size["records"] >= size["rows"]
    assert all(size[system]["wall_s"] > 0 for system in ("product", "spark_batch", "duckdb"))
    assert size["product"]["heap_mb"] > 0  # the driver's GC log was written and read
    assert results["noop"]["ratio"] > 0 and len(results["queries"]) == 3
    assert {name for name, _, _ in benchmark.targets(results)} >= {"no-op run <= 1.2x bare spark-submit"}
