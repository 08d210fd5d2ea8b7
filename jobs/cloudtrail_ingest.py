"""Ingest new CloudTrail files into the event-date partitioned Parquet table, exactly once.

Run it with either of:

    spark-submit --py-files build/jobs.zip jobs/cloudtrail_ingest.py --landing DIR --lake DIR [options]
    python -m jobs.cloudtrail_ingest --landing DIR --lake DIR [options]

`--help` lists the options. The job itself is the package jobs/ingest/ (command.py reads these arguments).
"""

from jobs.ingest.command import main

if __name__ == "__main__":
    raise SystemExit(main())
