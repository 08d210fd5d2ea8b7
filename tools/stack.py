"""The services of docker-compose.yml, started natively: no Docker engine needed.

    python -m tools.stack up     [--home .stack] [--env-file .env]
    python -m tools.stack status [--home .stack]
    python -m tools.stack down   [--home .stack]

`docker-compose config` resolves the file (variables from the env file, anchors, merges); each
service then runs as a local process group from its own `command`, `environment` and
`healthcheck`, in the order its `depends_on` conditions give. What a container would get from
its image and its network is mapped, and nothing else of the caller's environment gets in:

- service host names become 127.0.0.1, and every port a service publishes or exposes a local
  port (the same one when it is free, unless `fixed_ports` is off); a `host:port` reference,
  and the service's own port in its command, follow;
- named volumes become folders under the home, the container-private AIRFLOW_HOME and temporary
  folder one folder per process, the image's code and Python (Dockerfile `WORKDIR`, `ENV`) this
  checkout and its virtualenv;
- started by root, each process runs in a mount namespace of its own in which the other
  processes' folders and the volumes its service does not mount are covered by an empty file
  system: as in containers, it cannot read or write them (and Spark's executors, on one address
  here, ask each other for shuffle files rather than read them from a disk they cannot see);
- `postgres:15` runs Debian's PostgreSQL 15 (as the `postgres` user when started by root);
- a service of a profile runs when COMPOSE_PROFILES (the env file's) names it, as with compose.

So a secret or URL the services need to share must be in the compose file, as with containers.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tools.package import build_jar, build_jobs_zip

ROOT = Path(__file__).resolve().parents[1]
PG_BIN = Path("/usr/lib/postgresql/15/bin")
IMAGE_ROOT, IMAGE_PYTHON, PRIVATE_HOME = "/opt/cloudtrail", "/usr/local/bin/python", "/opt/airflow"
# On one host, loopback plays the part of the containers' private network.
LOOPBACK = {"AIRFLOW__API__HOST": "127.0.0.1", "SPARK_LOCAL_IP": "127.0.0.1"}
START_TIMEOUT = 300.0
STATE = "stack.json"  # under the home: the ports and process groups of a running stack
# Hosts compose keeps apart share one address here, and Spark has an executor read the shuffle files of another on its
# host from the disk, which each process's namespace hides: as between hosts, they ask each other for them.
HOST_LOCAL_READS = ("spark.shuffle.readHostLocalDisk", "false")


class StackError(RuntimeError):
    """A service did not start, or a tool the stack needs is missing."""


def resolve(compose: Path, env_file: Path) -> dict[str, Any]:
    """The compose file as a real compose parser reads it, with the env file's values."""
    clean = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root")}
    try:
        done = subprocess.run(["docker-compose", "--env-file", str(env_file), "-f", str(compose), "config"],
                              env=clean, capture_output=True, text=True, check=False)  # fmt: skip
    except FileNotFoundError as missing:
        raise StackError("docker-compose is not installed (Debian: apt-get install docker-compose; `make stack-up` does)") from missing
    if done.returncode != 0:
        raise StackError(f"docker-compose config failed: {done.stderr.strip()}")
    return yaml.safe_load(done.stdout)


def own_folders(home: Path) -> dict[str, str]:
    """A machine's environment for its temporary files: its scratch and temporary folders under `home`, its JVMs' too."""
    for folder in ("local", "tmp"):
        (home / folder).mkdir(parents=True, exist_ok=True)
    inherited = [option for option in os.environ.get("JDK_JAVA_OPTIONS", "").split() if "java.io.tmpdir" not in option]
    java = " ".join([*inherited, f"-Djava.io.tmpdir={home / 'tmp'}"])
    return {"SPARK_LOCAL_DIRS": str(home / "local"), "TMPDIR": str(home / "tmp"), "JDK_JAVA_OPTIONS": java}


