"""docker-compose.yml, as a real compose parser reads it, and its native mapping (tools/stack.py).
The services themselves run in `make test-stack` (tests/test_stack.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tools.stack import ROOT, Stack, StackError, fill_secrets, image_env, resolve, write_env_file

pytestmark = pytest.mark.unit

AIRFLOW_SERVICES = ["airflow-init", "airflow-api", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"]


@pytest.fixture
def env_file(tmp_path: Path) -> Path:
    target = tmp_path / ".env"
    write_env_file(target)
    return target


def test_the_compose_file_passes_the_compose_validator(env_file: Path):
    checked = subprocess.run(["docker-compose", "--env-file", str(env_file), "-f", str(ROOT / "docker-compose.yml"), "config", "-q"],
                             capture_output=True, text=True, check=False)  # fmt: skip
    assert checked.returncode == 0, checked.stderr


def test_no_secret_is_committed_the_file_refuses_to_start_without_them(tmp_path: Path):
    example = (ROOT / ".env.example").read_text()
    for secret in ("POSTGRES_PASSWORD=", "AIRFLOW_JWT_SECRET=", "AIRFLOW_FERNET_KEY="):
        assert f"\n{secret}\n" in example, f"{secret} must be empty in .env.example"
    (tmp_path / "empty.env").write_text(example)
    with pytest.raises(StackError, match="set it in .env"):
        resolve(ROOT / "docker-compose.yml", tmp_path / "empty.env")


def test_a_fresh_env_file_fills_the_secrets_compose_requires_and_nothing_else(env_file: Path):
    """An empty CLOUDTRAIL_LANDING is the landing volume and empty AWS keys the standard chain: a random value there
    was a landing folder of that name and keys AWS refuses."""
    written = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line and not line.startswith("#"))
    assert all(written[name] for name in ("POSTGRES_PASSWORD", "AIRFLOW_JWT_SECRET", "AIRFLOW_FERNET_KEY"))
    empty = (
        "CLOUDTRAIL_LANDING",
        "CLOUDTRAIL_QUEUE_URL",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_ENDPOINT_URL",
    )
    assert {name: written[name] for name in empty} == dict.fromkeys(empty, "")
    environment = resolve(ROOT / "docker-compose.yml", env_file)["services"]["airflow-scheduler"]["environment"]
    assert environment["CLOUDTRAIL_LANDING"] == "/data/landing" and environment["CLOUDTRAIL_QUEUE_URL"] == ""


def test_stack_up_fills_the_secrets_a_users_env_file_leaves_empty_and_keeps_what_they_set(tmp_path: Path):
    """An .env the user wrote from .env.example: S3 settings filled, secrets empty (or one left out altogether)."""
    user = tmp_path / "user.env"
    example = (ROOT / ".env.example").read_text()
    settings = {"CLOUDTRAIL_LANDING": "s3://org-trail/o-abc123", "CLOUDTRAIL_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/1/q"}
    lines = [f"{line}{settings[line[:-1]]}" if line[:-1] in settings else line for line in example.splitlines()]
    user.write_text("\n".join(line for line in lines if not line.startswith("AIRFLOW_FERNET_KEY=")) + "\n# mine\n")
    with pytest.raises(StackError):
        resolve(ROOT / "docker-compose.yml", user)
    assert sorted(fill_secrets(user)) == ["AIRFLOW_FERNET_KEY", "AIRFLOW_JWT_SECRET", "POSTGRES_PASSWORD"]
    environment = resolve(ROOT / "docker-compose.yml", user)["services"]["airflow-scheduler"]["environment"]
    assert environment["CLOUDTRAIL_LANDING"] == settings["CLOUDTRAIL_LANDING"] and environment["AIRFLOW__CORE__FERNET_KEY"]
    assert "# mine" in user.read_text() and fill_secrets(user) == [], "filled once, then kept"


def test_every_airflow_service_shares_what_the_execution_api_needs(env_file: Path):
    services = resolve(ROOT / "docker-compose.yml", env_file)["services"]
    shared = {"AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__CORE__EXECUTION_API_SERVER_URL", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"}
    values = {name: {key: services[name]["environment"][key] for key in shared} for name in AIRFLOW_SERVICES}
    assert len({tuple(sorted(v.items())) for v in values.values()}) == 1, values
    assert values["airflow-api"]["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://")
    assert services["airflow-api"]["ports"] == ["127.0.0.1:8080:8080/tcp"], "the UI is published on loopback unless .env says otherwise"
    assert "cloudtrail_lake 1" in services["airflow-init"]["command"][-1], "the writers' pool is created with the DB"


def test_the_native_stack_maps_host_names_ports_volumes_and_the_image(env_file: Path, tmp_path: Path):
    stack = Stack(home=tmp_path / "stack", env_file=env_file, fixed_ports=False)
    services = stack.config()["services"]
    stack.assign_ports(services)
    scheduler = stack.environment("airflow-scheduler", services)
    master = stack.ports["spark-master:7077"]
    assert scheduler["AIRFLOW_CONN_SPARK_DEFAULT"] == f"spark://127.0.0.1:{master}"
    assert f"@127.0.0.1:{stack.ports['postgres:5432']}/airflow" in scheduler["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert scheduler["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == f"{stack.url('airflow-api', 8080)}/execution/"
    assert scheduler["CLOUDTRAIL_LAKE"] == str(tmp_path / "stack" / "volumes" / "lake")
    assert scheduler["AIRFLOW_HOME"] == str(tmp_path / "stack" / "airflow-scheduler" / "airflow"), "each container's home is its own"
    assert scheduler["PYTHONPATH"] == image_env()["PYTHONPATH"].replace("/opt/cloudtrail", str(ROOT))
    api = stack.command("airflow-api", services, services["airflow-api"]["command"])
    assert api == ["airflow", "api-server", "--port", str(stack.ports["airflow-api:8080"])]
    # The tests' own environment sets CLOUDTRAIL_SETTLE=0 seconds and CLOUDTRAIL_DRIVER_MEMORY: neither leaks in.
    assert scheduler["CLOUDTRAIL_SETTLE"] == "1 minute", "the file's value, from the env file"
    assert "CLOUDTRAIL_DRIVER_MEMORY" not in scheduler, "nothing of the caller's environment"


def test_the_image_runs_as_an_unprivileged_user_without_dev_tools():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert dockerfile.splitlines()[-1].startswith("USER ") and "USER root" not in dockerfile
    assert "requirements-dev" not in dockerfile and "COPY tests" not in dockerfile
    assert "openjdk-17-jre-headless" in dockerfile


def test_the_env_file_takes_values_by_name_and_refuses_unknown_names(tmp_path: Path):
    target = tmp_path / ".env"
    write_env_file(target, {"CLOUDTRAIL_SETTLE": "0 seconds"})
    lines = target.read_text().splitlines()
    assert "CLOUDTRAIL_SETTLE=0 seconds" in lines and "CLOUDTRAIL_SCHEDULE=@hourly" in lines
    assert all(line.split("=", 1)[1] for line in lines if line.startswith(("POSTGRES_PASSWORD=", "AIRFLOW_JWT_SECRET=")))
    with pytest.raises(StackError, match="CLOUDTRAIL_SETTEL"):
        write_env_file(target, {"CLOUDTRAIL_SETTEL": "0 seconds"})


def test_nothing_listens_open_and_the_api_server_reads_the_task_logs_from_a_shared_volume(env_file: Path):
    """The configuration side of what `make test-stack` checks on the sockets the services really open."""
    services = resolve(ROOT / "docker-compose.yml", env_file)["services"]
    for name in ("airflow-scheduler", "airflow-triggerer"):
        assert "--skip-serve-logs" in services[name]["command"], f"{name} would start Airflow's log server on 0.0.0.0:8793"
    for name in AIRFLOW_SERVICES:
        environment, volumes = services[name]["environment"], services[name]["volumes"]
        assert environment["GX_ANALYTICS_ENABLED"] == "False", name
        folder = environment["AIRFLOW__LOGGING__BASE_LOG_FOLDER"]
        assert f"logs:{folder}:rw" in volumes, f"{name} keeps its logs apart"
    published = [port for service in services.values() for port in service.get("ports", [])]
    assert published and all(port.startswith("127.0.0.1:") for port in published), published
    assert all("expose" not in services[name] for name in AIRFLOW_SERVICES), "no Airflow service offers a port to the others but the API"
    assert "GX_ANALYTICS_ENABLED=False" in (ROOT / "Dockerfile").read_text()
