"""Spark's own metadata logs: read here, and rewritten here (or, for a rollback or a rescale, in jobs/spark/state.py)
where Spark offers no API.

Spark keeps each log (a checkpoint's commits/, offsets/ and sources/0/; a file sink's
<table>/_spark_metadata/) as one file per batch, named by the batch id. A file is a version
line ("v1") followed by JSON entries, one per line; every 10th file of a file log is a
compaction, `<id>.compact`, holding every entry still kept. The sink log is written through
Spark's own class (jobs/spark/sinks.py); nothing else in this project, these two modules aside, opens these files.

The de-duplication state is <checkpoint>/state/0/<partition>/: RocksDB's files, one `<version>.zip`
a committed version (the version a batch writes is its id + 1), and the operator's metadata.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, unquote

from jobs import storage
from jobs.cli import Refused
from jobs.storage import LakePath, read_whole, write_whole

VERSION = "v1"


class CheckpointError(Refused):
    """The checkpoint cannot be used as it is; the message says how to recover."""


def source_log_folder(checkpoint: LakePath) -> LakePath:
    """The checkpoint's log of what its file source read: the manifests (or, before the ledger, landing files)."""
    return checkpoint / "sources" / "0"


def batch_files(log: LakePath) -> list[tuple[int, LakePath]]:
    """A log's batch files (compactions included), by batch id."""
    batches = []
    for path in storage.files_in(log):
        stem = path.name.removesuffix(".compact")
        if stem.isdigit():
            batches.append((int(stem), path))
    return sorted(batches)


def damaged(path: LakePath, mend: str) -> CheckpointError:
    """The refusal for a log file Spark could not read either: cut short, overwritten, of another version."""
    return CheckpointError(f"{path} is damaged (cut short, overwritten or of another version). Refusing to start. {mend}")


# The mend when a log file the next batch needs is damaged: only a copy of the same moment brings it back.
RESTORE = "Recovery: restore the whole lake (tables and checkpoint) from one backup (README, 'Recovering a checkpoint')."


def _lines(path: LakePath, mend: str = RESTORE) -> list[str]:
    """A log file's lines, its version line checked."""
    try:
        lines = read_whole(path).splitlines()
    except UnicodeDecodeError:
        raise damaged(path, mend) from None
    if not lines or lines[0] != VERSION:
        raise damaged(path, mend)
    return lines


def _json(path: LakePath, line: str, mend: str = RESTORE) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        raise damaged(path, mend) from None


def latest_entry(log: LakePath, mend: str = RESTORE) -> tuple[int, dict[str, Any]] | None:
    """The newest batch of a commits/ or offsets/ log, with its first JSON entry."""
    batches = batch_files(log)
    if not batches:
        return None
    batch_id, path = batches[-1]
    lines = _lines(path, mend)
    body = _json(path, lines[1], mend) if len(lines) > 1 else None
    if not isinstance(body, dict):
        raise damaged(path, mend)
    return batch_id, body


@dataclass(frozen=True)
class Commit:
    """The last batch a checkpoint committed, and the de-duplication watermark the next batch uses."""

    batch_id: int | None = None
    watermark: datetime | None = None


# Deleting the newest commit makes its batch planned and not committed: the next run runs it again, and the sinks,
# which commit a batch id once, write nothing twice.
REPLAY_COMMIT = "Recovery: delete it (and its .crc) and run again: its batch runs again and writes nothing twice."


def last_commit(checkpoint: LakePath) -> Commit:
    entry = latest_entry(checkpoint / "commits", REPLAY_COMMIT)
    if entry is None:
        return Commit()
    millis = entry[1].get("nextBatchWatermarkMs", 0)
    return Commit(entry[0], datetime.fromtimestamp(millis / 1000, tz=UTC) if millis else None)


def planned_batch_id(checkpoint: LakePath) -> int | None:
    """The last batch the offset log fixed; past the last commit when a batch is half done."""
    entry = latest_entry(checkpoint / "offsets")
    return entry[0] if entry else None


def _offset_entry(checkpoint: LakePath, batch_id: int | None) -> list[str] | None:
    """The lines of batch `batch_id`'s offset log entry (version, metadata, one offset per source); None if there is none."""
    path = checkpoint / "offsets" / str(batch_id)
    return _lines(path) if batch_id is not None and path.exists() else None


