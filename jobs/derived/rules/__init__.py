"""Detection rules as data: one JSON file per rule in this folder (stdlib only).

A rule file holds `rule_id`, `title`, `severity` (low, medium, high), `reference`, `condition`
(a Spark SQL boolean expression over the events table's columns) and two test records: `match`,
which the condition must select, and `no_match`, which it must not (tests/test_derived.py
runs every file's pair through the ingest transforms). Adding a rule is adding a file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

SEVERITIES = ("low", "medium", "high")


@dataclass(frozen=True)
class Rule:
    rule_id: str
    title: str
    severity: str
    reference: str
    condition: str
    match: dict[str, Any]
    no_match: dict[str, Any]


def load_rules() -> list[Rule]:
    """Every rule of this folder (also inside jobs.zip), in file name order; a malformed file is an error naming it."""
    found = []
    for entry in sorted(resources.files(__name__).iterdir(), key=lambda entry: entry.name):
        if not entry.name.endswith(".json"):
            continue
        try:
            rule = Rule(**json.loads(entry.read_text()))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"rule file {entry.name}: {exc}") from None
        if rule.severity not in SEVERITIES:
            raise ValueError(f"rule file {entry.name}: severity {rule.severity!r} is not one of {SEVERITIES}")
        found.append(rule)
    ids = [rule.rule_id for rule in found]
    if len(set(ids)) != len(ids):
        raise ValueError(f"rule ids are not unique: {sorted(ids)}")
    return found
