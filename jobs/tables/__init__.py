"""The lake's tables: whole partitions swapped atomically (partitions), staged before their gate (staging), files no
commit lists moved aside (sweep), the quarantine (quarantine), and which landing files rows came from (sources).
"""

# The modules other packages import; the rest are this package's own (tests/test_layout.py).
__all__ = ["partitions", "quarantine", "sources", "staging", "sweep"]
