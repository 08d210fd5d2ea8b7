"""Every report the lake keeps (report: their shapes, the one writer and reader), a run's summary as text (summary),
and the tally the ingest runs fold their reports into (tally).
"""

# The modules other packages import; the rest are this package's own (tests/test_layout.py).
__all__ = ["report", "summary", "tally"]
