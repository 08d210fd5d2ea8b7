"""Where the lake's files live (jobs/storage.py): a folder or an S3 prefix (moto's), the same calls for both; and the
lake's lock, which a lake in S3 takes as a lease there."""

from __future__ import annotations

import boto3
import pytest

from jobs import storage
from jobs.lake import Lake
from jobs.lock import LakeBusyError, LakeLock
from jobs.storage import NewerFormat, read_record, write_record

pytestmark = pytest.mark.integration


@pytest.fixture(params=["folder", "s3"])
def lake(request, tmp_path) -> Lake:
    if request.param == "folder":
        return Lake.at(tmp_path / "lake")
    request.getfixturevalue("aws")
    bucket = "lake-records"
    boto3.client("s3").create_bucket(Bucket=bucket)
    return Lake.at(f"s3://{bucket}/lakes/acme")


def test_records_written_whole_read_back_listed_moved_and_removed_alike(lake):
    assert storage.is_folder(lake.root) == (not lake.location.startswith("s3://"))
    for run in ("b", "a", "c"):
        write_record(lake.ingest_report(run), 2, {"run_id": run})
    assert [path.name for path in storage.listed(lake.ingest_reports, "*.json")] == ["a.json", "b.json", "c.json"]
    assert read_record(lake.ingest_report("a"), 2) == {"run_id": "a"}
    with pytest.raises(NewerFormat, match="newer than this release's 1"):
        read_record(lake.ingest_report("a"), 1)
    write_record(lake.ingest_report("a"), 2, {"run_id": "a", "again": True})
    assert read_record(lake.ingest_report("a"), 2) == {"run_id": "a", "again": True}, "a record written again is replaced"

    if not storage.is_folder(lake.root):  # an empty folder Hadoop's S3A made in it (the checkpoint's state has them)
        boto3.client("s3").put_object(Bucket="lake-records", Key="lakes/acme/reports/ingest/empty/", Body=b"")
    storage.move(lake.ingest_reports, lake.replaced_root / "reports")
    assert storage.listed(lake.ingest_reports, "*.json") == [] and not lake.ingest_reports.exists(), "nothing left behind"
    assert [path.name for path in storage.listed(lake.replaced_root / "reports", "*.json")] == ["a.json", "b.json", "c.json"]
    storage.remove_tree(lake.replaced_root)
    assert not lake.replaced_root.exists() and storage.listed(lake.replaced_root, "*") == []
    storage.remove_tree(lake.replaced_root)  # nothing there: nothing done


def test_a_record_written_again_while_it_is_read_is_read_whole_old_or_new(lake, monkeypatch):
    """A record replaced between s3fs's look at the object and its GET (a lease renewed beside a run waiting for it, a
    checkpoint record beside the lake page) is read as one version, never refused as changed."""
    path = lake.ingest_report("a")
    write_record(path, 2, {"run_id": "a", "version": 1})
    if not storage.is_folder(path):
        looked = path.fs.info

        def replaced_after_a_look(*args, **kwargs):
            found = looked(*args, **kwargs)
            boto3.client("s3").put_object(Bucket="lake-records", Key=path.path.split("/", 1)[1], Body=b'{"format": 2, "version": 2}')
            return found

        monkeypatch.setattr(path.fs, "info", replaced_after_a_look)
    assert read_record(path, 2)["version"] in (1, 2)


def test_a_lake_in_s3_keeps_nothing_but_its_landing_fetches_on_this_machine(aws, tmp_path, monkeypatch):
    monkeypatch.setenv("CLOUDTRAIL_SCRATCH", str(tmp_path / "scratch"))
    boto3.client("s3").create_bucket(Bucket="lake-scratch")
    lake, other = Lake.at("s3://lake-scratch/one"), Lake.at("s3://lake-scratch/two")
    assert str(lake.checkpoint) == "s3://lake-scratch/one/_checkpoints/ingest"
    assert lake.landing_cache.is_relative_to(tmp_path / "scratch") and lake.landing_cache != other.landing_cache
    assert Lake.at(tmp_path / "lake").landing_cache == tmp_path / "lake" / "landing", "a folder lake keeps its own"


def test_the_lock_of_a_lake_in_s3_is_a_lease_a_second_writer_is_refused_by(aws):
    boto3.client("s3").create_bucket(Bucket="lake-locked")
    lake = Lake.at("s3://lake-locked/acme")
    with LakeLock(lake, "ingest run scheduled__1"):
        assert "ingest run scheduled__1" in lake.lock.read_text()
        with pytest.raises(LakeBusyError, match=r"^ingest run scheduled__1 \(pid \d+ on .+\) holds this lake; a rebuild waited"):
            LakeLock(Lake.at("s3://lake-locked/acme"), "a rebuild").__enter__()
    with LakeLock(lake, "a rebuild"):
        pass
