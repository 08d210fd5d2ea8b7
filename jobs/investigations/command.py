"""Answer one shipped investigation over the lake's Iceberg tables with DuckDB (jobs/investigate.py is the door).

    python -m jobs.investigate NAME --from-date YYYY-MM-DD --to-date YYYY-MM-DD [--param NAME=VALUE ...]
        [--format table|csv] [--sql] [--lake DIR|s3://BUCKET/PREFIX] [--catalog NAME] [--namespace NS]
    python -m jobs.investigate --list

The tables are read as their catalog's current snapshot holds them: the data files of the dates asked for, planned
through the catalog's manifests (no folder is listed), then read with DuckDB, which skips the row groups that the
files' statistics and bloom filters rule out (jobs/records/layout.py), from a folder or, through the lake's file system,
from object storage (jobs/duck.py). What is read is what the gates passed and the
publish committed, so the answer is what Athena or Trino would give on the same snapshot (`--sql` prints the query
for them). Values are shown escaped: a control character in a field prints as its code, and a CSV cell that a
spreadsheet would run as a formula is quoted.
"""

from __future__ import annotations

import argparse
import csv
import io
import logging
import sys
from dataclasses import dataclass
from datetime import date
from typing import Any

from jobs import cli, duck
from jobs.iceberg.catalog import TABLE_NAMES, CatalogUnusable, open_catalog
from jobs.investigations.catalogue import Query, QueryError, answer, literal_sql, prepared, queries, query, sql_literal
from jobs.lake import EVENT_DATE, EVENT_DAY, EVENTS, PARTITION_COLUMNS, Lake, event_day
from jobs.spark.logs import local_path

log = logging.getLogger("investigate")

FORMATS = ("table", "csv")
# A CSV cell starting with one of these is a formula to a spreadsheet (OWASP's CSV injection).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


@dataclass(frozen=True)
class InvestigateConfig:
    query: Query
    values: dict[str, str]
    lake: Lake | None
    catalog: str | None
    namespace: str
    output: str
    sql_only: bool


def _parameter(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    return name, value


def parse_args(argv: list[str] | None = None) -> InvestigateConfig | None:
    """The configuration; None when --list printed the queries."""
    parser = cli.parser("python -m jobs.investigate", __doc__)
    parser.add_argument("name", nargs="?", help="the investigation (--list names them)")
    parser.add_argument("--list", action="store_true", help="name every shipped investigation, its parameters and source")
    cli.add_lake(parser)
    cli.add_dates(parser, "event date to look at")
    parser.add_argument("--param", type=_parameter, action="append", default=[], metavar="NAME=VALUE", help="a parameter of the query")
    cli.add_catalog(parser)
    parser.add_argument("--format", dest="output", choices=FORMATS, default="table", help="how the answer prints")
    parser.add_argument("--sql", action="store_true", help="print the query with its parameters bound, for Athena or Trino; run nothing")
    args = parser.parse_args(argv)
    if args.list:
        for found in queries():
            takes = " ".join(f"--param {name}=..." for name in found.parameters)
            print(f"{found.name} {takes}".rstrip() + f"\n    {found.title}\n    source: {found.source}")
        return None
    if not args.name:
        parser.error("name an investigation (--list names them)")
    if args.from_date is None or args.to_date is None:
        parser.error("--from-date and --to-date are required: an investigation reads those event dates only")
    try:
        found = query(args.name)
        values = found.values(args.from_date, args.to_date, dict(args.param))
    except QueryError as exc:
        parser.error(str(exc))
    lake = None if args.sql and not args.lake else cli.lake(parser, args, existing=not args.sql)
    return InvestigateConfig(found, values, lake, args.catalog, args.namespace, args.output, args.sql)


def _date_filter(folder: str, values: dict[str, str]) -> str:
    """pyiceberg's filter on the table's date partition: only the manifests' entries of those dates are planned."""
    column = PARTITION_COLUMNS[folder][-1]
    first, last = (date.fromisoformat(values[name]) for name in ("from_date", "to_date"))
    low, high = (event_day(first), event_day(last)) if column == EVENT_DAY else (first.isoformat(), last.isoformat())
    return f"{column} >= '{low}' and {column} <= '{high}'"


def with_tables(db: Any, config: InvestigateConfig) -> Any:
    """`db` with a view cloudtrail.<table> per table the query reads: the current snapshot's files of its dates (their
    columns as the files hold them: the folder names' values, which DuckDB would type by guess, are not read)."""
    if config.lake is None:  # parse_args requires one unless only the SQL is asked for
        raise QueryError("--lake required: the tables are read through its catalog")
    catalog = open_catalog(config.lake, config.catalog, config.namespace)
    folders = {name: folder for folder, name in TABLE_NAMES.items()}
    for name in config.query.tables:
        table = catalog.load_table(f"{config.namespace}.{name}")
        scan = table.scan(row_filter=_date_filter(folders[name], config.values))
        duck.reading(db, table.location())
        files = [local_path(path) if path.startswith("file:") else path for path in (t.file.file_path for t in scan.plan_files())]
        if files:
            listed = ", ".join(sql_literal(path) for path in files)
            # Events files an earlier release wrote hold no event date (Iceberg's readers take it from the manifests): their
            # folder names do.
            hive = f"true, hive_types = {{'{EVENT_DATE}': DATE}}" if name == EVENTS else "false"
            db.execute(
                f"CREATE VIEW cloudtrail.{name} AS SELECT * FROM read_parquet([{listed}], union_by_name = true, hive_partitioning = {hive})"
            )
        else:
            db.register(f"_{name}_empty", table.schema().as_arrow().empty_table())
            db.execute(f"CREATE VIEW cloudtrail.{name} AS SELECT * FROM _{name}_empty")
    return db


def shown(value: Any) -> str:
    """A value as printed: NULL empty, control characters as their codes (a field may hold a terminal's escapes)."""
    if value is None:
        return ""
    text = str(value)
    return "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" if ord(ch) < 256 else f"\\u{ord(ch):04x}" for ch in text)


def as_csv(columns: list[str], rows: list[tuple[Any, ...]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["'" + shown(v) if isinstance(v, str) and v.startswith(FORMULA_START) else shown(v) for v in row])
    return out.getvalue()


def as_table(columns: list[str], rows: list[tuple[Any, ...]]) -> str:
    cells = [columns, *([shown(v) for v in row] for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in cells]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines) + f"\n({len(rows)} row{'s' if len(rows) != 1 else ''})\n"


def investigate(config: InvestigateConfig) -> str:
    """What the command prints: the bound query (--sql), or its answer."""
    if config.sql_only:
        return literal_sql(config.query, config.values) + "\n"
    db = with_tables(prepared(duck.connect()), config)
    columns, rows = answer(db, config.query, config.values)
    return (as_csv if config.output == "csv" else as_table)(columns, rows)


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    return cli.OK if config is None else cli.run(lambda: run(config))


def run(config: InvestigateConfig) -> int:
    from pyiceberg.exceptions import NoSuchTableError

    try:
        sys.stdout.write(investigate(config))
    except NoSuchTableError as exc:
        log.error("%s: not published yet (the publish makes the Iceberg tables): %s", config.query.name, cli.first_line(exc))
        return cli.FAILED
    except (CatalogUnusable, QueryError) as exc:
        log.error("%s", exc)
        return cli.USAGE
    return cli.OK
