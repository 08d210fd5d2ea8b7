"""A lake table's rows as its Iceberg table holds them: the partition folders' values written in as columns, and each
column in the type the table gives it.

A table keeps the type a column had when the table took it. A file whose column has another type (an older release's
text where the table holds a flag, a flag where it holds text) is conformed to the table's: cast where the cast loses
nothing, and a value that does not cast is kept as its JSON text in `_rescued` (the column null), as the ingest
rescues a misfit; the table's schema never changes a column's type, so one file cannot block every later publish.
"""

from __future__ import annotations

import json
from datetime import date
from typing import Any

from jobs.lake import ACCOUNT_ID, EVENT_DATE, EVENT_DAY, REGION

RESCUED = "_rescued"


def _partition_types() -> dict[str, Any]:
    import pyarrow as pa

    # Security Lake's partitions are text (an account id keeps its leading zeros); an event date is a date.
    return {EVENT_DATE: pa.date32(), REGION: pa.string(), ACCOUNT_ID: pa.string(), EVENT_DAY: pa.string()}


def with_partition_columns(rows: Any, partition: str) -> Any:
    """A local file's rows as published: timestamps as microseconds in UTC, the partition folder's values as columns."""
    import pyarrow as pa

    types = _partition_types()
    for i, column in enumerate(rows.schema):
        if pa.types.is_timestamp(column.type) and column.type != pa.timestamp("us", tz="UTC"):
            rows = rows.set_column(i, column.name, rows.column(i).cast(pa.timestamp("us", tz="UTC")))
    for part in partition.split("/"):
        column, value = part.split("=", 1)
        typed = date.fromisoformat(value) if types[column] == pa.date32() else value
        if column in rows.column_names:
            rows = rows.drop_columns([column])
        rows = rows.append_column(pa.field(column, types[column]), pa.array([typed] * rows.num_rows, types[column]))
    return rows


def conformed(rows: Any, target: Any) -> Any:
    """`rows` (pyarrow) with each top-level column `target` (the table's pyarrow schema) also has in the target's type."""
    import pyarrow as pa

    for name in rows.column_names:
        if name not in target.names:
            continue
        have, want = rows.schema.field(name).type, target.field(name).type
        if _alike(have, want) or pa.types.is_nested(have) or pa.types.is_nested(want):
            continue  # a struct or list gains fields by the schema's union, never changes kind
        try:
            column = rows.column(name).cast(want)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            column, rows = _rescued(rows, name, want)
        rows = rows.set_column(rows.schema.get_field_index(name), pa.field(name, want), column)
    return rows


def _alike(have: Any, want: Any) -> bool:
    """The same type as Parquet stores it (pyiceberg gives text as Arrow's large strings, the lake's files hold strings)."""
    import pyarrow as pa

    text = (pa.types.is_string(have) or pa.types.is_large_string(have)) and (pa.types.is_string(want) or pa.types.is_large_string(want))
    return bool(have == want or text)


def _rescued(rows: Any, name: str, want: Any) -> tuple[Any, Any]:
    """Column `name` cast value by value: what does not cast is null, its value's JSON text in `_rescued`."""
    import pyarrow as pa

    if RESCUED not in rows.column_names:
        raise ValueError(f"column {name} holds values that are not {want}, and the table has no {RESCUED} column to keep them in")
    values, rescued = rows.column(name).to_pylist(), rows.column(RESCUED).to_pylist()
    cast: list[Any] = []
    for i, value in enumerate(values):
        try:
            cast.append(pa.array([value]).cast(want)[0].as_py())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            cast.append(None)
            rescued[i] = json.dumps({**json.loads(rescued[i] or "{}"), name: json.dumps(value, default=str)})
    field = rows.schema.field(RESCUED)
    rows = rows.set_column(rows.schema.get_field_index(RESCUED), field, pa.array(rescued, field.type))
    return pa.array(cast, want), rows
