"""A repair of the file ledger (jobs/upkeep/repair.py): manifests Spark's log names that are gone, and the landing files the
tables show were read, written back so no batch takes them again."""

from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import zlib
from dataclasses import dataclass
from pathlib import Path

from jobs import storage
from jobs.lake import QUARANTINE, RETIRED, Lake
from jobs.landing.layout import day_folders, log_files_in, relative
from jobs.ledger.store import Entry, RetiredIndex, missing_manifests, read_manifests, sha256_of
from jobs.spark.checkpoint import CheckpointSnapshot
from jobs.spark.logs import CheckpointError
from jobs.storage import write_whole
from jobs.tables.events import all_files
from jobs.tables.quarantine_files import quarantine_data_files
from jobs.tables.sources import landing_files

log = logging.getLogger("cloudtrail_repair")


@dataclass(frozen=True)
class LedgerRepair:
    """Manifests Spark's log names that are gone, and the landing files the tables show were read."""

    lost: list[str]
    taken: list[Entry]

    def summary(self) -> dict[str, object]:
        return {"manifests_lost": len(self.lost), "landing_files_found_in_tables": len(self.taken)}

    def apply(self, lake: Lake) -> None:
        """The files into the newest lost manifest (Spark's log names it, so no batch reads it again); the others let go of."""
        newest, *older = sorted(self.lost, reverse=True)
        write_whole(storage.at(newest), "".join(f"{entry.line()}\n" for entry in self.taken))
        RetiredIndex(lake.checkpoint / RETIRED).add_let_go(Path(path).name for path in older)
        log.info("ledger: %d landing files the tables hold written into %s; %d lost manifests let go", len(self.taken), newest, len(older))


def plan_ledger(lake: Lake, landing: Path) -> LedgerRepair | None:
    """The lost manifests, and each landing file the ledger does not hold whose records the tables hold."""
    checkpoint = CheckpointSnapshot.read(lake.checkpoint)
    lost = missing_manifests(checkpoint, lake.manifests)
    if not lost:
        return None
    if not checkpoint.settled:
        raise CheckpointError(
            f"batch {checkpoint.planned_batch_id} of {lake.checkpoint} was planned and not committed, and manifests are lost: "
            "which files it read cannot be told. Restore the whole lake from one backup (README, 'Recovering a checkpoint')."
        )
    known = {relative(entry.path) for manifest in read_manifests(lake.manifests) for entry in manifest.entries}
    retired = RetiredIndex(lake.checkpoint / RETIRED)
    quarantined = {relative(path) for path in landing_files(QUARANTINE, quarantine_data_files(lake))}
    candidates: dict[str, list[str]] = {}  # path -> its eventIDs
    taken = []
    for day, folder in day_folders(landing):
        for file in log_files_in(folder):
            key = relative(file.path)
            if key in known or key in retired.on(day):
                continue
            if key in quarantined:
                taken.append(file.path)
            else:
                ids = event_ids(file.path)
                if ids:
                    candidates[file.path] = ids
    held = table_event_ids(lake, {i for ids in candidates.values() for i in ids})
    taken += [path for path, ids in candidates.items() if held.issuperset(ids)]
    return LedgerRepair(lost, [dataclasses.replace(Entry.of(path), sha256=sha256_of(path)) for path in sorted(taken)])


def event_ids(path: str) -> list[str]:
    """The eventIDs of a landing file's records; none when a record has none or the file cannot be read as a log file
    (the ingest quarantines it then, so such a file is only taken if the quarantine names it)."""
    try:
        with open(path, "rb") as raw:
            body = json.loads(gzip.decompress(data) if (data := raw.read())[:2] == b"\x1f\x8b" else data)
        ids = [record["eventID"] for record in body["Records"]]
    except (OSError, ValueError, KeyError, TypeError, EOFError, zlib.error):
        return []
    return ids if all(isinstance(i, str) and i for i in ids) else []


def table_event_ids(lake: Lake, wanted: set[str]) -> set[str]:
    """Which of `wanted` the events table holds (one column read, file by file)."""
    held: set[str] = set()
    for path in all_files(lake):
        held.update(i for i in storage.read_parquet(path, ["eventID"]).column("eventID").to_pylist() if i in wanted)
    return held
