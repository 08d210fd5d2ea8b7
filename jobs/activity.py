"""Bring the derived tables (activity_hourly, findings) up to date with the events table, partition by partition.

    spark-submit --py-files build/jobs.zip jobs/activity.py --lake DIR [--from-date YYYY-MM-DD --to-date YYYY-MM-DD]
    python -m jobs.activity --lake DIR [--from-date D --to-date D]

`--help` lists the options. The job itself is jobs/derived/activity.py.
"""

from jobs.derived.activity import main

if __name__ == "__main__":
    raise SystemExit(main())
