"""`python -m jobs.publish`: the gated tables published through an Iceberg catalog; usage and options in jobs/publishing/command.py."""

from jobs.publishing.command import main

if __name__ == "__main__":
    raise SystemExit(main())
