"""What the lake holds and how fresh it is: the lake page and `make status` ask lake_status, and
quarantined for what the quarantine holds."""

from jobs import exported

# What other packages may use (jobs/__init__.py, tests/test_layout.py).
__all__ = [
    "Backlog",
    "CheckpointHealth",
    "DayRows",
    "DeliveryStatus",
    "Freshness",
    "Quarantined",
    "SAMPLE_CHARS",
    "backlog",
    "checkpoint_health",
    "daily_rows",
    "deliveries",
    "derived_gate_runs",
    "derived_rows",
    "format_lag",
    "format_time",
    "freshness",
    "gate_runs",
    "ingest_run",
    "problems",
    "publications",
    "quarantine",
    "queue_depth",
    "replay_command",
]


def __getattr__(name: str) -> object:
    return exported(__name__, name)
