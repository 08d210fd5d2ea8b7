"""`python -m jobs.rescale`: the de-duplication state on another number of partitions; usage and options in jobs/upkeep/rescale.py."""

from jobs.upkeep.rescale import main

if __name__ == "__main__":
    raise SystemExit(main())
