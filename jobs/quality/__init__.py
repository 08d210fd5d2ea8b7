"""The data-quality gates: Great Expectations suites on a run's partitions (validate_events) and their verdicts (gate)."""

# The modules other packages import; the rest are this package's own (tests/test_layout.py).
__all__ = ["gate", "validate_events"]
