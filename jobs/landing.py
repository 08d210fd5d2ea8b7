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


def landing_glob(dates: str = ALL_DATES, extra: tuple[str, ...] = ()) -> str:
    """The files under <landing>/ the stream lists: delivery folders matching `dates`, plus `extra` (relative to AWSLogs/)."""
    levels = "{" + ",".join(ACCOUNT_LEVELS) + "}"
    return "AWSLogs/{" + ",".join((f"{levels}/CloudTrail/*/{dates}/{FILE_PATTERN}", *extra)) + "}"


def dates_from(first: date) -> str:
    """A glob alternative matching the YYYY/MM/DD folders on or after `first`."""
    year, month = f"{first.year:04d}", f"{first.month:02d}"
    days = ",".join(f"{day:02d}" for day in range(first.day, 32))
    alternatives = [f"{year}/{month}/{{{days}}}"]
    if first.month < 12:
        alternatives.append(f"{year}/{{{','.join(f'{m:02d}' for m in range(first.month + 1, 13))}}}/[0-9][0-9]")
    # later years, digit by digit: 2026 -> 202[7-9], 20[3-9][0-9], 2[1-9][0-9][0-9]
    for position in range(3, -1, -1):
        digit = int(year[position])
        if digit < 9:
            alternatives.append(f"{year[:position]}[{digit + 1}-9]{'[0-9]' * (3 - position)}/[0-9][0-9]/[0-9][0-9]")
    return "{" + ",".join(alternatives) + "}"


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
