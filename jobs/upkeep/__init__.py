"""The operator's commands that keep the lake right: rebuild (with rebuild_plan), repair (with repair_ledger), rescale,
compact, replay_quarantine.
"""

from jobs import exported

# What other packages may use (jobs/__init__.py, tests/test_layout.py).
__all__: list[str] = []  # its commands' entry points only


def __getattr__(name: str) -> object:
    return exported(__name__, name)
