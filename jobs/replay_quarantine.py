"""`python -m jobs.replay_quarantine`: the quarantine read again after a fix; usage and options in jobs/upkeep/replay_quarantine.py."""

from jobs.upkeep.replay_quarantine import main

if __name__ == "__main__":
    raise SystemExit(main())
