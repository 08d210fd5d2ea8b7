"""De-duplication: what makes two rows one event, and for how long a copy is recognised (stdlib only:
the ledger, which plans the files, and the stream, which drops the copies, both ask here).

The stream's watermark runs on arrival time, not event time, so a late event is kept; the
DataFrame steps that apply this are in jobs/transforms.py (`deduplicate`, `keep_first_copy`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from jobs import options


@dataclass(frozen=True)
class Dedup:
    """Rows sharing `key` are one event; a copy arriving within `horizon` of the first is dropped."""

    horizon: timedelta = options.duration(options.DEDUP_HORIZON)
    key: str = "eventID"

    @property
    def delay(self) -> timedelta:
        """The withWatermark delay: half the horizon.

        Spark keeps a key until the watermark (newest arrival minus the delay) reaches the key's
        arrival plus the delay, so copies are collapsed when they arrive less than twice the delay
        apart. Half the horizon collapses copies within the horizon and holds one horizon of keys
        in state, not two."""
        return self.horizon / 2

    def arrival_floor(self, committed_watermark: datetime | None) -> datetime | None:
        """The newest arrival the checkpoint has committed (watermark + delay); None before the first batch.

        No file taken later arrives before it (jobs/ledger.py), so none is dropped by the watermark."""
        return committed_watermark + self.delay if committed_watermark else None
