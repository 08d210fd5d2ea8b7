"""Put the tables and the ledger back in step with the checkpoint, so that ingestion continues exactly.

    python -m jobs.repair --lake DIR --landing DIR [--dry-run]

`--help` lists the options. The job itself is jobs/upkeep/repair.py.
"""

from jobs.upkeep.repair import main

if __name__ == "__main__":
    raise SystemExit(main())
