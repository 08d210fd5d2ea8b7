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


def top_level_names(path: Path) -> set[str]:
    """What a module defines at its top: functions, classes and assigned names (not what it imports)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def test_the_packages_are_the_folders_of_jobs_and_each_names_what_others_may_use():
    """Each name a package's `__all__` lists is defined in exactly one of its modules and is reached as
    jobs.<package>.<name>; a command's entry points are not listed (issue #81: `__all__` listed modules, so 42 of
    50 were public)."""
    folders = sorted(p.name for p in (ROOT / "jobs").iterdir() if (p / "__init__.py").exists())
    assert folders == sorted(PACKAGES)
    for package in PACKAGES:
        module = importlib.import_module(f"jobs.{package}")
        defined = {p.stem: top_level_names(p) for p in (ROOT / "jobs" / package).glob("*.py") if p.stem != "__init__"}
        for name in module.__all__:
            homes = [stem for stem, names in defined.items() if name in names]
            assert len(homes) == 1 and name not in jobs.ENTRY_POINTS, (package, name, homes)
            assert getattr(module, name) is getattr(importlib.import_module(f"jobs.{package}.{homes[0]}"), name)
    public = sum(len(importlib.import_module(f"jobs.{package}").__all__) for package in PACKAGES)
    every = sum(len(top_level_names(p)) for p in job_modules() if p.parent.name in PACKAGES)
    assert public < every / 3, f"{public} of {every} names are public"


def used_from_other_packages(path: Path) -> list[tuple[str, str]]:
    """(package, name) for each name of another package `path` uses: imported from one of its modules, or read as
    an attribute of one of its modules imported whole."""
    me = module_name(path)
    tree = ast.parse(path.read_text())
    used, whole = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "jobs":
            parts = node.module.split(".")
            if len(parts) < 2 or parts[1] not in PACKAGES or me.startswith(f"jobs.{parts[1]}"):
                continue
            for alias in node.names:
                if len(parts) == 2 and (ROOT / "jobs" / parts[1] / f"{alias.name}.py").exists():
                    whole[alias.asname or alias.name] = parts[1]
                else:
                    used.append((parts[1], alias.name))
    used += [
        (whole[node.value.id], node.attr)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in whole
    ]
    return used


def test_other_packages_use_only_the_names_a_package_makes_public():
    """Tests and benchmarks may look inside a package; the code (jobs, plugins, DAGs, tools) uses what its `__all__`
    names, and a command's entry points."""
    code = [p for folder in ("jobs", "plugins", "dags", "tools") for p in (ROOT / folder).rglob("*.py")]
    private = sorted(
        f"{path.relative_to(ROOT)} -> jobs.{package}: {name}"
        for path in code
        for package, name in used_from_other_packages(path)
        if name not in importlib.import_module(f"jobs.{package}").__all__ and name not in jobs.ENTRY_POINTS
    )
    assert private == []


def test_each_command_is_a_door_that_runs_its_package_s_main():
    """`python -m jobs.<command>` and `spark-submit jobs/<command>.py` keep their paths; the door only runs `main`."""
    tops = {p.stem for p in (ROOT / "jobs").glob("*.py")} - {"__init__"}
    assert set(COMMANDS) <= tops
    for command in COMMANDS:
        door = ROOT / "jobs" / f"{command}.py"
        (target,) = imported(door)
        assert layer(target) < DOOR and callable(importlib.import_module(target).main), command
        # Usage is written once, in the implementation; the door's docstring is one line pointing there (issue #81).
        implementation = ROOT.joinpath(*target.split(".")).with_suffix(".py")
        doc = ast.get_docstring(ast.parse(door.read_text())) or ""
        assert "\n" not in doc and f"python -m jobs.{command}" in doc and str(implementation.relative_to(ROOT)) in doc, command
        assert f"python -m jobs.{command}" in (ast.get_docstring(ast.parse(implementation.read_text())) or ""), command
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
