"""What earlier runs of the suite left in the machine's temporary folder, removed before a run starts (stdlib only:
tests/conftest.py imports it before anything else).

Since tests/conftest.py gives every process and JVM of a run a scratch folder of its own, a run leaves nothing
behind. Runs before that left the folders and native libraries of the JVMs they killed on purpose (about 140 MB a
run), and a CI machine that keeps /tmp between runs filled its disk with them. Those carry the JVM's names, not the
suite's, so an entry goes only when it has such a name, nothing in it changed for `MIN_AGE`, and nothing live holds it
(`Live`): what Spark's standalone worker does with the folders of applications that ended (spark.worker.cleanup.enabled).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

# The names the JVMs give their temporary files (Spark's local folders and session artifacts, the native libraries
# RocksDB and LZ4 extract), and the suite's (tests/conftest.py's scratch, test_transforms' decoded files).
JVM_FOLDERS = re.compile(r"(spark|blockmgr|artifacts)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
OTHERS = re.compile(r"librocksdbjni\d+\.so|liblz4-java-?\d+\.so(\.lck)?|cloudtrail-tests-\w+|decoded-\w+")
MIN_AGE = 3600  # seconds unchanged: a run of the suite changes its files within minutes


@dataclass(frozen=True)
class Live:
    """What the machine's live processes hold: a file a process has open, maps or works in is in use. A JVM's
    local folders may hold nothing open while it idles, so they go only when no JVM runs at all."""

    paths: frozenset[Path]
    jvms: frozenset[int]  # the process ids of the JVMs that run

    @classmethod
    def scan(cls) -> Live:
        paths: set[Path] = set()
        jvms: set[int] = set()
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                if Path(os.readlink(proc / "exe")).name == "java":
                    jvms.add(int(proc.name))
                links = [proc / "cwd", *(proc / "fd").iterdir()]
                for line in (proc / "maps").read_text().splitlines():
                    if "/" in line:
                        paths.add(Path(line[line.index("/") :]))
            except OSError:  # the process ended, or is not ours to read
                continue
            for link in links:
                try:
                    paths.add(Path(os.readlink(link)))
                except OSError:  # closed since it was listed: the process's other files still count
                    continue
        return cls(frozenset(paths), frozenset(jvms))

    def holds(self, entry: Path) -> bool:
        return (bool(self.jvms) and JVM_FOLDERS.fullmatch(entry.name) is not None) or any(
            path == entry or path.is_relative_to(entry) for path in self.paths
        )


def newest_change(entry: Path) -> float:
    if not entry.is_dir() or entry.is_symlink():
        return entry.lstat().st_mtime
    times = [entry.lstat().st_mtime]
    for folder, names, files in os.walk(entry):
        times += [os.lstat(os.path.join(folder, name)).st_mtime for name in names + files]
    return max(times)


def stale(root: Path, live: Live, now: float) -> list[Path]:
    """The entries of `root` an earlier run left: a JVM's or the suite's name, unchanged for MIN_AGE, held by nothing live."""
    found = []
    for entry in root.iterdir():
        try:
            named = JVM_FOLDERS.fullmatch(entry.name) or OTHERS.fullmatch(entry.name)
            if named and now - newest_change(entry) >= MIN_AGE and not live.holds(entry):
                found.append(entry)
        except OSError:  # removed meanwhile, or unreadable: not ours to judge
            continue
    return found


def tidy(root: Path) -> int:
    """Remove what `stale` finds under `root` now; the bytes freed."""
    return remove(stale(root, Live.scan(), time.time()))


def remove(entries: list[Path]) -> int:
    """Remove `entries` (files or folders); the bytes freed."""
    freed = 0
    for entry in entries:
        if entry.is_dir() and not entry.is_symlink():
            freed += sum(path.lstat().st_size for path in entry.rglob("*") if not path.is_dir())
            shutil.rmtree(entry, ignore_errors=True)
        else:
            freed += entry.lstat().st_size
            entry.unlink(missing_ok=True)
    return freed
