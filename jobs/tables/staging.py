"""Whole partitions changed the safe way, for a rebuild, a compaction and retention: written where no
reader looks (<lake>/_staging/<run>/<table>/), checked by their gate, then swapped in, each atomically
(jobs/tables/partitions.py), or discarded whole when the gate fails."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame

from jobs.lake import PARTITION_COLUMNS, Lake, partition_paths
from jobs.tables import partitions


@dataclass(frozen=True)
class Staging:
    """What run `run_id` stages in `lake`."""

    lake: Lake
    run_id: str

    def write(self, name: str, rows: DataFrame) -> DataFrame:
        """Table `name`'s rows as its partitions under the run's staging folder, read back as written."""
        folder = str(self.table(name))
        columns = PARTITION_COLUMNS[name]
        rows.write.mode("overwrite").partitionBy(*columns).parquet(folder)
        return rows.sparkSession.read.schema(rows.schema).parquet(folder)

    def table(self, name: str) -> Path:
        """Where the run stages table `name`'s partitions."""
        return self.lake.staging(self.run_id) / name

    def publish(self, passed: bool, changed: Mapping[str, Iterable[object]], then: dict[str, Any] | None = None) -> bool:
        """When the gate `passed`: each changed partition (table name -> partition values) becomes its staged version,
        or goes when none was staged; the old versions move to <lake>/_replaced/<table>/<run>/; `then` is left to do
        after (jobs/tables/partitions.py's `replace`). Else nothing changes."""
        if not passed:
            partitions.discard(self.lake, self.run_id)
            return False
        swaps = []
        for name, values in changed.items():
            table, staging = self.lake.table(name), self.table(name)
            for value in values:
                for folder in partition_paths(name, value, staging, table):
                    staged, live = staging / folder, table / folder
                    if staged.is_dir():
                        partitions.write_marker(staged, self.run_id)
                    if staged.is_dir() or live.exists():
                        aside = self.lake.replaced_by_run(table, self.run_id) / folder
                        swaps.append(partitions.Swap(str(live), str(staged) if staged.is_dir() else None, str(aside)))
        partitions.replace(self.lake, self.run_id, swaps, then)
        return True