def source_offset(checkpoint: LakePath, batch_id: int | None) -> int | None:
    """The file source's log offset that batch `batch_id` read up to (its offset log entry); None if unknown.

    A query batch and the source's log count apart: a batch with no new file adds no source entry."""
    lines = _offset_entry(checkpoint, batch_id)
    if not lines or len(lines) < 3 or lines[2] == "-":
        return None
    body = _json(checkpoint / "offsets" / str(batch_id), lines[2])
    if not isinstance(body, dict) or not isinstance(body.get("logOffset"), int):
        raise damaged(checkpoint / "offsets" / str(batch_id), RESTORE)
    return int(body["logOffset"])


def batch_time(checkpoint: LakePath, batch_id: int) -> datetime:
    """The time the offset log fixed for batch `batch_id` (what current_timestamp() is in that batch): the same on a replay."""
    lines = _offset_entry(checkpoint, batch_id)
    if not lines or len(lines) < 2:
        raise CheckpointError(f"batch {batch_id} has no offset log entry in {checkpoint}: Spark writes it before the batch runs")
    return datetime.fromtimestamp(json.loads(lines[1])["batchTimestampMs"] / 1000, tz=UTC)


def state_folder(checkpoint: LakePath) -> LakePath:
    return checkpoint / "state"


def source_log_gaps(checkpoint: LakePath, through: int | None) -> list[int]:
    """The file source's log offsets up to `through` that have no file: Spark keeps every one after its newest
    compaction, so one missing was deleted, and the manifests it named would be taken for new."""
    if through is None:
        return []
    files = batch_files(source_log_folder(checkpoint))
    present = {batch_id for batch_id, _ in files}
    compactions = [batch_id for batch_id, path in files if path.name.endswith(".compact")]
    return [offset for offset in range(max(compactions, default=-1) + 1, through + 1) if offset not in present]


# The stream's own id, all Spark keeps in the checkpoint's `metadata` file.
STREAM_METADATA = "metadata"


def stream_id(checkpoint: LakePath) -> str:
    """The stream's id, as its checkpoint holds it (what a table's snapshot names as the query that wrote it)."""
    return str(json.loads(read_whole(checkpoint / STREAM_METADATA))["id"])


def restore_stream_metadata(checkpoint: LakePath) -> bool:
    """Write the checkpoint's `metadata` file again when it is missing or damaged beside batches: it holds only the
    query's id, which no other file refers to, and Spark refuses to start without it. Whether it was written."""
    path = checkpoint / STREAM_METADATA
    try:
        body = json.loads(read_whole(path))
        if isinstance(body, dict) and isinstance(body.get("id"), str):
            return False
    except (OSError, ValueError):
        pass
    if not batch_files(checkpoint / "offsets"):
        return False  # a new stream: Spark writes it
    path.with_name(f".{path.name}.crc").unlink(missing_ok=True)
    write_whole(path, json.dumps({"id": str(uuid.uuid4())}) + "\n")
    return True


def sink_batch(table: LakePath) -> int | None:
    """The newest batch a table's sink log committed; None when it has none. Its file must be whole: Spark reads it."""
    batches = batch_files(sink_log(table))
    if not batches:
        return None
    batch_id, path = batches[-1]
    for line in _lines(path)[1:]:
        if line.strip() and not isinstance(_json(path, line), dict):
            raise damaged(path, RESTORE)
    return batch_id


def drop_orphan_checksums(checkpoint: LakePath, tables: list[LakePath]) -> list[LakePath]:
    """Delete each checksum (`.<name>.crc`) of the checkpoint's logs and the tables' sink logs whose file is gone (deleted
    by hand or by a copy tool): Hadoop will not write the file again beside it, and Spark reports that as another query
    using the checkpoint. Alone it checks nothing. Call it under the lake lock; the checksums deleted."""
    logs = [checkpoint / "commits", checkpoint / "offsets", source_log_folder(checkpoint), *map(sink_log, tables)]
    dropped = []
    for log in logs:
        for crc in log.glob(".*.crc") if log.is_dir() else ():
            if not crc.with_name(crc.name[1:].removesuffix(".crc")).exists():
                crc.unlink()
                dropped.append(crc)
    return dropped


def local_path(logged: str) -> str:
    """A file log entry's path ('file:///a%20b/x') as a local path ('/a b/x')."""
    return unquote(re.sub(r"^file:(//)?", "", logged))


def source_file(path: str) -> str:
    """A local path as the tables' _source_file (and the quarantine's source_file) name it: as Hadoop does ('file:/a b/x')."""
    return f"file:{path}"


@dataclass(frozen=True)
class LogEntry:
    line: str  # as Spark wrote it
    path: str  # the file it names, as a local path
    batch_id: int  # the source's log offset that took it (not the query's batch id: see source_offset)