def covered(argv: list[str], folders: Iterable[Path]) -> list[str]:
    """`argv` in a mount namespace of its own in which each of `folders` is covered by an empty file system, as on a
    machine that does not have them (needs root)."""
    covers = "".join(f"mount -t tmpfs none {shlex.quote(str(folder))} && " for folder in sorted(folders))
    return ["unshare", "--mount", "sh", "-c", covers + " ".join(["exec", *map(shlex.quote, argv)])]


def env_file_values(env_file: Path) -> dict[str, str]:
    """An env file's NAME=value lines."""
    lines = env_file.read_text().splitlines()
    return {
        name.strip(): value.strip()
        for name, _, value in (line.partition("=") for line in lines if "=" in line and not line.startswith("#"))
    }


def write_env_file(
    target: Path, values: dict[str, str] | None = None, example: Path = ROOT / ".env.example", compose: Path = ROOT / "docker-compose.yml"
) -> None:
    """`.env.example` with `values` set and every secret the compose file requires (`${NAME:?...}`) that is empty filled
    in with a fresh random value. Other empty variables stay empty (an S3 landing's settings, AWS keys: the chain)."""
    lines, unplaced = [], dict(values or {})
    required = required_secrets(compose, example)
    for line in example.read_text().splitlines():
        name, assigned, value = line.partition("=")
        if line.startswith("#") or not assigned:
            lines.append(line)
            continue
        value = unplaced.pop(name, value)
        lines.append(f"{name}={value or _secret(name) if name in required else value}")
    if unplaced:
        raise StackError(f"not variables of {example.name}: {', '.join(unplaced)}")
    target.write_text("\n".join(lines) + "\n")
    target.chmod(0o600)


def fill_secrets(target: Path, compose: Path = ROOT / "docker-compose.yml") -> list[str]:
    """An existing env file's secrets that the compose file requires and the file leaves empty or out, filled in with
    fresh random values; every other line as the user wrote it. The names filled."""
    required, lines, filled, present = required_secrets(compose), [], [], set()
    for line in target.read_text().splitlines():
        name, assigned, value = line.partition("=")
        if not line.startswith("#") and assigned:
            present.add(name.strip())
            if name.strip() in required and not value.strip():
                filled.append(name.strip())
                line = f"{name.strip()}={_secret(name.strip())}"
        lines.append(line)
    for name in sorted(required - present):
        lines.append(f"{name}={_secret(name)}")
        filled.append(name)
    if filled:
        target.write_text("\n".join(lines) + "\n")
        target.chmod(0o600)
    return filled


def required_secrets(compose: Path, example: Path = ROOT / ".env.example") -> set[str]:
    """The variables the compose file requires (`${NAME:?...}`) and `.env.example` leaves empty: its secrets (the
    lake's and the landing's locations are required too, but given)."""
    given = {name for name, value in env_file_values(example).items() if value}
    return set(re.findall(r"\$\{(\w+):\?", compose.read_text())) - given


def _secret(name: str) -> str:
    return base64.urlsafe_b64encode(os.urandom(32)).decode() if name.endswith("FERNET_KEY") else secrets.token_urlsafe(24)


def image_env(dockerfile: Path = ROOT / "Dockerfile") -> dict[str, str]:
    """The Dockerfile's ENV values (KEY=VALUE form, continued lines joined)."""
    text = dockerfile.read_text().replace("\\\n", " ")
    pairs = [pair for line in text.splitlines() if line.startswith("ENV ") for pair in shlex.split(line[4:])]
    return dict(pair.split("=", 1) for pair in pairs)


