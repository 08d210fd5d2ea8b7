"""A real S3 + SQS HTTP API on loopback (moto's server), and a trail that delivers to it as CloudTrail does.

boto3, aiobotocore and the Amazon provider reach it the way they reach AWS: AWS_ENDPOINT_URL and dummy keys in the
environment (set by the `aws` fixture, read by every client the product makes).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

import boto3

from tools.airflow_api import Api
from tools.aws_stand_in import answer_java_without_interim_continue
from tools.stack import Stack, write_env_file

ACCOUNT, REGION = "111122223333", "us-east-1"


def start_server() -> tuple[Any, str]:
    from moto.server import ThreadedMotoServer

    _quick_sqs_clock()
    answer_java_without_interim_continue()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, f"http://{host}:{port}"


def _quick_sqs_clock() -> None:
    """moto's SQS tests each message's visibility on every call, about 30 times a call, through a clock that builds
    datetimes (6 us a reading): receiving 2,000 waiting messages took 203 s, quadratic in the queue. The same clock,
    read from time.time(): the queue's behaviour is unchanged, its cost per message a hundred times lower."""
    from moto.sqs import models

    exact = models.unix_time

    def unix_time(dt: Any = None) -> float:
        return time.time() if dt is None else exact(dt)

    models.unix_time = unix_time
    models.unix_time_millis = lambda dt=None: unix_time(dt) * 1000.0


ENVIRONMENT = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": REGION}


def glue_catalog(name: str, warehouse: str) -> dict[str, str]:
    """The environment pyiceberg reads a Glue catalog `name` from, as a user writes it: its type and warehouse. The
    endpoint, region and keys are the AWS settings every client takes (jobs/object_store.py)."""
    return {f"PYICEBERG_CATALOG__{name.upper()}__{key}": value for key, value in {"TYPE": "glue", "WAREHOUSE": warehouse}.items()}


def log_key(prefix: str, delivered: datetime, file_id: str, account: str = ACCOUNT, region: str = REGION) -> str:
    stamp = delivered.strftime("%Y%m%dT%H%MZ")
    return f"{prefix}AWSLogs/{account}/CloudTrail/{region}/{delivered:%Y/%m/%d}/{account}_CloudTrail_{region}_{stamp}_{file_id}.json.gz"


@dataclass
class Trail:
    """A bucket (under a prefix) and the queue its notifications go to."""

    bucket: str
    prefix: str
    queue_url: str
    s3: Any = field(repr=False)
    sqs: Any = field(repr=False)

    @classmethod
    def create(cls, prefix: str = "trail/") -> Trail:
        s3, sqs = boto3.client("s3"), boto3.client("sqs")
        name = f"cloudtrail-{uuid.uuid4().hex[:12]}"
        s3.create_bucket(Bucket=name)
        queue_url = sqs.create_queue(QueueName=name)["QueueUrl"]
        return cls(name, prefix, queue_url, s3, sqs)

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def deliver(self, records: list[dict[str, Any]], delivered: datetime, file_id: str | None = None) -> str:
        """Write one log file (Records, gzipped); its key."""
        key = log_key(self.prefix, delivered, file_id or uuid.uuid4().hex[:16])
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=gzip.compress(json.dumps({"Records": records}).encode(), mtime=0))
        return key

    def digest(self, keys: list[str], end: datetime) -> str:
        """CloudTrail's hourly digest naming `keys`, with the SHA-256 of each one's uncompressed content."""
        files = []
        for key in keys:
            body = gzip.decompress(self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read())
            files.append({"s3Bucket": self.bucket, "s3Object": key, "hashValue": hashlib.sha256(body).hexdigest()})
        name = f"{ACCOUNT}_CloudTrail-Digest_{REGION}_trail_{REGION}_{end:%Y%m%dT%H%M%SZ}.json.gz"
        key = f"{self.prefix}AWSLogs/{ACCOUNT}/CloudTrail-Digest/{REGION}/{end:%Y/%m/%d}/{name}"
        digest = {"awsAccountId": ACCOUNT, "digestEndTime": end.strftime("%Y-%m-%dT%H:%M:%SZ"), "digestS3Object": key, "logFiles": files}
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=gzip.compress(json.dumps(digest).encode()))
        return key

    def notify(self, body: str) -> None:
        self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=body)

    def notify_many(self, bodies: list[str]) -> None:
        for start in range(0, len(bodies), 10):
            entries = [{"Id": str(i), "MessageBody": b} for i, b in enumerate(bodies[start : start + 10])]
            self.sqs.send_message_batch(QueueUrl=self.queue_url, Entries=entries)

    def waiting(self) -> int:
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.queue_url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        )["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"]) + int(attributes["ApproximateNumberOfMessagesNotVisible"])

    def keys(self) -> list[str]:
        """Every object key under the trail's prefix."""
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]

    def oracle(self) -> list[str]:
        """Every eventID in the bucket's log files, once: what the table must hold."""
        ids: set[str] = set()
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=f"{self.prefix}AWSLogs/"):
            for item in page.get("Contents", []):
                if "_CloudTrail_" in item["Key"]:
                    body = self.s3.get_object(Bucket=self.bucket, Key=item["Key"])["Body"].read()
                    ids.update(r["eventID"] for r in json.loads(gzip.decompress(body))["Records"])
        return sorted(ids)


