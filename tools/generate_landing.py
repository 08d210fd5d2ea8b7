"""Write a synthetic CloudTrail landing zone in the delivered layout (seeded, deterministic).

    python -m tools.generate_landing --out DIR [--records 20000] [--days 3] [--seed 7]
        [--duplicate-rate 0.01] [--late-event-files 2] [--malformed-files 1] [--digests]
        [--start 2024-01-01] [--samples ../shared/cloudtrail-samples]

Files land as AWSLogs/<account>/CloudTrail/<region>/YYYY/MM/DD/
<account>_CloudTrail_<region>_<YYYYMMDDTHHmmZ>_<id>.json.gz, the path date being the
delivery date. Each file's modification time is set to its delivery time, so arrival
order on disk matches CloudTrail's. The manifest (returned, and written as
_manifest.json beside AWSLogs/ unless --no-manifest) lists what was written, for tests.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import string
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from jobs.landing.layout import aws_logs, delivery_path

ACCOUNTS = ["111122223333", "444455556666", "017622104382"]
REGIONS = ["us-east-1", "us-west-2", "eu-west-1"]
REDELIVERY_WINDOW = timedelta(hours=12)
# (eventSource, eventName, readOnly, errorCodes that occur)
CALLS = [
    ("s3.amazonaws.com", "GetObject", True, ["AccessDenied", "NoSuchKey"]),
    ("s3.amazonaws.com", "PutObject", False, ["AccessDenied"]),
    ("ec2.amazonaws.com", "DescribeInstances", True, ["Client.UnauthorizedOperation"]),
    ("ec2.amazonaws.com", "RunInstances", False, ["Client.InstanceLimitExceeded"]),
    ("iam.amazonaws.com", "CreateRole", False, ["EntityAlreadyExists"]),
    ("iam.amazonaws.com", "ListUsers", True, []),
    ("sts.amazonaws.com", "AssumeRole", True, ["AccessDenied"]),
    ("kms.amazonaws.com", "Decrypt", True, ["ThrottlingException"]),
    ("lambda.amazonaws.com", "Invoke", False, []),
    ("signin.amazonaws.com", "ConsoleLogin", False, []),
    ("cloudtrail.amazonaws.com", "LookupEvents", True, ["ThrottlingException"]),
    ("secretsmanager.amazonaws.com", "GetSecretValue", True, ["ResourceNotFoundException"]),
]
IDENTITY_TYPES = ["IAMUser", "AssumedRole", "AssumedRole", "AWSService", "Root", "FederatedUser", "IdentityCenterUser"]


@dataclass
class Manifest:
    files: list[str] = field(default_factory=list)
    events: dict[str, str] = field(default_factory=dict)  # eventID -> event_date (every good event)
    duplicates: int = 0
    late_event_files: list[str] = field(default_factory=list)  # files of events delivered days after they happened
    malformed_files: dict[str, str] = field(default_factory=dict)  # path -> expected reason
    digest_files: list[str] = field(default_factory=list)


def _id(rng: random.Random, n: int = 16) -> str:
    return "".join(rng.choices(string.ascii_letters + string.digits, k=n))


def _identity(rng: random.Random, account: str) -> dict[str, Any]:
    kind = rng.choice(IDENTITY_TYPES)
    principal = f"AIDA{_id(rng, 12).upper()}"
    if kind == "AWSService":
        return {"type": kind, "invokedBy": rng.choice(["lambda.amazonaws.com", "ec2.amazonaws.com"])}
    identity: dict[str, Any] = {"type": kind, "principalId": principal, "accountId": account}
    if kind == "IAMUser":
        user = rng.choice(["alice", "bob", "deploy-bot"])
        identity.update(arn=f"arn:aws:iam::{account}:user/{user}", userName=user, accessKeyId=f"AKIA{_id(rng, 12).upper()}")
    elif kind in ("AssumedRole", "FederatedUser"):
        role = rng.choice(["Admin", "ReadOnly", "ci-runner"])
        identity.update(
            arn=f"arn:aws:sts::{account}:assumed-role/{role}/session-{rng.randint(1, 9)}",
            accessKeyId=f"ASIA{_id(rng, 12).upper()}",
            sessionContext={
                "sessionIssuer": {"type": "Role", "principalId": principal, "arn": f"arn:aws:iam::{account}:role/{role}",
                                  "accountId": account, "userName": role},
                "attributes": {"creationDate": "2024-01-01T00:00:00Z", "mfaAuthenticated": rng.choice(["true", "false"])},
            },
        )  # fmt: skip
    elif kind == "Root":
        identity.update(arn=f"arn:aws:iam::{account}:root")
    else:
        identity.update(onBehalfOf={"userId": _id(rng), "identityStoreArn": f"arn:aws:identitystore::{account}:identitystore/d-1"})
    return identity


def _payload(rng: random.Random, event_name: str) -> tuple[Any, Any]:
    """Request/response payloads whose JSON types vary, as they do in real CloudTrail."""
    if event_name in ("GetObject", "PutObject"):
        request: Any = {"bucketName": f"bucket-{rng.randint(1, 5)}", "key": f"data/{_id(rng, 8)}.csv", "Host": "s3.amazonaws.com"}
        return request, None
    if event_name == "RunInstances":
        request = {"instanceType": rng.choice(["t3.micro", "m5.large"]), "minCount": 1, "maxCount": rng.choice([1, "1"]),
                   "tagSpecificationSet": {"items": [{"resourceType": "instance", "tags": [{"key": "team", "value": "sec"}]}]}}  # fmt: skip
        response = {"instancesSet": {"items": [{"instanceId": f"i-{_id(rng, 17).lower()}", "launchTime": 1704067200000}]}}
        return request, response
    if event_name == "CreateRole":
        policy = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole"}]})
        return {"roleName": f"role-{_id(rng, 6)}", "assumeRolePolicyDocument": policy, "tags": rng.choice([[], {"a": "b"}])}, {
            "role": {"arn": "arn:aws:iam::111122223333:role/x", "createDate": "Jan 1, 2024, 12:00:00 AM"}
        }
    if event_name == "ConsoleLogin":
        return None, {"ConsoleLogin": rng.choice(["Success", "Failure"])}
    return rng.choice([None, {"maxResults": rng.choice([100, "100"])}, {}]), None


def make_record(rng: random.Random, event_time: datetime, account: str, region: str) -> dict[str, Any]:
    source, name, read_only, errors = rng.choice(CALLS)
    request, response = _payload(rng, name)
    record: dict[str, Any] = {
        "eventVersion": rng.choice(["1.08", "1.09", "1.10"]),
        "userIdentity": _identity(rng, account),
        "eventTime": event_time.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "eventSource": source,
        "eventName": name,
        "awsRegion": region,
        "sourceIPAddress": rng.choice(["203.0.113.10", "198.51.100.7", "AWS Internal", "lambda.amazonaws.com"]),
        "userAgent": rng.choice(["aws-cli/2.15.0 Python/3.11", "Boto3/1.34.0", "console.amazonaws.com"]),
        "requestParameters": request,
        "responseElements": response,
        "requestID": str(uuid.UUID(int=rng.getrandbits(128))),
        "eventID": str(uuid.UUID(int=rng.getrandbits(128))),
        "readOnly": read_only,
        "eventType": "AwsConsoleSignIn" if name == "ConsoleLogin" else "AwsApiCall",
        "managementEvent": source != "s3.amazonaws.com",
        "recipientAccountId": account,
        "eventCategory": "Data" if source == "s3.amazonaws.com" else "Management",
        "tlsDetails": {"tlsVersion": "TLSv1.3", "cipherSuite": "TLS_AES_128_GCM_SHA256", "clientProvidedHostHeader": source},
    }
    if errors and rng.random() < 0.08:
        record["errorCode"] = rng.choice(errors)
        record["errorMessage"] = f"{record['errorCode']} for {name}"
    if source == "s3.amazonaws.com":
        record["resources"] = [{"type": "AWS::S3::Object", "ARN": f"arn:aws:s3:::bucket/{_id(rng, 6)}"}]
        record["additionalEventData"] = {"bytesTransferredIn": rng.randint(0, 9999), "x-amz-id-2": _id(rng, 20)}
    return record


def real_records(samples: Path) -> list[dict[str, Any]]:
    """The real delivered records among the samples (invictus-ir: 2,900 records, about 1 KB each)."""
    folder, pattern, _, _ = SAMPLE_SOURCES[0]
    return [record for path in sorted((samples / folder).glob(pattern)) for record in json.loads(path.read_text())["Records"]]


def like(real: list[dict[str, Any]]) -> Callable[[random.Random, datetime, str, str], dict[str, Any]]:
    """A record maker that copies a random real record, with its own ids, time, account and region."""

    def make(rng: random.Random, event_time: datetime, account: str, region: str) -> dict[str, Any]:
        record = json.loads(json.dumps(rng.choice(real)))
        record.update(
            eventTime=event_time.strftime("%Y-%m-%dT%H:%M:%SZ"),
            eventID=str(uuid.UUID(int=rng.getrandbits(128))),
            requestID=str(uuid.UUID(int=rng.getrandbits(128))),
            awsRegion=region,
            recipientAccountId=account,
        )
        return record

    return make


def write_delivery(path: Path, records: list[dict[str, Any]], delivered: datetime, compress: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = json.dumps({"Records": records}, separators=(",", ":")).encode()
    path.write_bytes(gzip.compress(body, compresslevel=6, mtime=0) if compress else body)
    stamp = delivered.timestamp()
    os.utime(path, (stamp, stamp))


def generate(
    out: Path,
    records: int = 20_000,
    days: int = 3,
    seed: int = 7,
    start: date = date(2024, 1, 1),
    records_per_file: int = 250,
    duplicate_rate: float = 0.01,
    late_event_files: int = 0,
    malformed_files: int = 0,
    digests: bool = False,
    make: Callable[[random.Random, datetime, str, str], dict[str, Any]] = make_record,
) -> Manifest:
    """Write the landing zone under `out`; return what was written. `make` makes each event (`like(real)`: real-shaped ones)."""
    rng = random.Random(seed)
    manifest = Manifest()
    begin = datetime.combine(start, datetime.min.time(), tzinfo=UTC)
    span = timedelta(days=days)
    n_files = max(1, records // records_per_file)
    written: list[tuple[dict[str, Any], datetime]] = []  # in delivery order
    oldest_recent = 0  # index of the first entry within REDELIVERY_WINDOW of the file being written
    for index in range(n_files):
        account, region = ACCOUNTS[index % len(ACCOUNTS)], REGIONS[(index // len(ACCOUNTS)) % len(REGIONS)]
        delivered = begin + span * (index + 1) / (n_files + 1)
        batch = [
            make(rng, delivered - timedelta(minutes=rng.uniform(1, 15)), account, region)
            for _ in range(min(records_per_file, records - index * records_per_file))
        ]
        # Re-deliver a few events from files of the last hours: CloudTrail's at-least-once
        # delivery repeats within hours, well inside the de-duplication horizon.
        while oldest_recent < len(written) and delivered - written[oldest_recent][1] > REDELIVERY_WINDOW:
            oldest_recent += 1
        for _ in range(int(len(batch) * duplicate_rate)):
            if oldest_recent < len(written):
                batch.append(written[rng.randrange(oldest_recent, len(written))][0])
                manifest.duplicates += 1
        path = delivery_path(out, account, region, delivered, _id(rng))
        write_delivery(path, batch, delivered)
        manifest.files.append(str(path))
        for record in batch:
            manifest.events[record["eventID"]] = record["eventTime"][:10]
        written.extend((record, delivered) for record in batch[: len(batch) // 10])
    end = begin + span
    for index in range(late_event_files):
        # Delivered at the end of the window, holding events from its first day.
        batch = [make_record(rng, begin + timedelta(hours=rng.uniform(0, 20)), ACCOUNTS[0], REGIONS[0]) for _ in range(20)]
        path = delivery_path(out, ACCOUNTS[0], REGIONS[0], end + timedelta(minutes=index), _id(rng))
        write_delivery(path, batch, end + timedelta(minutes=index))
        manifest.files.append(str(path))
        manifest.late_event_files.append(str(path))
        manifest.events.update((record["eventID"], record["eventTime"][:10]) for record in batch)
    for index, (reason, content) in enumerate(
        [
            ("truncated_gzip", gzip.compress(b'{"Records":[' + b'{"eventID":"x"},' * 500 + b"]}")[:-40]),
            ("not_json", b'{"Records":[{"eventID":"a"} {"eventID":"b"}]}'),
            ("binary", bytes(range(256)) * 4),
            ("unsupported_shape", b'{"hello":"world"}'),
        ][:malformed_files]
    ):
        delivered = end + timedelta(hours=1, minutes=index)
        suffix = ".json.gz" if reason == "truncated_gzip" else ".json"
        path = delivery_path(out, ACCOUNTS[1], REGIONS[1], delivered, _id(rng), suffix)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        os.utime(path, (delivered.timestamp(), delivered.timestamp()))
        manifest.malformed_files[str(path)] = reason
    if digests:
        for account in ACCOUNTS:
            folder = aws_logs(out) / account / "CloudTrail-Digest" / REGIONS[0] / start.strftime("%Y/%m/%d")
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{account}_CloudTrail-Digest_{REGIONS[0]}_trail_{REGIONS[0]}_{start:%Y%m%d}T0100Z.json.gz"
            digest = {
                "awsAccountId": account,
                "digestStartTime": f"{start}T00:00:00Z",
                "logFiles": [],
                "Records": [make_record(rng, begin, account, REGIONS[0])],
            }
            path.write_bytes(gzip.compress(json.dumps(digest).encode(), mtime=0))
            manifest.digest_files.append(str(path))
    return manifest


# Delivered-shape sources among the shared samples: (folder, glob, account, region).
SAMPLE_SOURCES = [
    ("invictus-ir_aws_dataset", "CloudTrail/*.json", "218007301253", "us-east-1"),
    ("stratus-red-team_detonation-logs", "docs/detonation-logs/*.json", "999988887777", "us-east-2"),
    ("zmallen_cloudtrail2sightings", "*.json", "677301038893", "us-east-1"),
]


def add_samples(out: Path, samples: Path, delivered: datetime) -> list[str]:
    """Copy the delivered-shape real samples into the landing layout, unchanged byte for byte.

    Real CloudTrail file names are kept; others get one in CloudTrail's form. All are
    delivered (dated, and their mtime set) at `delivered`.
    """
    placed = []
    for folder, pattern, account, region in SAMPLE_SOURCES:
        for index, source in enumerate(sorted((samples / folder).glob(pattern))):
            name = source.name if "_CloudTrail_" in source.name else None
            target = delivery_path(out, account, region, delivered, f"sample{index:03d}", ".json")
            if name:
                target = target.with_name(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
            os.utime(target, (delivered.timestamp(), delivered.timestamp()))
            placed.append(str(target))
    return placed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--start", type=date.fromisoformat, default=date(2024, 1, 1))
    parser.add_argument("--records-per-file", type=int, default=250)
    parser.add_argument("--duplicate-rate", type=float, default=0.01)
    parser.add_argument("--late-event-files", type=int, default=0, help="files delivered at the end holding events of the first day")
    parser.add_argument("--malformed-files", type=int, default=0, help="0-4: truncated gzip, not JSON, binary, unsupported shape")
    parser.add_argument("--digests", action="store_true")
    parser.add_argument("--samples", type=Path, help="also lay out the real samples from this folder, when it exists")
    parser.add_argument("--if-absent", action="store_true", help="do nothing when --out already holds AWSLogs/")
    parser.add_argument("--no-manifest", action="store_true")
    args = parser.parse_args(argv)
    if args.if_absent and aws_logs(args.out).is_dir():
        print(f"{args.out}/AWSLogs exists: landing zone kept as it is")
        return 0
    manifest = generate(
        args.out, args.records, args.days, args.seed, args.start, args.records_per_file,
        args.duplicate_rate, args.late_event_files, args.malformed_files, args.digests,
    )  # fmt: skip
    if args.samples and args.samples.is_dir():
        delivered = datetime.combine(args.start, datetime.min.time(), tzinfo=UTC) + timedelta(days=args.days, hours=2)
        samples = add_samples(args.out, args.samples, delivered)
        manifest.files.extend(samples)
        print(f"laid out {len(samples)} real sample files from {args.samples}")
    if not args.no_manifest:
        (args.out / "_manifest.json").write_text(json.dumps(manifest.__dict__, indent=1))
    print(f"wrote {len(manifest.files)} files, {len(manifest.events)} distinct events, {manifest.duplicates} re-deliveries to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
