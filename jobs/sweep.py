"""`python -m jobs.sweep`: data files no committed batch lists moved aside; usage and options in jobs/tables/sweep.py."""

from jobs.tables.sweep import main

if __name__ == "__main__":
    raise SystemExit(main())
