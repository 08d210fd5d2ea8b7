"""The jobs' local file system (jobs/java/cloudtrail/LocalFileSystem.java): Hadoop's, with the permission set and the
link read in the JVM instead of by a chmod or readlink process. What it answers must be what Hadoop's answers."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from py4j.protocol import Py4JJavaError

pytestmark = pytest.mark.integration


def test_every_session_reads_and_writes_local_files_through_it(spark):
    jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()
    uri = jvm.java.net.URI("file:///")
    assert jvm.org.apache.hadoop.fs.FileSystem.get(uri, conf).getClass().getName() == "cloudtrail.LocalFileSystem"
    context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(uri, conf)
    assert context.getDefaultFileSystem().getClass().getName() == "cloudtrail.LocalFileSystem$Context"


def test_a_file_created_with_a_permission_has_it(spark, tmp_path: Path):
    jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()
    fs = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("file:///"), conf)
    for mode in (0o640, 0o604, 0o755):
        path = tmp_path / f"{mode:o}"
        permission = jvm.org.apache.hadoop.fs.permission.FsPermission(mode)
        fs.create(jvm.org.apache.hadoop.fs.Path(path.as_uri()), permission, True, 4096, 1, 1 << 20, None).close()
        assert stat.S_IMODE(path.stat().st_mode) == mode
        assert fs.getFileStatus(jvm.org.apache.hadoop.fs.Path(path.as_uri())).getPermission().toShort() == mode


def _link_status(fs, path) -> tuple | str:
    try:
        status = fs.getFileLinkStatus(path)
    except Py4JJavaError as error:
        return error.java_exception.getClass().getName()
    target = str(status.getSymlink()) if status.isSymlink() else None
    return (str(status.getPath()), status.isFile(), status.isDirectory(), status.isSymlink(), status.getLen(), target)


def test_a_link_a_file_and_a_missing_path_have_the_status_hadoop_gives_them(spark, tmp_path: Path):
    """Per path, as a file: URI and as a bare path (Hadoop reads the link of the second only): the same status as
    Hadoop's own RawLocalFileSystem, or the same exception."""
    jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()
    ours = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("file:///"), conf).getRaw()
    hadoops = jvm.org.apache.hadoop.fs.RawLocalFileSystem()
    hadoops.initialize(jvm.java.net.URI("file:///"), conf)
    (tmp_path / "target").write_bytes(b"12345")
    (tmp_path / "folder").mkdir()
    os.symlink(tmp_path / "target", tmp_path / "link")
    os.symlink(tmp_path / "gone", tmp_path / "dangling")
    answers = []
    for name in ("target", "folder", "link", "dangling", "missing"):
        for form in ((tmp_path / name).as_uri(), str(tmp_path / name)):
            path = jvm.org.apache.hadoop.fs.Path(form)
            answers.append((form, _link_status(ours, path)))
            assert answers[-1][1] == _link_status(hadoops, path), form
    # The cases are what they should be: a file, and a link read as one (its bare path) with its target.
    assert answers[0][1][1:] == (True, False, False, 5, None)
    assert answers[5][1][3:] == (True, 5, (tmp_path / "target").as_uri().replace("file:///", "file:/"))
