"""The suite's own temporary files: every process and JVM it starts writes them under the scratch folder
tests/conftest.py removes when the run ends, so a JVM killed on purpose leaves nothing in /tmp; what runs before that
left goes when a run starts (tests/scratch.py)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests import scratch


def test_processes_and_jvms_the_tests_start_keep_their_temporary_files_in_the_scratch_folder(spark):
    folder = os.environ["CLOUDTRAIL_TESTS_TMP"]
    assert Path(folder).is_dir() and Path(folder).resolve() != Path("/tmp")
    code = "import tempfile; print(tempfile.gettempdir())"
    python = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert python.stdout.strip() == folder
    # A JVM of its own (a job's, spark-submit's, the cluster's): java.io.tmpdir is where Spark's local folders and the
    # native libraries RocksDB and LZ4 extract go.
    java = subprocess.run(["java", "-XshowSettings:properties", "-version"], capture_output=True, text=True, check=True)
    assert f"java.io.tmpdir = {folder}\n" in java.stderr
    assert spark.sparkContext._jvm.java.lang.System.getProperty("java.io.tmpdir") == folder  # the shared session's


@pytest.mark.unit
def test_what_earlier_runs_left_goes_and_nothing_in_use_recent_or_foreign(tmp_path):
    old = time.time() - scratch.MIN_AGE - 60

    def planted(name: str, *, folder: bool, age: float = old) -> Path:
        entry = tmp_path / name
        if folder:
            (entry / "sub").mkdir(parents=True)
            (entry / "sub" / "shuffle_0.data").write_bytes(b"x" * 1000)
            for path in (entry / "sub" / "shuffle_0.data", entry / "sub", entry):
                os.utime(path, (age, age))
        else:
            entry.write_bytes(b"x" * 500)
            os.utime(entry, (age, age))
        return entry

    library = planted("librocksdbjni123.so", folder=False)
    spark_folder = planted(f"spark-{uuid.uuid4()}", folder=True)
    held = planted(f"blockmgr-{uuid.uuid4()}", folder=True)
    recent = planted(f"spark-{uuid.uuid4()}", folder=True, age=time.time())
    foreign = planted("somebody-elses.so", folder=False)
    with (held / "sub" / "shuffle_0.data").open("rb"):  # a live process (this one) holds a file of it open
        live = scratch.Live.scan()
        assert any(path.is_relative_to(held) for path in live.paths)
        # With no JVM running, an old JVM folder goes; with one, it stays: an idle JVM's folders hold nothing open.
        assert sorted(scratch.stale(tmp_path, dataclasses.replace(live, jvms=frozenset()), time.time())) == sorted([library, spark_folder])
        assert scratch.stale(tmp_path, dataclasses.replace(live, jvms=frozenset({1})), time.time()) == [library]
        # What tidy does, on one scan: another worker's JVMs come and go between two.
        now = scratch.Live.scan()
        jvm_beside = bool(now.jvms)  # the shared session's, another worker's: none under make test-fast
        freed = scratch.remove(scratch.stale(tmp_path, now, time.time()))
    assert not library.exists() and held.exists() and recent.exists() and foreign.exists()
    assert spark_folder.exists() == jvm_beside and freed == (500 if jvm_beside else 1500)


def test_a_running_jvm_is_seen(tmp_path):  # not `unit`: it starts a JVM of its own
    (tmp_path / "Wait.java").write_text("class Wait { public static void main(String[] a) throws Exception { System.in.read(); } }")
    jvm = subprocess.Popen(["java", str(tmp_path / "Wait.java")], stdin=subprocess.PIPE)
    try:
        assert jvm.pid in scratch.Live.scan().jvms
    finally:
        jvm.communicate(b"\n", timeout=60)
