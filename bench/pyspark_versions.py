"""This checkout against another checkout, in the same sitting: another pyspark (issue #32: pyspark 4.2 against 4.3),
or another commit (git worktree add --detach DIR <commit>, with its .venv and build/).

    make test-next-pyspark                                   # prepares build/pyspark-4.3.0: this commit on pyspark 4.3.0
    python -m bench.pyspark_versions build/pyspark-4.3.0 [--sizes 200000,1000000] [--rounds 3]

Each checkout runs with its own .venv: the product (`python -m jobs.cloudtrail_ingest`, a fresh lake) and the
peers C (batch + dropDuplicates) and A (plain batch) on the benchmark's real-shaped zones (bench.benchmark.zone),
whole process, the two checkouts alternating in each round (first one, then the other, then back). It prints
each median and the other checkout's speed against this one's, and the product's ratios against C and A under each.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

from bench.benchmark import BASELINES, ROOT, WORK, measure, product_command, zone

PEERS = {"C": BASELINES["dedup"], "A": BASELINES["spark_batch"]}


def python_of(checkout: Path) -> str:
    return str(checkout / ".venv" / "bin" / "python")


def version(checkout: Path) -> str:
    return subprocess.run(
        [python_of(checkout), "-c", "import pyspark; print(pyspark.__version__)"], capture_output=True, text=True, check=True
    ).stdout.strip()


def command(checkout: Path, system: str, landing: Path, out: Path) -> list[str]:
    python = python_of(checkout)
    if system == "product":
        return product_command(landing, out, python)
    return [python, str(checkout / "bench" / PEERS[system]), str(landing), str(out)]


def compare(checkouts: list[Path], records: int, rounds: int, scratch: Path) -> dict[tuple[str, Path], list[float]]:
    """Seconds per (system, checkout), the checkouts' order flipped every round."""
    landing = zone(records)
    seconds: dict[tuple[str, Path], list[float]] = {}
    for round_ in range(rounds):
        for system in ("product", *PEERS):
            for checkout in checkouts if round_ % 2 == 0 else checkouts[::-1]:
                out = scratch / "out"
                shutil.rmtree(out, ignore_errors=True)
                # `python -m` puts its working folder first on sys.path: each checkout runs its own code from its own folder.
                paths = {"PYTHONPATH": f"{checkout}:{checkout}/plugins"}
                wall, *_ = measure(command(checkout, system, landing, out), env=paths, cwd=checkout)
                seconds.setdefault((system, checkout), []).append(wall)
                print(f"{records:,} round {round_ + 1} {system} {checkout.name}: {wall:.1f} s", flush=True)
    return seconds


def table(results: dict[int, dict[tuple[str, Path], list[float]]], checkouts: list[Path], names: dict[Path, str]) -> str:
    this, other = checkouts
    lines = [
        f"| zone | system | {names[this]} s | {names[other]} s | {names[other]} speed | peer s / product s, {names[this]} | {names[other]} |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for records, seconds in results.items():
        median = {key: statistics.median(values) for key, values in seconds.items()}
        for system in ("product", *PEERS):
            runs = [", ".join(f"{s:.1f}" for s in seconds[(system, checkout)]) for checkout in checkouts]
            speed = median[(system, this)] / median[(system, other)]
            ratios = ["" if system == "product" else f"{median[(system, c)] / median[('product', c)]:.2f}x" for c in checkouts]
            lines.append(f"| {records:,} | {system} | {runs[0]} | {runs[1]} | {speed:.2f}x | {ratios[0]} | {ratios[1]} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("other", type=Path, help="another checkout with its own .venv and build/ (make test-next-pyspark, a worktree)")
    parser.add_argument("--sizes", default="200000,1000000")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    checkouts = [ROOT, args.other.resolve()]
    names = {checkout: f"{checkout.name}, pyspark {version(checkout)}" for checkout in checkouts}
    WORK.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=WORK) as scratch:
        results = {int(size): compare(checkouts, int(size), args.rounds, Path(scratch)) for size in args.sizes.split(",")}
    print(table(results, checkouts, names))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
