"""A derived job's state (stdlib only; written by jobs/derived.py, read by it and the lake page): per event date,
what the job's rows were built from and, per table, how many rows and partition folders that date holds.

    <lake>/_checkpoints/<state>  {"2024-03-01": {"built_from": "<partition fingerprint> <recipe>",
                                                 "rows": {table: n}, "folders": {table: n}}, ...}
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs.files import write_whole


@dataclass(frozen=True)
class Built:
    """One event date of a derived job's state."""

    stamp: str  # what its rows were built from (jobs/derived.py's built_stamp)
    rows: dict[str, int]  # per table
    folders: dict[str, int]  # per table, the partition folders those rows fill


def built_dates(state: Path) -> dict[str, Built]:
    """Per event date, what its derived rows were built from (a bare stamp, without figures, before the figures
    were kept; a partition's fingerprint alone before recipes were, which no stamp equals: built once more)."""
    body: dict[str, Any] = json.loads(state.read_text()) if state.exists() else {}
    return {
        day: Built(kept, {}, {}) if isinstance(kept, str) else Built(kept["built_from"], kept["rows"], kept["folders"])
        for day, kept in body.items()
    }


def record_built(state: Path, stamps: dict[str, str], rows: dict[str, dict[str, int]], folders: dict[str, dict[str, int]]) -> None:
    """The dates of `stamps` built, with their rows and folders per table (per table, per date); written whole (rename)
    after the swaps: a run that dies before it leaves its dates to the next run."""
    built = built_dates(state) | {
        day: Built(stamp, {name: counts.get(day, 0) for name, counts in rows.items()},
                   {name: counts.get(day, 0) for name, counts in folders.items()})
        for day, stamp in stamps.items()
    }  # fmt: skip
    body = {day: {"built_from": b.stamp, "rows": b.rows, "folders": b.folders} for day, b in sorted(built.items())}
    write_whole(state, json.dumps(body, indent=1) + "\n")
