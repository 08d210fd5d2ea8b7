"""`python -m jobs.compact`: closed event dates rewritten into laid-out files; usage and options in jobs/upkeep/compact.py."""

from jobs.upkeep.compact import main

if __name__ == "__main__":
    raise SystemExit(main())
