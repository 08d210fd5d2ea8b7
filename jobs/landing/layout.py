"""The landing zone's layout, as CloudTrail delivers it (stdlib only).

    <landing>/AWSLogs/[<org id>/]<account>/CloudTrail/<region>/YYYY/MM/DD/
        <account>_CloudTrail_<region>_<YYYYMMDDTHHmmZ>_<id>.json[.gz]

The path's date is the delivery date. The literal "CloudTrail" folder and "_CloudTrail_"
file name keep Digest and Insights files out.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Skipped:
    """Something in the landing zone the walk passed over, and why: it never halts on what it finds."""

    path: str
    reason: str


# Where a walk puts what it passed over; None: nowhere (the lake page's own walks).
SkipList = list[Skipped] | None


def _skip(skipped: SkipList, path: str, reason: str) -> None:
    if skipped is not None:
        skipped.append(Skipped(path, reason))


def _entries(folder: str | Path, skipped: SkipList) -> list[os.DirEntry[str]]:
    """A folder's entries; none, with the reason noted, when it cannot be listed (no permission, a link loop)."""
    try:
        with os.scandir(folder) as entries:
            return list(entries)
    except (FileNotFoundError, NotADirectoryError):
        return []  # gone since its parent was listed
    except OSError as exc:
        _skip(skipped, str(folder), f"cannot be listed: {exc.strerror or exc}")
        return []


def _is_dir(entry: os.DirEntry[str], skipped: SkipList) -> bool:
    """Whether `entry` is a folder, links followed; False, noted, when that cannot be told (a link loop)."""
    try:
        return entry.is_dir()
    except OSError as exc:
        _skip(skipped, entry.path, f"cannot be read: {exc.strerror or exc}")
        return False


def aws_logs(landing: str | Path) -> Path:
    return Path(landing) / "AWSLogs"


def landing_glob() -> str:
    """Every log file under <landing>/ as one Hadoop glob, for Spark's batch readers (the benchmark's
    baseline). The ingest job lists the landing zone itself (jobs/ledger/planner.py): a glob cannot take every name."""
    levels = "{" + ",".join(ACCOUNT_LEVELS) + "}"
    return f"AWSLogs/{levels}/CloudTrail/*/{ALL_DATES}/{FILE_PATTERN}"


def relative(path: str) -> str:
    """A log file's place in the landing zone, from AWSLogs/ on: its identity wherever the zone is mounted."""
    parts = path.split("/")
    for depth in (8, 9):  # AWSLogs/[<org id>/]<account>/CloudTrail/<region>/YYYY/MM/DD/<name>
        if len(parts) >= depth and parts[-depth] == "AWSLogs":
            return "/".join(parts[-depth:])
    return path


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


def exists(landing: str | Path) -> bool:
    """Whether `landing` is a landing zone: a folder holding AWSLogs/."""
    return aws_logs(landing).is_dir()


def delivery_order(path: str) -> tuple[str, str]:
    """A log file's place among its place's deliveries: by its delivery time stamp, then by name (one minute's files)."""
    name = os.path.basename(path)
    return _stamp(name) or "", name


def newest_of(paths: Iterable[str], until: datetime) -> dict[tuple[str, str], str]:
    """Per account and region, the newest of these log files delivered at or before `until` (as newest_deliveries)."""
    found: dict[tuple[str, str], tuple[tuple[str, str], str]] = {}  # place -> (its newest's order, its path)
    for path in paths:
        where = place(path)
        if where is None or (delivered_at(path) or until) > until:
            continue
        order = delivery_order(path)
        if where not in found or order > found[where][0]:
            found[where] = (order, path)
    return {where: path for where, (_, path) in found.items()}


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
            newest = newest_of((entry.path for entry in log_files_in(folder)), until)
            if newest:
                found[(account, region_folder.name)] = next(iter(newest.values()))
                break
    return found


def _folders(parent: str | Path, pattern: re.Pattern[str], skipped: SkipList = None) -> list[str]:
    return [e.name for e in _entries(parent, skipped) if pattern.fullmatch(e.name) and _is_dir(e, skipped)]


def _region_folders(landing: str | Path, skipped: SkipList = None) -> list[Path]:
    """Every <account>/CloudTrail/<region> folder, with or without an organization id level above the account
    (ACCOUNT_LEVELS), each level listed once."""
    logs = str(aws_logs(landing))
    # Above CloudTrail/ a folder may hold other services' logs: only what cannot be listed is noted.
    tops = _folders(logs, ANY_NAME, skipped)
    trails = [f"{logs}/{top}/CloudTrail" for top in tops]
    trails += [f"{logs}/{top}/{name}/CloudTrail" for top in tops for name in _folders(f"{logs}/{top}", ANY_NAME, skipped)]
    return [Path(trail, name) for trail in trails for name in sorted(_folders(trail, ANY_NAME, skipped))]


