"""Cost of each sandbox per Execute Script: the whole action (checks, sandbox start, Python start, output,
read-only check), for a script that only prints.

Sandboxes: fallback (the local sandbox without namespaces: a bare child process, the floor), local (namespaces;
commands forked by the run's zygote), local-fresh (the same confinement built afresh for each command by
confine.py, as where no zygote can be had), bwrap and docker where usable. Targets: local <= 1.3x the bare child
process; bwrap adds <= 50 ms per Execute Script against local. Each sandbox's cost is also given against the
bare child process, as a difference and a ratio. Rounds alternate between sandboxes so that machine load
affects them alike.

docker uses the engine `docker` reaches (DOCKER_HOST, MLAB_DOCKER_IMAGE); when there is none usable and this
runs as root with dockerd installed, it starts a daemon of its own as the tests do (tests/fixtures/docker_engine.py)
and stops it at the end.

    python benchmarks/sandbox_overhead.py [--rounds N] [--no-own-engine]
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from mlab.core.models import Action
from mlab.core.plugins.registry import load_registry
from mlab.core.run.environment import Environment, EnvSettings
from mlab.core.run.snapshot import SnapshotStore
from mlab.core.sandbox.limits import Limits
from mlab.core.sandbox.local import LocalSandbox, namespace_prefix

TARGET_MS = 50.0  # bwrap against local
LOCAL_TARGET_RATIO = 1.3  # local against the bare child process


def sandboxes(own_engine: bool) -> dict[str, object]:
    found: dict[str, object] = {"fallback": LocalSandbox(namespaces=False)}
    if namespace_prefix() is not None:
        found["local"] = LocalSandbox()
        found["local-fresh"] = LocalSandbox(zygotes=False)
    for name in ("bwrap", "docker"):
        cls = load_registry().items["sandboxes"].get(name)
        if cls is None:
            print(f"{name}: not installed")
            continue
        ok, why = cls.available()
        if not ok and name == "docker" and own_engine:
            print(f"docker: {why}; starting an engine of its own")
            why = docker_engine().ensure()
            ok, why = cls.available() if not why else (False, why)
        if not ok:
            print(f"{name}: skipped ({why})")
            continue
        found[name] = cls()
    return found


def docker_engine():
    """The tests' engine starter (the repository's root on the path: this runs as a script)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.fixtures import docker_engine

    return docker_engine


def environment(root: Path, sandbox) -> Environment:
    ws = root / "ws"
    (ws / "data").mkdir(parents=True)
    (ws / "data" / "train.csv").write_text("id,label\n1,0\n")
    (ws / "hello.py").write_text("print('hello')\n")
    (root / "hidden").mkdir()
    return Environment(EnvSettings(
        workspace=ws, read_only_patterns=["data/*"], sandbox=sandbox, store=SnapshotStore(root / "store"),
        hidden_paths=[root / "hidden"], sandbox_home=root / "home", limits=Limits(timeout_s=30)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--no-own-engine", action="store_true", help="never start a Docker engine for docker")
    args = parser.parse_args()
    boxes = sandboxes(own_engine=not args.no_own_engine)
    scratch = Path(tempfile.mkdtemp(prefix="mlab-sandbox-bench-"))
    envs: dict[str, Environment] = {}
    try:
        envs = {name: environment(scratch / name, box) for name, box in boxes.items()}
        action = Action(name="Execute Script", args={"script_name": "hello.py"})
        for env in envs.values():  # warm up: caches, page cache, the probes of namespaces and cgroups
            obs, err = env.execute(action)
            assert not err and "hello" in obs, obs
        times: dict[str, list[float]] = {name: [] for name in envs}
        for _round in range(args.rounds):
            for name, env in envs.items():
                started = time.perf_counter()
                obs, err = env.execute(action)
                times[name].append((time.perf_counter() - started) * 1000)
                assert not err and "hello" in obs, obs
        print(f"Execute Script of a one-line script, {args.rounds} rounds (ms):")
        print(f"{'sandbox':<10}{'median':>9}{'mean':>9}{'p90':>9}{'min':>9}")
        medians = {}
        for name, values in times.items():
            values.sort()
            medians[name] = statistics.median(values)
            print(f"{name:<10}{medians[name]:9.1f}{statistics.mean(values):9.1f}"
                  f"{values[int(len(values) * 0.9) - 1]:9.1f}{values[0]:9.1f}")
        if "bwrap" in medians and "local" in medians:
            extra = medians["bwrap"] - medians["local"]
            verdict = "OK" if extra <= TARGET_MS else "OVER TARGET"
            print(f"bwrap overhead against local: {extra:+.1f} ms per Execute Script (target <= {TARGET_MS:g} ms): "
                  f"{verdict}")
        for name in medians:
            if name != "fallback":
                print(f"{name} against a bare child process (fallback): "
                      f"{medians[name] - medians['fallback']:+.1f} ms, {medians[name] / medians['fallback']:.2f}x")
        if "local" in medians:
            ratio = medians["local"] / medians["fallback"]
            verdict = "OK" if ratio <= LOCAL_TARGET_RATIO else "OVER TARGET"
            print(f"local: {ratio:.2f}x a bare child process (target <= {LOCAL_TARGET_RATIO:g}x): {verdict}")
    finally:
        for env in envs.values():
            env.close()
        for box in boxes.values():
            if isinstance(box, LocalSandbox):
                box.close()
        shutil.rmtree(scratch, ignore_errors=True)
        if "docker" in boxes and not args.no_own_engine:
            docker_engine().stop()  # only stops a daemon this script started


if __name__ == "__main__":
    main()
