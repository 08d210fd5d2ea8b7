"""Completeness against CloudTrail's own record: the ledger compared with its hourly digests
(jobs/ledger/digests.py), without listing the log files.

A reconciliation, once a day (or when asked), reads the digests of the last `days` delivery days that an earlier one
has not proven, and checks each named log file against the ledger: taken, and the cached copy's content hash equal to
the digest's. A file the ledger does not hold (its notification never came, or expired in the queue) is fetched and
taken by the same run (`missing_files`, the run's one call). A digest whose every file is taken with matching hashes
is proven and recorded, so the next reconciliation reads only the new ones: its cost is the places (one listing
each) and the new digests, not the history. The report says per hour: delivered, ingested, missing, hashes that
differ. A place the ledger knows whose trail writes no digests (log file validation off) has its delivery folders of
the window listed instead.
"""

from __future__ import annotations

import logging
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from jobs import storage
from jobs.lake import Lake
from jobs.landing.bucket import FETCH_THREADS, BucketLanding
from jobs.landing.bucket_listing import region_prefixes
from jobs.landing.layout import FILE_NAME
from jobs.ledger.digests import DIGEST_FOLDER, Proven, content_hash, digest_keys, read_digest
from jobs.ledger.state import known_files
from jobs.reporting.report import read_report, write_json
from jobs.spark.checkpoint import CheckpointSnapshot
from jobs.storage import LakePath

log = logging.getLogger("cloudtrail_ingest")


@dataclass
class Reconciliation:
    """What one reconciliation found, per digest hour (account/region/hour), and the log files it found missing."""

    run_id: str
    checked_at: str
    days: list[str]
    digests_read: int = 0
    digests_proven_before: int = 0
    list_calls: int = 0
    seconds: float = 0.0
    hours: dict[str, dict[str, int]] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    hash_mismatches: list[str] = field(default_factory=list)
    # Why a named file's content could not be hashed (damaged, cut short, too large), by key: a hash mismatch too.
    unhashable: dict[str, str] = field(default_factory=dict)
    unreadable_digests: list[str] = field(default_factory=list)
    # Log files a digest names under the landing whose keys the cache cannot hold (jobs/landing/bucket.py), with the reason.
    refused: dict[str, str] = field(default_factory=dict)
    # Places the ledger knows whose trail writes no digests: listed from the window's first day instead.
    undigested_places: int = 0

    def summary(self) -> dict[str, int]:
        return {
            "hours": len(self.hours),
            "delivered": sum(h["delivered"] for h in self.hours.values()),
            "ingested": sum(h["ingested"] for h in self.hours.values()),
            "missing": len(self.missing),
            "hash_mismatches": len(self.hash_mismatches),
            "refused": len(self.refused),
            "unreadable_digests": len(self.unreadable_digests),
            "digests_read": self.digests_read,
            "undigested_places": self.undigested_places,
            "list_calls": self.list_calls,
        }

    def write(self, lake: Lake) -> LakePath:
        path = lake.reconcile_report(self.run_id)
        body = {**self.__dict__, "summary": self.summary()}
        return write_json(path, dict(sorted(body.items())))


def missing_files(
    s3: Any,
    landing: BucketLanding,
    lake: Lake,
    checkpoint: CheckpointSnapshot,
    taking: set[str],
    run_id: str,
    days: int,
    interval: timedelta,
    asked: bool,
) -> list[str]:
    """The log keys a reconciliation finds delivered and neither in the ledger nor `taking` (this run's files, by place
    in the landing), its report written; none when the newest reconciliation is younger than `interval`, unless
    `asked`."""
    now = datetime.now(tz=UTC)
    newest = last(lake)
    if not asked and newest is not None and now - datetime.fromisoformat(newest["checked_at"]) < interval:
        return []
    found = reconcile_ledger(s3, landing, lake, checkpoint, taking, run_id, days, now)
    log.info("reconciliation against CloudTrail's digests: %s; report %s", found.summary(), found.write(lake))
    return found.missing


def last(lake: Lake) -> dict[str, Any] | None:
    reports = sorted(storage.listed(lake.reconcile_reports, "*.json"), key=lambda path: path.stat().st_mtime)
    return next((report for path in reversed(reports) if (report := read_report(path)) is not None), None)


