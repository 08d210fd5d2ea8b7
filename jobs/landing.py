"""The landing zone's layout, as CloudTrail delivers it (stdlib only).

    <landing>/AWSLogs/[<org id>/]<account>/CloudTrail/<region>/YYYY/MM/DD/
        <account>_CloudTrail_<region>_<YYYYMMDDTHHmmZ>_<id>.json[.gz]

The path's date is the delivery date. The literal "CloudTrail" folder and "_CloudTrail_"
file name keep Digest and Insights files out.
"""

from __future__ import annotations

import os
import re
from datetime import date, datetime
from pathlib import Path

FILE_PATTERN = "*_CloudTrail_*.json{,.gz}"
FILE_NAME = re.compile(r".*_CloudTrail_.*\.json(\.gz)?")  # what FILE_PATTERN matches
ALL_DATES = "[0-9][0-9][0-9][0-9]/[0-9][0-9]/[0-9][0-9]"
# Delivered layout, with or without an organization id level.
ACCOUNT_LEVELS = ("*", "*/*")
DAY_FOLDERS = tuple(f"{level}/CloudTrail/*/{ALL_DATES}" for level in ACCOUNT_LEVELS)  # pathlib has no {a,b}
DELIVERY_DATE = re.compile(r"/CloudTrail/[^/]+/(\d{4})/(\d{2})/(\d{2})(?:/[^/]+)?$")


def aws_logs(landing: str | Path) -> Path:
    return Path(landing) / "AWSLogs"


def landing_glob() -> str:
    """Every log file under <landing>/ as one Hadoop glob, for Spark's batch readers (the benchmark's
    baseline). The ingest job lists the landing zone itself (jobs/ledger.py): a glob cannot take every name."""
    levels = "{" + ",".join(ACCOUNT_LEVELS) + "}"
    return f"AWSLogs/{levels}/CloudTrail/*/{ALL_DATES}/{FILE_PATTERN}"


def delivery_date(path: str) -> date | None:
    """The date of a delivery folder, or of the folder a file is in."""
    match = DELIVERY_DATE.search(path)
    if not match:
        return None
    try:
        return date(int(match[1]), int(match[2]), int(match[3]))
    except ValueError:
        return None


def day_folders(landing: str | Path) -> list[tuple[date, Path]]:
    """Every delivery day folder, with its date, oldest first."""
    folders = []
    for pattern in DAY_FOLDERS:
        for folder in aws_logs(landing).glob(pattern):
            folder_date = delivery_date(folder.as_posix())
            if folder_date is not None:
                folders.append((folder_date, folder))
    return sorted(folders)


def log_files_in(folder: Path) -> list[os.DirEntry]:
    """The files Spark lists there: CloudTrail log names, not hidden (Spark skips '.' and '_' names)."""
    return [e for e in os.scandir(folder) if e.is_file() and not e.name.startswith((".", "_")) and FILE_NAME.fullmatch(e.name)]


def delivery_path(landing: Path, account: str, region: str, delivered: datetime, file_id: str, suffix: str = ".json.gz") -> Path:
    """Where CloudTrail puts a file delivered at `delivered`."""
    stamp = delivered.strftime("%Y%m%dT%H%MZ")
    folder = aws_logs(landing) / account / "CloudTrail" / region / delivered.strftime("%Y/%m/%d")
    return folder / f"{account}_CloudTrail_{region}_{stamp}_{file_id}{suffix}"
