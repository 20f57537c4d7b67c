"""Harness overhead per step: snapshot + trace write after one file changed.

Workspace: 1,000 files of 10 KB plus 200 MB of read-only data. Target: <= 10 ms a step, and snapshot storage
growing by the changed bytes only.
"""
from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from mlab.core.models import Action, RunConfig, Step, Trace
from mlab.core.run.readonly import is_read_only
from mlab.core.run.snapshot import SnapshotStore
from mlab.core.run.trace import write_trace

FILES = 1000
FILE_BYTES = 10_000
READ_ONLY_BYTES = 200 * 2**20
STEPS = 50
READ_ONLY = ["data/*"]


def tree_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="mlab-bench-") as scratch:
        root = Path(scratch)
        workspace, run_dir = root / "workspace", root / "run"
        (workspace / "src").mkdir(parents=True)
        (workspace / "data").mkdir()
        run_dir.mkdir()
        for i in range(FILES):
            (workspace / "src" / f"f{i:04d}.py").write_bytes(os.urandom(FILE_BYTES))
        chunk = os.urandom(2**20)
        with open(workspace / "data" / "train.bin", "wb") as f:
            for _ in range(READ_ONLY_BYTES // len(chunk)):
                f.write(chunk)
        store = SnapshotStore(run_dir)
        skip = lambda rel: is_read_only(rel, READ_ONLY)  # noqa: E731
        store.take(workspace, "step_0000", skip=skip)
        trace = Trace(run_id="bench", config=RunConfig(task="bench", agent="bench"), started_at=time.time())
        write_trace(run_dir, trace)
        objects_before = tree_bytes(run_dir / "objects")
        times = []
        for index in range(1, STEPS + 1):
            (workspace / "src" / f"f{index % FILES:04d}.py").write_bytes(os.urandom(FILE_BYTES))
            started = time.perf_counter()
            name = f"step_{index:04d}"
            store.take(workspace, name, skip=skip)
            trace.steps.append(Step(index=index, action=Action(name="Write File", args={"file_name": "x"}),
                                    observation="ok", started_at=time.time(), duration_s=0.0, snapshot=name))
            write_trace(run_dir, trace)
            times.append(time.perf_counter() - started)
        growth = tree_bytes(run_dir / "objects") - objects_before
        median = statistics.median(times) * 1000
        p95 = sorted(times)[int(len(times) * 0.95) - 1] * 1000
        print(f"per-step overhead (snapshot + trace), {FILES} x {FILE_BYTES // 1000} KB files + "
              f"{READ_ONLY_BYTES // 2**20} MB read-only: median {median:.2f} ms, p95 {p95:.2f} ms over {STEPS} steps "
              f"(target <= 10 ms): {'OK' if median <= 10 else 'OVER TARGET'}")
        print(f"object storage growth: {growth} bytes for {STEPS} changed files of {FILE_BYTES} bytes "
              f"= {growth / (STEPS * FILE_BYTES):.2f}x the changed bytes "
              f"(manifests: {tree_bytes(run_dir / 'snapshots') // STEPS} bytes a step)")


if __name__ == "__main__":
    main()
