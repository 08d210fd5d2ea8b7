"""The questions analysts ask of CloudTrail, shipped as SQL (queries/), and answered over the Iceberg tables (command)."""

# The modules other packages import; the rest are this package's own (tests/test_layout.py).
__all__ = ["catalogue", "command"]
