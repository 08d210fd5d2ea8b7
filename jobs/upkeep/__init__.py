"""The operator's commands that keep the lake right: rebuild (with rebuild_plan), repair (with repair_ledger), rescale,
compact, replay_quarantine.
"""

# The modules other packages import; the rest are this package's own (tests/test_layout.py).
__all__ = ["compact", "rebuild", "repair", "replay_quarantine", "rescale"]
