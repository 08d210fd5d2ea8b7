"""Build jobs.zip, the job code spark-submit ships to the executors (--py-files).

python -m tools.package build/jobs.zip
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build_jobs_zip(target: Path) -> Path:
    """Every module of jobs/, as the package `jobs`, written whole or not at all."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial")
    with zipfile.ZipFile(partial, "w") as archive:
        for source in sorted((ROOT / "jobs").glob("*.py")):
            archive.write(source, f"jobs/{source.name}")
    partial.replace(target)
    return target


if __name__ == "__main__":
    print(build_jobs_zip(Path(sys.argv[1]).absolute()))
