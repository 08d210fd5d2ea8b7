"""The house of jobs/: a kernel, packages by stage with every import running downward, a door per command."""

from __future__ import annotations

import ast
import importlib
import sys
from importlib import metadata
from pathlib import Path

import pytest

import jobs
from jobs import COMMANDS, PACKAGES

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
KERNEL = 0  # jobs/*.py that are no door
DOOR = len(PACKAGES) + 1


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def imported(path: Path) -> list[str]:
    """The jobs modules `path` imports, at its top or inside a function: `from jobs.x import y` names jobs.x.y when y is a
    module (or a package) of jobs.x, else jobs.x."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names if alias.name.split(".")[0] == "jobs"]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "jobs":
            folder = ROOT.joinpath(*node.module.split("."))
            for alias in node.names:
                inner = folder / alias.name
                names.append(f"{node.module}.{alias.name}" if inner.is_dir() or inner.with_suffix(".py").exists() else node.module)
    return names


def layer(module: str) -> int:
    parts = module.split(".")[1:]
    if not parts:
        return KERNEL
    if len(parts) == 1 and parts[0] in COMMANDS:
        return DOOR
    return PACKAGES.index(parts[0]) + 1 if parts[0] in PACKAGES else KERNEL


def job_modules() -> list[Path]:
    return sorted(p for p in (ROOT / "jobs").rglob("*.py") if "__pycache__" not in p.parts)


def test_every_import_runs_downward_and_no_module_imports_a_door():
    """A module imports from its own package, the kernel, or a package below its own (jobs.PACKAGES, bottom up);
    a door (jobs.COMMANDS) is imported by nobody."""
    upward = [
        f"{module_name(path)} -> {target}"
        for path in job_modules()
        for target in imported(path)
        if layer(target) > layer(module_name(path)) or (layer(target) == DOOR and target != module_name(path))
    ]
    assert upward == []


def test_the_packages_are_the_folders_of_jobs_and_each_names_its_public_modules():
    folders = sorted(p.name for p in (ROOT / "jobs").iterdir() if (p / "__init__.py").exists())
    assert folders == sorted(PACKAGES)
    for package in PACKAGES:
        public = importlib.import_module(f"jobs.{package}").__all__
        inside = {p.stem for p in (ROOT / "jobs" / package).iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
        assert set(public) <= inside - {"__init__"}, package


def test_other_packages_import_only_a_package_s_public_modules():
    """Tests may look inside a package; the code (jobs, plugins, DAGs, tools, benchmarks) goes through its door."""
    code = [p for folder in ("jobs", "plugins", "dags", "tools", "bench") for p in (ROOT / folder).rglob("*.py")]
    private = []
    for path in code:
        for target in imported(path):
            parts = target.split(".")
            if len(parts) >= 3 and parts[1] in PACKAGES and not module_name(path).startswith(f"jobs.{parts[1]}"):
                if parts[2] not in importlib.import_module(f"jobs.{parts[1]}").__all__:
                    private.append(f"{path.relative_to(ROOT)} -> {target}")
    assert private == []


def test_each_command_is_a_door_that_runs_its_package_s_main():
    """`python -m jobs.<command>` and `spark-submit jobs/<command>.py` keep their paths; the door only runs `main`."""
    tops = {p.stem for p in (ROOT / "jobs").glob("*.py")} - {"__init__"}
    assert set(COMMANDS) <= tops
    for command in COMMANDS:
        door = ROOT / "jobs" / f"{command}.py"
        (target,) = imported(door)
        assert layer(target) < DOOR and callable(importlib.import_module(target).main), command
        assert f"python -m jobs.{command}" in (ast.get_docstring(ast.parse(door.read_text())) or ""), command
    assert len(tops - set(COMMANDS)) <= 7, f"the kernel stays small: {sorted(tops - set(COMMANDS))}"


def test_no_job_module_shadows_a_standard_or_installed_module():
    """spark-submit runs jobs/<job>.py with jobs/ first on sys.path: a jobs/queue.py was imported for the standard
    `queue` (py4j's), and every job submitted by the DAG failed with "module 'queue' has no attribute 'Queue'"."""
    names = {path.stem for path in (ROOT / "jobs").glob("*.py")} | {path.name for path in (ROOT / "jobs").iterdir() if path.is_dir()}
    installed = set(metadata.packages_distributions())
    assert names & (set(sys.stdlib_module_names) | installed) == set()


def test_the_kernel_is_read_by_the_house_and_each_package_is_reached():
    """No package stands apart: each is imported by a door, a plugin, or a package above it."""
    code = [p for folder in ("jobs", "plugins", "dags", "tools") for p in (ROOT / folder).rglob("*.py")]
    reached = {target.split(".")[1] for path in code for target in imported(path) if target.count(".") >= 1}
    assert set(PACKAGES) <= reached
    assert jobs.__doc__ and all(f"{package}/" in jobs.__doc__ for package in PACKAGES)


def test_no_module_is_over_350_lines_and_no_function_over_60():
    """A newcomer reads a module whole and a function at a glance (issue #81)."""
    long_modules = [f"{path.relative_to(ROOT)}: {n}" for path in job_modules() if (n := len(path.read_text().splitlines())) > 350]
    long_functions = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1}"
        for path in job_modules()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno and node.end_lineno - node.lineno + 1 > 60
    ]
    assert long_modules == [] and long_functions == [], (long_modules, long_functions)
