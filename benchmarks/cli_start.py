"""Start-up of the CLI against the imports it cannot avoid, interleaved (the machine is shared and noisy).

`mlab --help` against `python -c "import click"`; `mlab list-plugins` against importing click, pydantic, rich
and pluggy (what listing plugins needs). Targets (issue 14): at most 1.2x and 1.5x, median of the pairwise
ratios of wall time. The ratio of CPU time (user + system of each child) is printed beside it: on a loaded
machine it is the steadier of the two.

Every command runs once before the timed rounds with bytecode writing allowed, so no round compiles a module
(as for any installed mlab) even when PYTHONDONTWRITEBYTECODE is set.

    python benchmarks/cli_start.py [--rounds N]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

PAIRS = {
    "mlab --help": ([sys.executable, "-m", "mlab.cli.main", "--help"], "import click", 1.2),
    "mlab list-plugins": ([sys.executable, "-m", "mlab.cli.main", "list-plugins"],
                          "import click, pydantic, rich, pluggy", 1.5),
}


def timed(command: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of command."""
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed")
    return wall, usage.ru_utime + usage.ru_stime


def warm(command: list[str]) -> None:
    """One run that may write bytecode, and fills the page cache."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(command, check=True, capture_output=True, env=env)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    rounds = parser.parse_args().rounds
    for name, (command, imports, target) in PAIRS.items():
        floor = [sys.executable, "-c", imports]
        warm(command), warm(floor)
        ours, theirs = [], []
        for _ in range(rounds):
            ours.append(timed(command))
            theirs.append(timed(floor))
        wall_ratio = statistics.median(a[0] / b[0] for a, b in zip(ours, theirs, strict=True))
        cpu_ratio = statistics.median(a[1] / b[1] for a, b in zip(ours, theirs, strict=True))
        print(f"{name}: median {statistics.median(a[0] for a in ours) * 1000:.0f} ms against {imports!r} "
              f"{statistics.median(b[0] for b in theirs) * 1000:.0f} ms: {wall_ratio:.2f}x (target <= {target}x): "
              f"{'OK' if wall_ratio <= target else 'OVER'}; CPU time {cpu_ratio:.2f}x")


if __name__ == "__main__":
    main()