# The notification shapes a queue receives, for one or more keys of one bucket.
def cloudtrail_sns(bucket: str, keys: list[str], wrapped: bool = True) -> str:
    message = json.dumps({"s3Bucket": bucket, "s3ObjectKey": keys})
    return json.dumps({"Type": "Notification", "MessageId": uuid.uuid4().hex, "Message": message}) if wrapped else message


def s3_event(bucket: str, keys: list[str], wrapped: bool = False) -> str:
    records = [
        {"eventSource": "aws:s3", "eventName": "ObjectCreated:Put", "s3": {"bucket": {"name": bucket}, "object": {"key": quote_plus(key)}}}
        for key in keys
    ]
    message = json.dumps({"Records": records})
    return json.dumps({"Type": "Notification", "Message": message}) if wrapped else message


def eventbridge(bucket: str, key: str) -> str:
    return json.dumps({"source": "aws.s3", "detail-type": "Object Created", "detail": {"bucket": {"name": bucket}, "object": {"key": key}}})


S3_TEST_EVENT = json.dumps({"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": "b"})


def committed_ids(lake: str, catalog: str = "glue") -> set[str]:
    """The eventIDs the events table of record has committed (its `ingest` branch), read through the lake's catalog;
    none before its first run created it."""
    from pyiceberg.exceptions import NoSuchTableError

    from tests.helpers import catalog_rows

    try:
        return {event_id for event_id, _ in catalog_rows(lake, catalog)}
    except NoSuchTableError:
        return set()


@contextmanager
def reaching(stack: Stack) -> Iterator[str]:
    """This process reaching the stack's AWS and the lake's catalog as its services do (their AWS_* and PYICEBERG_*
    settings), once the lake's and the landing's buckets are there; the lake's location."""
    env = stack.env("airflow-scheduler")
    with environment({name: value for name, value in env.items() if name.startswith(("AWS_", "PYICEBERG_"))}):
        s3, deadline = boto3.client("s3"), time.monotonic() + 120
        buckets = {env[name].removeprefix("s3://").split("/")[0] for name in ("CLOUDTRAIL_LAKE", "CLOUDTRAIL_LANDING")}
        while not buckets <= {bucket["Name"] for bucket in s3.list_buckets()["Buckets"]}:
            assert time.monotonic() < deadline, f"the buckets {sorted(buckets)} were never created"
            time.sleep(1)
        yield env["CLOUDTRAIL_LAKE"]


def landing_trail(stack: Stack) -> Trail:
    """The stack's landing bucket (CLOUDTRAIL_LANDING), delivered to as CloudTrail does (no queue: it is listed)."""
    bucket, _, prefix = stack.env("airflow-scheduler")["CLOUDTRAIL_LANDING"].removeprefix("s3://").partition("/")
    return Trail(bucket, prefix, "", boto3.client("s3"), None)


@contextmanager
def s3_stack(home: Path, settings: dict[str, str] | None = None) -> Iterator[tuple[Stack, Trail]]:
    """The compose stack (tools/stack.py) with moto's server as AWS, outside the stack as AWS would be (its stand-in's
    profile off): the lake in a bucket there, the landing in another with its notification queue; the ingest DAG
    unpaused, woken by the queue (`settings`: more .env lines)."""
    with ExitStack() as cleanup:
        server, endpoint = start_server()
        cleanup.callback(server.stop)
        # moto keeps its state per process, not per server: an earlier stack's Glue tables, named as this one's, would
        # be this lake's (whose empty checkpoint then refuses them).
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"), timeout=30).close()
        aws = {**ENVIRONMENT, "AWS_ENDPOINT_URL": endpoint}
        cleanup.enter_context(environment(aws))
        trail = Trail.create()
        lake_bucket = f"lake-{uuid.uuid4().hex[:12]}"
        boto3.client("s3").create_bucket(Bucket=lake_bucket)
        env_file = home / "stack.env"
        home.mkdir(parents=True, exist_ok=True)
        write_env_file(env_file, {"CLOUDTRAIL_SCHEDULE": "@daily", "CLOUDTRAIL_LANDING": trail.url, "CLOUDTRAIL_QUEUE_URL": trail.queue_url,
                                  "COMPOSE_PROFILES": "", "CLOUDTRAIL_LAKE": f"s3://{lake_bucket}/lake",
                                  "CLOUDTRAIL_WAREHOUSE": f"s3://{lake_bucket}/warehouse", **aws, **(settings or {})})  # fmt: skip
        stack = Stack(home=home / "stack", env_file=env_file, fixed_ports=False)
        cleanup.callback(stack.down)
        stack.up()
        Api.of(stack).unpause()
        with reaching(stack):  # the lake's catalog too
            yield stack, trail


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """This process's environment with `values` set, as it was afterwards."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)


@dataclass(frozen=True)
class Notified:
    """A delivered log file whose notification was sent: when S3 says it arrived, and the events it holds."""

    key: str
    modified: float
    wanted: frozenset[str]


def deliver_notified(trail: Trail, records: list[dict[str, Any]], file_id: str) -> Notified:
    """Deliver one log file and CloudTrail's notification of it."""
    key = trail.deliver(records, datetime.now(tz=UTC), file_id)
    modified = trail.s3.head_object(Bucket=trail.bucket, Key=key)["LastModified"].timestamp()
    trail.notify(cloudtrail_sns(trail.bucket, [key]))
    return Notified(key, modified, frozenset(record["eventID"] for record in records))


