"""`python -m jobs.validate_events`: the data-quality gate on a run's event dates; usage and options in jobs/quality/validate_events.py."""

from jobs.quality.validate_events import main

if __name__ == "__main__":
    raise SystemExit(main())
