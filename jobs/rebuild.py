"""`python -m jobs.rebuild`: event dates rebuilt from their landing files; usage and options in jobs/upkeep/rebuild.py."""

from jobs.upkeep.rebuild import main

if __name__ == "__main__":
    raise SystemExit(main())
