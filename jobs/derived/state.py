"""A derived job's state (stdlib only; written by jobs/derived/derivation.py, read by it and the lake page): per event date,
what the job's rows were built from and, per table, how many rows and partition folders that date holds.

    <lake>/_checkpoints/<job>.json  {"format": 2, "dates": {"2024-03-01": {"built_from": "<partition fingerprint> <recipe>",
                                                                         "rows": {table: n}, "folders": {table: n}}, ...}}

Format 1 (before issue #68) was the dates object alone, the activity job's in downstream.json; before the figures were
kept, a date held its bare stamp. `built_dates` reads every format; `record_built` writes the current one, under the
job's name, and removes the older file.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobs.lake import Derived, Lake
from jobs.storage import read_record, under, write_record

STATE_FORMAT = 2


@dataclass(frozen=True)
class Built:
    """One event date of a derived job's state."""

    stamp: str  # what its rows were built from (jobs/derived/derivation.py's built_stamp)
    rows: dict[str, int]  # per table
    folders: dict[str, int]  # per table, the partition folders those rows fill


def built_dates(lake: Lake, derived: Derived) -> dict[str, Built]:
    """Per event date, what its derived rows were built from (a bare stamp, without figures, before the figures
    were kept; a partition's fingerprint alone before recipes were, which no stamp equals: built once more)."""
    state = next((path for path in (lake.derived_state(derived), lake.derived_state_before(derived)) if path and path.exists()), None)
    body = read_record(state, STATE_FORMAT, {1: under("dates")}) if state else {"dates": {}}
    return {
        day: Built(kept, {}, {}) if isinstance(kept, str) else Built(kept["built_from"], kept["rows"], kept["folders"])
        for day, kept in body["dates"].items()
    }


def record_built(
    lake: Lake, derived: Derived, stamps: dict[str, str], rows: dict[str, dict[str, int]], folders: dict[str, dict[str, int]]
) -> None:
    """The dates of `stamps` built, with their rows and folders per table (per table, per date); written whole (rename)
    after the swaps: a run that dies before it leaves its dates to the next run."""
    built = built_dates(lake, derived) | {
        day: Built(stamp, {name: counts.get(day, 0) for name, counts in rows.items()},
                   {name: counts.get(day, 0) for name, counts in folders.items()})
        for day, stamp in stamps.items()
    }  # fmt: skip
    dates = {day: {"built_from": b.stamp, "rows": b.rows, "folders": b.folders} for day, b in sorted(built.items())}
    write_record(lake.derived_state(derived), STATE_FORMAT, {"dates": dates}, indent=1)
    if before := lake.derived_state_before(derived):
        before.unlink(missing_ok=True)
