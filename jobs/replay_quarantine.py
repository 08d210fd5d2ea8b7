"""Read quarantined files and records again, after a parser fix or a hand repair.

    python -m jobs.replay_quarantine --landing DIR --lake DIR [--from-date D --to-date D] [--reason R ...]
    spark-submit --py-files build/jobs.zip jobs/replay_quarantine.py --landing DIR --lake DIR ...

`--help` lists the options. The job itself is jobs/upkeep/replay_quarantine.py.
"""

from jobs.upkeep.replay_quarantine import main

if __name__ == "__main__":
    raise SystemExit(main())
