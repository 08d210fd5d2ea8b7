"""`python -m jobs.repair`: the tables and the ledger back in step with the checkpoint; usage and options in jobs/upkeep/repair.py."""

from jobs.upkeep.repair import main

if __name__ == "__main__":
    raise SystemExit(main())
