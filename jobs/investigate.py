"""Answer one of the shipped investigations over the lake's Iceberg tables.

    python -m jobs.investigate NAME --from-date 2024-01-01 --to-date 2024-01-07 [--param access_key=AKIA...]
        [--lake DIR] [--catalog NAME] [--format table|csv] [--sql]
    python -m jobs.investigate --list

`--help` lists the options. The command itself is jobs/investigations/command.py.
"""

from jobs.investigations.command import main

if __name__ == "__main__":
    raise SystemExit(main())
