"""Files written whole (stdlib only): a reader finds the old version or the new one, never half of one. The lake's JSON
records name their format version (`write_record`), and each record's one reader takes every older version up to its own
(`record_body`): README, "Versioned state"."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

FORMAT = "format"  # the key a record's format version is under; a record written before versions were named is format 1


class NewerFormat(ValueError):
    """A record written by a newer release than this code: read by it, not guessed at."""


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


def write_record(path: Path, version: int, body: Mapping[str, Any], indent: int | None = None) -> Path:
    """A JSON record of the lake, its format version first, written whole."""
    return write_whole(path, json.dumps({FORMAT: version, **body}, indent=indent, default=str) + "\n")


Upgrades = Mapping[int, Callable[[Any], dict[str, Any]]]


def read_record(path: Path, version: int, upgrades: Upgrades | None = None) -> dict[str, Any]:
    """The JSON record at `path`, at this code's `version` (see `record_body`)."""
    return record_body(json.loads(path.read_text()), version, upgrades or {}, path)


def under(key: str) -> Callable[[Any], dict[str, Any]]:
    """The upgrade of a format whose record was one object alone to the next, which keeps it under `key`."""
    return lambda alone: {key: alone}


def record_body(body: Any, version: int, upgrades: Upgrades, what: Path | str) -> dict[str, Any]:
    """A record's body (as json.loads read it) at this code's `version`, without its format key: `upgrades[n]` takes a
    body of format n to format n + 1 (a body with no format key is format 1). A newer format is refused."""
    found = body.pop(FORMAT, 1) if isinstance(body, dict) else 1
    if not isinstance(found, int) or found > version:
        raise NewerFormat(f"{what} is of format {found}, newer than this release's {version}: read it with the release that wrote it")
    while found < version:
        body = upgrades[found](body)
        found += 1
    if not isinstance(body, dict):
        raise ValueError(f"{what} is not a JSON object")
    return body
