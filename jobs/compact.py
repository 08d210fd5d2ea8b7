"""Compact closed event dates of the events table: each date's files rewritten into files near a target size.

    python -m jobs.compact --lake DIR [--from-date 2024-01-01 --to-date 2024-01-31 | --closed-at 2024-02-01]
        [--target-size 128m] [--dedup-horizon '2 days'] [--retain '400 days'] [--dry-run]
    spark-submit --py-files build/jobs.zip jobs/compact.py --lake DIR ...

`--help` lists the options. The job itself is jobs/upkeep/compact.py.
"""

from jobs.upkeep.compact import main

if __name__ == "__main__":
    raise SystemExit(main())
