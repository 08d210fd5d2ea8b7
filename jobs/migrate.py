"""`python -m jobs.migrate`: a folder lake moved to object storage; usage and options in jobs/upkeep/migrate.py."""

from jobs.upkeep.migrate import main

if __name__ == "__main__":
    raise SystemExit(main())
