"""`python -m jobs.cloudtrail_ingest`: new CloudTrail files into the tables, exactly once; usage and options in jobs/ingest/command.py."""

from jobs.ingest.command import main

if __name__ == "__main__":
    raise SystemExit(main())
