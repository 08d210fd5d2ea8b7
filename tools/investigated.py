"""Records shaped as investigations find them (tools/generate_landing.py's `make`): a fixed population of principals,
each with its own access key, calling from its own few addresses, with the events the shipped questions look for
(jobs/investigations/queries/): refused calls, IAM changes, access keys created, root at work, console sign-ins with
and without MFA, trail changes, calls from public and private addresses. Deterministic for a seed."""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tools.generate_landing import make_record

# (eventSource, eventName, weight): the common calls first, the rare ones an investigation looks for after.
CALLS = [
    ("s3.amazonaws.com", "GetObject", 30), ("ec2.amazonaws.com", "DescribeInstances", 20), ("sts.amazonaws.com", "AssumeRole", 12),
    ("kms.amazonaws.com", "Decrypt", 12), ("lambda.amazonaws.com", "Invoke", 8), ("iam.amazonaws.com", "ListUsers", 5),
    ("iam.amazonaws.com", "GetRole", 4), ("signin.amazonaws.com", "ConsoleLogin", 3), ("iam.amazonaws.com", "AttachRolePolicy", 2),
    ("iam.amazonaws.com", "CreateUser", 1), ("iam.amazonaws.com", "CreateAccessKey", 1), ("cloudtrail.amazonaws.com", "UpdateTrail", 1),
    ("cloudtrail.amazonaws.com", "StopLogging", 1), ("cloudtrail.amazonaws.com", "LookupEvents", 2),
]  # fmt: skip
REFUSALS = ["AccessDenied", "Client.UnauthorizedOperation", "AccessDeniedException"]


@dataclass(frozen=True)
class Principal:
    account: str
    kind: str  # IAMUser, AssumedRole, Root
    name: str
    access_key: str
    addresses: tuple[str, ...]

    @property
    def arn(self) -> str:
        if self.kind == "Root":
            return f"arn:aws:iam::{self.account}:root"
        if self.kind == "IAMUser":
            return f"arn:aws:iam::{self.account}:user/{self.name}"
        return f"arn:aws:sts::{self.account}:assumed-role/{self.name}/session"


def _key(rng: random.Random, prefix: str) -> str:
    return prefix + "".join(rng.choices(string.ascii_uppercase + string.digits, k=16))


def _address(rng: random.Random) -> str:
    first = rng.choice([10, 172, 192, 203, 198, 54, 3, 52, 18])
    second = {172: rng.randint(16, 31), 192: 168}.get(first, rng.randint(0, 255))
    return f"{first}.{second}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"


def population(
    seed: int, principals: int = 400, accounts: tuple[str, ...] = ("111122223333", "444455556666", "017622104382")
) -> list[Principal]:
    rng = random.Random(seed)
    found = [Principal(account, "Root", "root", _key(rng, "AKIA"), (_address(rng),)) for account in accounts]
    for index in range(principals):
        kind = "IAMUser" if index % 3 == 0 else "AssumedRole"
        addresses = tuple(_address(rng) for _ in range(rng.randint(1, 3)))
        found.append(Principal(rng.choice(accounts), kind, f"p{index}", _key(rng, "AKIA" if kind == "IAMUser" else "ASIA"), addresses))
    return found


Make = Callable[[random.Random, datetime, str, str], dict[str, Any]]


def maker(seed: int, principals: int = 400, base: Make = make_record) -> Make:
    """A `make` for generate(): each record made by `base` (`like(real_records(...))`: real-shaped, ~1 KB), then its
    identity, address and call drawn from the population and CALLS."""
    people = population(seed, principals)
    weights = [weight for *_, weight in CALLS]

    def make(rng: random.Random, event_time: datetime, account: str, region: str) -> dict[str, Any]:
        record = base(rng, event_time, account, region)
        who = people[min(int(rng.paretovariate(1.2)) - 1, len(people) - 1)] if rng.random() < 0.5 else rng.choice(people)
        source, name, _ = rng.choices(CALLS, weights)[0]
        record.update(eventSource=source, eventName=name, sourceIPAddress=rng.choice([*who.addresses, f"{source}"]),
                      recipientAccountId=who.account, eventType="AwsConsoleSignIn" if name == "ConsoleLogin" else "AwsApiCall")  # fmt: skip
        identity: dict[str, Any] = {"type": who.kind, "principalId": f"AIDA{who.name.upper()}", "arn": who.arn, "accountId": who.account}
        if who.kind != "Root" or rng.random() < 0.5:
            identity["accessKeyId"] = who.access_key
        if who.kind == "IAMUser":
            identity["userName"] = who.name
        record["userIdentity"] = identity
        record.pop("errorCode", None), record.pop("errorMessage", None)
        if rng.random() < 0.06:
            record["errorCode"] = rng.choice(REFUSALS)
        if name == "ConsoleLogin":
            record["additionalEventData"] = {"MFAUsed": rng.choice(["Yes", "No"]), "LoginTo": "https://console.aws.amazon.com"}
            record["responseElements"] = {"ConsoleLogin": rng.choice(["Success", "Success", "Failure"])}
        elif name == "CreateAccessKey":
            record["responseElements"] = {
                "accessKey": {"userName": f"p{rng.randrange(principals)}", "accessKeyId": _key(rng, "AKIA"), "status": "Active"}
            }
        elif source == "iam.amazonaws.com":
            record["requestParameters"] = {
                "userName": f"p{rng.randrange(principals)}",
                "roleName": "Admin",
                "policyArn": "arn:aws:iam::aws:policy/AdministratorAccess",
            }
        elif source == "cloudtrail.amazonaws.com" and name != "LookupEvents":
            record["requestParameters"] = {"name": "organization-trail"}
        return record

    return make
