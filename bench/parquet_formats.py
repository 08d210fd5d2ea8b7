"""The events table's Parquet as the lake writes it now (INT64 microsecond timestamps with statistics, zstd) against
before (INT96, snappy): the same rows written both ways, one after the other, then read by DuckDB with a filter on
eventTime. Prints sizes, medians of write and query times, and the ratios.

    python -m bench.parquet_formats --lake DIR [--rounds 3]

DIR is a lake the ingest wrote (its events table is read once, cached, and written into a scratch folder).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import duckdb

from jobs.lake import EVENT_DATE, Lake
from jobs.spark.session import spark_session

FORMATS = {
    "before (INT96, snappy)": {"spark.sql.parquet.outputTimestampType": "INT96", "spark.sql.parquet.compression.codec": "snappy"},
    "now (INT64 micros, zstd)": {
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.sql.parquet.compression.codec": "zstd",
    },
}


def size_mb(folder: Path) -> float:
    return sum(path.stat().st_size for path in folder.rglob("*.parquet")) / 2**20


def query_seconds(folder: Path) -> float:
    """An analyst's filter on an hour of eventTime: statistics let a reader skip what lies outside it."""
    db = duckdb.connect()
    low = db.execute(f"select min(eventTime) from read_parquet('{folder}/*/*.parquet')").fetchall()[0][0]
    started = time.perf_counter()
    query = f"select count(*) from read_parquet('{folder}/*/*.parquet') where eventTime between ? and ? + interval 1 hour"
    db.execute(query, [low, low]).fetchone()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lake", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    spark = spark_session("parquet_formats")
    rows = spark.read.parquet(str(Lake.at(args.lake).events)).cache()
    count = rows.count()
    timings: dict[str, list[tuple[float, float]]] = {name: [] for name in FORMATS}
    sizes: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(args.rounds):
            for name, conf in FORMATS.items():
                out = Path(scratch) / "table"
                for key, value in conf.items():
                    spark.conf.set(key, value)
                started = time.perf_counter()
                rows.write.partitionBy(EVENT_DATE).parquet(str(out))
                written = time.perf_counter() - started
                timings[name].append((written, query_seconds(out)))
                sizes[name] = size_mb(out)
                shutil.rmtree(out)
    print(f"{count} rows, {args.rounds} rounds, medians")
    print(f"{'':<28}{'size MB':>10}{'write s':>10}{'query s':>10}")
    medians = {name: [statistics.median(t[i] for t in times) for i in (0, 1)] for name, times in timings.items()}
    for name in FORMATS:
        print(f"{name:<28}{sizes[name]:>10.1f}{medians[name][0]:>10.2f}{medians[name][1]:>10.3f}")
    before, now = (list(FORMATS)[i] for i in (0, 1))
    print(f"now against before: size {sizes[now] / sizes[before]:.2f}x, write time {medians[now][0] / medians[before][0]:.2f}x, "
          f"query time {medians[now][1] / medians[before][1]:.2f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
