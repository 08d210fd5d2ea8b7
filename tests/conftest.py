"""Shared fixtures: one SparkSession per test session, temp landing/lake, an isolated Airflow home."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from tests import scratch

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = Path(os.environ.get("CLOUDTRAIL_SAMPLES", ROOT.parent / "shared" / "cloudtrail-samples"))

# Airflow reads its configuration when first imported: point it at a throw-away home and
# at this project's dags/ and plugins/ before any test imports it.
_SCRATCH = Path(tempfile.mkdtemp(prefix="cloudtrail-tests-"))
# The JIT's first tier only: for the JVMs the tests start in processes of their own (below).
FIRST_TIER = "-XX:TieredStopAtLevel=1"
atexit.register(shutil.rmtree, _SCRATCH, ignore_errors=True)
# Every temporary file of the run goes under the first process's scratch folder, removed when the run ends: the Python
# processes' (TMPDIR, xdist's workers included) and the JVMs' (java.io.tmpdir: Spark's local folders, the native
# libraries RocksDB and LZ4 extract). A JVM the tests kill on purpose skips its own clean-up: in /tmp, each run of the
# suite left about 140 MB behind, and a machine that runs it every day ran out of disk (what they left goes: tests/scratch.py).
if "CLOUDTRAIL_TESTS_TMP" not in os.environ:
    if freed := scratch.tidy(Path(tempfile.gettempdir())):
        print(f"removed {freed / 2**20:.0f} MB that earlier runs of the suite left in {tempfile.gettempdir()}", file=sys.stderr)
    (_SCRATCH / "tmp").mkdir()
    os.environ["CLOUDTRAIL_TESTS_TMP"] = os.environ["TMPDIR"] = str(_SCRATCH / "tmp")
TMPDIR_OPTION = f"-Djava.io.tmpdir={os.environ['CLOUDTRAIL_TESTS_TMP']}"
os.environ.update(
    {
        # pyspark.testing's assertDataFrameEqual imports pandas-on-Spark, which warns without it (pyspark 4.1).
        "PYARROW_IGNORE_TIMEZONE": "1",
        "AIRFLOW_HOME": str(_SCRATCH / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type": "spark", "host": "local[2]"}',
        "CLOUDTRAIL_HOME": str(ROOT),
        "CLOUDTRAIL_LANDING": str(_SCRATCH / "landing"),
        "CLOUDTRAIL_LAKE": str(_SCRATCH / "lake"),
        "CLOUDTRAIL_DRIVER_MEMORY": "1g",
        # Tests deliver files and ingest them at once.
        "CLOUDTRAIL_SETTLE": "0 seconds",
        "CLOUDTRAIL_JOBS_ZIP": str(_SCRATCH / "jobs.zip"),
        # The JVM helpers, compiled once per `pytest` run (below): xdist's workers inherit the controller's.
        "CLOUDTRAIL_JAR": os.environ.get("CLOUDTRAIL_TESTS_JAR", str(_SCRATCH / "cloudtrail.jar")),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins")]),
        "GX_ANALYTICS_ENABLED": "false",
        # The JVMs the tests start in processes of their own (each job's, spark-submit's, the cluster's) compile with
        # the JIT's first tier only: their runs last seconds, too short for the second tier's compiles to pay back,
        # which took two fifths of a small ingest's CPU (README, "Development"). The jobs' own options are unchanged.
        "JDK_JAVA_OPTIONS": " ".join(dict.fromkeys([*os.environ.get("JDK_JAVA_OPTIONS", "").split(), FIRST_TIER, TMPDIR_OPTION])),
    }
)
sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]
# The JVM helpers, compiled from the working tree: every session of the tests (and every job they start) loads them.
# The first process compiles them (the controller, under xdist) and its workers, started after, take its jar.
if "CLOUDTRAIL_TESTS_JAR" not in os.environ:
    subprocess.run([sys.executable, "-m", "tools.package", os.environ["CLOUDTRAIL_JAR"]], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    os.environ["CLOUDTRAIL_TESTS_JAR"] = os.environ["CLOUDTRAIL_JAR"]


# The files that take longest, longest first. `make test` runs two workers (pytest -n 2 --dist worksteal):
# each starts on its half of the tests in collection order, so these start at once and end with the rest.
LONGEST_FIRST = (
    "test_chaos.py",
    "test_bench_smoke.py",
    "test_dag.py",
    "test_operator_sequences.py",
    "test_cluster.py",
    "test_hostile_bucket.py",
    "test_derived.py",
    "test_rebuild.py",
    "test_s3_landing.py",
    "test_ledger.py",
    "test_publish.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test not marked unit (fast, in-process) or stack is an integration test; the longest files come first."""
    for item in items:
        if not any(item.get_closest_marker(kind) for kind in ("unit", "stack")):
            item.add_marker(pytest.mark.integration)
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(scope="session")
def spark():
    from jobs.spark.session import STREAM_CONF, spark_session, stop_state_stores

    # A driver as large as the job's default: the parser-limit test holds a 20 MB record.
    conf = {**STREAM_CONF, "spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false", "spark.driver.memory": "2g"}
    # The shared session's JVM runs every in-process test of its worker, long enough for both tiers of the JIT to pay.
    short_lived = os.environ.pop("JDK_JAVA_OPTIONS")
    both_tiers = " ".join(option for option in short_lived.split() if option != FIRST_TIER)
    os.environ.update({"JDK_JAVA_OPTIONS": both_tiers} if both_tiers else {})
    try:
        session = spark_session("cloudtrail-tests", conf, "local[2]")
    finally:
        os.environ["JDK_JAVA_OPTIONS"] = short_lived
    session.sparkContext.setLogLevel("ERROR")
    yield session
    stop_state_stores(session)  # as a job's JobSession does: maintenance left running found SparkEnv gone
    session.stop()


