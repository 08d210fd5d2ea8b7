"""Spark jobs of the CloudTrail lake (shipped to the cluster as jobs.zip).

The house, bottom up: a module imports only from its own package or from the ones below it (tests/test_layout.py).

    jobs/*.py     the kernel: the lake's layout (lake), options, files written whole, the command line and exit codes
                  (cli), the lake lock, DuckDB over the lake (duck); and one door per command (below)
    landing/      the landing zone: its layout, an S3 bucket's objects, their SQS notifications
    records/      a landed file -> typed rows: schema, decode, transforms, de-duplication, the tables' rows
    reporting/    every report the lake keeps, the run summaries and the tally
    spark/        Spark: the session, its logs and state, the sinks, the ingest checkpoint
    ledger/       the file ledger: which landing files a run takes, its records on disk, the digests' reconciliation
    iceberg/      Apache Iceberg through a catalog: its settings, Spark's catalog, the embedded catalog read without
                  Spark, conformed columns, expiry and orphans
    tables/       the lake's tables: the events as the jobs read them, the quarantine (an Iceberg table of record),
                  partitions swapped whole, staging, the sweep, rows' sources
    quality/      the data-quality gates (Great Expectations)
    publishing/   the events' gated files published as an Iceberg table; the catalog's tables kept small
    ingest/       the ingest job
    upkeep/       rebuild, repair, rescale, compaction, the quarantine's replay
    derived/      tables derived from the events table date by date: activity, findings, OCSF
    status/       what the lake holds and how fresh it is (the lake page, `make status`)
    investigations/  the questions analysts ask, shipped as SQL and answered over the Iceberg tables

The doors: `python -m jobs.<command>` or `spark-submit jobs/<command>.py` for each of COMMANDS; each door's module
holds its usage and runs the command's `main` in its package.

Each package's `__all__` names the functions, classes and constants other packages may use; a command's entry
points (ENTRY_POINTS) are reached in its module. The rest is the package's own (tests/test_layout.py).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

# The packages of jobs/, bottom up: a package imports from the kernel and from the packages before it.
PACKAGES = (
    "landing",
    "records",
    "reporting",
    "spark",
    "ledger",
    "iceberg",
    "tables",
    "quality",
    "publishing",
    "ingest",
    "upkeep",
    "derived",
    "status",
    "investigations",
)
# The commands a user or a DAG runs: jobs/<command>.py, each a door into its package.
COMMANDS = ("cloudtrail_ingest", "replay_quarantine", "validate_events", "rebuild", "repair", "rescale", "compact",
            "activity", "ocsf", "publish", "investigate", "migrate")  # fmt: skip
# A command's entry points, the same names in each command's module: reached there, not listed in `__all__`.
ENTRY_POINTS = ("main", "parse_args", "run")


def exported(package: str, name: str) -> object:
    """`jobs.<package>.<name>` for a name the package's `__all__` lists (its module-level __getattr__, PEP 562): taken
    from the package's module that holds it, imported on first use, so importing a package imports nothing heavy."""
    module = sys.modules[package]
    if name in getattr(module, "__all__", ()):
        for inner in pkgutil.iter_modules(getattr(module, "__path__", [])):
            found = vars(importlib.import_module(f"{package}.{inner.name}"))
            if name in found:
                return found[name]
    raise AttributeError(f"module {package!r} has no attribute {name!r}")
