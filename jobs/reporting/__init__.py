"""Every report the lake keeps (report: their shapes, the one writer and reader), a run's summary as text (summary),
and the tally the ingest runs fold their reports into (tally).
"""

from jobs import exported

# What other packages may use (jobs/__init__.py, tests/test_layout.py).
__all__ = [
    "BatchStats",
    "DerivedReport",
    "PartitionStats",
    "RebuildReport",
    "RunReport",
    "Tally",
    "Verdict",
    "apply_progress",
    "derived_summary",
    "failure_line",
    "gate_of",
    "gate_report",
    "gate_verdicts",
    "log_batch",
    "now_iso",
    "publish_summary",
    "read",
    "read_report",
    "read_reports",
    "record",
    "run_summary",
    "skipped_gate_report",
    "verdict_of",
    "write_json",
    "written_batches",
]


def __getattr__(name: str) -> object:
    return exported(__name__, name)