@pytest.fixture(autouse=True)
def _suite_shuffle_partitions(request: pytest.FixtureRequest) -> None:
    """A job's main() run in-process builds its session with getOrCreate, which sets the job's own conf on the
    suite's session (the ingest's --state-partitions, 4, as its shuffle partitions): each test starts from 2."""
    if "spark" in request.fixturenames:
        request.getfixturevalue("spark").conf.set("spark.sql.shuffle.partitions", "2")


@pytest.fixture
def samples() -> Path:
    if not SAMPLES.is_dir():
        pytest.skip(f"real CloudTrail samples not found at {SAMPLES} (set CLOUDTRAIL_SAMPLES)")
    return SAMPLES


@pytest.fixture
def landing(tmp_path: Path) -> Path:
    return tmp_path / "landing"


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    return tmp_path / "lake"


@pytest.fixture(scope="session")
def jobs_zip() -> Path:
    """$CLOUDTRAIL_JOBS_ZIP, built from the working tree so spark-submit ships the code under test."""
    from tools.package import build_jobs_zip

    return build_jobs_zip(Path(os.environ["CLOUDTRAIL_JOBS_ZIP"]))


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """A migrated SQLite metadata DB in the throw-away AIRFLOW_HOME (dag.test needs one)."""
    home = Path(os.environ["AIRFLOW_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True, timeout=300)
    shutil.copytree(home, _migrated(home))
    return home


def _migrated(airflow_db: Path) -> Path:
    return airflow_db.with_name(f"{airflow_db.name}-migrated")


def own_airflow_home(airflow_db: Path, folder: Path) -> dict[str, str]:
    """The environment of a copy of the metadata DB as migrated, before any test ran a DAG in it, for Airflow processes
    on another lake: the DAGs they serialize name their assets after that lake. In the session's DB those assets would
    be the active ones, leaving the session's own DAG runs with inactive assets; and in a copy of it taken after a
    session DAG ran, the session's assets (the same names, the session lake's URIs) leave theirs inactive."""
    shutil.copytree(_migrated(airflow_db), folder)
    return {"AIRFLOW_HOME": str(folder), "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{folder / 'airflow.db'}"}


@pytest.fixture
def dag_roots(jobs_zip: Path, airflow_db: Path) -> tuple[Path, Path]:
    """A fresh landing and lake inside the roots the DAG was configured with."""
    name = uuid.uuid4().hex[:8]
    return Path(os.environ["CLOUDTRAIL_LANDING"]) / name, Path(os.environ["CLOUDTRAIL_LAKE"]) / name


@pytest.fixture(scope="session")
def aws():
    """moto's S3 + SQS server on loopback, and the environment every AWS client here reads (tests/aws.py)."""
    from tests.aws import ENVIRONMENT, start_server

    server, url = start_server()
    os.environ.update({**ENVIRONMENT, "AWS_ENDPOINT_URL": url})
    yield url
    server.stop()


@pytest.fixture
def trail(aws):
    from tests.aws import Trail

    return Trail.create()


@pytest.fixture
def s3_lake(aws, tmp_path, monkeypatch) -> str:
    """A bucket for the lake and a SQL catalog for its tables (a catalog service: its file is not the lake's)."""
    import boto3

    bucket = f"lake-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    settings = {"TYPE": "sql", "URI": f"sqlite:///{tmp_path / 'catalog.db'}", "WAREHOUSE": f"s3://{bucket}/warehouse"}
    for key, value in settings.items():
        monkeypatch.setenv(f"PYICEBERG_CATALOG__RECORDS__{key}", value)
    monkeypatch.setenv("CLOUDTRAIL_SCRATCH", str(tmp_path / "scratch"))
    return f"s3://{bucket}/lakes/acme"
