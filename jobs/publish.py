"""`python -m jobs.publish`: the gated tables published through an Iceberg catalog; usage and options in jobs/iceberg/publish.py."""

from jobs.iceberg.publish import main

if __name__ == "__main__":
    raise SystemExit(main())
