"""Files written whole (stdlib only): a reader finds the old version or the new one, never half of one."""

from __future__ import annotations

import os
from pathlib import Path


def write_whole(path: Path, text: str, mtime_ns: int | None = None) -> Path:
    """Write `text` to a hidden partial file beside `path` and rename it over `path` (with `mtime_ns`, the new file's mtime).

    Readers of these folders skip hidden names (Spark skips '.' and '_' names too)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    if mtime_ns is not None:
        os.utime(partial, ns=(mtime_ns, mtime_ns))
    os.replace(partial, path)
    return path
