"""What the lake holds and how fresh it is: the lake page and `make status` ask lake_status, and
quarantined for what the quarantine holds."""

# The modules other packages import; the rest are this package's own (tests/test_layout.py).
__all__ = ["lake_status", "quarantined"]
