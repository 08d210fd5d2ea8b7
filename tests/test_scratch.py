"""The suite's own temporary files: every process and JVM it starts writes them under the scratch folder
tests/conftest.py removes when the run ends, so a JVM killed on purpose leaves nothing in /tmp."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_processes_and_jvms_the_tests_start_keep_their_temporary_files_in_the_scratch_folder(spark):
    scratch = os.environ["CLOUDTRAIL_TESTS_TMP"]
    assert Path(scratch).is_dir() and Path(scratch).resolve() != Path("/tmp")
    code = "import tempfile; print(tempfile.gettempdir())"
    python = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert python.stdout.strip() == scratch
    # A JVM of its own (a job's, spark-submit's, the cluster's): java.io.tmpdir is where Spark's local folders and the
    # native libraries RocksDB and LZ4 extract go.
    java = subprocess.run(["java", "-XshowSettings:properties", "-version"], capture_output=True, text=True, check=True)
    assert f"java.io.tmpdir = {scratch}\n" in java.stderr
    assert spark.sparkContext._jvm.java.lang.System.getProperty("java.io.tmpdir") == scratch  # the shared session's
