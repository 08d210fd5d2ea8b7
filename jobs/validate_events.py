"""Data-quality gate: Great Expectations suites on the partitions a run is responsible for.

    spark-submit --py-files build/jobs.zip jobs/validate_events.py --lake DIR [--run-id ID] \
        [--from-date YYYY-MM-DD --to-date YYYY-MM-DD] [--dates D1,D2] [--quarantine-threshold 0.01]
    python -m jobs.validate_events --lake DIR ...

`--help` lists the options. The job itself is jobs/quality/validate_events.py.
"""

from jobs.quality.validate_events import main

if __name__ == "__main__":
    raise SystemExit(main())
