"""The file ledger: the landing files a run takes (planner), its records on disk (store), what it holds (state), a
file's fate (search), and completeness against CloudTrail's digests (reconcile).
"""

# The modules other packages import; the rest are this package's own (tests/test_layout.py).
__all__ = ["planner", "reconcile", "search", "state", "store"]