def moved(place: LakePath, folder: LakePath) -> bool:
    """`place` is in `folder` as the lake stood under another root (copied, restored to a new disk, moved)."""
    return place.parent != folder and place.parent.parts[-3:] == folder.parts[-3:]


def _entry(path: LakePath, line: str, folder: LakePath | None) -> LogEntry:
    body = _json(path, line)
    if not isinstance(body, dict) or "path" not in body or "batchId" not in body:
        raise damaged(path, RESTORE)
    place = local_path(body["path"])
    if folder is not None and moved(storage.at(place), folder):
        place = str(folder / os.path.basename(place))
    return LogEntry(line, place, int(body["batchId"]))


def _read_entries(path: LakePath, folder: LakePath | None = None) -> tuple[str, list[LogEntry]]:
    version, *lines = _lines(path)
    return version, [_entry(path, line, folder) for line in lines if line.strip()]


@dataclass(frozen=True)
class SourceLog:
    """The files a file source has read: its newest compaction and the batch files after it."""

    compact: LakePath | None = None
    version: str = VERSION
    compacted: tuple[LogEntry, ...] = ()
    later: tuple[LogEntry, ...] = ()

    @property
    def entries(self) -> tuple[LogEntry, ...]:
        return self.compacted + self.later


def read_source_log(checkpoint: LakePath, folder: LakePath | None = None) -> SourceLog:
    """What Spark restores the file source's list of read files from. With `folder` (the folder the source reads),
    an entry that names a file of it where the lake stood before it was copied or moved names it where it is now:
    what every reader of the ledger asks (relocate_source_log rewrites the log itself before a stream reads it)."""
    batches = batch_files(source_log_folder(checkpoint))
    compactions = [(batch_id, path) for batch_id, path in batches if path.name.endswith(".compact")]
    if not compactions:
        return SourceLog(later=tuple(entry for _, path in batches for entry in _read_entries(path, folder)[1]))
    last_compacted, compact = compactions[-1]
    version, compacted = _read_entries(compact, folder)
    later = [entry for batch_id, path in batches if batch_id > last_compacted for entry in _read_entries(path, folder)[1]]
    return SourceLog(compact, version, tuple(compacted), tuple(later))


def hadoop_uri(path: LakePath) -> str:
    """A path as Hadoop writes it into a file log: a local one as file:// and the path, quoted as java.net.URI quotes
    one; one in S3 as its URI (the lake's names need no quoting)."""
    if not storage.is_folder(path):
        return str(path)
    return "file://" + quote(str(path), safe="/:@!$&'()*+,;=-._~")


def relocate_source_log(checkpoint: LakePath, folder: LakePath) -> int:
    """Point the file source's log at `folder` where it names the same folder under another root (the lake was
    moved): otherwise the source would take every manifest there for new and read it again. The entries rewritten."""
    if not any(moved(storage.at(entry.path), folder) for entry in read_source_log(checkpoint).entries):
        return 0
    rewritten = 0
    for _, path in batch_files(source_log_folder(checkpoint)):
        version, entries = _read_entries(path)
        lines = []
        for entry in entries:
            place = storage.at(entry.path)
            if moved(place, folder):
                body = json.loads(entry.line)
                body["path"] = hadoop_uri(folder / place.name)
                lines.append(json.dumps(body, separators=(",", ":")))
                rewritten += 1
            else:
                lines.append(entry.line)
        if lines != [entry.line for entry in entries]:
            replace_log_file(path, version, lines)
    return rewritten


def replace_log_file(path: LakePath, version: str, lines: list[str]) -> None:
    """Rewrite a log file whole, atomically, as Spark writes one: no final newline."""
    # Hadoop's local file system checks a file against its .crc when one exists; the old one no longer matches.
    path.with_name(f".{path.name}.crc").unlink(missing_ok=True)
    write_whole(path, "\n".join([version, *lines]))


def rewrite_compaction(log: SourceLog, kept: list[LogEntry]) -> None:
    """Replace the newest compaction's entries with `kept`, atomically."""
    if log.compact is None:
        raise ValueError("only a compaction is rewritten: the source log has none")
    replace_log_file(log.compact, log.version, [entry.line for entry in kept])


def sink_log(table: LakePath) -> LakePath:
    return table / "_spark_metadata"


def sink_log_files(table: LakePath) -> list[LakePath]:
    """The batch files of a table's sink log (what its committed batches are)."""
    return [path for _, path in batch_files(sink_log(table))]
