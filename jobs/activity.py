"""`python -m jobs.activity`: the activity and findings tables brought up to date; usage and options in jobs/derived/activity.py."""

from jobs.derived.activity import main

if __name__ == "__main__":
    raise SystemExit(main())
