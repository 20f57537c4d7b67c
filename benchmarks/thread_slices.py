"""Two agent scripts at once in the local sandbox, each a scikit-learn HistGradientBoosting fit (OpenMP): without a
slice (every command starts as many OpenMP threads as the machine has cores) and with the slices of
`mlab bench --cpus-per-run 1` (one CPU and one thread each). Issue 42: a fit of the search agent took 1,531 s on a
shared 2-core machine without a slice, about 20 s with one thread.

    python benchmarks/thread_slices.py
"""
from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from mlab.core.sandbox.limits import Limits
from mlab.core.sandbox.local import LocalSandbox
from mlab.core.sandbox.spec import ExecSpec

FIT = """
import time
from sklearn.datasets import make_classification
from sklearn.ensemble import HistGradientBoostingClassifier
X, y = make_classification(n_samples=20000, n_features=40, random_state=0)
started = time.perf_counter()
HistGradientBoostingClassifier(max_iter=200, early_stopping=False, random_state=0).fit(X, y)
print(f"{time.perf_counter() - started:.1f}")
"""


def both(limits: list[Limits]) -> tuple[list[str], float]:
    """Each fit's seconds, and the wall time of the two together."""
    out = ["?", "?"]

    def one(i: int) -> None:
        with tempfile.TemporaryDirectory() as folder:
            result = LocalSandbox().run([sys.executable, "-c", FIT], ExecSpec(cwd=Path(folder), limits=limits[i]))
            out[i] = (result.output.strip().splitlines() or ["?"])[-1]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return out, time.perf_counter() - started


def main() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        sys.exit("thread_slices: needs 2 CPUs")
    print(f"{len(cpus)} CPUs, load {os.getloadavg()[0]:.1f}")
    for label, limits in (("--cpus-per-run 1", [Limits(cpus=1, cpu_set=[cpus[0]]), Limits(cpus=1, cpu_set=[cpus[1]])]),
                          ("no slice", [Limits(), Limits()])):
        fits, wall = both(limits)
        print(f"{label:>16}: fits {fits[0]} s and {fits[1]} s, both done in {wall:.1f} s", flush=True)


if __name__ == "__main__":
    main()
