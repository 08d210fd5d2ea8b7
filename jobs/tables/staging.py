"""A run's rows kept where no reader looks (<lake>/_staging/<run>/<table>/) while the run needs them, then deleted:
a rebuild's quarantine rows, computed from landing files the run reads once (jobs/upkeep/rebuild.py)."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame

from jobs.lake import PARTITION_COLUMNS, Lake
from jobs.storage import LakePath
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

    def table(self, name: str) -> LakePath:
        """Where the run stages table `name`'s partitions."""
        return self.lake.staging(self.run_id) / name

    def discard(self) -> None:
        """Delete what the run staged."""
        partitions.discard(self.lake, self.run_id)
