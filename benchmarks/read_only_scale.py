"""Read-only data at the original datasets' scale: what a command and a step cost with 0 to 200,000 read-only
files, and `mlab check-task` of a task holding thousands of them, per sandbox.

1. Execute Script (the real action, in a run's environment: the guard's survey, the sandbox, the guard's look
   after) of a script that reads one image, with N read-only files in `data/images/` (`data/images/*`), per
   sandbox, beside a bare child running the same script in its own session (setsid, as mlab starts every
   command: with sched_autogroup a child left in this script's session would share its CPU); sizes, sandboxes
   and the bare child alternate round by round. Each size is reported as a ratio to the same sandbox with none
   and to the bare child (the median of each round's own ratio). Targets: 200,000 files <= 1.2x none, and for
   the unconfined sandbox <= 1.2x the bare child.
2. The harness's CPU for a step after a script (the guard before and after, and the snapshot a run takes), in the
   local and the unconfined sandbox (--step-sandboxes): 200,000 read-only files in the contrails layout (train/ of
   20,000 record folders of 10 files) beside 1,000 writable ones, and 150,000 so (target <= 10 ms), and 50,000
   writable files in folders of 100 (target <= 50 ms). Unconfined, the guard watches each read-only file and
   folder (a file past the user's inotify watch limit, fs.inotify.max_user_watches, gets a fanotify mark): what
   lies past both limits is polled, and said.
   The script changes one writable file; the sandbox's own CPU (the command's start and wait) is not counted,
   nor the snapshot after the first script (unconfined, a walk that also watches each writable file's inode:
   about 370 ms at 50,000 files, once).
3. `mlab check-task` of a declarative task (`mlab new-task`) whose prepare also writes N images and declares
   `images/*` read-only, per sandbox: PASSED or not, and its time.

Measured (2 shared cores, ext4 mounted with discard, other work running; load 4-12) with
`--skip-curve --skip-steps --check-sizes 200000`: check-task PASSED in local 375 s, bwrap 384 s, docker 566 s
(before read-only files were linked whatever their size and large trees removed in parallel: local 1,416 s,
docker unfinished after 34 min). At 20,000: local 36.9 / bwrap 98.6 / docker 219.5 s before, 18.9-34.7 /
23.3-53.0 / 46.6-50.6 s after (two runs).

    python benchmarks/read_only_scale.py [--sizes 0,1000,20000,200000] [--rounds 5]
                                         [--sandboxes unconfined,local,bwrap,docker]
                                         [--step-sandboxes local,unconfined] [--check-sizes 3000,200000]
                                         [--skip-curve] [--skip-steps] [--skip-check]
"""
from __future__ import annotations

import argparse
import functools
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.fixtures.docker_engine starts an engine as the tests do

from mlab.core.fs.bulk_remove import remove_tree  # noqa: E402
from mlab.core.models import Action  # noqa: E402
from mlab.core.plugins.registry import load_registry  # noqa: E402
from mlab.core.run.environment import Environment, EnvSettings  # noqa: E402
from mlab.core.run.readonly import read_only_rule  # noqa: E402
from mlab.core.run.snapshot import SnapshotStore  # noqa: E402
from mlab.core.sandbox.contract import Sandbox  # noqa: E402
from mlab.core.sandbox.limits import Limits  # noqa: E402
from mlab.core.sandbox.local import LocalSandbox, UnconfinedSandbox, namespace_prefix  # noqa: E402
from tests.fixtures.read_only_task import make_read_only_task  # noqa: E402

CURVE_TARGET = 1.2
STEP_TARGET_MS = {"200k read-only + 1k writable": 10.0, "150k read-only + 1k writable": 10.0,
                  "50k writable": 50.0}
IMAGE = b"\x89PNG" + bytes(60)


def sandbox_named(name: str) -> Sandbox | None:
    if name == "unconfined":
        return UnconfinedSandbox()
    if name == "local":
        return LocalSandbox() if namespace_prefix() is not None else None
    cls = load_registry().items["sandboxes"].get(name)
    if cls is None:
        return None
    ok, _why = cls.available()
    if not ok and name == "docker" and shutil.which("dockerd") and os.geteuid() == 0:
        from tests.fixtures import docker_engine

        if not docker_engine.ensure():
            ok, _why = cls.available()
    return cls() if ok else None


def write_files(folder: Path, count: int, data: bytes = IMAGE) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for number in range(count):
        fd = os.open(folder / f"{number:06d}.png", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, data)
        os.close(fd)


def environment(root: Path, sandbox: Sandbox, patterns: list[str], workspace: Path | None = None) -> Environment:
    workspace = workspace or root / "ws"
    return Environment(EnvSettings(
        workspace=workspace, read_only_patterns=patterns, sandbox=sandbox, store=SnapshotStore(root / "store"),
        pristine_dir=workspace, hidden_paths=[root / "hidden"], sandbox_home=root / "home",
        limits=Limits(timeout_s=120), python=sys.executable, extra_env={"MLAB_BENCH": uuid.uuid4().hex}))


