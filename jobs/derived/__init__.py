"""Tables derived from the events table event date by event date, each job defined in jobs/lake.py's DERIVED: the one
way they are built (derivation), their state (state), the activity tables (activity, with its rules) and the OCSF
view (ocsf, with ocsf_mapping).
"""

from jobs import exported

# What other packages may use (jobs/__init__.py, tests/test_layout.py).
__all__ = [
    "built_dates",
]


def __getattr__(name: str) -> object:
    return exported(__name__, name)
