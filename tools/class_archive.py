"""Archive the classes an ingest loads, for the JVM's class data sharing: `make setup` runs it once per checkout.

    python -m tools.class_archive      (writes build/spark-classes.jsa, jobs/session.class_archive)

It runs the ingest on a small generated landing zone in a JVM that writes, as it exits, every class it loaded
beyond the JDK's own into the archive (-XX:ArchiveClassesAtExit). A driver started with it maps those classes
instead of finding, reading and verifying them one by one (jobs/session.driver_java_options). The archive fits
this JDK and this venv's Spark only; a JVM it does not fit passes it over.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from pyspark import SparkContext

from jobs import options
from jobs.ingest.command import parse_args
from jobs.ingest.run import run
from jobs.ingest.stream import build_session
from jobs.spark.session import CLASS_ARCHIVE_QUIET, JobSession, class_archive, class_archive_size
from tools.generate_landing import generate


def main() -> int:
    archive = class_archive()
    written = archive.with_name(f".{archive.name}.tmp")  # renamed once the JVM has exited: no driver maps half of it
    written.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as work:
        landing, lake = Path(work) / "landing", Path(work) / "lake"
        generate(landing, records=2_000, days=1, records_per_file=500)
        config = parse_args(["--landing", str(landing), "--lake", str(lake), "--settle", "0 seconds"])
        dump = f"{options.JVM_OPTIONS} -XX:ArchiveClassesAtExit={written} {CLASS_ARCHIVE_QUIET}"
        # Stopped as a job's session is, state stores first; JobSession then lets the JVM go.
        with JobSession(lambda: build_session(config, {"spark.driver.defaultJavaOptions": dump}, dumping_classes=True)) as session:
            report = run(config, session)
            launcher = SparkContext._gateway.proc  # type: ignore[union-attr]
    # The JVM writes the archive as it exits.
    launcher.wait(timeout=300)
    if report.status != "succeeded" or not written.is_file():
        print(f"no class archive written (the run {report.status}): drivers load their classes one by one", file=sys.stderr)
        return 1
    class_archive_size(archive).unlink(missing_ok=True)
    written.rename(archive)
    class_archive_size(archive).write_text(str(archive.stat().st_size))  # last: until then no driver uses it
    print(f"{archive}: {archive.stat().st_size / 2**20:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