def execute(env: Environment) -> float:
    started = time.perf_counter()
    observation, failed = env.execute(Action(name="Execute Script", args={"script_name": "read.py"}))
    if failed or "ok" not in observation:
        raise SystemExit(f"the script failed: {observation}")
    return time.perf_counter() - started


def bare_child(env: Environment) -> Callable[[], float]:
    """The script as a plain child process in a session of its own, as the sandboxes start it."""
    spec = env.exec_spec()
    argv = [sys.executable, "-u", "read.py"]

    def run() -> float:
        started = time.perf_counter()
        done = subprocess.run(argv, cwd=spec.cwd, env=spec.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, check=False, start_new_session=True)
        if b"ok" not in done.stdout:
            raise SystemExit(f"the bare child failed: {done.stdout!r}")
        return time.perf_counter() - started
    return run


def curve(scratch: Path, sizes: list[int], names: list[str], rounds: int) -> None:
    print(f"== Execute Script with N read-only files in data/images (median of {rounds} rounds, ms)")
    runners: dict[tuple[str, int], Callable[[], float]] = {}
    envs: list[Environment] = []
    for size in sizes:
        source = scratch / f"curve-{size}"
        write_files(source / "ws" / "data" / "images", size)
        # reads one image (when there is one), not the folder: the script's own cost stays the same at every size
        (source / "ws" / "read.py").write_text("import os\nos.path.exists('data/images/000000.png')\nprint('ok')\n")
        for name in names:
            sandbox = sandbox_named(name)
            if sandbox is None:
                continue
            root = scratch / f"env-{name}-{size}"
            root.mkdir()
            # one workspace per size, shared by the sandboxes: the script only reads
            env = environment(root, sandbox, ["data/images/*"], source / "ws")
            envs.append(env)
            execute(env)  # warm: the zygote, the container, the unconfined guard's watches
            runners[name, size] = functools.partial(execute, env)
            if ("bare", 0) not in runners:
                runners["bare", 0] = bare_child(env)
    times: dict[tuple[str, int], list[float]] = {key: [] for key in runners}
    keys = list(runners)
    for round_number in range(rounds):
        for key in keys[round_number % len(keys):] + keys[:round_number % len(keys)]:
            times[key].append(runners[key]())
    bare = times.get(("bare", 0))
    if bare:
        print(f"{'bare':>10}: {statistics.median(bare) * 1000:7.1f} ms (a plain child, setsid)")
    for name in names:
        row = [(size, times[name, size]) for size in sizes if (name, size) in times]
        if not row:
            print(f"{name}: not usable here")
            continue
        base = statistics.median(row[0][1]) if row[0][0] == 0 else None
        cells = []
        for size, values in row:
            ms = statistics.median(values) * 1000
            cell = f"{size:>7,}: {ms:7.1f} ms" + (f" ({ms / base / 1000:.2f}x)" if base else "")
            if bare:
                cell += f" [{statistics.median(a / b for a, b in zip(values, bare, strict=True)):.2f}x bare]"
            cells.append(cell)
        verdict = ""
        if row[-1][0] >= 200_000:
            last = statistics.median(row[-1][1])
            if base:
                met = "met" if last / base <= CURVE_TARGET else "NOT met"
                verdict = f"  -> 200k/none {last / base:.2f}x {met} (<= {CURVE_TARGET}x)"
            if bare and name == "unconfined":
                ratio = statistics.median(a / b for a, b in zip(row[-1][1], bare, strict=True))
                met = "met" if ratio <= CURVE_TARGET else "NOT met"
                verdict += f"; 200k/bare {ratio:.2f}x {met} (<= {CURVE_TARGET}x)"
        print(f"{name:>10}: " + " | ".join(cells) + verdict)
    for env in envs:
        past = past_the_limit(env)
        if past:
            print(f"{env.workspace.parent.name}:{past}")
        env.close()


def timed(function, spent: list[float]):  # the guard's CPU inside Execute Script
    def wrapper(*args):
        started = time.process_time()
        try:
            return function(*args)
        finally:
            spent.append(time.process_time() - started)
    return wrapper


def past_the_limit(env: Environment) -> str:
    """How much of the unconfined guard's record went unwatched (fs.inotify.max_user_watches, shared by all the
    user's processes, was reached, and fanotify's marks could not take the rest): each such file costs a stat,
    each such folder a listing, per look; and how many files fanotify marks."""
    watch = getattr(env.scripts.guard, "_watch", None)
    files, _recorded, folders = watch.unwatched() if watch is not None else (0, 0, 0)
    marked = sum(wd < 0 for wd in watch._rel_wd.values()) if watch is not None else 0
    said = f" [{marked:,} files marked by fanotify past the inotify watch limit]" if marked else ""
    if not (files or folders):
        return said
    return (said + f" [{files:,} files, {folders:,} folders past the inotify watch limit "
            f"({Path('/proc/sys/fs/inotify/max_user_watches').read_text().strip()}) and fanotify's: polled]")


