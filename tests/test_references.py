"""What the code and the docs point a reader to exists: a section a message, docstring, comment or doc names in README,
docs/design.md or BENCHMARKS.md, and a function or name a comment or docstring tells the reader to use (issue #58)."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = {"README": ROOT / "README.md", "design.md": ROOT / "docs" / "design.md", "BENCHMARKS.md": ROOT / "BENCHMARKS.md"}
# Where a reader is pointed from: the code, its build, and the two documents a user reads.
SOURCES = [
    *sorted(ROOT.glob("jobs/**/*.py")), *sorted(ROOT.glob("jobs/**/*.java")), *sorted(ROOT.glob("plugins/**/*.py")),
    *sorted(ROOT.glob("dags/*.py")), *sorted(ROOT.glob("tools/*.py")), *sorted(ROOT.glob("bench/*.py")), *sorted(ROOT.glob("tests/*.py")),
    ROOT / "Makefile", ROOT / "README.md", ROOT / "docs" / "design.md",
]  # fmt: skip
# A document named, then the section's title in quotes: (docs/design.md, "Bounded metadata"), README 'Recovering a checkpoint'.
REFERENCE = re.compile(r"""\b(README|design\.md|BENCHMARKS\.md)(?:\.md)?\s*,?\s*(?:section\s+)?["'“]([A-Z][^"'”\n]{2,100}?)["'”]""")
# What a comment's or a docstring's continued line starts with, folded away so a reference may span lines.
CONTINUATION = re.compile(r"\n\s*(?:#|//|\*)?\s*")


def headings(document: Path) -> list[str]:
    """A document's sections: its headings, and the bold titles its paragraphs open with (**Batch size.** ...)."""
    lines = document.read_text().splitlines()
    bold = [match[1] for line in lines if (match := re.match(r"\*\*([^*]+?)\.?\*\*", line))]
    return [line.lstrip("#").strip() for line in lines if re.match(r"#{1,6} ", line)] + bold


def resolves(title: str, titles: list[str]) -> bool:
    """A heading is the title, or starts with it and goes on after a colon or a parenthesis ("A year of history: ...")."""
    return any(heading == title or re.match(re.escape(title) + r"\s*[:(,]", heading) for heading in titles)


def references() -> list[tuple[str, str, str]]:
    found = []
    for path in SOURCES:
        text = CONTINUATION.sub(" ", path.read_text())
        found += [(str(path.relative_to(ROOT)), document, title) for document, title in REFERENCE.findall(text)]
    return found


@pytest.mark.unit
def test_every_section_named_exists():
    titles = {name: headings(path) for name, path in DOCS.items()}
    found = references()
    assert len(found) > 30, "the pattern still finds the references"
    broken = sorted({(where, document, title) for where, document, title in found if not resolves(title, titles[document])})
    assert broken == [], broken


def prose_and_code(path: Path) -> tuple[str, set[str]]:
    """A Python file's prose (comments and docstrings) and the words of its code (names, and the words of its other
    strings: columns, keys, options)."""
    source = path.read_text()
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
        and isinstance(node.body[0].value.value, str)
    }
    prose: list[str] = []
    words: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            prose.append(node.value) if id(node) in docstrings else words.update(re.findall(r"\w+", node.value))
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            prose.append(token.string)
        elif token.type == tokenize.NAME:
            words.add(token.string)
    return "\n".join(prose), words


# Names of other projects' a comment may use: OCSF's types.
EXTERNAL = {"ip_t"}


@pytest.mark.unit
def test_every_function_or_name_the_prose_of_jobs_names_exists():
    """A snake_case name in a comment or docstring of jobs/ (`derive_columns`) is a name some code of the project has:
    a function, a variable, a column, a key."""
    code: set[str] = set()
    prose: dict[str, str] = {}
    for path in [*ROOT.glob("jobs/**/*.py"), *ROOT.glob("plugins/**/*.py"), *ROOT.glob("dags/*.py"), *ROOT.glob("tools/*.py")]:
        prose[str(path.relative_to(ROOT))], words = prose_and_code(path)
        code |= words
    for data in [*ROOT.glob("expectations/*.json"), *ROOT.glob("jobs/derived/rules/*.json"), *ROOT.glob("jobs/java/cloudtrail/*.java")]:
        code.update(re.findall(r"\w+", data.read_text()))
    unknown = sorted(
        (where, name)
        for where, text in prose.items()
        if where.startswith("jobs/")
        for name in set(re.findall(r"(?<![\w./$-])([a-z][a-z0-9]*(?:_[a-z0-9]+)+)(?![\w/])", text))
        if name not in code and name not in EXTERNAL
    )
    assert unknown == [], unknown


# A file of the project as README or design.md names it: a path (jobs/publishing/command.py) or a module's file name.
NAMED_FILE = re.compile(r"(?<![\w./])((?:\w[\w-]*/)*\w[\w-]*\.(?:py|java)|(?:\w[\w-]*/)+[\w-]+\.sql)\b")


@pytest.mark.unit
def test_every_file_readme_and_design_name_exists():
    """README's module map named modules that no longer existed (`ledger_search.py`, `run_summary.py`) (issue #81)."""
    every = (p.relative_to(ROOT) for p in ROOT.rglob("*") if p.suffix in (".py", ".java", ".sql"))
    files = [p for p in every if not {".venv", "build"} & set(p.parts)]  # the clone's own parts: it may sit under a build/
    names = {p.name for p in files}
    named = {(doc, m) for doc in ("README", "design.md") for m in NAMED_FILE.findall(DOCS[doc].read_text())}
    assert len(named) > 50, "the pattern still finds the files named"
    missing = sorted((doc, name) for doc, name in named if not (ROOT / name).exists() and not (ROOT / "jobs" / name).exists()
                     and ("/" in name or name not in names))  # fmt: skip
    assert missing == [], missing


@pytest.mark.unit
def test_the_architecture_readme_draws_is_the_code_s():
    """README draws the packages as jobs.PACKAGES orders them, top down, and its table has a row for each and no other."""
    from jobs import PACKAGES

    text = DOCS["README"].read_text()
    drawn = next(line for line in text.splitlines() if line.lstrip().startswith("investigations/ ->") or " -> landing/" in line)
    assert [name.strip().rstrip("/") for name in drawn.split("->")] == list(reversed(PACKAGES))
    rows = re.findall(r"(?m)^\| `jobs/(\w+)/` \|", text)
    assert sorted(rows) == sorted(PACKAGES)


@pytest.mark.unit
def test_readme_and_design_hold_no_commit_ids_or_sittings():
    """Figures and their history go to BENCHMARKS.md and CHANGELOG.md: README's "Tests" section was a log of sittings
    ("a later sitting (2026-11-28) ... edac3c9 16 min 44 s") (issue #81)."""
    commit = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
    for name in ("README", "design.md"):
        text = DOCS[name].read_text()
        assert commit.findall(text) == [] and not re.search(r"\bsittings?\b|\bthis stop\b", text), name
