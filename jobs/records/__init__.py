"""A landed file -> typed rows, as pure DataFrame steps: the record schema (schema), the JVM decode (decode), the
parse and the quarantine reasons (transforms), de-duplication (dedup), the tables" row (rows), the events' layout in their files (layout).
"""

# The modules other packages import; the rest are this package's own (tests/test_layout.py).
__all__ = ["decode", "dedup", "layout", "rows", "schema", "transforms"]
