"""The lake's Iceberg catalog and its tables: which catalog (pyiceberg's configuration, or the embedded one inside the
lake), a table opened or created with the lake's partitioning, and the one lake that owns each table.

A table records the lake that owns it (`cloudtrail.lake`, the lake's location): a second lake pointed at the same
catalog and namespace is refused with one line, where its publish replaced the first lake's rows with its own.
"""

from __future__ import annotations

import logging
from typing import Any, cast

from jobs import cli, object_store, options
from jobs.lake import DERIVED, EVENTS, QUARANTINE, Lake

log = logging.getLogger("iceberg")

NAMESPACE = options.NAMESPACE
# What each table is called in the catalog, by the lake's folder: the events and every derived table
# (`ocsf/api_activity` -> `ocsf_api_activity`).
TABLE_NAMES = {EVENTS: EVENTS} | {name: name.replace("/", "_") for derived in DERIVED for name in derived.tables}
# The table property naming the lake that owns the table.
OWNER = "cloudtrail.lake"
# The name the embedded catalog goes by: pyiceberg finds its tables only under this name.
EMBEDDED = "lake"


class CatalogUnusable(cli.Refused):
    """The catalog named is not configured, or cannot be reached: nothing was written (one line, exit 2)."""


def open_catalog(lake: Lake, name: str | None, namespace: str = NAMESPACE) -> Any:
    """The catalog named (pyiceberg's configuration), or the embedded one inside the lake, holding `namespace`."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.utils.config import Config

    try:
        if name:
            # Read now, not at pyiceberg's import (its `load_catalog` alone would use the settings of that moment).
            configured = cast(dict[str, str], Config().get_catalog_config(name) or {})  # nested values pass as they are
            catalog = load_catalog(name, **configured, **object_store.iceberg_properties(configured))
        else:
            lake.iceberg_warehouse.mkdir(parents=True, exist_ok=True)
            catalog = SqlCatalog(EMBEDDED, **embedded_settings(lake))
        ensure_namespace(catalog, namespace)
        if not name:
            _rehome(catalog, lake, namespace)
    except Exception as exc:  # pyiceberg's errors for a missing setting are ValueErrors, a network's are boto's or OSError
        raise CatalogUnusable(f"catalog {name!r} cannot be used: {cli.first_line(exc)} (pyiceberg reads its settings from "
                              f".pyiceberg.yaml and PYICEBERG_CATALOG__{(name or '').upper()}__<PROPERTY>)") from exc  # fmt: skip
    return catalog


def embedded_settings(lake: Lake) -> dict[str, str]:
    """The embedded catalog's pyiceberg settings: a SQLite catalog and a warehouse folder inside the lake. The warehouse
    is a plain path: pyiceberg takes a file URI's path as written, so `Path.as_uri()`'s `%20` for a space put the
    tables' files in a sibling folder named with the `%20`, outside the lake."""
    return {"type": "sql", "uri": f"sqlite:///{lake.iceberg_catalog}", "warehouse": str(lake.iceberg_warehouse)}


def reader_settings(lake: Lake) -> str:
    """The `.pyiceberg.yaml` with which any pyiceberg reader opens the embedded catalog (`load_catalog("lake")`)."""
    lines = [f"    {key}: {value}" for key, value in embedded_settings(lake).items()]
    return "\n".join(["catalog:", f"  {EMBEDDED}:", *lines])


def ensure_namespace(catalog: Any, namespace: str) -> None:
    """The namespace, created only when it is missing: a role allowed to read a Glue database that exists but not to
    create one (glue:CreateDatabase) was refused, pyiceberg's create-if-not-exists trying the creation first."""
    from pyiceberg.exceptions import NoSuchNamespaceError

    try:
        catalog.load_namespace_properties(namespace)
    except NoSuchNamespaceError:
        catalog.create_namespace_if_not_exists(namespace)


def _rehome(catalog: Any, lake: Lake, namespace: str) -> None:
    """A lake copied or moved to another path brings an embedded catalog whose tables live at the old path (Iceberg
    metadata holds absolute paths): they are dropped from this catalog (the old lake's files untouched) and published
    again from the lake's files by this publish; their snapshot history starts again. So are tables an earlier release
    put beside the lake, under its path percent-encoded (`embedded_settings`). The quarantine, a table of record, is
    registered again where it is instead (jobs/tables/quarantine_table.py)."""
    home = f"{lake.iceberg_warehouse}/"
    for identifier in catalog.list_tables(namespace):
        if identifier[-1].startswith((QUARANTINE, EVENTS)):  # tables of record: registered again where they are
            continue
        try:
            location = catalog.load_table(identifier).location()
        except FileNotFoundError:  # its metadata went with the old path: the lake was moved, or restored elsewhere
            location = "a path that is gone"
        if not location.removeprefix("file://").startswith(home):
            log.warning("the lake moved: its embedded table %s lived at %s, published again under %s", ".".join(identifier), location, home)
            catalog.drop_table(identifier)