@dataclass(frozen=True)
class Older:
    """Which day folders before a walk's `since` it lists: those changed (inode change time) after `changed_after_ns`.

    `every_day`: each older day folder is tested, which finds a file added to any of them. Otherwise those on or
    after `tested_from` are tested one by one, and of the ones before it only the folders under a year or month
    folder that changed: a new folder changes its parent's time, a new file only its own folder's. Such a walk finds
    new folders anywhere, and new files in the tested ones, at a cost that does not grow with the zone's history."""

    changed_after_ns: int
    every_day: bool = True
    tested_from: date | None = None


def _ctime_ns(folder: str) -> int:
    try:
        return os.stat(folder).st_ctime_ns
    except FileNotFoundError:
        return 0  # gone since its parent was listed


def _days(
    region_folder: Path, since: date | None = None, newest_first: bool = False, skipped: SkipList = None, older: Older | None = None
) -> Iterator[tuple[date, str]]:
    """A region's day folders YYYY/MM/DD, oldest first (or newest first), listed as they are asked for;
    with `since`, those on or after it, and the older ones `older` asks for (else no older year or month is listed).
    Paths are text, and day names are compared as text (two digits sort as numbers do): a walk of a large zone
    spent half its time building and comparing Path and date objects."""

    def names(parent: str, pattern: re.Pattern[str]) -> list[str]:
        return sorted(_folders(parent, pattern, skipped), reverse=newest_first)

    after = older.changed_after_ns if older is not None else None

    def changed(folder: str) -> bool:
        return after is not None and _ctime_ns(folder) > after

    every_day = older is not None and older.every_day
    floor = (older.tested_from if older is not None else None) or since  # from here on every day folder is looked at
    # Dates as the folders spell them, YYYY/MM/DD: compared as text, as dates compare.
    since_text = since.isoformat().replace("-", "/") if since is not None else None
    floor_text = floor.isoformat().replace("-", "/") if floor is not None else None
    region = str(region_folder)
    for year in names(region, YEAR):
        year_folder = f"{region}/{year}"
        if floor_text is not None and year < floor_text[:4] and not (every_day or changed(year_folder)):
            continue
        for month in names(year_folder, TWO_DIGITS):
            month_folder, year_month = f"{year_folder}/{month}", f"{year}/{month}"
            before = floor_text is not None and year_month < floor_text[:7]
            if before and not (every_day or changed(month_folder)):
                continue
            days = names(month_folder, TWO_DIGITS)
            if days and floor_text is not None and year_month == floor_text[:7] and not every_day:
                first = floor_text[8:]
                # Its days before `floor` are looked at only when a day folder was added to the month.
                if (days[-1] if newest_first else days[0]) < first and not changed(month_folder):
                    days = [day for day in days if day >= first]
            for day in days:
                if since_text is not None and f"{year_month}/{day}" < since_text and not changed(f"{month_folder}/{day}"):
                    continue
                try:
                    yield date(int(year), int(month), int(day)), f"{month_folder}/{day}"
                except ValueError:
                    continue  # not a date: not a delivery folder


def day_folders(
    landing: str | Path, since: date | None = None, skipped: SkipList = None, older: Older | None = None
) -> list[tuple[date, str]]:
    """Every delivery day folder (on or after `since`, and the older ones `older` asks for), with its date, oldest
    first; what cannot be listed is passed over and, with `skipped`, noted there."""
    regions = _region_folders(landing, skipped)
    return sorted(day for region_folder in regions for day in _days(region_folder, since, skipped=skipped, older=older))


def log_files_in(folder: str | Path, skipped: SkipList = None) -> list[os.DirEntry[str]]:
    """The log files of a day folder: CloudTrail log names, not hidden (copies in flight, and Spark skips
    '.' and '_' names). Anything else not hidden is passed over and, with `skipped`, noted with its reason."""
    files = []
    for entry in _entries(folder, skipped):
        if entry.name.startswith((".", "_")):
            continue
        if not FILE_NAME.fullmatch(entry.name):
            _skip(skipped, entry.path, "not a CloudTrail log file name")
            continue
        try:
            is_file = entry.is_file()
            is_dir = not is_file and entry.is_dir()
        except OSError as exc:  # a link loop, say
            _skip(skipped, entry.path, f"cannot be read: {exc.strerror or exc}")
            continue
        if is_file:
            files.append(entry)
        elif is_dir:
            _skip(skipped, entry.path, "a folder named like a log file: what it holds is not read")
        else:
            _skip(skipped, entry.path, "a link to nothing" if entry.is_symlink() else "not a regular file")
    return files


def delivery_path(landing: Path, account: str, region: str, delivered: datetime, file_id: str, suffix: str = ".json.gz") -> Path:
    """Where CloudTrail puts a file delivered at `delivered`."""
    stamp = delivered.strftime("%Y%m%dT%H%MZ")
    folder = aws_logs(landing) / account / "CloudTrail" / region / delivered.strftime("%Y/%m/%d")
    return folder / f"{account}_CloudTrail_{region}_{stamp}_{file_id}{suffix}"
