"""The investigation queries the product ships (queries/<name>.sql), and how one is bound and run in DuckDB.

A query is Athena/Trino SQL over the lake's Iceberg tables, named `cloudtrail.<table>`. Its header says what it
answers (the first line), where it comes from (`-- source:`) and the parameters it takes beyond the date range
(`-- params:`); it names its parameters `:name`, and every query takes `:from_date` and `:to_date` (YYYY-MM-DD).
`literal_sql` binds them as quoted literals for pasting into Athena or Trino; `answer` runs the query with DuckDB,
its parameters bound as prepared values (never spliced into the text), in a connection that has the tables.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

QUERIES = Path(__file__).with_name("queries")
DATE_PARAMETERS = ("from_date", "to_date")
# A string literal, or a parameter outside one.
_TOKEN = re.compile(r"'(?:[^']|'')*'|:([A-Za-z_]\w*)")
# Trino's functions the queries use that DuckDB calls otherwise.
TRINO_FUNCTIONS = (
    "CREATE MACRO json_extract_scalar(j, p) AS json_extract_string(j, p)",
    "CREATE MACRO regexp_like(s, p) AS regexp_matches(s, p)",
)


class QueryError(ValueError):
    """A query that does not exist, or parameters it cannot take."""


@dataclass(frozen=True)
class Query:
    name: str
    title: str
    source: str
    parameters: tuple[str, ...]  # beyond the date range
    tables: tuple[str, ...]  # cloudtrail.<table> it reads
    sql: str

    def values(self, from_date: date, to_date: date, given: dict[str, str]) -> dict[str, str]:
        """Every parameter's value: the date range and each of `parameters`, all given, none unknown."""
        missing = [name for name in self.parameters if name not in given]
        unknown = sorted(set(given) - set(self.parameters))
        if missing or unknown:
            wanted = ", ".join(f"--param {name}=..." for name in self.parameters) or "no --param"
            raise QueryError(
                f"{self.name} takes {wanted} (missing: {', '.join(missing) or 'none'}; unknown: {', '.join(unknown) or 'none'})"
            )
        if from_date > to_date:
            raise QueryError(f"--from-date {from_date} is after --to-date {to_date}")
        return {"from_date": from_date.isoformat(), "to_date": to_date.isoformat(), **given}


def _header(text: str, key: str) -> str:
    found = re.search(rf"^-- {key}:[ \t]*(.*)$", text, re.MULTILINE)
    return found.group(1).strip() if found else ""


def read_query(path: Path) -> Query:
    text = path.read_text()
    title = text.splitlines()[0].removeprefix("--").strip()
    parameters = tuple(p.strip() for p in _header(text, "params").split(",") if p.strip())
    sql = "\n".join(line for line in text.splitlines() if not line.startswith("--")).strip()
    tables = tuple(dict.fromkeys(re.findall(r"\b(?:FROM|JOIN)\s+cloudtrail\.(\w+)", sql, re.IGNORECASE)))
    return Query(path.stem, title, _header(text, "source"), parameters, tables, sql)


def queries() -> list[Query]:
    return [read_query(path) for path in sorted(QUERIES.glob("*.sql"))]


def query(name: str) -> Query:
    path = QUERIES / f"{name}.sql"
    if not re.fullmatch(r"[a-z0-9_]+", name) or not path.is_file():
        raise QueryError(f"no investigation named {name!r}; `python -m jobs.investigate --list` names them")
    return read_query(path)


def _substituted(sql: str, replace: Any) -> str:
    return _TOKEN.sub(lambda m: replace(m.group(1)) if m.group(1) else m.group(0), sql)


def sql_literal(text: str) -> str:
    """`text` as an SQL string literal, its quotes doubled."""
    return "'" + text.replace("'", "''") + "'"


def literal_sql(found: Query, values: dict[str, str]) -> str:
    """The query with its parameters as SQL string literals: for Athena's or Trino's console."""
    return _substituted(found.sql, lambda name: sql_literal(values[name]))


def answer(db: Any, found: Query, values: dict[str, str]) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The query's columns and rows in DuckDB connection `db`, whose schema `cloudtrail` holds the tables it reads."""
    result = db.execute(
        _substituted(found.sql, lambda name: f"${name}"), {name: values[name] for name in {*DATE_PARAMETERS, *found.parameters}}
    )
    return [column[0] for column in result.description], result.fetchall()


def prepared(db: Any) -> Any:
    """`db` with Trino's function names the queries use, UTC times, and an empty schema `cloudtrail` for the tables."""
    db.execute("SET TimeZone = 'UTC'")
    for statement in TRINO_FUNCTIONS:
        db.execute(statement)
    db.execute("CREATE SCHEMA IF NOT EXISTS cloudtrail")
    return db
