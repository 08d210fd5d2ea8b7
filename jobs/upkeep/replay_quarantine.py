"""Read quarantined files and records again, after a parser fix or a hand repair.

    python -m jobs.replay_quarantine --landing DIR --lake DIR [--from-date D --to-date D] [--reason R ...]
    spark-submit --py-files build/jobs.zip jobs/replay_quarantine.py --landing DIR --lake DIR ...

It is an ingest run (jobs/ingest/, any of its options may follow) that also takes
the quarantined files of those delivery dates and reasons: a file quarantined whole is read
whole, and of a file with quarantined records only those records are read. What now parses
moves into the table, de-duplicated as usual; what still fails stays in quarantine with its
current reason; the rows of the earlier reads leave the quarantine in the same snapshot (its history keeps them).
Exit codes are the ingest job's.
"""

from __future__ import annotations

import argparse

from jobs.ingest import command as cli


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="replay_quarantine", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from-date", help="first delivery date (YYYY-MM-DD)")
    parser.add_argument("--to-date", help="last delivery date (YYYY-MM-DD)")
    parser.add_argument("--reason", action="append", default=[], help="only rows quarantined for this reason (repeatable)")
    args, ingest = parser.parse_known_args(argv)
    replay = ["--replay-quarantine", *(f"--replay-reason={reason}" for reason in args.reason)]
    replay += [f"--replay-from={args.from_date}"] if args.from_date else []
    replay += [f"--replay-to={args.to_date}"] if args.to_date else []
    return cli.main([*ingest, *replay])
