"""Build what spark-submit ships with a job: jobs.zip (--py-files) and the JVM helpers' jar (--jars).

python -m tools.package build/jobs.zip
python -m tools.package build/cloudtrail.jar
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pyspark

ROOT = Path(__file__).resolve().parents[1]
JAVA_SOURCES = ROOT / "jobs" / "java"
# What the helpers compile against, from the Spark this project pins.
SPARK_JARS = Path(pyspark.__file__).parent / "jars"
COMPILE_CLASSPATH = (
    "jackson-core-*.jar", "jackson-databind-*.jar", "jackson-annotations-*.jar", "scala-library-*.jar", "hadoop-client-api-*.jar",
    "spark-sql-api_*.jar", "spark-sql_*.jar", "spark-catalyst_*.jar", "spark-core_*.jar", "spark-common-utils_*.jar",
    "spark-common-utils-java_*.jar", "spark-unsafe_*.jar", "jsr305-*.jar", "kryo-shaded-*.jar",
)  # fmt: skip


def build_jobs_zip(target: Path) -> Path:
    """Every module of jobs/ (its packages too) and its data (the rules), as the package `jobs`, written whole or not at all."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial")
    sources = [*(ROOT / "jobs").rglob("*.py"), *(ROOT / "jobs" / "derived" / "rules").glob("*.json")]
    with zipfile.ZipFile(partial, "w") as archive:
        for source in sorted(sources):
            archive.write(source, source.relative_to(ROOT).as_posix())
    partial.replace(target)
    return target


def build_jar(target: Path) -> Path:
    """jobs/java/ compiled for Java 17 against the pinned Spark's jars, written whole or not at all."""
    javac = shutil.which("javac")
    if javac is None:
        raise SystemExit("javac not found: a JDK 17+ is needed to build the JVM helpers (Debian: apt-get install openjdk-17-jdk-headless)")
    classpath = [str(jar) for pattern in COMPILE_CLASSPATH for jar in SPARK_JARS.glob(pattern)]
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial")
    with tempfile.TemporaryDirectory() as classes:
        sources = [str(path) for path in sorted(JAVA_SOURCES.rglob("*.java"))]
        subprocess.run([javac, "--release", "17", "-Xlint:all", "-Werror", "-cp", ":".join(classpath), "-d", classes, *sources], check=True)
        with zipfile.ZipFile(partial, "w") as archive:
            for path in sorted(Path(classes).rglob("*.class")):
                archive.write(path, path.relative_to(classes).as_posix())
    partial.replace(target)
    return target


if __name__ == "__main__":
    out = Path(sys.argv[1]).absolute()
    print(build_jar(out) if out.suffix == ".jar" else build_jobs_zip(out))
