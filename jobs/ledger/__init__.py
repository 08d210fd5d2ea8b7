"""The file ledger: the landing files a run takes (planner), its records on disk (store), what it holds (state), a
file's fate (search), and completeness: CloudTrail's digests (digests) compared with the ledger (reconcile).
"""

from jobs import exported

# What other packages may use (jobs/__init__.py, tests/test_layout.py).
__all__ = [
    "Entry",
    "LedgerHit",
    "LedgerOptions",
    "MANIFESTS",
    "MANIFEST_DDL",
    "Plan",
    "RetiredIndex",
    "check_manifests",
    "known_files",
    "last",
    "late_files",
    "manifests",
    "missing_files",
    "missing_manifests",
    "plan_files",
    "read_files",
    "read_manifest",
    "read_manifests",
    "record_late_files",
    "search_ledger",
    "sha256_of",
    "verified_checkpoint",
]


def __getattr__(name: str) -> object:
    return exported(__name__, name)
