"""Ingest new CloudTrail files into the event-date partitioned Parquet table, exactly once.

Run it with either of:

    spark-submit --py-files build/jobs.zip jobs/cloudtrail_ingest.py --landing DIR --lake DIR [options]
    python -m jobs.cloudtrail_ingest --landing DIR --lake DIR [options]

--landing/--lake default to $CLOUDTRAIL_LANDING/$CLOUDTRAIL_LAKE. A --landing s3://BUCKET[/PREFIX] is read
through its delivery notifications when --queue-url (or $CLOUDTRAIL_QUEUE_URL) names their SQS queue, else by
listing it from --since on; its objects are fetched into <lake>/landing/ first (jobs/landing/bucket.py), and --dry-run
prints the files and bytes per account and day such a listing would fetch. A folder landing: the run lists the files under
<landing>/AWSLogs/ that the ledger has not taken (jobs/ledger/planner.py; every delivery folder once per
--full-listing-interval, else those within the horizon, changed ones and new ones), reads them
(Trigger.AvailableNow, in rate-limited batches, oldest first), writes <lake>/events/event_date=YYYY-MM-DD/,
<lake>/quarantine/reason=.../ and <lake>/reports/ingest/<run id>.json, and exits 0.
Exit codes (jobs/cli.py): 1 the run failed, 2 bad arguments (a --landing without AWSLogs/ too) or a
checkpoint, ledger or table the job cannot trust (README, 'Recovering a checkpoint'), 3 rows would have
been lost, 75 another writer held the lake longer than --lock-wait.
With --gate-from/--gate-to the run also validates, in this application, those event dates and
the ones it wrote (when it wrote or quarantined anything), as jobs/quality/validate_events.py would in
a second one: the verdict is in <lake>/reports/dq/<run id>.json, the exit code does not carry it.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from jobs import cli, options
from jobs.ingest.config import IngestConfig
from jobs.ingest.run import run
from jobs.ingest.stream import build_session
from jobs.landing import layout as landing
from jobs.landing.bucket import BucketLanding, is_bucket
from jobs.landing.sqs import queue_url_default
from jobs.ledger.planner import LedgerOptions
from jobs.lock import LakeLock
from jobs.quality import gate
from jobs.records.dedup import Dedup
from jobs.spark.session import JobSession, for_table_reads
from jobs.tables.quarantine import Replay

log = logging.getLogger("cloudtrail_ingest")


def _parser() -> argparse.ArgumentParser:
    """The command line, by what each group of options sets: the stream, the ledger, a replay and the gate, an S3 landing."""
    parser = cli.parser("cloudtrail_ingest", __doc__)
    cli.add_landing(parser)
    cli.add_lake(parser)
    cli.add_catalog(parser, namespace=False)
    cli.add_run_id(parser)
    cli.add_lock_wait(parser)
    parser.add_argument("--trigger", choices=["availableNow", "once"], default="availableNow")
    parser.add_argument("--max-files-per-trigger", type=cli.positive_int, help="files per batch (availableNow)")
    parser.add_argument("--max-bytes-per-trigger", type=cli.size, default=options.MAX_BYTES_PER_TRIGGER, help="compressed bytes per batch")
    parser.add_argument(
        "--dedup-horizon", type=cli.duration, default=options.DEDUP_HORIZON, help="a copy arriving within this of the first is dropped"
    )
    parser.add_argument(
        "--watermark", dest="dedup_horizon", type=cli.duration, action=cli.DeprecatedAlias, default=argparse.SUPPRESS,
        help="deprecated: --dedup-horizon",
    )  # fmt: skip
    parser.add_argument("--state-partitions", type=cli.positive_int, default=options.STATE_PARTITIONS, help="fixed by the first run")
    parser.add_argument("--max-file-age", default=options.MAX_FILE_AGE, help="files older than the newest by more than this are not read")
    # Scripts written for an earlier release pass it: the tables have no sink log now (Iceberg's expiry bounds their history).
    parser.add_argument("--table-log-retention", type=cli.duration, help="no effect (accepted for scripts of an earlier release)")
    _add_ledger_options(parser)
    parser.add_argument(
        "--clock-skew", type=cli.duration, default=options.CLOCK_SKEW,
        help="an event dated later than its batch by more than this is future-dated: counted, never taken for the newest event",
    )  # fmt: skip
    parser.add_argument("--replay-quarantine", action="store_true", help="also read again the quarantined files and records below")
    parser.add_argument("--replay-reason", action="append", default=[], help="only those quarantined for this reason (repeatable)")
    cli.add_date_pair(parser, "delivery date of the files replayed", "--replay-from", "--replay-to")
    cli.add_date_pair(parser, "event date the quality gate checks in this application", "--gate-from", "--gate-to")
    parser.add_argument("--quarantine-threshold", type=float, default=options.QUARANTINE_THRESHOLD, help="the gate's max quarantined share")
    _add_bucket_options(parser)
    return parser


def _add_ledger_options(parser: argparse.ArgumentParser) -> None:
    """How the ledger lists the landing zone (jobs/ledger/planner.py's LedgerOptions, with the batch limits)."""
    parser.add_argument(
        "--source-retention", type=cli.duration, default=options.SOURCE_RETENTION,
        help="delivery folders this long before the newest one read are no longer tracked file by file",
    )  # fmt: skip
    parser.add_argument(
        "--full-listing-interval", type=cli.duration, default=options.FULL_LISTING_INTERVAL,
        help="how often a run lists every delivery folder (finds a file added to a retired one); '0 seconds': every run",
    )  # fmt: skip
    parser.add_argument("--settle", type=cli.duration, default=options.SETTLE, help="files written to more recently wait for a later run")


def _add_bucket_options(parser: argparse.ArgumentParser) -> None:
    """An s3:// landing's: its notification queue, a listing without one, and the reconciliation against its digests."""
    parser.add_argument("--queue-url", default=queue_url_default(), help="an s3:// landing's notification queue [$CLOUDTRAIL_QUEUE_URL]")
    parser.add_argument("--max-messages", type=cli.positive_int, default=options.MAX_MESSAGES, help="notifications one run takes at most")
    parser.add_argument(
        "--visibility-timeout", type=cli.positive_int, default=options.VISIBILITY_SECONDS,
        help="seconds a received notification stays hidden: a run that dies leaves it to come back after this",
    )  # fmt: skip
    parser.add_argument("--since", type=cli.iso_date, help="an s3:// landing without a queue: the first delivery date listed")
    parser.add_argument("--dry-run", action="store_true", help="an s3:// landing: print what a listing would fetch, per account and day")
    parser.add_argument("--reconcile", action="store_true", help="an s3:// landing: prove completeness against CloudTrail's digests now")
    parser.add_argument(
        "--reconcile-interval", type=cli.duration, default=options.RECONCILE_INTERVAL, help="how often a run reconciles by itself"
    )
    parser.add_argument("--reconcile-days", type=cli.positive_int, default=options.RECONCILE_DAYS, help="days a reconciliation covers")


def parse_args(argv: Sequence[str] | None = None) -> IngestConfig:
    parser = _parser()
    args = parser.parse_args(argv)
    cli.required(parser, args, "landing", "lake")
    lake = cli.lake(parser, args)
    bucket_landing = BucketLanding.at(args.landing, lake.landing_cache) if is_bucket(args.landing) else None
    if bucket_landing is None and not landing.exists(args.landing):
        parser.error(f"--landing {args.landing} holds no AWSLogs/ folder: is it the root CloudTrail writes AWSLogs/ into?")
    if args.replay_from and args.replay_to and args.replay_from > args.replay_to:
        parser.error(f"--replay-from {args.replay_from} is after --replay-to {args.replay_to}")
    # One limit per run, as Spark's file source takes: an explicit file limit wins.
    max_bytes = None if args.max_files_per_trigger else args.max_bytes_per_trigger
    # An object is whole when it is notified or listed: nothing in the cache settles.
    settle = timedelta(0) if bucket_landing is not None else args.settle
    return IngestConfig(
        landing=bucket_landing.cache if bucket_landing is not None else Path(args.landing).absolute(),
        lake=lake,
        run_id=cli.run_id(args.run_id),
        lock_wait=args.lock_wait,
        trigger=args.trigger,
        dedup=Dedup(args.dedup_horizon),
        ledger=LedgerOptions(args.source_retention, settle, args.max_files_per_trigger, max_bytes, args.full_listing_interval),
        state_partitions=args.state_partitions,
        max_file_age=args.max_file_age,
        clock_skew=args.clock_skew,
        replay=Replay(tuple(args.replay_reason), args.replay_from, args.replay_to) if args.replay_quarantine else None,
        gate_dates=cli.date_range(parser, args.gate_from, args.gate_to, "--gate-from and --gate-to"),
        quarantine_threshold=args.quarantine_threshold,
        bucket=bucket_landing,
        queue_url=args.queue_url if bucket_landing is not None else None,
        max_messages=args.max_messages,
        visibility_seconds=args.visibility_timeout,
        since=args.since,
        dry_run=args.dry_run,
        reconcile=args.reconcile,
        reconcile_interval=args.reconcile_interval,
        reconcile_days=args.reconcile_days,
    )


def main(argv: list[str] | None = None) -> int:
    return cli.run(lambda: ingest(parse_args(argv)))


def ingest(config: IngestConfig) -> int:
    """One run under the lake lock, then the gate on what it wrote; the exit code."""
    started = time.monotonic()
    if config.dry_run:
        return dry_run(config)

    def build() -> Any:
        if config.gate_dates is not None:  # GX takes seconds to import: meanwhile the JVM starts and the batches run
            threading.Thread(target=_import_gate, daemon=True).start()
        return build_session(config)

    with LakeLock(config.lake, f"ingest run {config.run_id}", wait_seconds=config.lock_wait), JobSession(build) as session:
        config.lake.gate_report(config.run_id).unlink(missing_ok=True)  # this attempt's verdict, or none
        report = run(config, session)
        if config.gate_dates is not None and gate.wrote_anything(report.totals()):
            from jobs.quality import validate_events

            checked = validate_events.ValidateConfig(
                config.lake, config.run_id, config.gate_dates, config.quarantine_threshold, config.lake.gate_report(config.run_id)
            )
            validate_events.check(for_table_reads(session()), checked)
    outside = report.deliveries.get("outside_landing")
    if outside and not report.ledger.get("new_files"):
        log.error(
            "took nothing: %d notifications name %d CloudTrail log files under %s, outside the landing %s; kept under %s "
            "and taken by the first run whose --landing names them",
            outside["messages"], outside["files"], ", ".join(outside["named"][:3]), outside["landing"], config.lake.outside_messages,
        )  # fmt: skip
        return cli.USAGE
    dropped = report.totals()["rows_dropped_by_watermark"]
    if dropped:
        log.error("%d rows were dropped by the de-duplication watermark: see docs/design.md, 'Recovering dropped rows'", dropped)
        return cli.ROWS_LOST
    log.info("done in %.1f s", time.monotonic() - started)
    return cli.OK


def _import_gate() -> None:
    # The gate's module brings pandas and GX: a run without --gate-from does not pay for them (0.3 to 0.8 s).
    from jobs.quality import validate_events

    validate_events.import_gx()


def dry_run(config: IngestConfig) -> int:
    """What a listing of an S3 landing from --since on would fetch, per account and delivery day (JSON on stdout)."""
    if config.bucket is None:
        log.error("--dry-run estimates an s3:// landing's first run; --landing %s is a folder", config.landing)
        return cli.USAGE
    from jobs.landing.bucket import s3_client
    from jobs.landing.bucket_listing import estimate, listed

    figures = estimate(config.bucket, listed(config.bucket, s3_client(), config.since))
    total = {"files": sum(f["files"] for f in figures.values()), "bytes": sum(f["bytes"] for f in figures.values())}
    print(json.dumps({"landing": config.bucket.url, "since": config.since and config.since.isoformat(), "total": total,
                      "per_account_and_day": figures}, indent=1))  # fmt: skip
    return cli.OK