def step_costs(scratch: Path, steps: int, names: list[str]) -> None:
    print(f"== harness CPU of a step after a script (median of {steps} steps)")
    layouts = {"200k read-only + 1k writable": (20_000, 10, 1_000),
               "150k read-only + 1k writable": (15_000, 10, 1_000), "50k writable": (0, 0, 50_000),
               "1k writable": (0, 0, 1_000)}
    for label, (records, per_record, writable) in layouts.items():
        root = scratch / f"step-{label.split()[0]}"
        ws = root / "ws"
        for record in range(records):
            write_files(ws / "train" / f"r{record:05d}", per_record)
        for folder in range(max(1, writable // 100)):
            write_files(ws / "src" / f"p{folder:03d}", min(100, writable))
        (ws / "read.py").write_text("open('src/p000/000000.png', 'ab').write(b'x')\nprint('ok')\n")
        patterns = ["train/*"]
        for name in names:
            sandbox = sandbox_named(name)
            if sandbox is None:
                print(f"{label:>30}, {name}: not usable here")
                continue
            shutil.rmtree(root / "store", ignore_errors=True)
            env = environment(root, sandbox, patterns)
            execute(env)  # warm: the zygote, the unconfined guard's first walk and watches
            store = env.s.store
            guard = env.scripts.guard
            spent: list[float] = []
            guard.survey, guard.restore = timed(guard.survey, spent), timed(guard.restore, spent)

            skip = read_only_rule(tuple(patterns))  # as a run's snapshots leave read-only files out
            store.record(ws, "s0", skip=skip, changes=store.changes)
            cpu, guard_cpu = [], []
            for number in range(1, steps + 1):
                spent.clear()
                execute(env)
                started = time.process_time()
                store.record(ws, f"s{number}", skip=skip, changes=store.changes)
                cpu.append((time.process_time() - started + sum(spent)) * 1000)
                guard_cpu.append(sum(spent) * 1000)
            past = past_the_limit(env)
            env.close()
            median = statistics.median(cpu)
            target = STEP_TARGET_MS.get(label)
            verdict = f" ({'met' if median <= target else 'NOT met'}: <= {target:g} ms)" if target else ""
            print(f"{label:>30}, {name:>10}: {median:7.2f} ms CPU (min {min(cpu):.2f}, max {max(cpu):.2f}; the "
                  f"guard {statistics.median(guard_cpu):.2f}){verdict}{past}", flush=True)
        remove_tree(root)


def check_task(scratch: Path, sizes: list[int], names: list[str]) -> None:
    print("== mlab check-task of a declarative task with N read-only images (images/*)")
    mlab = str(Path(sys.executable).with_name("mlab"))
    for size in sizes:
        task = make_read_only_task(scratch / f"ro-task-{size}", size, mlab)
        for name in names:
            if sandbox_named(name) is None:
                print(f"{size:>7,} files, {name:>6}: skipped (not usable here)")
                continue
            started = time.perf_counter()
            done = subprocess.run([mlab, "check-task", str(task), "--sandbox", name], capture_output=True,
                                  text=True, env={**os.environ, "MLAB_HOME": str(scratch / f"home-{size}-{name}")})
            seconds = time.perf_counter() - started
            verdict = "PASSED" if done.returncode == 0 and "PASSED" in done.stdout else f"FAILED ({done.returncode})"
            print(f"{size:>7,} files, {name:>6}: {verdict} in {seconds:.1f} s", flush=True)
            if not verdict.startswith("PASSED"):
                print((done.stdout + done.stderr)[-2000:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="0,1000,20000,200000")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--sandboxes", default="unconfined,local,bwrap,docker")
    parser.add_argument("--step-sandboxes", default="local,unconfined")
    parser.add_argument("--check-sizes", default="3000,200000")
    parser.add_argument("--skip-curve", action="store_true")
    parser.add_argument("--skip-steps", action="store_true")
    parser.add_argument("--skip-check", action="store_true")
    args = parser.parse_args()
    names = [n for n in args.sandboxes.split(",") if n]
    # Stopped (a timeout, a kill): the finally below still stops the engine and removes the scratch folder.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    scratch = Path(tempfile.mkdtemp(prefix="mlab-ro-scale-"))
    try:
        if not args.skip_curve:
            curve(scratch, [int(s) for s in args.sizes.split(",")], names, args.rounds)
        if not args.skip_steps:
            step_costs(scratch, args.steps, [n for n in args.step_sandboxes.split(",") if n])
        if not args.skip_check:
            check_task(scratch, [int(s) for s in args.check_sizes.split(",")], names)
    finally:
        remove_tree(scratch)  # hundreds of thousands of files: in parallel (see mlab.core.fs.bulk_remove)
        if "docker" in names:
            from tests.fixtures import docker_engine

            docker_engine.stop()  # only an engine this script started
    return 0


if __name__ == "__main__":
    sys.exit(main())
