"""`gpuchain --help` CPU time against `python -c "import typer"`, alternated in one run.

Each round runs, one after the other, the baseline (the CLI framework alone) and the measured
commands as fresh processes, and takes each one's user + system CPU time from the kernel
(``RUSAGE_CHILDREN``), so load from other processes on the machine costs both alike. Prints
medians and ratios; the goal is ``gpuchain --help`` <= 2x the baseline.

    .venv/bin/python -m bench.cli.run [--rounds 20]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys

BASELINE = ("python -c 'import typer'", [sys.executable, "-c", "import typer"])
MEASURED = [
    ("gpuchain --help", [sys.executable, "-m", "gpuchain", "--help"]),
    ("gpuchain --version", [sys.executable, "-m", "gpuchain", "--version"]),
    ("gpuchain device-plugin --help", [sys.executable, "-m", "gpuchain", "device-plugin", "--help"]),
]


def cpu_of(cmd: list[str]) -> float:
    """CPU seconds (user + system) the command's process used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    times: dict[str, list[float]] = {name: [] for name, _ in [BASELINE, *MEASURED]}
    for _ in range(args.rounds):
        for name, cmd in [BASELINE, *MEASURED]:
            times[name].append(cpu_of(cmd))
    base = statistics.median(times[BASELINE[0]])
    print(f"CLI start-up CPU, median of {args.rounds} alternated rounds")
    print(f"{'command':<34}{'CPU ms':>9}{'x baseline':>12}")
    for name, values in times.items():
        ms = statistics.median(values) * 1000
        print(f"{name:<34}{ms:>9.1f}{ms / 1000 / base:>12.2f}")
    help_ratio = statistics.median(times[MEASURED[0][0]]) / base
    print(f"goal: gpuchain --help <= 2x the baseline: {help_ratio:.2f}x  {'ok' if help_ratio <= 2 else 'MISSED'}")


if __name__ == "__main__":
    main()
