"""Every MLAgentBench task on raw data of its original's shape (tests/fixtures/real_shapes.py): for each dataset,
generate it (timed; kept for the next run, see `cached`), prepare the task from it with `mlab prepare`, then
`mlab check-task` in each sandbox (local, bwrap, docker where usable), and print task x sandbox: PASSED, FAILED
or skipped with the seconds it took, then why each one that did not pass did not.

The data is noise with a weak learnable signal, not the competitions': a FAILED whose reason is the margin says
the reference could not beat the starter on it; any other reason (a prepare, a script or a sandbox that broke)
is the harness's or the task's. The GPU tasks are skipped on a machine without a GPU (--allow-no-gpu runs them
on the CPU: the full identify-contrails and fathomnet starters then take hours). Everything (data, homes,
workspaces, TMPDIR) is in one folder on one file system: the contrails arrays are sparse files that prepare and
the workspaces hard-link, and a copy would write all of their 240 GB.

    python benchmarks/real_shapes.py [--datasets fathomnet,identify-contrails,cifar10,babylm]
        [--sandboxes local,bwrap,docker] [--scale 1.0] [--root DIR] [--timeout 2h] [--allow-no-gpu]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fixtures import real_shapes  # noqa: E402

TASKS = {"fathomnet": ["fathomnet", "fathomnet-cpu"],
         "identify-contrails": ["identify-contrails", "identify-contrails-cpu"],
         "cifar10": ["cifar10"], "babylm": ["babylm", "babylm-cpu"]}
MLAB = [str(Path(sys.executable).parent / "mlab")]  # the CLI of this environment, as a person runs it


def usable_sandboxes(names: list[str], own_engine: bool) -> tuple[list[str], dict[str, str]]:
    """The sandboxes of names that work here, and why each other one does not."""
    from mlab.core.plugins.registry import load_registry
    from mlab.core.sandbox.local import namespace_prefix

    usable, why_not = [], {}
    sandboxes = load_registry().items["sandboxes"]
    for name in names:
        if name == "local":
            if namespace_prefix() is None:
                why_not[name] = "no mount/PID namespaces here"
            else:
                usable.append(name)
            continue
        cls = sandboxes.get(name)
        if cls is None:
            why_not[name] = "the plugin is not installed"
            continue
        ok, why = cls.available()
        if not ok and name == "docker" and own_engine and os.geteuid() == 0 and shutil.which("dockerd"):
            from tests.fixtures import docker_engine  # an engine of its own, as the tests start one

            why = docker_engine.ensure()
            ok, why = cls.available() if not why else (False, why)
        if ok:
            usable.append(name)
        else:
            why_not[name] = why
    return usable, why_not


def run(argv: list[str], env: dict[str, str], timeout: float) -> tuple[int, str, float]:
    started = time.monotonic()
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)
        return done.returncode, done.stdout + done.stderr, time.monotonic() - started
    except subprocess.TimeoutExpired as exc:
        return 124, f"timed out after {timeout:.0f} s: {exc.stdout or ''}", time.monotonic() - started


def one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + " ..."


def check(task: str, data_dir: Path, sandbox: str, root: Path, env: dict[str, str], timeout: str,
          wall_limit: float) -> dict:
    """`mlab check-task` of task in sandbox, in a fresh home under root (removed afterwards, untimed)."""
    home = root / f"check-home-{task}-{sandbox}"
    shutil.rmtree(home, ignore_errors=True)
    code, output, seconds = run([*MLAB, "check-task", f"mlagentbench/{task}", "--data-dir", str(data_dir),
                                 "--home", str(home), "--sandbox", sandbox, "--timeout", timeout, "--json"],
                                env, wall_limit)
    shutil.rmtree(home, ignore_errors=True)
    try:
        report = json.loads(output[output.index("["):])[0]
    except (ValueError, IndexError):
        report = {"status": "failed", "reason": f"exit {code}: {one_line(output[-2000:])}"}
    report["wall"] = seconds
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default=",".join(TASKS))
    parser.add_argument("--tasks", help="tasks to check (default: every task of the datasets)")
    parser.add_argument("--sandboxes", default="local,bwrap,docker")
    parser.add_argument("--scale", type=float, default=1.0, help="counts of the originals times this")
    parser.add_argument("--babylm-scale", type=float, default=None, help="babylm's scale (default: --scale)")
    parser.add_argument("--root", type=Path, default=None,
                        help="folder of everything (default: the cache of tests/fixtures/real_shapes.py)")
    parser.add_argument("--timeout", default="2h", help="check-task's limit of one script")
    parser.add_argument("--allow-no-gpu", action="store_true", help="run the GPU tasks without a GPU")
    parser.add_argument("--no-own-engine", action="store_true", help="never start a Docker engine for docker")
    args = parser.parse_args()
    # Stopped (timeout, kill): the finally below still stops the engine and removes the scratch folder.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    root = (args.root or real_shapes.cache_root()).resolve()
    scratch = root / f"bench-{os.getpid()}"  # of this run: two runs may share the data
    (scratch / "tmp").mkdir(parents=True)
    sandboxes, why_not = usable_sandboxes(args.sandboxes.split(","), not args.no_own_engine)
    # After the engine started: its DOCKER_HOST and image name reach the commands.
    env = {**os.environ, "TMPDIR": str(scratch / "tmp"), "MLAB_HOME": str(scratch / "home")}
    env.pop("MLAB_ALLOW_NO_GPU", None)
    if args.allow_no_gpu:
        env["MLAB_ALLOW_NO_GPU"] = "1"
    wall_limit = 6 * 3600.0

    rows: list[tuple[str, dict[str, str]]] = []
    notes: list[str] = []
    try:
        for dataset in args.datasets.split(","):
            scale = args.babylm_scale if dataset == "babylm" and args.babylm_scale is not None else args.scale
            options = {"scale": scale} if scale != 1.0 else {}
            kept = (root / real_shapes.cache_key(dataset, **options) / "written.json").is_file()
            written = real_shapes.cached(dataset, root, **options)
            print(f"{dataset}: generated {written.summary()}" + (" (kept from an earlier run)" if kept else ""),
                  flush=True)
            for note in written.notes:
                print(f"  {note}")
            tasks = [t for t in (args.tasks.split(",") if args.tasks else TASKS[dataset]) if t in TASKS[dataset]]
            for task in tasks:
                home = scratch / "home"
                shutil.rmtree(home, ignore_errors=True)
                # Prepare needs no GPU, only the data: the GPU tasks too.
                code, output, seconds = run([*MLAB, "prepare", f"mlagentbench/{task}", "--data-dir",
                                             str(written.data_dir)],
                                            {**env, "MLAB_HOME": str(home), "MLAB_ALLOW_NO_GPU": "1"}, wall_limit)
                shutil.rmtree(home, ignore_errors=True)
                prepared = "ok" if code == 0 else f"exit {code}"
                print(f"  mlab prepare {task}: {prepared} in {seconds:.0f} s"
                      + ("" if code == 0 else f": {one_line(output[-600:])}"), flush=True)
                cells = {"prepare": f"{'ok' if code == 0 else 'FAILED'} {seconds:.0f} s"}
                for sandbox in args.sandboxes.split(","):
                    if sandbox not in sandboxes:
                        cells[sandbox] = "skipped"
                        continue
                    report = check(task, written.data_dir, sandbox, scratch, env, args.timeout, wall_limit)
                    status = report.get("status", "failed")
                    cells[sandbox] = f"{status.upper() if status != 'skipped' else status} {report['wall']:.0f} s"
                    steps = ", ".join(f"{k} {v:.0f} s" for k, v in report.get("seconds", {}).items())
                    print(f"  check-task {task} --sandbox {sandbox}: {cells[sandbox]}"
                          + (f" ({steps})" if steps else ""), flush=True)
                    if status != "passed":
                        notes.append(f"{task} in {sandbox}: {status}: {one_line(report.get('reason', ''))}")
                        print(f"    {notes[-1]}", flush=True)
                rows.append((task, cells))
    finally:
        if "docker" in sandboxes and not args.no_own_engine:
            from tests.fixtures import docker_engine

            docker_engine.stop()  # only stops an engine this script started
        shutil.rmtree(scratch, ignore_errors=True)

    columns = ["prepare", *args.sandboxes.split(",")]
    width = max([len("task"), *(len(t) for t, _ in rows)])
    print("\n" + " | ".join(["task".ljust(width), *(c.ljust(14) for c in columns)]))
    print("-|-".join(["-" * width, *("-" * 14 for _ in columns)]))
    for task, cells in rows:
        print(" | ".join([task.ljust(width), *(cells.get(c, "").ljust(14) for c in columns)]))
    for name, why in why_not.items():
        print(f"{name}: skipped ({one_line(why)})")
    for note in notes:
        print(note)


if __name__ == "__main__":
    main()
