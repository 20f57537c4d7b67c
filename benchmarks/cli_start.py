"""Start-up of the CLI against the imports it cannot avoid, interleaved (the machine is shared and noisy).

`mlab --help` against `python -c "import click"`; `mlab list-plugins` against importing click, pydantic, rich
and pluggy (what listing plugins needs). Targets (issue 14): at most 1.2x and 1.5x, median of the pairwise
ratios.

    python benchmarks/cli_start.py [--rounds N]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

PAIRS = {
    "mlab --help": ([sys.executable, "-m", "mlab.cli.main", "--help"], "import click", 1.2),
    "mlab list-plugins": ([sys.executable, "-m", "mlab.cli.main", "list-plugins"],
                          "import click, pydantic, rich, pluggy", 1.5),
}


def wall(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    rounds = parser.parse_args().rounds
    for name, (command, imports, target) in PAIRS.items():
        floor = [sys.executable, "-c", imports]
        wall(command), wall(floor)  # warm the page cache
        ratios, ours, theirs = [], [], []
        for _ in range(rounds):
            a, b = wall(command), wall(floor)
            ours.append(a)
            theirs.append(b)
            ratios.append(a / b)
        ratio = statistics.median(ratios)
        print(f"{name}: median {statistics.median(ours) * 1000:.0f} ms against {imports!r} "
              f"{statistics.median(theirs) * 1000:.0f} ms: {ratio:.2f}x (target <= {target}x): "
              f"{'OK' if ratio <= target else 'OVER'}")


if __name__ == "__main__":
    main()
