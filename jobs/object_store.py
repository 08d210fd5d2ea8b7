"""How every client of the product reaches object storage: the AWS conventions, read once, given to each (boto3 only
in `s3_client`).

One set of settings serves them all, as the AWS SDKs and CLI read them, so MinIO, LocalStack or moto need one setting:

    AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL   the S3 endpoint (path-style addressing then: a local server has no
                                                 bucket host names)
    AWS_REGION, else AWS_DEFAULT_REGION          the region
    the standard credential chain                environment, web identity (EKS), profile, container, instance role

- Spark (`spark_conf`): `s3://` and `s3a://` locations both go through Hadoop's S3A (build/jars, tools/jars/pom.xml),
  its credentials from the AWS SDK's default chain (S3A's own list has no profile or web identity);
- pyiceberg (`iceberg_properties`): its file IO is pyarrow's S3, which reads no AWS_* variable, so the endpoint and
  region are passed on wherever the catalog's own settings name none (a Glue catalog otherwise created its tables
  through the endpoint and wrote their files to AWS's own host);
- boto3 (jobs/landing/, the lake's lease in jobs/lock.py) reads them itself (`s3_client`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

S3A = "org.apache.hadoop.fs.s3a.S3AFileSystem"
# The AWS SDK's own chain: S3A's default list lacks the profile file and EKS's web identity.
CREDENTIALS = "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider"


def endpoint(env: Mapping[str, str] = os.environ) -> str | None:
    return env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None


def region(env: Mapping[str, str] = os.environ) -> str | None:
    return env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None


def spark_conf(env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Spark's Hadoop settings for S3 (spark.hadoop.*, the driver's and executors' alike)."""
    conf = {
        "spark.hadoop.fs.s3.impl": S3A,
        "spark.hadoop.fs.AbstractFileSystem.s3.impl": "org.apache.hadoop.fs.s3a.S3A",
        "spark.hadoop.fs.s3a.aws.credentials.provider": CREDENTIALS,
        # Hadoop closes every cached file system in a shutdown hook; on a lake in S3 that close held each job's JVM
        # 1.5 s past its work (S3A shutting its AWS SDK clients down; BENCHMARKS.md). Nothing is pending by
        # then: each write is closed, and so complete, before the job says it is done, and a job killed at any moment
        # loses nothing (the chaos tests), so the JVM exits without it.
        "spark.hadoop.fs.automatic.close": "false",
    }
    if url := endpoint(env):
        conf |= {"spark.hadoop.fs.s3a.endpoint": url, "spark.hadoop.fs.s3a.path.style.access": "true"}
        if url.startswith("http://"):
            conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = "false"
    if name := region(env):
        conf["spark.hadoop.fs.s3a.endpoint.region"] = name
    return conf


def iceberg_properties(configured: Mapping[str, object], env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """pyiceberg's S3 and Glue properties from the conventions, for the keys the catalog's settings leave out."""
    defaults = {"s3.endpoint": endpoint(env), "s3.region": region(env), "glue.region": region(env)}
    return {key: value for key, value in defaults.items() if value and key not in configured}


def s3_client(connections: int = 10) -> Any:
    """A boto3 S3 client, retrying throttles and resets (the standard mode), with up to `connections` open at once."""
    import boto3
    from botocore.config import Config

    return boto3.client("s3", config=Config(retries={"mode": "standard", "max_attempts": 3}, max_pool_connections=connections))
