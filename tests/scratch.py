"""What earlier runs of the suite left in the machine's temporary folder, removed before a run starts (stdlib only:
tests/conftest.py imports it before anything else).

Since tests/conftest.py gives every process and JVM of a run a scratch folder of its own, a run leaves nothing
behind. Runs before that left the folders and native libraries of the JVMs they killed on purpose (about 140 MB a
run), and a CI machine that keeps /tmp between runs filled its disk with them. Those carry Spark's names, not the
suite's, so an entry goes only when it has Spark's (or the suite's) name, nothing in it changed for `MIN_AGE`, and no
live process has a file in it open, mapped or as its working folder: what Spark's standalone worker does with the
folders of applications that ended (spark.worker.cleanup.enabled).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

# The names the JVMs (Spark's local folders and session artifacts, the native libraries RocksDB and LZ4 extract) and
# the suite (tests/conftest.py's scratch, test_transforms' decoded files) give their temporary files.
NAMES = re.compile(
    r"(spark-|blockmgr-|artifacts-)[0-9a-f-]{36}"
    r"|librocksdbjni\d+\.so|liblz4-java-?\d+\.so(\.lck)?"
    r"|cloudtrail-tests-\w+|decoded-\w+"
)
MIN_AGE = 6 * 3600  # seconds: runs of the suite end within the hour; a folder older than that belongs to none


def in_use() -> set[Path]:
    """Every path a live process has open, maps, or works in."""
    paths: set[Path] = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for link in [proc / "cwd", *(proc / "fd").iterdir()]:
                paths.add(Path(os.readlink(link)))
            for line in (proc / "maps").read_text().splitlines():
                if "/" in line:
                    paths.add(Path(line[line.index("/") :]))
        except OSError:  # the process ended, or is not ours to read
            continue
    return paths


def newest_change(entry: Path) -> float:
    if not entry.is_dir() or entry.is_symlink():
        return entry.lstat().st_mtime
    times = [entry.lstat().st_mtime]
    for folder, names, files in os.walk(entry):
        times += [os.lstat(os.path.join(folder, name)).st_mtime for name in names + files]
    return max(times)


def stale(root: Path, now: float | None = None) -> list[Path]:
    """The entries of `root` an earlier run left: the suite's or Spark's names, unchanged for MIN_AGE, unused."""
    now = time.time() if now is None else now
    candidates = []
    for entry in root.iterdir():
        try:
            if NAMES.fullmatch(entry.name) and now - newest_change(entry) >= MIN_AGE:
                candidates.append(entry)
        except OSError:  # removed meanwhile, or unreadable: not ours to judge
            continue
    used = in_use()
    return [entry for entry in candidates if not any(path == entry or path.is_relative_to(entry) for path in used)]


def tidy(root: Path) -> int:
    """Remove what `stale` finds under `root`; the bytes freed."""
    freed = 0
    for entry in stale(root):
        if entry.is_dir() and not entry.is_symlink():
            freed += sum(path.lstat().st_size for path in entry.rglob("*") if not path.is_dir())
            shutil.rmtree(entry, ignore_errors=True)
        else:
            freed += entry.lstat().st_size
            entry.unlink(missing_ok=True)
    return freed
