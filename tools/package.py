"""Build what spark-submit ships with a job: jobs.zip (--py-files), the JVM helpers' jar and the JVM dependencies (--jars).

python -m tools.package build/jobs.zip
python -m tools.package build/cloudtrail.jar
python -m tools.package build/jars
"""

from __future__ import annotations

import hashlib
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


# The JVM dependencies the pyspark wheel lacks, pinned in tools/jars/pom.xml, each file's SHA-256 in jars.sha256.
DEPENDENCIES = ROOT / "tools" / "jars"


def fetch_jars(target: Path) -> Path:
    """tools/jars/pom.xml's dependencies from Maven Central (Maven checks the registry's checksums), then every file
    against jars.sha256: a folder of exactly those jars, written whole or not at all."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SystemExit("mvn not found: Maven fetches the JVM dependencies (Debian: apt-get install maven)")
    partial = target.with_name(f".{target.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    pom = str(DEPENDENCIES / "pom.xml")
    goal = ["dependency:copy-dependencies", f"-DoutputDirectory={partial}"]
    command = [mvn, "-q", "-B", "-Dstyle.color=never", "--strict-checksums", "-f", pom, *goal]
    fetched = subprocess.run(command, capture_output=True, text=True)  # Maven's own output only when it fails
    if fetched.returncode != 0:
        raise SystemExit(f"Maven could not fetch the JVM dependencies:\n{(fetched.stdout + fetched.stderr)[-3000:]}")
    expected = dict(line.split()[::-1] for line in (DEPENDENCIES / "jars.sha256").read_text().splitlines() if line.strip())
    found = {jar.name: hashlib.sha256(jar.read_bytes()).hexdigest() for jar in partial.glob("*.jar")}
    if found != expected:
        wrong = sorted(name for name in found.keys() | expected.keys() if found.get(name) != expected.get(name))
        shutil.rmtree(partial)
        raise SystemExit(f"the JVM dependencies differ from tools/jars/jars.sha256: {', '.join(wrong)}")
    shutil.rmtree(target, ignore_errors=True)
    partial.replace(target)
    return target


if __name__ == "__main__":
    out = Path(sys.argv[1]).absolute()
    if out.suffix == ".jar":
        print(build_jar(out))
    elif out.suffix == ".zip":
        print(build_jobs_zip(out))
    else:
        print(fetch_jars(out))
