"""What the lake holds and how fresh it is: the lake page and `make status` ask lake_status."""

# The modules other packages import; the rest are this package's own (tests/test_layout.py).
__all__ = ["lake_status"]
