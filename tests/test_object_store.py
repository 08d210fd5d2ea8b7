"""Object storage through the AWS conventions (jobs/object_store.py): a job's Spark session reads and writes `s3://`
through S3A (the jars `make setup` fetches) with nothing set but what the AWS SDKs read, a stream keeps its checkpoint
there, and pyiceberg's file IO is given the endpoint its pyarrow S3 would not read (tests/test_publish.py's Glue test
publishes through it)."""

from __future__ import annotations

import hashlib
import json
import sys
import textwrap
import uuid
from pathlib import Path

import boto3
import pytest

from jobs import object_store
from tests.helpers import succeeded

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.unit
def test_the_aws_settings_become_s3a_s_and_pyiceberg_s():
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_DEFAULT_REGION": "eu-west-1"}
    conf = object_store.spark_conf(env)
    assert conf["spark.hadoop.fs.s3.impl"] == object_store.S3A  # s3:// as users write it, through S3A
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true" and conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    # The S3-only endpoint and AWS_REGION win, as in the AWS SDKs; with none, AWS's own endpoints and host-style addressing.
    env |= {"AWS_ENDPOINT_URL_S3": "https://minio.internal", "AWS_REGION": "us-west-2"}
    conf = object_store.spark_conf(env)
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "https://minio.internal" and "spark.hadoop.fs.s3a.connection.ssl.enabled" not in conf
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "us-west-2"
    assert not any("endpoint" in key or "path.style" in key for key in object_store.spark_conf({}))
    # pyiceberg: the conventions fill what the catalog's own settings leave out, never what they name.
    assert object_store.iceberg_properties({"s3.endpoint": "http://other"}, env) == {"s3.region": "us-west-2", "glue.region": "us-west-2"}
    assert object_store.iceberg_properties({}, {}) == {}


@pytest.mark.unit
def test_a_catalog_configured_after_pyiceberg_was_imported_is_opened_with_its_settings(tmp_path, monkeypatch):
    """pyiceberg's `load_catalog` alone reads the settings of its import: a process that imported it before the catalog's
    PYICEBERG_* settings were made (a test, a long-lived worker) got no `type` and failed with "URI missing"."""
    import pyiceberg.catalog  # noqa: F401  (imported before the settings exist, as an earlier caller would)

    from jobs.iceberg.catalog import open_catalog
    from jobs.lake import Lake

    settings = {"TYPE": "sql", "URI": f"sqlite:///{tmp_path / 'late.db'}", "WAREHOUSE": str(tmp_path / "warehouse")}
    for key, value in settings.items():
        monkeypatch.setenv(f"PYICEBERG_CATALOG__LATE__{key}", value)
    catalog = open_catalog(Lake.at(tmp_path / "lake"), "late")
    assert type(catalog).__name__ == "SqlCatalog" and ("cloudtrail",) in catalog.list_namespaces()


@pytest.mark.unit
def test_the_jvm_dependencies_are_pinned_and_checked():
    """build/jars is exactly tools/jars/jars.sha256 (`make setup` fetched and checked it): S3A at the wheel's Hadoop."""
    expected = dict(line.split()[::-1] for line in (ROOT / "tools" / "jars" / "jars.sha256").read_text().splitlines() if line.strip())
    jars = ROOT / "build" / "jars"
    assert {jar.name: hashlib.sha256(jar.read_bytes()).hexdigest() for jar in jars.glob("*.jar")} == expected
    hadoop = {p.name for p in (Path(sys.modules["pyspark"].__file__).parent / "jars").glob("hadoop-client-api-*.jar")}
    assert {f"hadoop-client-api-{name.removeprefix('hadoop-aws-')}" for name in expected if name.startswith("hadoop-aws-")} == hadoop


# A job's session, in a process of its own as an operator runs one: a table written to `s3://` and read back, and a
# stream whose checkpoint is there, run twice: the second run finds its file done.
SESSION = textwrap.dedent(
    """
    import json, sys
    from jobs.spark.session import JobSession, spark_session
    root = sys.argv[1]
    with JobSession(lambda: spark_session("object-store-test", {"spark.ui.enabled": "false"}, "local[2]")) as session:
        spark = session()
        spark.range(5).selectExpr("id", "cast(id % 2 as string) part").write.mode("append").partitionBy("part").parquet(f"{root}/table")
        rows = sorted(r.id for r in spark.read.parquet(f"{root}/table").collect())
        seen = []
        stream = spark.readStream.format("text").load(f"{root}/input")
        for _ in range(2):
            query = (stream.writeStream.foreachBatch(lambda batch, _: seen.extend(r.value for r in batch.collect()))
                     .option("checkpointLocation", f"{root}/_checkpoint").trigger(availableNow=True).start())
            query.awaitTermination()
        print(json.dumps({"rows": rows, "seen": seen}))
    """
)


@pytest.mark.integration
def test_a_job_s_session_reads_writes_and_checkpoints_on_s3_with_the_aws_settings_alone(aws):
    import os
    import subprocess

    bucket = f"lake-{uuid.uuid4().hex[:12]}"
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="lake/input/a.txt", Body=b"one\ntwo\n")
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYICEBERG_", "SPARK_DIST"))}
    assert env["AWS_ENDPOINT_URL"] == aws and "fs.s3a" not in json.dumps(env)
    result = subprocess.run([sys.executable, "-c", SESSION, f"s3://{bucket}/lake"], capture_output=True, text=True, env=env, timeout=300)
    succeeded(result)
    assert json.loads(result.stdout.splitlines()[-1]) == {"rows": [0, 1, 2, 3, 4], "seen": ["one", "two"]}
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="lake/")["Contents"]]
    assert any(k.startswith("lake/table/part=1/") and k.endswith(".parquet") for k in keys)
    assert "lake/_checkpoint/commits/0" in keys and not any(k.startswith("lake/_checkpoint/commits/1") for k in keys)


@pytest.mark.integration
def test_a_jar_that_differs_from_its_pinned_checksum_stops_the_setup(tmp_path, monkeypatch):
    """`make setup`'s fetch refuses a set of jars one of which is not the pinned bytes, naming it, and leaves no folder."""
    from tools import package

    pinned = (ROOT / "tools" / "jars" / "jars.sha256").read_text().splitlines()
    name = next(line.split()[1] for line in pinned if "hadoop-aws" in line)
    altered = [line.replace(line.split()[0], "0" * 64) if line.endswith(name) else line for line in pinned]
    (tmp_path / "pins").mkdir()
    (tmp_path / "pins" / "pom.xml").write_text((ROOT / "tools" / "jars" / "pom.xml").read_text())
    (tmp_path / "pins" / "jars.sha256").write_text("\n".join(altered) + "\n")
    monkeypatch.setattr(package, "DEPENDENCIES", tmp_path / "pins")
    with pytest.raises(SystemExit, match=f"differ from tools/jars/jars.sha256: {name}$"):
        package.fetch_jars(tmp_path / "jars")
    assert not (tmp_path / "jars").exists() and not (tmp_path / ".jars.partial").exists()
    monkeypatch.setattr(package, "DEPENDENCIES", ROOT / "tools" / "jars")
    assert len(list(package.fetch_jars(tmp_path / "jars").glob("*.jar"))) == len(pinned)
