"""Snapshot cost against workspace size: mlab's store now, the store before the tree of folder listings (taken
from git, same machine, same run) and the original benchmark's per-step save (every non-read-only file copied
each step, re-implemented from its description), on the same workspaces.

Workspaces: N files of --file-bytes in folders of 100 (src/pNNN/fNNNNN.py). Per size it reports:
  first snapshot (into an empty store, ending with its syncfs), beside `cp -r` of the same tree with and without
  a sync after it: --first-rounds rounds, alternating, medians and the median of the per-round ratios;
  a step after agent code changed one file (the stat walk), beside a bare Python stat walk of the tree (through
  folder descriptors, as the store walks) and `find -printf` of inode, size and times (the C floor): wall and CPU,
  in µs per file, alternating step by step; from split_walk.MIN_ENTRIES files also beside a second store whose
  walk is done in one process (no forked child for half the folders), the two alternating step by step; CPU
  includes the forked child's;
  a step after Write File (the one path), and a step that changed nothing (List Files);
  bytes stored after --steps steps changing one file each, beyond the first snapshot.
Rounds alternate between the implementations so machine load affects them alike; compare ratios, not times.

    python benchmarks/snapshot_scale.py [--sizes 1000,10000,100000] [--steps 20] [--first-rounds 3]
                                        [--old-rev REV] [--old-max-files 10000] [--walk-rev REV --walk-rounds 15]

--walk-rev REV adds, per size, the walk alone (Scanner.scan over the recorded tree, nothing changed, no commit)
of tree_index.py at REV beside today's and the bare stat walk, alternating round by round: CPU and wall medians
and the medians of per-round ratios to the bare walk.
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from mlab.core.fs import split_walk
from mlab.core.fs.dirfd import WalkLimits, list_dir, open_dir_at, open_root
from mlab.core.fs.tree_index import Scanner
from mlab.core.run.snapshot import SnapshotStore

REPO = Path(__file__).resolve().parents[1]
OLD_REV = "0a79632^"  # the last commit with flat manifests, a stat cache per path and an fsync per object
FOLDER_FILES = 100
TARGET_STEP_MS_50K = 150.0
TARGET_FIRST_VS_CP = 2.0
FIND_FORMAT = "%i %s %T@ %C@\\n"  # what the store compares: inode, size, mtime, ctime


def module_at(rev: str, repo_path: str, name: str, scratch: Path) -> ModuleType:
    """The module at repo_path as it was at rev, loaded under name beside today's."""
    source = subprocess.run(["git", "show", f"{rev}:{repo_path}"], cwd=REPO, check=True,
                            capture_output=True).stdout
    path = scratch / f"{name}.py"
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def old_store_module(rev: str, scratch: Path) -> ModuleType:
    return module_at(rev, "core/run/snapshot.py", "old_snapshot", scratch)


def tree_index_at(rev: str, scratch: Path) -> ModuleType:
    return module_at(rev, "core/fs/tree_index.py", "rev_tree_index", scratch)


def walks_beside_rev(ws: Path, store: SnapshotStore, rev_module: ModuleType, rounds: int) -> None:
    """The walk of a recorded, unchanged tree by Scanner at the given revision and now, beside the bare walk."""
    assert store._index is not None
    tree, skip = store._index[2], store._index[1]

    def scan_with(scanner: Any) -> Callable[[], None]:
        def run() -> None:
            root = open_root(ws)
            try:
                scanner(store._record, skip, WalkLimits(), 0).scan(root, "", tree, 0)
            finally:
                os.close(root)
        return run

    walks = {"bare": lambda: stat_walk(ws), "rev": scan_with(rev_module.Scanner), "now": scan_with(Scanner)}
    times: dict[str, list[tuple[float, float]]] = {label: [] for label in walks}
    for round_ in range(rounds):
        for label in (list(walks) if round_ % 2 == 0 else list(walks)[::-1]):
            times[label].append(timed(walks[label]))
    files = sum(1 for _ in ws.rglob("*"))
    for label, values in times.items():
        wall, cpu = (statistics.median(v[i] for v in values) for i in (0, 1))
        to_bare = [statistics.median(v[i] / b[i] for v, b in zip(values, times["bare"], strict=True)) for i in (0, 1)]
        print(f"walk alone, {label:4s}: {wall * 1e6 / files:.2f} / {cpu * 1e6 / files:.2f} µs per entry wall / CPU "
              f"= {to_bare[0]:.3f}x / {to_bare[1]:.3f}x the bare walk")