def reconcile_ledger(
    s3: Any, landing: BucketLanding, lake: Lake, checkpoint: CheckpointSnapshot, taking: set[str], run_id: str, days: int, now: datetime
) -> Reconciliation:
    """Read the unproven digests of the last `days` delivery days and check them against the ledger and the files this
    run takes (`taking`, by place in the landing); `missing` lists the log keys to fetch and take now."""
    started = datetime.now(tz=UTC)
    window = [now.date() - timedelta(days=n) for n in range(days - 1, -1, -1)]
    # A log file is delivered before the digest that names it, up to a day earlier.
    known = set(known_files(checkpoint, lake.manifests, [window[0] - timedelta(days=1), *window])) | taking
    found = Reconciliation(run_id, now.isoformat(timespec="seconds"), [d.isoformat() for d in window])
    proven = Proven(lake.reconciled)
    calls: Counter[str] = Counter()
    digested = region_prefixes(landing, s3, DIGEST_FOLDER, calls)
    found.list_calls += calls["list"]
    first_day = window[0].strftime("%Y/%m/%d")
    with ThreadPoolExecutor(FETCH_THREADS) as pool:
        listed = list(pool.map(lambda prefix: digest_keys(s3, landing.bucket, prefix, f"{prefix}{first_day}"), digested))
        found.list_calls += sum(made for _, made in listed)
        keys = []
        for key in (key for names, _ in listed for key in names):
            if Proven.day(key) is None:
                found.unreadable_digests.append(f"{key}: not at a digest's place (.../CloudTrail-Digest/<region>/YYYY/MM/DD/)"[:600])
            else:
                keys.append(key)
        unproven = [key for key in keys if key not in proven.on(key)]
        found.digests_proven_before += len(keys) - len(unproven)
        for key, digest in zip(unproven, pool.map(lambda key: read_digest(s3, landing.bucket, key), unproven), strict=True):
            if _check(landing, key, digest, known, found):
                proven.add(key)
    proven.save()
    _list_undigested(s3, landing, known, set(digested), first_day, found)
    found.seconds = round((datetime.now(tz=UTC) - started).total_seconds(), 3)
    return found


def _list_undigested(s3: Any, landing: BucketLanding, known: set[str], digested: set[str], first_day: str, found: Reconciliation) -> None:
    """The places the ledger knows that have no digests (a trail without log file validation): their delivery folders
    from the window's first day on are listed instead, one listing per place, and what the ledger lacks is missing."""
    places = set()
    for key in known:
        parts = key.split("/")
        if "CloudTrail" in parts[:-1]:
            at = parts.index("CloudTrail")
            places.add("/".join(parts[: at + 2]) + "/")
    for place in sorted(places):
        if f"{landing.prefix}{place}".replace("/CloudTrail/", f"/{DIGEST_FOLDER}/", 1) in digested:
            continue
        found.undigested_places += 1
        pages = s3.get_paginator("list_objects_v2").paginate(
            Bucket=landing.bucket, Prefix=f"{landing.prefix}{place}", StartAfter=f"{landing.prefix}{place}{first_day}"
        )
        for page in pages:
            found.list_calls += 1
            for item in page.get("Contents", []):
                relative, refusal = landing.place(item["Key"])
                if relative is not None and relative not in known:
                    found.missing.append(item["Key"])
                elif refusal is not None and FILE_NAME.fullmatch(item["Key"].rsplit("/", 1)[-1]):
                    found.refused[item["Key"]] = refusal


def _check(landing: BucketLanding, key: str, digest: dict[str, Any] | str, known: set[str], found: Reconciliation) -> bool:
    """One digest (read by read_digest) against the ledger; whether every file it names is taken and matches."""
    if isinstance(digest, str):
        found.unreadable_digests.append(digest)
        return False
    files, hour = [item for item in digest.get("logFiles") or [] if isinstance(item, dict)], digest["hour"]
    found.digests_read += 1
    figures = found.hours.setdefault(hour, {"delivered": 0, "ingested": 0, "missing": 0, "hash_mismatches": 0})
    complete = True
    for item in files:
        log_key = str(item.get("s3Object", ""))
        if not landing.holds(str(item.get("s3Bucket")), log_key):
            continue
        relative, refusal = landing.place(log_key)
        if relative is None:
            found.refused[log_key] = str(refusal)
            continue
        figures["delivered"] += 1
        if relative not in known:
            figures["missing"] += 1
            found.missing.append(log_key)
            complete = False
            continue
        figures["ingested"] += 1
        cached = landing.cache / relative
        if not cached.is_file():
            continue
        content, why = content_hash(cached)
        if content != item.get("hashValue"):
            figures["hash_mismatches"] += 1
            found.hash_mismatches.append(log_key)
            if why is not None:
                found.unhashable[log_key] = why
            complete = False
    return complete