def free_port(preferred: int | None = None) -> int:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", preferred or 0))
        except OSError:
            probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Stack:
    """The compose services as local processes under `home` (their ports and process groups in `home/STATE`)."""

    home: Path
    env_file: Path
    compose: Path = ROOT / "docker-compose.yml"
    fixed_ports: bool = True
    ports: dict[str, int] = field(default_factory=dict)  # "service:port" -> local port
    processes: dict[str, int] = field(default_factory=dict)  # process name -> process group id
    children: dict[str, subprocess.Popen] = field(default_factory=dict, repr=False)  # started by this object

    @classmethod
    def load(cls, home: Path) -> Stack:
        saved = json.loads((home / STATE).read_text())
        stack = cls(home=home, env_file=Path(saved["env_file"]), compose=Path(saved["compose"]))
        stack.ports, stack.processes = saved["ports"], saved["processes"]
        return stack

    def save(self) -> None:
        saved = {"env_file": str(self.env_file), "compose": str(self.compose), "ports": self.ports, "processes": self.processes}
        (self.home / STATE).write_text(json.dumps(saved, indent=2))

    # -- mapping a container's view onto this host -------------------------------------------

    def config(self) -> dict[str, Any]:
        """The compose file resolved, with the services of the profiles COMPOSE_PROFILES does not name left out."""
        resolved = resolve(self.compose, self.env_file)
        profiles = set(filter(None, env_file_values(self.env_file).get("COMPOSE_PROFILES", "").split(",")))
        services = resolved["services"]
        resolved["services"] = {name: s for name, s in services.items() if not s.get("profiles") or profiles & set(s["profiles"])}
        return resolved

    def assign_ports(self, services: dict[str, Any]) -> None:
        for name, service in services.items():
            published = [str(p).split("/")[0].rsplit(":", 1)[-1] for p in service.get("ports", [])]
            for port in [*map(str, service.get("expose", [])), *published]:
                self.ports.setdefault(f"{name}:{port}", free_port(int(port) if self.fixed_ports else None))

    def url(self, service: str, port: int) -> str:
        return f"http://127.0.0.1:{self.ports[f'{service}:{port}']}"

    def localize(self, text: str, service: str, services: dict[str, Any]) -> str:
        for reference, local in self.ports.items():
            text = re.sub(rf"(?<![\w.-]){re.escape(reference)}(?!\d)", f"127.0.0.1:{local}", text)
            owner, port = reference.split(":")
            if owner == service:
                text = re.sub(rf"(?<![\d.:]){port}(?!\d)", str(local), text)
        for name in services:
            text = re.sub(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", "127.0.0.1", text)
        text = re.sub(r"(?<![\d.])0\.0\.0\.0(?![\d.])", "127.0.0.1", text)  # a container's every interface: its own network
        for volume, folder in self.volumes(service, services).items():
            text = re.sub(rf"(?<![\w/]){re.escape(volume)}(?![\w-])", str(folder), text)
        replaced = {IMAGE_ROOT: str(ROOT), IMAGE_PYTHON: sys.executable, PRIVATE_HOME: str(self.home / service / "airflow")}
        for image_path, local_path in replaced.items():
            text = text.replace(image_path, local_path)
        return text

    def volumes(self, service: str, services: dict[str, Any]) -> dict[str, Path]:
        """Container path -> the named volume's folder under the home."""
        mounts = [str(volume).split(":") for volume in services[service].get("volumes", [])]
        return {target: self.home / "volumes" / source for source, target, *_ in mounts}

    def environment(self, service: str, services: dict[str, Any]) -> dict[str, str]:
        local_bin = f"{Path(sys.executable).parent}:{PG_BIN}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
        base = {"PATH": local_bin, "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8"}
        if "JAVA_HOME" in os.environ:
            base["JAVA_HOME"] = os.environ["JAVA_HOME"]
        ours = {s.get("image") for s in services.values() if "build" in s}
        inherited = image_env() if services[service].get("image") in ours else {}
        declared = {**inherited, **{k: str(v) for k, v in (services[service].get("environment") or {}).items()}}
        return {**base, **{k: self.localize(v, service, services) for k, v in declared.items()}, **LOOPBACK}

    def env(self, service: str) -> dict[str, str]:
        """The environment the service's processes get: for running a client as that service would."""
        return self.environment(service, self.config()["services"])

    def command(self, service: str, services: dict[str, Any], argv: str | list[str]) -> list[str]:
        words = shlex.split(argv) if isinstance(argv, str) else [str(word) for word in argv]
        return [self.localize(word, service, services) for word in words]

    # -- starting and stopping ----------------------------------------------------------------

    def up(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        build_jobs_zip(ROOT / "build" / "jobs.zip")  # the image's build step
        build_jar(ROOT / "build" / "cloudtrail.jar")
        services = self.config()["services"]
        self.assign_ports(services)
        self.save()
        processes = {name: process_names(name, services[name]) for name in start_order(services)}
        for folder in [self.home / process for names in processes.values() for process in names]:
            folder.mkdir(parents=True, exist_ok=True)  # all of them now, so each namespace covers every other
        for name, names in processes.items():
            self.wait_for_dependencies(name, services)
            for process in names:
                self.start(name, services, process)
        for name, service in services.items():
            if "healthcheck" in service:
                self.wait_healthy(name, services)

    def start(self, service: str, services: dict[str, Any], process: str) -> None:
        for each in services:  # every volume, so that a namespace covers those its service does not mount
            for folder in self.volumes(each, services).values():
                folder.mkdir(parents=True, exist_ok=True)
        env = self.environment(service, services)
        workdir = self.home / process
        workdir.mkdir(parents=True, exist_ok=True)
        if services[service].get("image", "").startswith("postgres:"):
            argv = self.postgres(service, services, env)
        else:
            argv = self.command(service, services, services[service]["command"])
            (workdir / "spark-conf").mkdir(exist_ok=True)
            (workdir / "spark-conf" / "spark-defaults.conf").write_text(" ".join(HOST_LOCAL_READS) + "\n")
            env |= own_folders(workdir) | {"SPARK_WORKER_DIR": str(workdir / "spark-work"), "SPARK_CONF_DIR": str(workdir / "spark-conf")}
        if os.geteuid() == 0:
            argv = self.isolated(process, service, services, argv)
        log = (self.home / f"{process}.log").open("a")
        started = subprocess.Popen(argv, env=env, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.processes[process] = started.pid
        self.children[process] = started
        self.save()

    def isolated(self, process: str, service: str, services: dict[str, Any], argv: list[str]) -> list[str]:
        """`argv` in a mount namespace of its own, the other processes' folders and the volumes `service` does not
        mount covered by an empty file system (needs root)."""
        mounted = set(self.volumes(service, services).values())
        volumes = [folder for folder in (self.home / "volumes").iterdir() if folder not in mounted]
        others = [folder for folder in self.home.iterdir() if folder.is_dir() and folder.name not in (process, "volumes")]
        return covered(argv, others + volumes)

    def postgres(self, service: str, services: dict[str, Any], env: dict[str, str]) -> list[str]:
        """Debian's PostgreSQL 15 in the volume's folder, initialised the way the postgres image does."""
        data = self.volumes(service, services)["/var/lib/postgresql/data"]
        as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if not (PG_BIN / "initdb").exists():
            raise StackError(f"{PG_BIN / 'initdb'} is missing (Debian: apt-get install postgresql-15; `make stack-up` does)")
        if not (data / "PG_VERSION").exists():
            if as_postgres:
                subprocess.run(["chown", "-R", "postgres", str(self.home / "volumes")], check=True)
                for folder in [self.home, *self.home.parents]:  # postgres must reach its folder
                    folder.chmod(folder.stat().st_mode | 0o001)
            password = data.parent / ".pgpass-init"
            password.write_text(env["POSTGRES_PASSWORD"])
            if as_postgres:
                subprocess.run(["chown", "postgres", str(password)], check=True)
            initdb = [*as_postgres, str(PG_BIN / "initdb"), "-D", str(data), "-U", env["POSTGRES_USER"], f"--pwfile={password}",
                      "--auth-local=scram-sha-256", "--auth-host=scram-sha-256"]  # fmt: skip
            create = f'CREATE DATABASE "{env.get("POSTGRES_DB", env["POSTGRES_USER"])}" OWNER "{env["POSTGRES_USER"]}";\n'
            single_user = [*as_postgres, str(PG_BIN / "postgres"), "--single", "-D", str(data), "postgres"]
            for argv, stdin in ((initdb, None), (single_user, create)):
                done = subprocess.run(argv, input=stdin, text=True, capture_output=True, check=False)
                if done.returncode != 0:
                    raise StackError(f"{argv[len(as_postgres)]} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
            password.unlink()
        port = self.ports[f"{service}:5432"]
        return [*as_postgres, str(PG_BIN / "postgres"), "-D", str(data), "-p", str(port), "-c", "listen_addresses=127.0.0.1",
                "-c", f"unix_socket_directories={data}"]  # fmt: skip

    def wait_for_dependencies(self, service: str, services: dict[str, Any]) -> None:
        for dependency, rule in depends_on(services[service]).items():
            if rule == "service_healthy":
                self.wait_healthy(dependency, services)
            elif rule == "service_completed_successfully":
                self.wait_completed(dependency)

    def wait_healthy(self, service: str, services: dict[str, Any]) -> None:
        test = services[service]["healthcheck"]["test"]
        argv = self.command(service, services, test[1:] if test[0] in ("CMD", "CMD-SHELL") else test)
        if test[0] == "CMD-SHELL":
            argv = ["sh", "-c", " ".join(argv)]
        env = self.environment(service, services)
        deadline = time.monotonic() + START_TIMEOUT
        while subprocess.run(argv, env=env, capture_output=True, check=False).returncode != 0:
            self.check_running(service)
            if time.monotonic() > deadline:
                raise StackError(f"{service} is not healthy after {START_TIMEOUT:.0f} s: {self.log_tail(service)}")
            time.sleep(1)

    def wait_completed(self, service: str) -> None:
        try:
            status = self.children[service].wait(timeout=START_TIMEOUT)
        except subprocess.TimeoutExpired as slow:
            raise StackError(f"{service} did not finish in {START_TIMEOUT:.0f} s: {self.log_tail(service)}") from slow
        if status != 0:
            raise StackError(f"{service} failed (exit {status}): {self.log_tail(service)}")

    def check_running(self, service: str) -> None:
        if self.children[service].poll() is not None:
            raise StackError(f"{service} exited: {self.log_tail(service)}")

    def log_tail(self, process: str, chars: int = 3000) -> str:
        return (self.home / f"{process}.log").read_text(errors="replace")[-chars:]

    def down(self) -> None:
        """Stop every process group this stack started, clients first, the database last."""
        for group in reversed(list(self.processes.values())):
            stop_group(group)
        self.processes = {}
        self.save()

    def admin_password(self) -> str | None:
        generated = self.home / "airflow-api" / "airflow" / "simple_auth_manager_passwords.json.generated"
        return json.loads(generated.read_text()).get("admin") if generated.exists() else None

    def status(self) -> dict[str, str]:
        return {process: "running" if alive(group) else "stopped" for process, group in self.processes.items()}

    def listening(self) -> list[Listener]:
        """The TCP sockets the stack's processes (and every process they started) listen on now."""
        return listeners(self.processes.values())


@dataclass(frozen=True)
class Listener:
    """A listening TCP socket as `ss` shows it, and the processes that hold it."""

    address: str
    port: int
    commands: tuple[str, ...]

    @property
    def loopback(self) -> bool:
        return self.address in ("::1", "localhost") or self.address.removeprefix("::ffff:").startswith("127.")


def _process_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, session id) of every process, from /proc."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # gone meanwhile
            table[int(entry.name)] = (int(fields[1]), int(fields[3]))
    return table


def listeners(roots: Iterable[int]) -> list[Listener]:
    """The sockets listening now (`ss -ltnp`, as the kernel has them, not as a configuration says) that belong to the
    processes `roots`, their descendants, or a process in their sessions (a daemon that left its parent)."""
    table = _process_table()
    ours = {pid for pid in roots if pid in table}
    sessions = {table[pid][1] for pid in ours}
    grew = True
    while grew:
        found = {pid for pid, (parent, session) in table.items() if parent in ours or session in sessions} - ours
        ours |= found
        grew = bool(found)
    shown = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    found_sockets = []
    for line in shown.splitlines():
        local, users = line.split()[3], line.partition("users:")[2]
        holders = [(name, int(pid)) for name, pid in re.findall(r'\("([^"]*)",pid=(\d+)', users)]
        if any(pid in ours for _, pid in holders):
            address, _, port = local.rpartition(":")
            found_sockets.append(Listener(address.strip("[]"), int(port), tuple(sorted({name for name, _ in holders}))))
    return found_sockets


def process_names(name: str, service: dict[str, Any]) -> list[str]:
    """The processes a service runs as: itself, or one per replica (name-1, name-2, ...)."""
    replicas = int((service.get("deploy") or {}).get("replicas", 1))
    return [f"{name}-{replica}" for replica in range(1, replicas + 1)] if replicas > 1 else [name]


def depends_on(service: dict[str, Any]) -> dict[str, str]:
    declared = service.get("depends_on") or {}
    if isinstance(declared, list):
        return {name: "service_started" for name in declared}
    return {name: rule.get("condition", "service_started") for name, rule in declared.items()}


def start_order(services: dict[str, Any]) -> list[str]:
    order: list[str] = []

    def visit(name: str) -> None:
        if name not in order:
            for dependency in depends_on(services[name]):
                visit(dependency)
            order.append(name)

    for name in services:
        visit(name)
    return order


def alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(group: int, grace: float = 30.0) -> None:
    """SIGTERM to the process group, SIGKILL when it is still there after `grace` seconds."""
    try:
        os.killpg(group, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while alive(group) and time.monotonic() < deadline:
        reap()
        time.sleep(0.2)
    if alive(group):
        os.killpg(group, signal.SIGKILL)


def reap() -> None:
    """Collect exited children, so a stopped group stops counting as alive."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.stack", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["up", "status", "down"])
    parser.add_argument("--home", type=Path, default=ROOT / ".stack")
    parser.add_argument("--env-file", type=Path, default=ROOT / ".env")
    args = parser.parse_args(argv)
    home = args.home.absolute()
    if args.action == "up":
        if not args.env_file.exists():
            write_env_file(args.env_file)
            print(f"wrote {args.env_file} with fresh secrets")
        elif filled := fill_secrets(args.env_file):
            print(f"filled the secrets {args.env_file} left empty with fresh values: {', '.join(filled)} (the rest as you set it)")
        if (home / STATE).exists() and "running" in Stack.load(home).status().values():
            print("already running (make stack-status; make stack-down)")
            return 1
        stack = Stack(home=home, env_file=args.env_file.absolute())
        try:
            stack.up()
        except StackError as failed:
            print(f"stack-up failed: {failed}", file=sys.stderr)
            stack.down()
            return 1
    if not (home / STATE).exists():
        print(f"no stack under {home}")
        return 0 if args.action == "down" else 1
    stack = Stack.load(home)
    if args.action == "down":
        stack.down()
        print("stopped")
        return 0
    for process, state in stack.status().items():
        print(f"{process:24} {state:8} log: {home / process}.log")
    print(f"Airflow UI    {stack.url('airflow-api', 8080)}  user admin, password {stack.admin_password()}")
    print(f"Spark master  {stack.url('spark-master', 8081)}")
    scheduler = stack.env("airflow-scheduler")
    print(f"lake          {scheduler['CLOUDTRAIL_LAKE']} (catalog {scheduler['CLOUDTRAIL_CATALOG']})")
    print(f"landing       {scheduler['CLOUDTRAIL_LANDING']}")
    if endpoint := scheduler.get("AWS_ENDPOINT_URL"):
        print(f"AWS endpoint  {endpoint}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
