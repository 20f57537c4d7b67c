"""Harness overhead per step: snapshot + trace write (the run's append-only trace log), for each kind of step.

Workspace: 1,000 files of 10 KB plus 200 MB of read-only data. Kinds of step, as the run loop tells the snapshot
store what changed:
  script  - agent code ran and changed one file: the store lstats the workspace, reads the changed file;
  write   - Write File changed one file: the store looks at that path alone;
  nothing - an action that ran no agent code and wrote nothing (List Files, Read File): the last snapshot is reused.
Targets (issue 14): <= 2 ms CPU a step when no agent code ran, <= 10 ms after a script that changed one file;
snapshot storage growing by the changed bytes only. Kinds alternate step by step so load affects them alike.
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
from mlab.core.run.trace_log import TraceLog

FILES = 1000
FILE_BYTES = 10_000
READ_ONLY_BYTES = 200 * 2**20
ROUNDS = 30
READ_ONLY = ["data/*"]
TARGET_CPU_MS = {"script": 10.0, "write": 2.0, "nothing": 2.0}


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

        def skip(rel: str) -> bool:
            return is_read_only(rel, READ_ONLY)

        store.record(workspace, "step_0000", skip=skip, changes=store.changes)
        trace = Trace(run_id="bench", config=RunConfig(task="bench", agent="bench"), started_at=time.time())
        trace_log = TraceLog(run_dir)  # as the run loop writes it: one appended, fdatasynced line a step
        trace_log.begin(trace)
        objects_before = SnapshotStore(run_dir).objects.digests()
        wall: dict[str, list[float]] = {kind: [] for kind in TARGET_CPU_MS}
        cpu: dict[str, list[float]] = {kind: [] for kind in TARGET_CPU_MS}
        snapshot_cpu: dict[str, list[float]] = {kind: [] for kind in TARGET_CPU_MS}
        changed = 0
        index = 0
        for _ in range(ROUNDS):
            for kind in TARGET_CPU_MS:
                index += 1
                if kind != "nothing":
                    target = workspace / "src" / f"f{index % FILES:04d}.py"
                    target.write_bytes(os.urandom(FILE_BYTES))
                    changed += 1
                    if kind == "script":
                        store.changes.ran_agent_code()
                os.sync()  # each step pays for its own durability only
                started, started_cpu = time.perf_counter(), time.process_time()
                name = f"step_{index:04d}"
                store.record(workspace, name, skip=skip, changes=store.changes)
                snapshot_cpu[kind].append(time.process_time() - started_cpu)
                trace.steps.append(Step(index=index, action=Action(name="Write File", args={"file_name": "x"}),
                                        observation="ok", started_at=time.time(), duration_s=0.0, snapshot=name))
                trace_log.append(trace)
                wall[kind].append(time.perf_counter() - started)
                cpu[kind].append(time.process_time() - started_cpu)
        reader = SnapshotStore(run_dir)
        new_objects = [reader.read_object(digest) for digest in reader.objects.digests() - objects_before]
        listings = sum(len(data) for data in new_objects if data[:2] in (b'{"', b"{}"))
        growth = sum(len(data) for data in new_objects)
        print(f"per-step overhead (snapshot + trace), {FILES} x {FILE_BYTES // 1000} KB files + "
              f"{READ_ONLY_BYTES // 2**20} MB read-only, {ROUNDS} steps of each kind (median):")
        for kind, target in TARGET_CPU_MS.items():
            median_cpu = statistics.median(cpu[kind]) * 1000
            print(f"  {kind:8s} {statistics.median(wall[kind]) * 1000:7.2f} ms wall, {median_cpu:6.2f} ms CPU "
                  f"(snapshot {statistics.median(snapshot_cpu[kind]) * 1000:5.2f} ms, the rest the trace) "
                  f"(target <= {target:g} ms CPU): {'OK' if median_cpu <= target else 'OVER TARGET'}")
        print(f"object storage growth: {growth - listings} bytes of file contents for {changed} changed files of "
              f"{FILE_BYTES} bytes = {(growth - listings) / (changed * FILE_BYTES):.2f}x the changed bytes, plus "
              f"{listings // changed} bytes of folder listings a changed file (src/ lists {FILES} files); "
              f"root listings: {tree_bytes(run_dir / 'snapshots') // index} bytes a step")
        trace_log.close()


if __name__ == "__main__":
    main()
