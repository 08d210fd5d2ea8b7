"""The lake's freshness, backlog and last run, in a terminal (the Airflow UI's lake page shows the same).

python -m tools.status [--lake DIR|s3://BUCKET/PREFIX] [--catalog NAME] [--landing DIR|s3://BUCKET/PREFIX] [--queue-url URL]
                                                        freshness, backlog (or the queue), the last run
python -m tools.status --run latest|RUN_ID              what one ingest run did (the end of `make run`)
"""

from __future__ import annotations

import argparse
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from jobs import cli, options
from jobs.iceberg.catalog import EMBEDDED, reader_settings
from jobs.lake import Lake
from jobs.landing import kept_notifications
from jobs.landing.bucket import is_bucket
from jobs.reporting import summary as run_summary
from jobs.reporting import tally
from jobs.reporting.report import read_report
from jobs.status import lake_status as status

# Keys refused that `make status` names, the newest first (the lake page names 100).
REFUSED_SHOWN = 5


def _printable(name: str) -> str:
    return name if name.isprintable() else repr(name)


def run_lines(lake: Lake, run_id: str | None) -> list[str]:
    run = status.ingest_run(lake, run_id)
    if run is None:
        return [f"no ingest report {'yet' if run_id is None else 'for run ' + run_id} in {lake.ingest_reports}"]
    lines = run_summary.run_summary(run, run_summary.gate_of(status.gate_runs(lake), run["run_id"]))
    return lines + run_summary.publish_summary(read_report(lake.publish_report(run["run_id"])))


def overview(lake: Lake, landing: str, queue_url: str | None, threshold: timedelta, skew: timedelta, now: datetime) -> list[str]:
    lines = [f"lake {lake.root}, landing {landing}"]
    found = status.problems(lake)
    if found:
        lines.append("PROBLEMS: the lake's state is damaged:")
        lines.extend(f"  {problem}" for problem in found)
        return lines + ["last run:", *run_lines(lake, None)]
    walked, tallied = None if is_bucket(landing) else Path(landing), tally.read(lake)
    if walked is None:
        queue, why = status.queue_depth(queue_url)
        lines.append(f"queue: {queue['waiting']} notifications waiting, {queue['in_flight']} being taken" if queue else f"queue: {why}")
        outside = tallied.get("outside_landing")
        if outside:
            named = ", ".join(_printable(place) for place in outside["named"])
            lines.append(f"OUTSIDE THE LANDING: {outside['files']} log files in {outside['messages']} notifications name {named}, "
                         f"not {outside['landing']}: kept under {lake.outside_messages}")  # fmt: skip
        for refused in kept_notifications.refused(lake, REFUSED_SHOWN):
            lines.append(f"refused: s3://{_printable(refused['bucket'])}/{_printable(refused['key'])}: {refused['reason']}")
    else:
        waiting = status.backlog(lake, walked)
        lines.append(f"backlog: {waiting.files} landing files ({waiting.bytes / 1e6:.1f} MB) not taken by a run yet")
        if waiting.oldest:
            lines.append(f"  first of them: {waiting.oldest}")
    lines.append(
        f"freshness at {status.format_time(now)} (STALE: no event written yet, or the newest delivery or event is over {threshold} old; "
        f"future-dated: events dated over {skew} after they were ingested, never taken for the newest):"
    )
    rows = status.freshness(lake, walked, threshold, tallied, now, skew)
    # Folder names are data: shown as Python would quote them when they hold anything a terminal would act on.
    names = [(_printable(row.account), _printable(row.region)) for row in rows]
    account, region = (max([len(title), *(len(pair[i]) for pair in names)]) + 2 for i, title in enumerate(("account", "region")))
    lines.append(f"  {'account':<{account}}{'region':<{region}}{'delivered':<22}{'newest event':<22}{'lag':<14}future-dated")
    for (account_name, region_name), row in zip(names, rows, strict=True):
        lines.append(
            f"  {account_name:<{account}}{region_name:<{region}}{status.format_time(row.delivered_at):<22}"
            f"{status.format_time(row.newest_event):<22}{status.format_lag(row.lag):<14}{row.future_dated or '':<12}"
            f"{'STALE' if row.stale else ''}"
        )
    health = status.checkpoint_health(lake)
    lines.append(
        f"checkpoint: batch {health.committed_batch}, watermark {status.format_time(health.watermark)}, "
        f"state {health.state_bytes / 1e6:.1f} MB, source log {health.source_log_bytes / 1e3:.0f} KB"
    )
    if lake.iceberg_catalog.exists():
        lines.append(f"Iceberg tables in the embedded catalog: pyiceberg's load_catalog({EMBEDDED!r}) reads them with this .pyiceberg.yaml")
        lines.extend(f"  {line}" for line in reader_settings(lake).splitlines())
    lines.append("last run:")
    return lines + run_lines(lake, None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lake", default=os.environ.get("CLOUDTRAIL_LAKE"))
    parser.add_argument("--catalog", default=os.environ.get("CLOUDTRAIL_CATALOG") or None, help="a lake in S3's catalog")
    parser.add_argument("--landing", default=os.environ.get("CLOUDTRAIL_LANDING"))
    parser.add_argument("--queue-url", default=os.environ.get("CLOUDTRAIL_QUEUE_URL") or None)
    threshold = os.environ.get("CLOUDTRAIL_FRESHNESS_THRESHOLD", options.FRESHNESS_THRESHOLD)
    parser.add_argument("--threshold", type=options.duration, default=threshold)
    parser.add_argument("--clock-skew", type=options.duration, default=os.environ.get("CLOUDTRAIL_CLOCK_SKEW", options.CLOCK_SKEW))
    parser.add_argument("--run", help="only what this ingest run did ('latest': the newest run)")
    args = parser.parse_args(argv)
    if args.lake is None or (args.landing is None and not args.run):
        parser.error("--lake and --landing (or $CLOUDTRAIL_LAKE and $CLOUDTRAIL_LANDING) are needed")
    lake = cli.lake(parser, args)
    if args.run:
        lines = run_lines(lake, None if args.run == "latest" else args.run)
    else:
        landing = args.landing if is_bucket(args.landing) else str(Path(args.landing).absolute())
        lines = overview(lake, landing, args.queue_url, args.threshold, args.clock_skew, datetime.now(tz=UTC))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
