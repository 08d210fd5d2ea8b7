"""Which of the events table's committed files its readers may see, per partition (`events_published`): a date's files
when they are the very files its gate passed (their fingerprint is the one <lake>/reports/dq/_validated.json holds); a
date changed since (a batch not gated yet, a failed gate, a file planted in it) is held back, with why, and readers
keep its last published files. Debris never qualifies: files outside the table folders (_staging, _replaced, _swept)
are never looked at. A derived table's dates held back are those its job's newest run failed the gate on
(`derived_held_back`): that run's snapshot was staged, never published.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from jobs.lake import DERIVED, EVENT_DATE, Lake
from jobs.quality import gate
from jobs.reporting.report import read_reports, verdict_of
from jobs.storage import LakePath
from jobs.tables.events import date_files, date_fingerprint, event_dates


@dataclass(frozen=True)
class LocalFile:
    """A committed, gated data file of a lake table, and where its copy goes in the table's location."""

    path: LakePath
    partition: str  # its partition folder, relative to the table (`event_date=2024-03-01`, `region=.../eventDay=...`)
    size: int
    mtime_ns: int

    @property
    def key(self) -> str:
        """The copy's path inside the table's data folder: the same local file always gets the same name, another
        version of it (another size or time) another."""
        token = hashlib.sha256(f"{self.path.name}\0{self.size}\0{self.mtime_ns}".encode()).hexdigest()[:12]
        return f"{self.partition}/{self.path.stem.removesuffix('.c000').removesuffix('.snappy').removesuffix('.zstd')}-{token}.parquet"


@dataclass
class Published:
    """What the lake offers a table's readers: its files per partition, and the partitions held back with why."""

    files: dict[str, list[LocalFile]] = field(default_factory=dict)
    held_back: dict[str, str] = field(default_factory=dict)  # event date -> why
    kept: set[str] = field(default_factory=set)  # partitions whose published files stay as they are (held back)
    prints: dict[str, str] = field(default_factory=dict)  # partition -> fingerprint when listed

    def keys(self) -> set[str]:
        return {f.key for files in self.files.values() for f in files}

    def local_commit(self) -> str:
        return hashlib.sha256("\n".join(sorted(self.keys())).encode()).hexdigest()[:16]

    def newest(self) -> int:
        return max((f.mtime_ns for files in self.files.values() for f in files), default=0)


def _local(path: LakePath, partition: str) -> LocalFile:
    stat = path.stat()
    return LocalFile(path, partition, stat.st_size, stat.st_mtime_ns)


def _failed_gates(lake: Lake) -> dict[str, str]:
    """Per event date, the newest events gate that failed on it, unless a newer one passed or skipped it."""
    seen: dict[str, str] = {}
    for report in reversed(read_reports(lake.gate_reports, newest=20)):
        failed = verdict_of(report) == "failed"
        when = f"in run {report['run_id']}" if report.get("run_id") else f"when run by hand at {report.get('validated_at')}"
        for day in report.get("event_dates") or []:
            seen.setdefault(day, f"its gate failed {when}" if failed else "")
    return {day: why for day, why in seen.items() if why}


def events_published(lake: Lake) -> Published:
    """The events table's dates whose files are the ones their gate passed; the others held back, with why."""
    found, index, failed = Published(), gate.validated(lake), _failed_gates(lake)
    for day in event_dates(lake):
        folder = f"{EVENT_DATE}={day}"
        found.prints[folder] = current = date_fingerprint(lake, day)
        passed = index.get(day, {}).get("fingerprint")
        if passed == current:
            found.files[folder] = [_local(p, folder) for p in date_files(lake, day) if p.suffix == ".parquet"]
        else:
            found.kept.add(folder)
            found.held_back[day] = failed.get(day) or (
                "changed since its gate passed; the next gate checks it" if passed else "no gate has passed it yet"
            )
    return found


def derived_held_back(lake: Lake, name: str) -> dict[str, str]:
    """A derived table's dates whose newest rows failed their gate (readers keep the version published before), with
    why: its job's newest run, when that run's gate failed."""
    derived = next(derived for derived in DERIVED if name in derived.tables)
    newest = read_reports(lake.derived_reports(derived.job), newest=1)
    if not newest or newest[0].get("status") != "gate_failed":
        return {}
    why = f"the rows of run {newest[0]['run_id']} failed their gate; readers keep the last good version"
    return dict.fromkeys(newest[0].get("dates") or [], why)
