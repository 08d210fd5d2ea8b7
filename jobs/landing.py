"""The landing zone's layout, as CloudTrail delivers it (stdlib only).

    <landing>/AWSLogs/[<org id>/]<account>/CloudTrail/<region>/YYYY/MM/DD/
        <account>_CloudTrail_<region>_<YYYYMMDDTHHmmZ>_<id>.json[.gz]

The path's date is the delivery date. The literal "CloudTrail" folder and "_CloudTrail_"
file name keep Digest and Insights files out.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path

FILE_PATTERN = "*_CloudTrail_*.json{,.gz}"
FILE_NAME = re.compile(r".*_CloudTrail_.*\.json(\.gz)?")  # what FILE_PATTERN matches
ALL_DATES = "[0-9][0-9][0-9][0-9]/[0-9][0-9]/[0-9][0-9]"
# Delivered layout, with or without an organization id level.
ACCOUNT_LEVELS = ("*", "*/*")
DELIVERY_DATE = re.compile(r"/CloudTrail/[^/]+/(\d{4})/(\d{2})/(\d{2})(?:/[^/]+)?$")
PLACE = re.compile(r"/([^/]+)/CloudTrail/([^/]+)/\d{4}/\d{2}/\d{2}(?:/[^/]+)?$")
ANY_NAME, YEAR, TWO_DIGITS = re.compile(r"[^.].*"), re.compile(r"[0-9]{4}"), re.compile(r"[0-9]{2}")
DELIVERED_AT = re.compile(r"_(\d{8}T\d{4}Z)_[^_]*$")


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


def place(path: str) -> tuple[str, str] | None:
    """The account and region of a delivery folder, or of a file in one."""
    match = PLACE.search(path)
    return (match[1], match[2]) if match else None


def _stamp(name: str) -> str | None:
    """The YYYYMMDDTHHmmZ delivery time stamp in a log file's name; as text it sorts as time does."""
    match = DELIVERED_AT.search(name.split(".json")[0])
    return match[1] if match else None


def delivered_at(path: str) -> datetime | None:
    """When CloudTrail delivered a file: the time stamp in its name (UTC, to the minute)."""
    stamp = _stamp(os.path.basename(path))
    return datetime.strptime(stamp, "%Y%m%dT%H%MZ").replace(tzinfo=UTC) if stamp else None


def newest_deliveries(landing: str | Path, until: datetime) -> dict[tuple[str, str], str | None]:
    """Per account and region, the newest log file in the landing zone delivered at or before `until` (its day
    folders listed newest first, until one holds such a file); None when it has none. A later time stamp or
    folder is not believed: a file named as delivered in the future would stand for its place's newest delivery for ever."""
    found: dict[tuple[str, str], str | None] = {}
    for region_folder in _region_folders(landing):
        account = region_folder.parent.parent.name  # <account>/CloudTrail/<region>
        found[(account, region_folder.name)] = None
        for day, folder in _days(region_folder, newest_first=True):
            if day > until.date():
                continue
            stamps = [((_stamp(e.name) or ""), e.name, e.path) for e in log_files_in(folder)]
            taken = [stamp for stamp in stamps if (delivered_at(stamp[1]) or until) <= until]
            if taken:
                found[(account, region_folder.name)] = max(taken)[2]
                break
    return found


def _folders(parent: Path, pattern: re.Pattern[str]) -> list[str]:
    try:
        return [e.name for e in os.scandir(parent) if pattern.fullmatch(e.name) and e.is_dir()]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _region_folders(landing: str | Path) -> list[Path]:
    """Every <account>/CloudTrail/<region> folder, with or without an organization id level above the account."""
    logs = aws_logs(landing)
    depths = [level.count("/") + 1 for level in ACCOUNT_LEVELS]
    trails = [logs.joinpath(*parts, "CloudTrail") for depth in depths for parts in _paths(logs, depth)]
    return [trail / name for trail in trails for name in sorted(_folders(trail, ANY_NAME))]


def _paths(root: Path, levels: int) -> list[tuple[str, ...]]:
    """The folder names `levels` deep under `root`."""
    paths: list[tuple[str, ...]] = [()]
    for _ in range(levels):
        paths = [(*parts, name) for parts in paths for name in _folders(root.joinpath(*parts), ANY_NAME)]
    return paths


def _days(region_folder: Path, since: date | None = None, newest_first: bool = False) -> Iterator[tuple[date, Path]]:
    """A region's day folders YYYY/MM/DD, oldest first (or newest first), listed as they are asked for;
    with `since`, those on or after it (older years and months are not listed)."""

    def names(parent: Path, pattern: re.Pattern[str]) -> list[str]:
        return sorted(_folders(parent, pattern), reverse=newest_first)

    for year in names(region_folder, YEAR):
        if since and int(year) < since.year:
            continue
        for month in names(region_folder / year, TWO_DIGITS):
            if since and (int(year), int(month)) < (since.year, since.month):
                continue
            for day in names(region_folder / year / month, TWO_DIGITS):
                folder = region_folder / year / month / day
                folder_date = delivery_date(folder.as_posix())
                if folder_date is not None and (since is None or folder_date >= since):
                    yield folder_date, folder


def day_folders(landing: str | Path, since: date | None = None) -> list[tuple[date, Path]]:
    """Every delivery day folder (on or after `since`), with its date, oldest first."""
    return sorted(day for region_folder in _region_folders(landing) for day in _days(region_folder, since))


def log_files_in(folder: Path) -> list[os.DirEntry[str]]:
    """The files Spark lists there: CloudTrail log names, not hidden (Spark skips '.' and '_' names)."""
    return [e for e in os.scandir(folder) if e.is_file() and not e.name.startswith((".", "_")) and FILE_NAME.fullmatch(e.name)]


def delivery_path(landing: Path, account: str, region: str, delivered: datetime, file_id: str, suffix: str = ".json.gz") -> Path:
    """Where CloudTrail puts a file delivered at `delivered`."""
    stamp = delivered.strftime("%Y%m%dT%H%MZ")
    folder = aws_logs(landing) / account / "CloudTrail" / region / delivered.strftime("%Y/%m/%d")
    return folder / f"{account}_CloudTrail_{region}_{stamp}_{file_id}{suffix}"
