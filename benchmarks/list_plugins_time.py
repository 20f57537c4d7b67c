"""Wall time of `mlab list-plugins` with every built-in plugin installed. Target: median <= 0.3 s."""
from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

RUNS = 15


def main() -> None:
    mlab = shutil.which("mlab") or str(Path(sys.executable).with_name("mlab"))
    subprocess.run([mlab, "list-plugins"], check=True, capture_output=True)  # warm the page cache
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        subprocess.run([mlab, "list-plugins"], check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    median = statistics.median(times)
    print(f"mlab list-plugins: median {median:.3f} s, min {min(times):.3f} s, max {max(times):.3f} s "
          f"over {RUNS} runs (target <= 0.300 s): {'OK' if median <= 0.3 else 'OVER TARGET'}")


if __name__ == "__main__":
    main()