def make_workspace(root: Path, files: int, file_bytes: int) -> list[Path]:
    paths = []
    for i in range(files):
        folder = root / "src" / f"p{i // FOLDER_FILES:03d}"
        if i % FOLDER_FILES == 0:
            folder.mkdir(parents=True)
        path = folder / f"f{i:06d}.py"
        path.write_bytes(os.urandom(file_bytes))
        paths.append(path)
    return paths


def tree_bytes(folder: Path) -> int:
    total = 0
    for base, _dirs, names in os.walk(folder):
        for name in names:
            total += os.lstat(os.path.join(base, name)).st_blocks * 512
    return total


def stat_walk(root: Path) -> int:
    """lstat of every entry through folder descriptors: the floor of any walk that must see every change."""
    count = 0
    pending = [open_root(root)]
    while pending:
        fd = pending.pop()
        try:
            for name, st in list_dir(fd):
                count += 1
                if st is not None and (st.st_mode & 0o170000) == 0o040000:
                    pending.append(open_dir_at(fd, name))
        finally:
            os.close(fd)
    return count


def find_walk(root: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of `find -printf` of every entry's stat, after a sync like timed()."""
    os.sync()
    before, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(["find", str(root), "-printf", FIND_FORMAT], check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - wall, (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)


def timed(action: Callable[[], Any]) -> tuple[float, float]:
    """(wall, CPU) seconds of one call, after flushing what earlier calls left unwritten (a sync of the file
    system would otherwise pay for the copies of the implementation timed before it)."""
    os.sync()
    wall, cpu = time.perf_counter(), _cpu_s()
    action()
    return time.perf_counter() - wall, _cpu_s() - cpu


def _cpu_s() -> float:
    """CPU seconds of this process and of its children that ended (the split walk's forked child, cp)."""
    return sum(u.ru_utime + u.ru_stime for u in map(resource.getrusage, (resource.RUSAGE_SELF,
                                                                          resource.RUSAGE_CHILDREN)))


def one_process(action: Callable[[], Any]) -> Callable[[], Any]:
    """The action with the walk after agent code left to this process alone (no forked child for half)."""
    def unsplit() -> Any:
        saved, split_walk.MIN_ENTRIES = split_walk.MIN_ENTRIES, sys.maxsize
        try:
            return action()
        finally:
            split_walk.MIN_ENTRIES = saved
    return unsplit


class Original:
    """The original benchmark's save: every file copied into a folder per step."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir()

    def take(self, workspace: Path, name: str) -> None:
        shutil.copytree(workspace, self.root / name, symlinks=True)


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


def _remove(tree: Path) -> None:
    """Delete a copy, and flush the deletion now: on a file system mounted with `discard`, the freed blocks are
    discarded at the next journal commit, which would otherwise be the next timed copy's sync."""
    shutil.rmtree(tree)
    os.sync()


def run_size(files: int, args: argparse.Namespace, old: ModuleType | None, scratch: Path) -> dict[str, Any]:
    ws = scratch / f"ws{files}"
    paths = make_workspace(ws, files, args.file_bytes)
    os.sync()
    row: dict[str, Any] = {"files": files}
    # first snapshot, beside cp -r, alternating (each into an empty target; the page cache is warm for all alike)
    cp_target = scratch / f"cp{files}"
    firsts: dict[str, list[tuple[float, float]]] = {"cp": [], "cp_sync": [], "new": []}
    for round_ in range(args.first_rounds):
        order = ["cp", "cp_sync", "new"] if round_ % 2 == 0 else ["new", "cp_sync", "cp"]
        for label in order:
            if label == "new":
                store = SnapshotStore(scratch / f"first{files}")
                firsts[label].append(timed(lambda s=store: s.record(ws, "step_0000", changes=s.changes)))
                _remove(scratch / f"first{files}")
                continue
            # the store's first snapshot ends with a sync that makes it durable: cp_sync does too
            command = ["cp", "-r", str(ws), str(cp_target)]
            firsts[label].append(timed(lambda c=command, sync=label == "cp_sync": (
                subprocess.run(c, check=True), os.sync() if sync else None)))
            _remove(cp_target)
    row["cp_s"] = statistics.median(w for w, _c in firsts["cp"])
    row["cp_sync_s"] = statistics.median(w for w, _c in firsts["cp_sync"])
    row["new_first_s"] = statistics.median(w for w, _c in firsts["new"])
    row["new_first_cpu_s"] = statistics.median(c for _w, c in firsts["new"])
    row["first_vs_cp"] = statistics.median(n[0] / c[0] for n, c in zip(firsts["new"], firsts["cp"], strict=True))
    row["first_vs_cp_sync"] = statistics.median(n[0] / c[0] for n, c in zip(firsts["new"], firsts["cp_sync"],
                                                                             strict=True))
    new = SnapshotStore(scratch / f"new{files}")
    new.record(ws, "step_0000", changes=new.changes)
    stores: dict[str, Any] = {"new": new}
    if files >= split_walk.MIN_ENTRIES:  # the same store's walk without its forked child, step by step beside it
        unsplit = SnapshotStore(scratch / f"unsplit{files}")
        unsplit.record(ws, "step_0000", changes=unsplit.changes)
        stores["unsplit"] = unsplit
    if old is not None and files <= args.old_max_files:
        old_store = old.SnapshotStore(scratch / f"old{files}")
        row["old_first_s"] = timed(lambda: old_store.take(ws, "step_0000"))[0]
        stores["old"] = old_store
    if files <= args.old_max_files:
        original = Original(scratch / f"orig{files}")
        row["orig_first_s"] = timed(lambda: original.take(ws, "step_0000"))[0]
        stores["orig"] = original
    if args.walk_rev:
        walks_beside_rev(ws, new, tree_index_at(args.walk_rev, scratch), args.walk_rounds)
    base = {name: tree_bytes(scratch / f"{name}{files}") for name in stores}
    walks, finds, script, write, idle = [], [], {name: [] for name in stores}, [], []
    for step in range(1, args.steps + 1):
        name = f"step_{step:04d}"
        walks.append(timed(lambda: stat_walk(ws)))
        finds.append(find_walk(ws))
        paths[(step * 7919) % files].write_bytes(os.urandom(1000))  # agent code changed one file
        for label in list(stores) if step % 2 else list(stores)[::-1]:  # alternating: load hits all alike
            store = stores[label]
            if label in ("new", "unsplit"):
                store.changes.ran_agent_code()
                call = functools.partial(store.record, ws, name, changes=store.changes)
                script[label].append(timed(call if label == "new" else one_process(call)))
            else:
                script[label].append(timed(lambda s=store, n=name: s.take(ws, n)))
    for label in stores:
        row[f"{label}_bytes_after"] = tree_bytes(scratch / f"{label}{files}") - base[label]
    for step in range(args.steps + 1, 2 * args.steps + 1):  # Write File, then List Files: new only
        target = paths[(step * 7919) % files]
        target.write_bytes(os.urandom(1000))
        write.append(timed(lambda s=step: new.record(ws, f"step_{s:04d}w", changes=new.changes)))
        idle.append(timed(lambda s=step: new.record(ws, f"step_{s:04d}i", changes=new.changes)))
    row["walk_ms"] = median_ms([w for w, _c in walks])
    row["walk_cpu_ms"] = median_ms([c for _w, c in walks])
    row["find_ms"] = median_ms([w for w, _c in finds])
    row["find_cpu_ms"] = median_ms([c for _w, c in finds])
    row["step_vs_walk"] = statistics.median(n[0] / w[0] for n, w in zip(script["new"], walks, strict=True))
    row["step_vs_walk_cpu"] = statistics.median(n[1] / w[1] for n, w in zip(script["new"], walks, strict=True))
    for label in stores:
        row[f"{label}_step_ms"] = median_ms([w for w, _c in script[label]])
        row[f"{label}_step_cpu_ms"] = median_ms([c for _w, c in script[label]])
    if "unsplit" in script:
        row["split_vs_unsplit"] = statistics.median(n[0] / u[0] for n, u in zip(script["new"], script["unsplit"],
                                                                                 strict=True))
    row["new_write_ms"] = median_ms([w for w, _c in write])
    row["new_write_cpu_ms"] = median_ms([c for _w, c in write])
    row["new_idle_ms"] = median_ms([w for w, _c in idle])
    row["new_idle_cpu_ms"] = median_ms([c for _w, c in idle])
    for label in stores:
        shutil.rmtree(scratch / f"{label}{files}", ignore_errors=True)
    shutil.rmtree(ws)
    return row


def report(row: dict[str, Any], steps: int) -> None:
    n = row["files"]
    print(f"\n== {n} files ==")
    first = (f"first snapshot: new {row['new_first_s']:.2f} s ({row['new_first_cpu_s']:.2f} s CPU) = "
             f"{row['first_vs_cp_sync']:.2f}x cp -r + sync ({row['cp_sync_s']:.2f} s), "
             f"{row['first_vs_cp']:.2f}x cp -r alone ({row['cp_s']:.2f} s) (median of per-round ratios; "
             f"target <= {TARGET_FIRST_VS_CP:g}x cp -r)")
    if "old_first_s" in row:
        first += f"; old {row['old_first_s']:.2f} s (new/old {row['new_first_s'] / row['old_first_s']:.3f})"
    if "orig_first_s" in row:
        first += f"; original {row['orig_first_s']:.2f} s"
    print(first)

    def per_file(ms: float) -> str:
        return f"{ms * 1000 / n:.2f}"

    print(f"walk of every entry, µs per file, wall / CPU: mlab step after a script {per_file(row['new_step_ms'])} / "
          f"{per_file(row['new_step_cpu_ms'])}; bare Python stat walk {per_file(row['walk_ms'])} / "
          f"{per_file(row['walk_cpu_ms'])}; find -printf {per_file(row['find_ms'])} / {per_file(row['find_cpu_ms'])}")
    line = (f"step after agent code changed one file: new {row['new_step_ms']:.1f} ms "
            f"({row['new_step_cpu_ms']:.1f} ms CPU) = {row['step_vs_walk']:.2f}x the bare stat walk "
            f"({row['step_vs_walk_cpu']:.2f}x its CPU; medians of per-step ratios)")
    if "unsplit_step_ms" in row:
        line += (f"; in one process {row['unsplit_step_ms']:.1f} ms ({row['unsplit_step_cpu_ms']:.1f} ms CPU; "
                 f"split / one process {row['split_vs_unsplit']:.2f}x wall, median of per-step ratios)")
    if "old_step_ms" in row:
        line += f"; old {row['old_step_ms']:.1f} ms (new/old {row['new_step_ms'] / row['old_step_ms']:.3f})"
    if "orig_step_ms" in row:
        line += f"; original {row['orig_step_ms']:.1f} ms (new/original {row['new_step_ms'] / row['orig_step_ms']:.4f})"
    print(line)
    print(f"step after Write File: {row['new_write_ms']:.2f} ms ({row['new_write_cpu_ms']:.2f} ms CPU); "
          f"step that changed nothing: {row['new_idle_ms']:.2f} ms ({row['new_idle_cpu_ms']:.2f} ms CPU)")
    stored = f"bytes stored by {steps} steps beyond the first snapshot: new {row['new_bytes_after'] / 1e6:.2f} MB"
    if "old_bytes_after" in row:
        stored += f"; old {row['old_bytes_after'] / 1e6:.2f} MB " \
                  f"(new/old {row['new_bytes_after'] / row['old_bytes_after']:.3f})"
    if "orig_bytes_after" in row:
        stored += f"; original {row['orig_bytes_after'] / 1e6:.1f} MB " \
                  f"(new/original {row['new_bytes_after'] / row['orig_bytes_after']:.4f})"
    print(stored)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--file-bytes", type=int, default=1000)
    parser.add_argument("--first-rounds", type=int, default=3, help="rounds of first snapshot beside cp -r")
    parser.add_argument("--old-rev", default=OLD_REV)
    parser.add_argument("--old-max-files", type=int, default=10_000,
                        help="compare with the old store and the original's save up to this size (both are slow)")
    parser.add_argument("--walk-rev", default=None, help="also time the walk alone of tree_index.py at this rev")
    parser.add_argument("--walk-rounds", type=int, default=15)
    parser.add_argument("--dir", default=None, help="scratch folder (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mlab-snapshot-scale-", dir=args.dir) as tmp:
        scratch = Path(tmp)
        try:
            old = old_store_module(args.old_rev, scratch)
        except subprocess.CalledProcessError:
            print(f"(no old store: {args.old_rev} is not in this checkout)", file=sys.stderr)
            old = None
        for size in (int(s) for s in args.sizes.split(",")):
            row = run_size(size, args, old, scratch)
            report(row, args.steps)
            if size >= 50_000 and row["new_step_ms"] > TARGET_STEP_MS_50K:
                print(f"  step above the {TARGET_STEP_MS_50K:g} ms target at {size} files")
            if row["first_vs_cp"] > TARGET_FIRST_VS_CP:
                print(f"  first snapshot above the {TARGET_FIRST_VS_CP:g}x cp -r target at {size} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
