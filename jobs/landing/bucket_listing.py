"""An S3 landing's objects found by listing it: a first run's, or a dry run's, listing from a delivery date on, and the
trail folders (accounts, regions) a reconciliation walks."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from typing import Any

from jobs.landing.bucket import FETCH_THREADS, BucketLanding, ns_of
from jobs.landing.layout import FILE_NAME, delivery_date, place

__all__ = ["estimate", "listed", "region_prefixes"]


def listed(landing: BucketLanding, s3: Any, since: date | None = None) -> Iterator[tuple[str, int, int]]:
    """Every CloudTrail log object (key, size, LastModified in ns) under the prefix delivered on or after `since`:
    a first run's, or a dry run's, listing. Each account and region is listed from `since` on (StartAfter), not
    from its first day. A log key the cache cannot hold is listed too: its fetch names it as refused."""
    paginator = s3.get_paginator("list_objects_v2")
    for region_prefix in region_prefixes(landing, s3):
        start = f"{region_prefix}{since.strftime('%Y/%m/%d')}" if since else ""
        for page in paginator.paginate(Bucket=landing.bucket, Prefix=region_prefix, StartAfter=start):
            for item in page.get("Contents", []):
                if FILE_NAME.fullmatch(item["Key"].rsplit("/", 1)[-1]):
                    yield item["Key"], item["Size"], ns_of(item["LastModified"])


def region_prefixes(landing: BucketLanding, s3: Any, folder: str = "CloudTrail", calls: Counter[str] | None = None) -> list[str]:
    """<prefix>AWSLogs/[<org id>/]<account>/<folder>/<region>/ (`folder`: CloudTrail, or CloudTrail-Digest), by
    delimiter listings (no object listed), the accounts' in FETCH_THREADS threads; each listing counted in
    `calls["list"]` when given."""

    def folders(prefix: str) -> tuple[list[str], int]:
        names, made = [], 0
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=landing.bucket, Prefix=prefix, Delimiter="/"):
            made += 1
            names += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        return names, made

    def regions(top: str) -> tuple[list[str], int]:
        below, made = folders(top)
        trails = [f"{top}{folder}/"] if f"{top}{folder}/" in below else [f"{b}{folder}/" for b in below]
        found: list[str] = []
        for trail in trails:
            names, listed = folders(trail)
            found, made = found + names, made + listed
        return found, made

    tops, made = folders(f"{landing.prefix}AWSLogs/")
    with ThreadPoolExecutor(FETCH_THREADS) as pool:
        listed = list(pool.map(regions, tops))
    if calls is not None:
        calls["list"] += made + sum(count for _, count in listed)
    return [prefix for names, _ in listed for prefix in names]


def estimate(landing: BucketLanding, objects: Iterable[tuple[str, int, int]]) -> dict[str, dict[str, int]]:
    """A dry run's figures: files and bytes per account and delivery day."""
    files: Counter[str] = Counter()
    size: Counter[str] = Counter()
    for key, length, _ in objects:
        relative = landing.relative_key(key) or key
        where, day = place(os.path.dirname(relative)), delivery_date(relative)
        name = f"{where[0] if where else '?'} {day.isoformat() if day else '?'}"
        files[name] += 1
        size[name] += length
    return {name: {"files": files[name], "bytes": size[name]} for name in sorted(files)}
