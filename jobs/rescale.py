"""Move the ingest's de-duplication state to another number of partitions, keeping every key it holds.

    python -m jobs.rescale --lake DIR --state-partitions 16 [--run-id ID] [--lock-wait SECONDS]
    spark-submit --py-files build/jobs.zip jobs/rescale.py --lake DIR --state-partitions 16

`--help` lists the options. The job itself is jobs/upkeep/rescale.py.
"""

from jobs.upkeep.rescale import main

if __name__ == "__main__":
    raise SystemExit(main())
