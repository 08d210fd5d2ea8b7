"""Whole partitions changed the safe way, for a rebuild and for the downstream tables: written where no
reader looks (<lake>/_staging/<run>/<table>/), checked by their gate, then swapped in, each atomically
(jobs/partitions.py), or discarded whole when the gate fails."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame

from jobs import partitions
from jobs.lake import PARTITION_COLUMN, Lake, partition


@dataclass(frozen=True)
class Staging:
    """What run `run_id` stages in `lake`."""

    lake: Lake
    run_id: str

    def write(self, name: str, rows: DataFrame, one_file_each: int | None = None) -> DataFrame:
        """Table `name`'s rows as its partitions under the run's staging folder, read back as written.

        `one_file_each`: the number of partitions expected, each written as one file (a small table, which a
        reader opens once per partition)."""
        folder = str(self.lake.staging(self.run_id) / name)
        column = PARTITION_COLUMN[name]
        if one_file_each is not None:
            rows = rows.repartition(max(1, one_file_each), column)
        rows.write.mode("overwrite").partitionBy(column).parquet(folder)
        return rows.sparkSession.read.schema(rows.schema).parquet(folder)

    def partition(self, name: str, value: object) -> Path:
        """Where the run stages partition `value` of table `name`."""
        return partition(self.lake.staging(self.run_id) / name, value)

    def publish(self, passed: bool, changed: Mapping[str, Iterable[object]]) -> bool:
        """When the gate `passed`: each changed partition (table name -> partition values) becomes its staged version,
        or goes when none was staged; the old versions move to <lake>/_replaced/<table>/<run>/. Else nothing changes."""
        if not passed:
            partitions.discard(self.lake, self.run_id)
            return False
        swaps = []
        for name, values in changed.items():
            table = self.lake.table(name)
            for value in values:
                staged, live = self.partition(name, value), partition(table, value)
                if staged.is_dir():
                    partitions.write_marker(staged, self.run_id)
                if staged.is_dir() or live.exists():
                    aside = self.lake.replaced_by_run(table, self.run_id) / live.name
                    swaps.append(partitions.Swap(str(live), str(staged) if staged.is_dir() else None, str(aside)))
        partitions.replace(self.lake, self.run_id, swaps)
        return True
