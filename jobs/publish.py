"""Publish the lake's committed, gated tables as Apache Iceberg tables through a catalog (write, audit, publish).

    python -m jobs.publish --lake DIR [--catalog NAME] [--namespace NS] [--run-id ID]
        [--expire-after '7 days'] [--orphan-grace '3 days']

`--help` lists the options. The job itself is jobs/iceberg/publish.py.
"""

from jobs.iceberg.publish import main

if __name__ == "__main__":
    raise SystemExit(main())