TABLE_PROPERTIES = {
    "format-version": "2",
    "write.parquet.compression-codec": "zstd",
    # Each commit writes a metadata file: the newest ten are kept, older ones deleted as commits go.
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "10",
    # A publish that adds files merges the table's small manifests once ten of them wait: a plan reads a few
    # manifests, not one per publish (BENCHMARKS.md, "Publishing as Iceberg tables").
    "commit.manifest-merge.enabled": "true",
    "commit.manifest.min-count-to-merge": "10",
    # pyiceberg retries a commit another one overtook by replaying the same appends on the newer snapshot: right for
    # independent writers, a file twice for two publishes of one lake. A publish computes its difference again instead.
    "commit.retry.num-retries": "0",
}


def existing_table(catalog: Any, identifier: str) -> Any | None:
    """The table, or None before its first publish."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return catalog.load_table(identifier)
    except NoSuchTableError:
        return None


def open_table(
    catalog: Any, identifier: str, columns: tuple[str, ...], schemas: list[Any], table: Any | None, lake: Lake, order: tuple[str, ...] = ()
) -> Any:
    """`table`, or the Iceberg table created on its first publish (identity partitions on `columns`, owned by `lake`,
    its rows sorted by `order` within them, as the lake's writers sort them), with every column of `schemas` (the files
    about to be added) it lacks added: the lake's tables gain columns as CloudTrail does."""
    from pyiceberg.table import TableProperties
    from pyiceberg.table.sorting import NullOrder
    from pyiceberg.transforms import IdentityTransform

    def sorted_by(tx: Any) -> None:  # Spark's ascending order: nulls first
        with tx.update_sort_order() as sort:
            for column in order:
                sort.asc(column, IdentityTransform(), NullOrder.NULLS_FIRST)

    def name_mapping(tx: Any) -> None:  # files carry no Iceberg field ids: every reader maps their columns by name
        tx.set_properties({TableProperties.DEFAULT_NAME_MAPPING: tx.table_metadata.schema().name_mapping.model_dump_json()})

    if table is None:
        tx = catalog.create_table_transaction(identifier, schema=schemas[0], properties=TABLE_PROPERTIES | {OWNER: lake.location})
        with tx.update_spec() as spec:
            for column in columns:
                spec.add_identity(column)
        name_mapping(tx)
        tx.commit_transaction()
        table = catalog.load_table(identifier)
    if order and table.sort_order().is_unsorted:  # a table its first publish created before the lake sorted its rows
        with table.transaction() as tx:
            sorted_by(tx)
    known = {f.name: f.field_type for f in table.schema().fields}

    def addable(schema: Any) -> Any:
        """A file's columns the table can take: those it lacks, and the fields a struct or list it has may gain. A
        column it has keeps its type (jobs/iceberg/columns.py conforms the file's values to it)."""
        import pyarrow as pa

        return pa.schema([f for f in schema if f.name not in known or (pa.types.is_nested(f.type) and not known[f.name].is_primitive)])

    wider = [addable(schema) for schema in schemas if any(column not in known for column in schema.names)]
    if wider:
        with table.transaction() as tx:  # the table takes the new metadata as it commits
            with tx.update_schema() as update:
                for schema in wider:
                    update.union_by_name(schema)
            name_mapping(tx)
    return table


def current_files(table: Any) -> dict[str, Any]:
    """The data files the table's current snapshot holds, by their path inside its data folder."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return {}
    prefix = f"{table.location().rstrip('/')}/data/"
    found = {}
    for manifest in snapshot.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            found[entry.data_file.file_path.removeprefix(prefix)] = entry.data_file
    return found


def commit_files(table: Any, removed: list[Any], added: list[Any], properties: dict[str, str], merge: bool = False) -> None:
    """`removed` out of the table and `added` into it, in one snapshot stating `properties` (an append when nothing goes:
    merging its manifests with `merge`). Never replayed by pyiceberg: its retry of a commit another overtook adds the
    same files again (a table of record's property allows retries, for its Java writers, whose commits replay safely),
    so the caller computes its difference anew."""
    table.metadata = table.metadata.model_copy(update={"properties": {**table.metadata.properties, "commit.retry.num-retries": "0"}})
    with table.transaction() as tx:
        update = tx.update_snapshot(snapshot_properties=properties)
        with update.overwrite() if removed else update.merge_append() if merge else update.fast_append() as producer:
            for data_file in removed:
                producer.delete_data_file(data_file)
            for data_file in added:
                producer.append_data_file(data_file)


class OwnedByAnotherLake(cli.Refused):
    """The table belongs to another lake: nothing of this lake is written to it."""


def claim(table: Any, lake: Lake) -> Any:
    """`table`, checked to be this lake's; one that names no owner (published by an earlier release) becomes this lake's."""
    owner = table.properties.get(OWNER)
    if owner is None:
        with table.transaction() as tx:
            tx.set_properties({OWNER: lake.location})
    elif owner != lake.location:
        raise owned_by_another(".".join(table.name()), owner, lake)
    return table


def owned_by_another(name: str, owner: str, lake: Lake) -> OwnedByAnotherLake:
    return OwnedByAnotherLake(
        f"{name} belongs to the lake at {owner}, not to this one ({lake.location}): refused; "
        f"to hand it to this lake, set its table property {OWNER} to {lake.location}, or drop it"
    )