def queryable_lags(stack: Stack, delivered: list[Notified], timeout: float = 600) -> list[float]:
    """Seconds from each file's LastModified until every one of its events is in a committed file of the events
    table (polled each second), in the order given."""
    lake, lags = stack.env("airflow-scheduler")["CLOUDTRAIL_LAKE"], dict.fromkeys(delivered, 0.0)
    deadline = time.monotonic() + timeout
    while waiting := [d for d, lag in lags.items() if not lag]:
        assert time.monotonic() < deadline, f"{[d.key for d in waiting]}: not queryable after {timeout:.0f} s"
        committed = committed_ids(lake)
        for notified in waiting:
            if notified.wanted <= committed:
                lags[notified] = time.time() - notified.modified
        time.sleep(1)
    return [lags[d] for d in delivered]


def queryable_after(stack: Stack, trail: Trail, records: list[dict[str, Any]], file_id: str, timeout: float = 600) -> float:
    """Deliver one log file and CloudTrail's notification of it; seconds from the object's LastModified until every
    one of its events is in a committed file of the events table."""
    (lag,) = queryable_lags(stack, [deliver_notified(trail, records, file_id)], timeout)
    return lag


def burst_lags(stack: Stack, trail: Trail, make: Any, timeout: float = 600) -> list[float]:
    """A burst of 4 deliveries (`make(n)`: the records of the n-th): the 2nd while the run the 1st woke is running,
    then a manual run queued behind it, the 3rd and 4th two seconds after that run was created. Each one's seconds
    from its LastModified until queryable."""
    api = Api.of(stack)
    delivered = [deliver_notified(trail, make(0), "burst-0")]
    deadline = time.monotonic() + timeout
    while not api.runs_in("running"):
        assert time.monotonic() < deadline, "the first delivery woke no run"
        time.sleep(0.5)
    delivered.append(deliver_notified(trail, make(1), "burst-1"))
    queued = api.trigger()
    time.sleep(2)
    delivered += [deliver_notified(trail, make(n), f"burst-{n}") for n in (2, 3)]
    lags = queryable_lags(stack, delivered, timeout)
    assert api.finished(queued) == "success"
    return lags


def reach_from(spark: Any) -> None:
    """The suite's one JVM, which started before moto's server did, made to reach it as a job's own session would:
    its Hadoop settings for S3 (jobs/object_store.py) and the keys and region as the AWS SDK's system properties (the
    first its credential chain asks; the JVM's environment is the one it started with). The Hadoop settings go to Spark's
    own settings too, where an executor's code reads them (jobs/java/cloudtrail/LandingFile.java)."""
    from jobs import object_store

    hadoop, conf = spark.sparkContext._jsc.hadoopConfiguration(), spark.sparkContext._jsc.sc().conf()
    for key, value in object_store.spark_conf().items():
        hadoop.set(key.removeprefix("spark.hadoop."), value)
        conf.set(key, value)
    system = spark.sparkContext._jvm.java.lang.System
    names = {"aws.accessKeyId": "AWS_ACCESS_KEY_ID", "aws.secretAccessKey": "AWS_SECRET_ACCESS_KEY", "aws.region": "AWS_DEFAULT_REGION"}
    for key, name in names.items():
        system.setProperty(key, os.environ[name])


def copy_prefix(bucket: str, source: str, target: str) -> None:
    """Every object under `source`/ copied to the same key under `target`/ (an operator's `aws s3 cp --recursive`)."""
    s3 = boto3.client("s3")
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{source}/"):
        for item in page.get("Contents", []):
            s3.copy_object(Bucket=bucket, Key=target + item["Key"][len(source) :], CopySource={"Bucket": bucket, "Key": item["Key"]})
