"""The command line every job shares: where the lake and the landing zone are, a run's id,
date ranges, durations and sizes, and what each exit code means.

A job's `main` builds its parser here, parses its arguments into its one config object, and hands
its body to `run`, which turns the failures an operator can act on into an exit code and one line.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any

from jobs import options, storage
from jobs.lake import Lake

log = logging.getLogger("cloudtrail")

# Exit codes, the same for every job (README, "Exit codes").
OK = 0
FAILED = 1  # the run failed, or its gate did
USAGE = 2  # bad arguments, or a checkpoint the job cannot use as it is
ROWS_LOST = 3  # the de-duplication watermark dropped rows (docs/design.md, "Recovering dropped rows")
LAKE_BUSY = 75  # another writer held the lake longer than the job waits (EX_TEMPFAIL: try again later)


class Refused(RuntimeError):
    """A failure the operator acts on (a lake that cannot be used as it is, a busy lake): `run` ends the job with
    `exit_code` and the message, one line, no traceback. Each raiser subclasses it where its concept lives."""

    exit_code = USAGE


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The module docstring as written, and each option's default in its help."""


def parser(prog: str, doc: str | None) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog=prog, description=doc, formatter_class=HelpFormatter)


def add_lake(parser: argparse.ArgumentParser) -> None:
    """--lake: a folder, or an S3 prefix whose catalog the command's --catalog names (`add_catalog`, `lake`)."""
    parser.add_argument("--lake", type=_text, default=os.environ.get("CLOUDTRAIL_LAKE"),
                        help="the lake's folder or s3://BUCKET/PREFIX [$CLOUDTRAIL_LAKE]")  # fmt: skip


def lake(parser: argparse.ArgumentParser, args: argparse.Namespace, existing: bool = False) -> Lake:
    """The lake --lake names: a folder (its tables in the embedded catalog), or an S3 prefix with the catalog --catalog
    names (an S3 lake has no folder for the embedded one); with `existing`, one that is there: every command but those
    that make a lake (the ingest, a rebuild from the landing) works on a lake that exists, where a mistyped path was a
    new, empty lake (a gate of nothing passed, a compaction found nothing to do)."""
    required(parser, args, "lake")
    found = Lake.at(args.lake, getattr(args, "catalog", None))
    if not storage.is_folder(found.root) and found.catalog is None:
        parser.error(f"--lake {args.lake}: a lake in S3 names the catalog its tables are in (--catalog NAME or $CLOUDTRAIL_CATALOG)")
    if existing:
        try:
            there = found.root.is_dir()
        except Exception as exc:  # a bucket refused or unreachable, as s3fs raises it
            parser.error(f"--lake {args.lake}: cannot be read ({type(exc).__name__}: {first_line(exc)})")
        if not there:
            parser.error(f"--lake {args.lake}: no lake there (no such folder); the ingest makes a lake, this command needs one")
    return found


def add_catalog(parser: argparse.ArgumentParser, namespace: bool = True) -> None:
    """--catalog and (with `namespace`) --namespace: the Iceberg catalog the lake's tables are in (jobs/iceberg/catalog.py);
    a lake in S3 names one (`lake`)."""
    parser.add_argument("--catalog", default=os.environ.get("CLOUDTRAIL_CATALOG") or None,
                        help="a pyiceberg catalog's name [$CLOUDTRAIL_CATALOG]; none: SQLite in <lake>/iceberg/")  # fmt: skip
    if not namespace:
        return
    parser.add_argument("--namespace", default=options.NAMESPACE, help="the catalog namespace (Glue: database) of the tables")


def add_landing(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--landing", default=os.environ.get("CLOUDTRAIL_LANDING"), help="root holding AWSLogs/ [$CLOUDTRAIL_LANDING]")


def add_run_id(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run-id", type=_text, help="id of this run in its reports and rows (any text); None: manual__<UTC time>")


def add_lock_wait(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lock-wait", type=float, default=options.LOCK_WAIT_SECONDS, help="seconds to wait for another writer")


class DeprecatedAlias(argparse.Action):
    """An old option name that still works, with a warning naming the new one."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None) -> None:
        log.warning("%s is deprecated: use --%s", option, self.dest.replace("_", "-"))
        setattr(namespace, self.dest, values)


def add_date_pair(parser: argparse.ArgumentParser, what: str, first: str, last: str) -> None:
    parser.add_argument(first, type=iso_date, help=f"first {what} (YYYY-MM-DD)")
    parser.add_argument(last, type=iso_date, help=f"last {what} (YYYY-MM-DD)")


def add_dates(parser: argparse.ArgumentParser, what: str) -> None:
    """--from-date and --to-date, every command's spelling of its date range (--from and --to still work, deprecated)."""
    add_date_pair(parser, what, "--from-date", "--to-date")
    for old, dest in (("--from", "from_date"), ("--to", "to_date")):
        parser.add_argument(
            old, dest=dest, type=iso_date, action=DeprecatedAlias, default=argparse.SUPPRESS, help=f"deprecated: --{dest.replace('_', '-')}"
        )


def first_line(exc: BaseException) -> str:
    """An error's message as a report or a log line names it: its first line (a JVM's or boto's run to pages), or its
    type's name when it has none (an empty message left `splitlines()[0]` raising an IndexError of its own)."""
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def run_id(given: str | None, kind: str = "manual") -> str:
    """The run id given, or `<kind>__<UTC time>`: unique to the microsecond, so a retry never takes an attempt's reports."""
    return given or f"{kind}__{datetime.now(tz=UTC).isoformat(timespec='microseconds')}"


def required(parser: argparse.ArgumentParser, args: argparse.Namespace, *names: str) -> None:
    missing = [name for name in names if not getattr(args, name)]
    if missing:
        shown = " and ".join(f"--{name.replace('_', '-')}" for name in missing)
        parser.error(f"{shown} required (--lake and --landing may come from $CLOUDTRAIL_LAKE and $CLOUDTRAIL_LANDING)")


def date_range(parser: argparse.ArgumentParser, first: date | None, last: date | None, names: str) -> tuple[date, ...] | None:
    """The dates first..last; None when neither is given. Both go together, the first not after the second."""
    if first is None and last is None:
        return None
    if first is None or last is None or first > last:
        parser.error(f"{names} go together, the first not after the second")
    return options.date_range(first, last)


def _text(value: str) -> str:
    if not value.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return value


def iso_date(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date (YYYY-MM-DD)") from None


def duration(text: str) -> timedelta:
    try:
        return options.duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def size(text: str) -> int:
    try:
        return options.size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def run(body: Callable[[], int]) -> int:
    """A job's body, with the job's log lines on stderr; the failures an operator acts on become an exit code and one line."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return body()
    except Refused as exc:
        log.error("%s", exc)
        return exc.exit_code
