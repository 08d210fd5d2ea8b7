"""`python -m jobs.investigate`: a shipped question over the Iceberg tables; usage and options in jobs/investigations/command.py."""

from jobs.investigations.command import main

if __name__ == "__main__":
    raise SystemExit(main())
