"""Tables derived from the events table event date by event date, each job defined in jobs/lake.py's DERIVED: the one
way they are built (derivation), their state (state), the activity tables (activity, with its rules) and the OCSF
view (ocsf, with ocsf_mapping).
"""

# The modules other packages import; the rest are this package's own (tests/test_layout.py).
__all__ = ["activity", "ocsf", "rules", "state"]
