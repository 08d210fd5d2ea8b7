"""Bring the OCSF view of the lake (ocsf/api_activity: the events as OCSF 1.1.0 API Activity) up to date with the
events table, event date by event date.

    python -m jobs.ocsf --lake DIR [--from-date YYYY-MM-DD --to-date YYYY-MM-DD]
    spark-submit --py-files build/jobs.zip jobs/ocsf.py --lake DIR [--from-date D --to-date D]

`--help` lists the options. The job itself is jobs/derived/ocsf.py.
"""

from jobs.derived.ocsf import main

if __name__ == "__main__":
    raise SystemExit(main())
