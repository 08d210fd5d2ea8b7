"""`python -m jobs.ocsf`: the OCSF API Activity table brought up to date; usage and options in jobs/derived/ocsf.py."""

from jobs.derived.ocsf import main

if __name__ == "__main__":
    raise SystemExit(main())
