"""The lake's committed, gated tables published as Apache Iceberg tables through a catalog (publish)."""

# The modules other packages import; the rest are this package's own (tests/test_layout.py).
__all__ = ["catalog", "publish", "upkeep"]
