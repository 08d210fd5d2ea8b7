"""Rebuild event-date partitions from the landing files, and swap them in atomically.

    spark-submit --py-files build/jobs.zip jobs/rebuild.py --landing DIR --lake DIR --from-date YYYY-MM-DD --to-date YYYY-MM-DD
    python -m jobs.rebuild --landing DIR --lake DIR --from-date YYYY-MM-DD --to-date YYYY-MM-DD [--dry-run]
    python -m jobs.rebuild --lake DIR --rollback TAG

`--help` lists the options. The job itself is jobs/upkeep/rebuild.py.
"""

from jobs.upkeep.rebuild import main

if __name__ == "__main__":
    raise SystemExit(main())
