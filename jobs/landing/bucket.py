"""An S3 landing: the bucket CloudTrail delivers to, read object by object into the lake's landing cache.

    --landing s3://<bucket>[/<prefix>]   objects <prefix>/AWSLogs/... as CloudTrail names them
    <lake>/landing/AWSLogs/...           each object fetched, written whole under its key, mtime = its LastModified
    <lake>/landing/.pruned               the date before which the cache was last pruned
    <lake>/landing/.landing              the landing whose copies the lake's ledger took (`claim`, `mark`)

Spark reads the cache as it reads a landing folder, so the ledger, the de-duplication on arrival time (an object's
LastModified), quarantine, rebuild and repair work on it unchanged (docs/design.md, 'An S3 landing'). Which objects
are fetched comes from the queue's notifications (jobs/landing/sqs.py), from a listing of the bucket (a first run, bounded
by a delivery date), or from the ledger (a rebuild whose local copies are gone). The cache is pruned (`prune`) of
the delivery folders the ledger has retired: no run reads them again, and a rebuild fetches them anew.

Clients are boto3's, configured the way boto3 configures itself: the standard credential chain (environment, profile,
instance role) and the endpoints in AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_S3 and AWS_ENDPOINT_URL_SQS (tests, MinIO).
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs import object_store
from jobs.landing.layout import FILE_NAME, day_folders, delivery_date
from jobs.storage import write_whole

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("landing")
SCHEME = "s3://"
# Objects fetched at once: a fetch waits on the network, not on the CPU.
FETCH_THREADS = 16
# Reasons an object is not fetched for good, its message deleted: it was deleted before it was fetched, or its key
# names a file the cache cannot hold (the others, forbidden or failed, are retried: their messages come back).
GONE = "gone (404)"
REFUSED = "refused"
CHUNK = 1 << 20
# The cache's record of its last prune: the date before which it holds no delivery folder.
PRUNED = ".pruned"
# The cache's record of the landing whose copies the lake's ledger took.
CLAIMED = ".landing"
# Where the executors read the landing's files: `store` (the objects, through S3A), `cache` (the driver's copies; only
# where they share its disk) or unset: the driver's copies in local mode, the objects on a cluster.
READS = "CLOUDTRAIL_LANDING_READS"
# What a POSIX file system holds: a name of at most 255 bytes, a path of at most 4,095.
NAME_MAX, PATH_MAX = 255, 4095
# What the file system answers for a name it cannot hold, rather than a passing fault (a full disk, an I/O error).
CANNOT_HOLD = {errno.ENAMETOOLONG, errno.ENOTDIR, errno.EISDIR, errno.EILSEQ, errno.EINVAL, errno.EEXIST}


def is_bucket(landing: str | Path) -> bool:
    return str(landing).startswith(SCHEME)


@dataclass(frozen=True)
class Problem:
    """An object a run could not fetch, named with its bucket and key: gone (404), forbidden (403), or failed."""

    bucket: str
    key: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"bucket": self.bucket, "key": self.key, "reason": self.reason}

    @property
    def lasting(self) -> bool:
        """Whether asking again cannot help: the object is gone, or the cache cannot hold its key."""
        return self.reason.startswith((GONE, REFUSED))


@dataclass
class Fetched:
    """What one fetch did: the cache files of the objects asked for (fetched now or already cached as they are),
    the bytes it downloaded, and what it could not fetch."""

    files: list[str] = field(default_factory=list)
    downloaded: int = 0
    downloaded_bytes: int = 0
    problems: list[Problem] = field(default_factory=list)

    def add(self, other: Fetched) -> None:
        self.files += [path for path in other.files if path not in self.files]
        self.downloaded += other.downloaded
        self.downloaded_bytes += other.downloaded_bytes
        self.problems += other.problems


@dataclass(frozen=True)
class BucketLanding:
    bucket: str
    prefix: str  # "" or ending in "/"
    cache: Path

    @classmethod
    def at(cls, url: str, cache: Path) -> BucketLanding:
        """`s3://bucket[/prefix]`; ValueError for anything else."""
        if not is_bucket(url):
            raise ValueError(f"{url} is not an s3:// address")
        bucket, _, prefix = url[len(SCHEME) :].partition("/")
        if not bucket or "/" in bucket:
            raise ValueError(f"{url} names no bucket: s3://BUCKET[/PREFIX]")
        prefix = prefix.strip("/")
        return cls(bucket, f"{prefix}/" if prefix else "", cache)

    @property
    def url(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.prefix}"

    def object_uri(self, place: str) -> str:
        """The object at `place` (AWSLogs/...) as Hadoop's S3A names it."""
        return f"s3a://{self.bucket}/{self.prefix}{place}"

    @staticmethod
    def from_store(spark: SparkSession, env: Mapping[str, str] = os.environ) -> bool:
        """Whether Spark's executors read the objects themselves (through S3A) rather than the driver's cache: on a
        cluster, whose executors share no disk with the driver; in local mode where READS says `store`."""
        chosen = env.get(READS, "")
        if chosen not in ("", "cache", "store"):
            raise ValueError(f"{READS} must be 'store', 'cache' or unset, not {chosen!r}")
        return chosen == "store" or (not chosen and not str(spark.sparkContext.master).startswith("local"))

    def holds(self, bucket: str, key: str) -> bool:
        """Whether a log key falls under this landing (its bucket, its prefix's AWSLogs/): one it takes or refuses."""
        return bucket == self.bucket and key.startswith(f"{self.prefix}AWSLogs/")

    def relative_key(self, key: str) -> str | None:
        """A key's place under the prefix (AWSLogs/...), or None for a key this landing does not take (`place` says
        why)."""
        return self.place(key)[0]

    def place(self, key: str) -> tuple[str, None] | tuple[None, str]:
        """(the key's place under the prefix, None), or (None, why it gets none: `refusal`)."""
        refused = self.refusal(key)
        return (None, refused) if refused is not None else (key[len(self.prefix) :], None)

    def refusal(self, key: str) -> str | None:
        """Why a key gets no place in the cache, None when it gets one: outside the prefix, not a CloudTrail log file
        name, a name that would climb out of the cache ('..', '.', an empty part), or one a POSIX file system cannot
        hold (a name over 255 bytes, a path over 4,095, a log file's name as a folder, where the log file must go)."""
        if not key.startswith(f"{self.prefix}AWSLogs/"):
            return f"{REFUSED}: not under {self.url}AWSLogs/"
        rest = key[len(self.prefix) :]
        parts = rest.split("/")
        if any(p in ("", ".", "..") or "\0" in p for p in parts):
            return f"{REFUSED}: an empty, '.' or '..' part would climb out of the cache"
        if not FILE_NAME.fullmatch(parts[-1]) or delivery_date(rest) is None:
            return f"{REFUSED}: not a CloudTrail log file's name in a delivery folder"
        longest = max(len(p.encode()) for p in parts)
        if longest > NAME_MAX:
            return f"{REFUSED}: a part of {longest} bytes, over the file system's {NAME_MAX}"
        path_bytes = len(os.fsencode(self.cache / rest))
        if path_bytes > PATH_MAX:
            return f"{REFUSED}: {path_bytes} bytes as a path in the cache, over {PATH_MAX}"
        if any(FILE_NAME.fullmatch(p) for p in parts[:-1]):
            return f"{REFUSED}: a log file's name as a folder (where a log file goes)"
        return None

    def cached(self, key: str) -> Path:
        relative = self.relative_key(key)
        if relative is None:
            raise ValueError(f"s3://{self.bucket}/{key} is not a CloudTrail log file under {self.url}")
        return self.cache / relative

    def fetch(self, s3: Any, keys: Iterable[str]) -> Fetched:
        """Fetch `keys` into the cache (each at most once), oldest name first; an object cached with its size and
        LastModified is not downloaded again."""
        fetched = Fetched()
        unique = sorted(dict.fromkeys(keys))
        with ThreadPoolExecutor(FETCH_THREADS) as pool:
            for outcome in pool.map(lambda key: self._fetch_one(s3, key), unique):
                if isinstance(outcome, Problem):
                    fetched.problems.append(outcome)
                    continue
                path, size = outcome
                fetched.files.append(str(path))
                if size is not None:
                    fetched.downloaded += 1
                    fetched.downloaded_bytes += size
        return fetched

    def fetch_missing(self, places: Iterable[str], why: str) -> Fetched:
        """Fetch again the log files at these places under the prefix (AWSLogs/...) whose copies this cache does not
        hold (cleaned, another machine's, a lake restored without it); `why` they are wanted, for the log."""
        missing = sorted(place for place in places if place.startswith("AWSLogs/") and not (self.cache / place).exists())
        if not missing:
            return Fetched()
        fetched = self.fetch(s3_client(), [self.prefix + place for place in missing])
        log.info("fetched %d files again from %s (%s)", fetched.downloaded, self.url, why)
        for problem in fetched.problems[:10]:
            log.warning("s3://%s/%s not fetched again: %s", problem.bucket, problem.key, problem.reason)
        return fetched

    def _fetch_one(self, s3: Any, key: str) -> tuple[Path, int | None] | Problem:
        from botocore.exceptions import BotoCoreError, ClientError

        relative, refused = self.place(key)
        if relative is None:
            return Problem(self.bucket, key, str(refused))
        path = self.cache / relative
        try:
            response = s3.get_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status == 404 or error.get("Code") in ("NoSuchKey", "404"):
                return Problem(self.bucket, key, f"{GONE}: deleted before it was fetched")
            if status == 403 or error.get("Code") == "AccessDenied":
                return Problem(self.bucket, key, "forbidden (403): the role may not read it (s3:GetObject, the key's KMS key)")
            return Problem(self.bucket, key, f"failed: {error.get('Code', status)}")
        except BotoCoreError as exc:
            return Problem(self.bucket, key, f"failed: {exc}"[:300])
        mtime_ns = ns_of(response["LastModified"])
        body = response["Body"]
        try:
            if _same(path, response["ContentLength"], mtime_ns):
                return path, None  # re-delivered: as cached, and its ctime must not move
            _write(path, body.iter_chunks(CHUNK), mtime_ns)
        except BotoCoreError as exc:  # the connection broke mid-object: nothing written, the message comes back
            return Problem(self.bucket, key, f"failed while read: {exc}"[:300])
        except OSError as exc:
            if exc.errno in CANNOT_HOLD:  # a folder where the file must go, or a name this file system refuses
                return Problem(self.bucket, key, f"{REFUSED}: the cache cannot hold it ({exc.strerror})")
            return Problem(self.bucket, key, f"failed while written: {exc.strerror or exc}"[:300])  # a full disk: retried
        finally:
            body.close()
        return path, response["ContentLength"]

    def is_cached(self, key: str, size: int, mtime_ns: int) -> bool:
        relative = self.relative_key(key)
        return relative is not None and _same(self.cache / relative, size, mtime_ns)

    def claim(self, new_lake: bool) -> None:
        """The cache made this landing's before a walk of it plans what it holds: the copies of another landing (the
        lake's `--landing` changed) or, for a lake whose ledger holds nothing yet (`new_lake`), those an earlier lake
        at its location took (`mark`) are deleted. A first run's own copies, fetched before it died, have no mark and
        stay. Copies are scratch: fetched again when wanted."""
        record = self.cache / CLAIMED
        held = record.read_text().strip() if record.is_file() else None
        if held is not None and (held != self.url or new_lake):
            why = "an earlier lake here took" if held == self.url else "this lake took before its landing changed"
            log.warning("the landing cache %s held copies of %s that %s: deleted (this lake reads %s)", self.cache, held, why, self.url)
            shutil.rmtree(self.cache / "AWSLogs", ignore_errors=True)
            (self.cache / PRUNED).unlink(missing_ok=True)
            record.unlink()
        (self.cache / "AWSLogs").mkdir(parents=True, exist_ok=True)

    def mark(self) -> None:
        """Recorded in the cache that the lake's ledger took copies of this landing's (`claim` reads it)."""
        record = self.cache / CLAIMED
        if not record.is_file() or record.read_text().strip() != self.url:
            write_whole(record, self.url + "\n")

    def prune(self, before: date) -> dict[str, Any]:
        """Delete the cached delivery folders dated before `before`, once per date (a walk of the cache's day folders):
        what it deleted, files and bytes."""
        record = self.cache / PRUNED
        if record.is_file() and record.read_text().strip() >= before.isoformat():
            return {"before": before.isoformat(), "files": 0, "bytes": 0, "walked": False}
        files = size = 0
        for day, folder in day_folders(self.cache):
            if day >= before:
                break
            for entry in os.scandir(folder):
                files, size = files + 1, size + entry.stat(follow_symlinks=False).st_size
            shutil.rmtree(folder, ignore_errors=True)
            for parent in list(Path(folder).parents)[:2]:  # the month and year folders, once empty
                try:
                    parent.rmdir()
                except OSError:
                    break
        write_whole(record, before.isoformat() + "\n")
        return {"before": before.isoformat(), "files": files, "bytes": size, "walked": True}


def ns_of(modified: datetime) -> int:
    """S3's LastModified (whole seconds) as a file time."""
    return int(modified.timestamp()) * 10**9


def _same(path: Path, size: int, mtime_ns: int) -> bool:
    try:
        stat = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return False
    return stat.st_size == size and stat.st_mtime_ns == mtime_ns


def _write(path: Path, chunks: Iterable[bytes], mtime_ns: int) -> None:
    """Written whole: a hidden name (the landing walk and Spark pass over it) renamed once complete, its mtime the
    object's LastModified (when it counts as arrived)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{uuid.uuid4().hex}.part")  # short, whatever the key's name
    try:
        with open(partial, "wb") as out:
            for chunk in chunks:
                out.write(chunk)
        os.utime(partial, ns=(mtime_ns, mtime_ns))
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)  # a download cut short (a full disk, a reset connection) leaves nothing


def s3_client() -> Any:
    return object_store.s3_client(FETCH_THREADS)
