"""CloudTrail's digest files: where they are, listing and reading them, the content hash they give each log file,
and the digests proven complete (<checkpoint>/reconciled/<date>.txt, jobs/lake.py). The comparison with the ledger
is jobs/ledger/reconcile.py's.

CloudTrail writes, per account, region and hour, a digest naming every log file it delivered in that hour with the
SHA-256 of its uncompressed content:

    <prefix>AWSLogs/[<org id>/]<account>/CloudTrail-Digest/<region>/YYYY/MM/DD/<account>_CloudTrail-Digest_..._<end>Z.json.gz

A digest is data from outside: whatever it holds (damage, a gzip bomb, no digest at all) is reported, never raised.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import zlib
from pathlib import Path
from typing import Any

from jobs.storage import LakePath, lines_of, write_whole

DIGEST_NAME = re.compile(r"[^/]+_CloudTrail-Digest_[^/]+\.json\.gz")
DIGEST_FOLDER = "CloudTrail-Digest"
# Where a digest is: .../CloudTrail-Digest/<region>/YYYY/MM/DD/<name>; its date names its proof file.
DIGEST_PLACE = re.compile(r"/CloudTrail-Digest/[^/]+/(\d{4})/(\d{2})/(\d{2})/[^/]+$")
# Most bytes a digest may take, compressed and decompressed: an hour's digest names a few thousand files (about
# 200 bytes each), so a larger one is no digest (a gzip bomb is named, not decompressed).
DIGEST_MAX = 64 << 20
# Most bytes a log file's content may decompress to when hashed: CloudTrail's files are tens of MB.
LOG_MAX = 4 << 30


def digest_keys(s3: Any, bucket: str, region_prefix: str, start: str) -> tuple[list[str], int]:
    """The digest keys of a region's digest folder after `start`, and the listings it took."""
    keys, made = [], 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=region_prefix, StartAfter=start):
        made += 1
        keys += [item["Key"] for item in page.get("Contents", []) if DIGEST_NAME.fullmatch(item["Key"].rsplit("/", 1)[-1])]
    return keys, made


def read_digest(s3: Any, bucket: str, key: str) -> dict[str, Any] | str:
    """A digest's content, or why it cannot be read: a digest is data from outside, whatever it holds is reported."""
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"]
        try:
            compressed = body.read(DIGEST_MAX + 1)
        finally:
            body.close()
        if len(compressed) > DIGEST_MAX:
            raise ValueError(f"over {DIGEST_MAX >> 20} MiB: no digest is")
        with gzip.GzipFile(fileobj=io.BytesIO(compressed)) as file:  # decompressed as a stream, up to the cap
            content = file.read(DIGEST_MAX + 1)
        if len(content) > DIGEST_MAX:
            raise ValueError(f"decompresses to over {DIGEST_MAX >> 20} MiB")
        digest = json.loads(content)
        if not isinstance(digest, dict) or not isinstance(digest.get("logFiles") or [], list):
            raise ValueError("not a digest: a JSON object with a list of logFiles")
        digest["hour"] = f"{digest['awsAccountId']}/{key.split('/')[-5]}/{digest['digestEndTime'][:13]}"
        return digest
    except Exception as exc:  # noqa: BLE001 - see above: reported, never raised
        return f"{key}: {type(exc).__name__}: {exc}"[:300]


def content_hash(path: Path) -> tuple[str | None, str | None]:
    """SHA-256 of a log file's uncompressed content, as a digest's hashValue gives it, read as a stream; or why it
    cannot be told (a damaged or cut gzip stream, content past LOG_MAX): a file that differs from its digest."""
    digest = hashlib.sha256()
    opener = gzip.open if path.name.endswith(".gz") else open
    size = 0
    try:
        with opener(path, "rb") as file:
            for chunk in iter(lambda: file.read(1 << 20), b""):
                size += len(chunk)
                if size > LOG_MAX:
                    return None, f"decompresses to over {LOG_MAX >> 30} GiB"
                digest.update(chunk)
    except (OSError, EOFError, zlib.error) as exc:
        return None, f"cannot be read: {type(exc).__name__}: {exc}"[:300]
    return digest.hexdigest(), None


class Proven:
    """Digests proven complete, one text file per digest delivery date: never read again."""

    def __init__(self, folder: LakePath) -> None:
        self.folder = folder
        self._days: dict[str, set[str]] = {}
        self._added: set[str] = set()

    @staticmethod
    def day(key: str) -> str | None:
        """A digest's delivery date (YYYY-MM-DD) from its place; None for a key not at a digest's place."""
        match = DIGEST_PLACE.search(key)
        return "-".join(match.groups()) if match else None

    def on(self, key: str) -> set[str]:
        day = self.day(key) or ""
        if day not in self._days:
            path = self.folder / f"{day}.txt"
            self._days[day] = lines_of(path) or set()
        return self._days[day]

    def add(self, key: str) -> None:
        self.on(key).add(key)
        self._added.add(self.day(key) or "")

    def save(self) -> None:
        for day in self._added:
            write_whole(self.folder / f"{day}.txt", "".join(f"{key}\n" for key in sorted(self._days[day])))
