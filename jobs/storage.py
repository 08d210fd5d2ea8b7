"""Where the lake's files live: a folder, or a prefix in object storage (`s3://bucket/prefix`), as one kind of path
(`LakePath`): pathlib's in a folder, universal-pathlib's UPath in S3 (Airflow's own, s3fs beneath it), which
answers the same calls.

What only a file system does (a lock the kernel holds, a SQLite file, a rename that replaces a file at once) is done on
a folder's paths alone (`is_folder`). An S3 path reaches the endpoint and region the AWS conventions name
(jobs/object_store.py), with the standard credential chain, and lists the store anew each time: s3fs keeps each
listing otherwise, and a file another driver wrote since would go unseen.

The lake's JSON records are written whole (`write_record`): a reader finds the old version or the new one. Each names
its format version, and each record's one reader takes every older version up to its own (`record_body`): README,
"Versioned state".
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, Union
from urllib.parse import unquote

from typing_extensions import TypeIs

if TYPE_CHECKING:
    from upath import UPath

from jobs import object_store

SCHEMES = ("s3://", "s3a://")
# A path in the lake: pathlib's in a folder, universal-pathlib's in S3 (imported only for a lake there).
LakePath = Union[Path, "UPath"]  # noqa: UP007 - a forward reference: upath is not imported for a folder lake
Written = TypeVar("Written", bound=LakePath)


def at(where: str | os.PathLike[str] | LakePath) -> LakePath:
    """The location `where` names: an S3 URI (s3:// or s3a://), else a local path or a file URI as Spark and Hadoop
    write them ('file:///a%20b/x', 'file:/a b/x'), made absolute."""
    if not isinstance(where, str | os.PathLike):
        return where  # a path in S3 already
    text = os.fspath(where)
    if text.startswith(SCHEMES):
        return _s3(text)
    if text.startswith("file:"):
        text = unquote(re.sub(r"^file:(//)?", "", text))
    return Path(os.path.abspath(text))


def _s3(uri: str) -> UPath:
    from upath import UPath

    path: UPath = UPath("s3://" + uri.split("://", 1)[1], **s3_options())
    return path


def s3_options(env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """s3fs's settings from the AWS conventions: the endpoint and region where they are set, no listing kept."""
    client = {"endpoint_url": object_store.endpoint(env), "region_name": object_store.region(env)}
    return {"use_listings_cache": False, "client_kwargs": {key: value for key, value in client.items() if value}}


def is_folder(path: LakePath) -> TypeIs[Path]:
    """Whether `path` is on a file system (a folder lake's), where pathlib's and os's calls work."""
    return isinstance(path, Path)


def scratch(location: str) -> Path:
    """This machine's scratch folder for the lake at `location` ($CLOUDTRAIL_SCRATCH, else the temporary folder): what
    it holds can be lost with the machine and fetched again."""
    base = os.environ.get("CLOUDTRAIL_SCRATCH") or tempfile.gettempdir()
    return Path(base) / "cloudtrail" / hashlib.sha256(location.encode()).hexdigest()[:16]


def folder(path: LakePath) -> Path:
    """`path`, which only a folder lake has (an earlier release's folders, which a lake in S3 never had)."""
    if not is_folder(path):
        raise TypeError(f"{path} is in object storage, where only a folder lake's paths are expected")
    return path


def remove_tree(path: LakePath) -> None:
    """A folder and what it holds, gone (nothing there: nothing done)."""
    if is_folder(path):
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists():
        path.fs.rm(path.path, recursive=True)


def move(source: LakePath, target: LakePath) -> None:
    """A file or folder moved to `target` in the same lake, which it replaces (a file; in a folder, at once, by a
    rename; in S3, copied and deleted)."""
    if not is_folder(source):
        if is_folder(target):
            raise TypeError(f"{source} and {target} are not in one lake")
        found = source.fs.find(source.path)  # a file: itself; a folder: each file under it
        for name in found:
            source.fs.copy(name, target.path + name[len(source.path) :])
        if found == [source.path]:
            source.fs.rm(source.path)
        else:  # a folder, with the empty-folder markers (S3A's) that find does not name
            source.fs.rm(source.path, recursive=True)
        return
    destination = folder(target)
    destination.parent.mkdir(parents=True, exist_ok=True)
    os.replace(source, destination)


def read_parquet(path: LakePath, columns: list[str] | None = None) -> Any:
    """A Parquet file's rows (of `columns`) as a pyarrow table, in a folder or in S3 (through s3fs, as every lake path)."""
    import pyarrow.parquet as pq

    if is_folder(path):
        return pq.read_table(path, columns=columns)
    with path.open("rb") as source:
        return pq.read_table(source, columns=columns)


def write_parquet(rows: Any, path: LakePath, **options: Any) -> LakePath:
    """A pyarrow table written as the Parquet file at `path`, in a folder or in S3."""
    import pyarrow.parquet as pq

    if is_folder(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(rows, path, **options)
        return path
    with path.open("wb") as sink:
        pq.write_table(rows, sink, **options)
    return path


def listed(where: LakePath, pattern: str) -> list[LakePath]:
    """The paths in folder `where` matching the glob `pattern`, in order (none where there is no folder)."""
    return sorted(where.glob(pattern), key=lambda path: path.parts) if where.is_dir() else []


def files_in(folder: LakePath) -> list[LakePath]:
    """The files in `folder` (none where there is no folder). In S3, one listing, without the marker object Hadoop
    writes for an empty folder (`<folder>/`), which s3fs lists as a file of the folder's own name in it."""
    if is_folder(folder):
        return [path for path in folder.iterdir() if path.is_file()] if folder.is_dir() else []
    own = folder.path.rstrip("/")
    try:
        found = folder.fs.ls(own, detail=True)
    except FileNotFoundError:
        return []
    return [folder / entry["name"].rsplit("/", 1)[-1] for entry in found if entry["type"] == "file" and entry["name"].rstrip("/") != own]


def write_whole(path: Written, text: str, mtime_ns: int | None = None) -> Written:
    """`text` as the file at `path`, written whole: a reader finds the old version or the new one, never half of one.

    In a folder, a hidden partial file beside `path` renamed over it (readers of these folders skip hidden names, as
    Spark does; with `mtime_ns`, the new file's mtime); in S3 one PUT, which is whole by itself (the store gives the
    file its time)."""
    if not isinstance(path, Path):
        path.write_text(text)
        return path
    partial = _partial(path)
    partial.write_text(text)
    if mtime_ns is not None:
        os.utime(partial, ns=(mtime_ns, mtime_ns))
    os.replace(partial, path)
    return path


def read_whole(path: LakePath) -> str:
    """The text of the file at `path`, read whole. In S3, one GET: s3fs's `read_text` asks for the object's ETag
    first and then GETs it on condition it still has that ETag, so a record written whole again between the two
    calls (a lease renewed, a run's checkpoint record) failed its reader with PreconditionFailed."""
    if is_folder(path):
        return path.read_text()
    data: bytes = path.fs.cat_file(path.path)
    return data.decode()


def lines_of(path: LakePath) -> set[str] | None:
    """The lines of the file at `path`, read whole; None where there is none (one request in S3, not a look and a read)."""
    try:
        return set(read_whole(path).splitlines())
    except (FileNotFoundError, NotADirectoryError):
        return None


def _partial(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(f".{path.name}.partial")


FORMAT = "format"  # the key a record's format version is under; a record written before versions were named is format 1


class NewerFormat(ValueError):
    """A record written by a newer release than this code: read by it, not guessed at."""


def write_record(path: LakePath, version: int, body: Mapping[str, Any], indent: int | None = None) -> LakePath:
    """A JSON record of the lake, its format version first, written whole."""
    return write_whole(path, json.dumps({FORMAT: version, **body}, indent=indent, default=str) + "\n")


Upgrades = Mapping[int, Callable[[Any], dict[str, Any]]]


def read_record(path: LakePath, version: int, upgrades: Upgrades | None = None) -> dict[str, Any]:
    """The JSON record at `path`, at this code's `version` (see `record_body`)."""
    return record_body(json.loads(read_whole(path)), version, upgrades or {}, path)


def under(key: str) -> Callable[[Any], dict[str, Any]]:
    """The upgrade of a format whose record was one object alone to the next, which keeps it under `key`."""
    return lambda alone: {key: alone}


def record_body(body: Any, version: int, upgrades: Upgrades, what: LakePath | str) -> dict[str, Any]:
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
