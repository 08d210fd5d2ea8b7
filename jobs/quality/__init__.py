"""The data-quality gates: Great Expectations suites on a run's partitions (validate_events) and their verdicts (gate)."""

from jobs import exported

# What other packages may use (jobs/__init__.py, tests/test_layout.py).
__all__ = [
    "EVENT_SUITES",
    "ValidateConfig",
    "check",
    "failed",
    "fingerprints",
    "import_gx",
    "judge",
    "record_skip",
    "record_validated",
    "skip_reason",
    "validated",
    "verdict",
    "with_check_columns",
    "wrote_anything",
]


def __getattr__(name: str) -> object:
    return exported(__name__, name)
