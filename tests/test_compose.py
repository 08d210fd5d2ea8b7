"""docker-compose.yml, as a real compose parser reads it, and its native mapping (tools/stack.py).
The services themselves run in `make test-stack` (tests/test_stack.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tools.stack import ROOT, Stack, StackError, env_file_values, fill_secrets, image_env, resolve, write_env_file

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
    """The lake's and the landing's locations are required too, but given (the stand-in's buckets): a random value there
    was a bucket of that name. An empty queue is a listed landing, an empty session token the keys alone."""
    written, example = env_file_values(env_file), env_file_values(ROOT / ".env.example")
    secrets = {"POSTGRES_PASSWORD", "AIRFLOW_JWT_SECRET", "AIRFLOW_FERNET_KEY"}
    assert all(written[name] for name in secrets)
    assert {name: value for name, value in written.items() if name not in secrets} == {n: v for n, v in example.items() if n not in secrets}
    environment = resolve(ROOT / "docker-compose.yml", env_file)["services"]["airflow-scheduler"]["environment"]
    assert environment["CLOUDTRAIL_LAKE"].startswith("s3://") and environment["CLOUDTRAIL_LANDING"].startswith("s3://")
    assert environment["CLOUDTRAIL_CATALOG"] == "glue" and environment["CLOUDTRAIL_QUEUE_URL"] == ""


def test_stack_up_fills_the_secrets_a_users_env_file_leaves_empty_and_keeps_what_they_set(tmp_path: Path):
    """An .env the user wrote from .env.example: S3 settings filled, secrets empty (or one left out altogether)."""
    user = tmp_path / "user.env"
    example = (ROOT / ".env.example").read_text()
    settings = {"CLOUDTRAIL_LANDING": "s3://org-trail/o-abc123", "CLOUDTRAIL_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/1/q"}
    lines = [f"{line.partition('=')[0]}={settings[line.partition('=')[0]]}" if line.partition("=")[0] in settings else line
             for line in example.splitlines()]  # fmt: skip
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
    assert scheduler["AWS_ENDPOINT_URL"] == stack.url("aws-stand-in", 5000), "the stand-in for AWS, at its local port"
    moto = stack.command("aws-stand-in", services, services["aws-stand-in"]["command"])
    assert moto[-4:] == ["-H", "127.0.0.1", "-p", str(stack.ports["aws-stand-in:5000"])], "a container's every interface is loopback here"
    assert scheduler["AIRFLOW_HOME"] == str(tmp_path / "stack" / "airflow-scheduler" / "airflow"), "each container's home is its own"
    assert scheduler["PYTHONPATH"] == image_env()["PYTHONPATH"].replace("/opt/cloudtrail", str(ROOT))
    api = stack.command("airflow-api", services, services["airflow-api"]["command"])
    assert api == ["airflow", "api-server", "--port", str(stack.ports["airflow-api:8080"])]
    # The tests' own environment sets CLOUDTRAIL_SETTLE=0 seconds and CLOUDTRAIL_DRIVER_MEMORY: neither leaks in.
    assert scheduler["CLOUDTRAIL_SETTLE"] == "1 minute", "the file's value, from the env file"
    assert "CLOUDTRAIL_DRIVER_MEMORY" not in scheduler, "nothing of the caller's environment"


def test_the_image_runs_as_an_unprivileged_user_without_dev_tools():
    dockerfile = (ROOT / "Dockerfile").read_text()
    image = dockerfile.rpartition("\nFROM ")[2]  # the last stage: the stand-in for AWS is a stage of its own
    assert dockerfile.splitlines()[-1].startswith("USER ") and "USER root" not in dockerfile
    assert "requirements-dev" not in image and "COPY tests" not in dockerfile and "moto" not in image
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


def test_the_spark_workers_mount_nothing_and_only_the_airflow_services_share_a_volume(env_file: Path):
    """The lake, the landing, the checkpoint and the state are in S3: a worker (or a driver) is a machine to lose."""
    services = resolve(ROOT / "docker-compose.yml", env_file)["services"]
    assert "volumes" not in services["spark-worker"] and "volumes" not in services["spark-master"]
    shared = {str(v).split(":")[0] for name, s in services.items() if name != "postgres" for v in s.get("volumes", [])}
    assert shared == {"logs"}, "the task logs, which the API server shows"
    assert services["spark-worker"]["environment"]["AWS_ENDPOINT_URL"] == services["airflow-scheduler"]["environment"]["AWS_ENDPOINT_URL"]


def test_the_stand_in_for_aws_runs_only_in_its_profile(env_file: Path, tmp_path: Path):
    started = Stack(home=tmp_path / "a", env_file=env_file).config()["services"]
    assert {"aws-stand-in", "aws-stand-in-buckets"} <= started.keys(), ".env.example names the stand-in's profile"
    on_aws = tmp_path / "aws.env"
    on_aws.write_text(
        env_file.read_text()
        .replace("COMPOSE_PROFILES=stand-in", "COMPOSE_PROFILES=")
        .replace("AWS_ENDPOINT_URL=http://aws-stand-in:5000", "AWS_ENDPOINT_URL=")
    )
    services = Stack(home=tmp_path / "b", env_file=on_aws).config()["services"]
    assert not {"aws-stand-in", "aws-stand-in-buckets"} & services.keys()
    assert services["airflow-scheduler"]["environment"]["AWS_ENDPOINT_URL"] == ""


def test_started_by_root_each_process_sees_only_its_own_folder_and_its_services_volumes(env_file: Path, tmp_path: Path):
    stack = Stack(home=tmp_path / "stack", env_file=env_file, fixed_ports=False)
    services = stack.config()["services"]
    for folder in ("spark-worker-1", "spark-worker-2", "airflow-scheduler", "volumes/logs", "volumes/pgdata"):
        (stack.home / folder).mkdir(parents=True)
    argv = stack.isolated("spark-worker-1", "spark-worker", services, ["spark-class", "Worker"])
    covered = sorted(Path(word) for word in argv[-1].split() if word.startswith(str(stack.home)))
    assert argv[:2] == ["unshare", "--mount"] and argv[-1].endswith("exec spark-class Worker")
    assert covered == sorted(stack.home / f for f in ("spark-worker-2", "airflow-scheduler", "volumes/logs", "volumes/pgdata"))
    scheduler = stack.isolated("airflow-scheduler", "airflow-scheduler", services, ["airflow", "scheduler"])[-1]
    assert str(stack.home / "volumes" / "logs") not in scheduler and str(stack.home / "spark-worker-1") in scheduler
    (stack.home / "airflow-scheduler" / "scratch").write_text("a driver's")
    (stack.home / "spark-worker-1" / "work").write_text("its own")

    def cat(path: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            stack.isolated("spark-worker-1", "spark-worker", services, ["cat", str(path)]), capture_output=True, text=True, check=False
        )

    assert cat(stack.home / "spark-worker-1" / "work").stdout == "its own"
    hidden = cat(stack.home / "airflow-scheduler" / "scratch")
    assert hidden.returncode != 0 and "No such file" in hidden.stderr, "covered where the worker looks"
    assert (stack.home / "airflow-scheduler" / "scratch").read_text() == "a driver's", "and there still, for the others"
