"""How the events table's rows lie in its files, so the questions analysts ask (jobs/investigations/command.py) read little
(stdlib only: the Spark writers, the compaction and the Iceberg publish all take it from here).

The question asked most is what one principal, access key or address did. Within each closed event date the
compaction sorts the rows by principal (SORT_COLUMNS), so one principal's rows sit in a row group or two, and the
ARN's min/max statistics skip the rest; a rebuild writes its dates sorted too. The ingest keeps arrival order: a
run's files are small (one row group each, which a sort cannot narrow), and sorting them cost a backfill 7% for
files the compaction rewrites within days. The principal, its access key and its address are also looked up through
Parquet bloom filters (BLOOM_COLUMNS), which every writer, the ingest's too, puts in every row group: on an open date
they skip every run's file that cannot hold the value, and on a closed one the row groups of other principals. Parquet
writes no bloom filter for a chunk its dictionary holds whole, so those columns are plain-encoded. Row groups of
ROW_GROUP_BYTES give a date of real volume tens of them. The Iceberg table declares the same order
(jobs/iceberg/catalog.py), so every engine that writes to it keeps it. What each choice costs and saves:
BENCHMARKS.md, "Investigations".
"""

from __future__ import annotations

from typing import Any

SORT_COLUMNS: tuple[str, ...] = ("userIdentity.arn", "eventTime")
BLOOM_COLUMNS = ("sourceIPAddress", "userIdentity.accessKeyId", "userIdentity.arn")
ROW_GROUP_BYTES = 8 * 1024 * 1024
# Rows per row group where a writer counts rows (pyarrow): about ROW_GROUP_BYTES of real-shaped events.
ROW_GROUP_ROWS = 100_000


def spark_conf() -> dict[str, str]:
    """Every job's Parquet writes: bloom filters on the lookup columns, sized to the distinct values a row group holds
    (adaptive: the smallest candidate that holds them at the default 1% false positives), and the row
    group size. Tables without those columns are unaffected."""
    blooms = {f"spark.hadoop.parquet.bloom.filter.enabled#{column}": "true" for column in BLOOM_COLUMNS}
    # Parquet skips the bloom filter of a chunk its dictionary holds whole, as most of these do: plain-encoded, every
    # chunk has one (zstd takes the repeats a dictionary would).
    plain = {f"spark.hadoop.parquet.enable.dictionary#{column}": "false" for column in BLOOM_COLUMNS}
    candidates = {f"spark.hadoop.parquet.bloom.filter.candidates.number#{column}": "8" for column in BLOOM_COLUMNS}
    return (
        blooms
        | plain
        | candidates
        | {
            "spark.hadoop.parquet.bloom.filter.adaptive.enabled": "true",
            # Candidates from 256 KB (a full row group's distinct values) halving down to 2 KB (a one-file run's file).
            "spark.hadoop.parquet.bloom.filter.max.bytes": str(256 * 1024),
            "spark.hadoop.parquet.block.size": str(ROW_GROUP_BYTES),
        }
    )


def ordered(rows: Any, date_column: str) -> Any:
    """A Spark frame's rows as a rebuild writes them: within each task, by date, then by SORT_COLUMNS."""
    return rows.sortWithinPartitions(date_column, *SORT_COLUMNS)


def pyarrow_options(rows: Any) -> dict[str, Any]:
    """pyarrow's write_table options that keep the layout of `rows` (a pyarrow table) already in order: bloom filters
    on the lookup columns it has, sized to a row group's rows at 1% false positives, and the row group size."""
    distinct = max(1, min(rows.num_rows, ROW_GROUP_ROWS))
    blooms = {column: {"ndv": distinct, "fpp": 0.01} for column in BLOOM_COLUMNS if _has(rows.schema, column)}
    return {"bloom_filter_options": blooms or None, "row_group_size": ROW_GROUP_ROWS}


def _has(schema: Any, dotted: str) -> bool:
    head, _, rest = dotted.partition(".")
    if head not in schema.names:
        return False
    field = schema.field(head)
    return not rest or (hasattr(field.type, "get_field_index") and field.type.get_field_index(rest) >= 0)
