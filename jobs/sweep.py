"""Move aside data files that no committed batch lists, so directory readers see the committed table.

    spark-submit --py-files build/jobs.zip jobs/sweep.py --lake DIR
    python -m jobs.sweep --lake DIR

`--help` lists the options. The job itself is jobs/tables/sweep.py.
"""

from jobs.tables.sweep import main

if __name__ == "__main__":
    raise SystemExit(main())
