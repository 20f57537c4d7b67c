"""Cost of each sandbox per Execute Script beside what the same script costs without it, measured side by side.

Each sandbox runs the real path of Execute Script: `Sandbox.run` of `python -u hello.py` with the spec a run's
script gets (core/run/scripts.py: its environment, limits, read-only and hidden paths), timed from the call to
its result (start, wait, output, cleanup). Beside them, in the same rounds, the floors:

- bare: a plain child process, `subprocess.run([python, "-u", "hello.py"])` with the same environment, folder
  and captured output, in a session of its own as mlab starts every command (setsid: with the kernel's
  sched_autogroup a session shares the CPU as one group, so a child left in this busy script's session would be
  slowed by it and flatter the sandboxes): what a sandbox costs is its time beyond this;
- docker-exec: when the docker sandbox is usable, `docker exec` of the same command into one container started
  up front from the same image with the same folders: what any docker-based sandbox costs at least.

Sandboxes: unconfined (the local sandbox without namespaces: a process group with rlimits and a cgroup), local
(namespaces; commands forked by the run's zygote), local-fresh (the same confinement built afresh for each
command by confine.py, as where no zygote can be had), bwrap and docker where usable. bwrap builds the
next command's container as a command ends: inside that command's `Sandbox.run`, so inside its time here.
Every round runs each of them once, in an order that rotates from round to round, so that machine load affects
all alike.

Targets: local <= 1.3x bare; bwrap <= 30 ms more than local (idle and at --load 5); docker <= 1.3x docker-exec.
unconfined / bare is printed too (the cost of start, wait and limits alone). `--load N` runs N busy Python loops
beside the rounds, each in a session of its own as other runs' commands would be (`--load-session harness`: in
this script's session, a busy harness); bwrap - local is also given as the median of each round's own difference,
which the load weighs on alike, with its 95% bootstrap interval (scipy).

docker uses the engine `docker` reaches (DOCKER_HOST, MLAB_DOCKER_IMAGE); when there is none usable and this
runs as root with dockerd installed, it starts a daemon of its own as the tests do (tests/fixtures/docker_engine.py)
and stops it at the end.

    python benchmarks/sandbox_overhead.py [--rounds N] [--load N] [--load-session own|harness]
                                          [--sandboxes local,bwrap] [--no-own-engine]
"""
from __future__ import annotations

import argparse
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from mlab.core.plugins.registry import load_registry
from mlab.core.run.environment import Environment, EnvSettings
from mlab.core.run.snapshot import SnapshotStore
from mlab.core.sandbox.contract import Sandbox
from mlab.core.sandbox.limits import Limits
from mlab.core.sandbox.local import LocalSandbox, UnconfinedSandbox, namespace_prefix
from mlab.core.sandbox.rootfs import root_view
from mlab.core.sandbox.spec import ExecSpec

LOCAL_TARGET_RATIO = 1.3  # local against the bare child process
BWRAP_TARGET_MS = 30.0  # bwrap against local
DOCKER_TARGET_RATIO = 1.3  # docker against a plain docker exec
SCRIPT = "hello.py"
ARGV_TAIL = ["-u", SCRIPT]  # as core/run/scripts.py runs a workspace script


BUSY_LOOP = "while True:\n    pass\n"


def sandboxes(own_engine: bool, wanted: set[str]) -> dict[str, Sandbox]:
    found: dict[str, Sandbox] = {"unconfined": UnconfinedSandbox()} if "unconfined" in wanted else {}
    if namespace_prefix() is not None:
        if "local" in wanted:
            found["local"] = LocalSandbox()
        if "local-fresh" in wanted:
            found["local-fresh"] = LocalSandbox(zygotes=False)
    else:
        print("local: skipped (no namespaces here)")
    for name in ("bwrap", "docker"):
        if name not in wanted:
            continue
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


def environment(root: Path, sandbox: Sandbox) -> Environment:
    ws = root / "ws"
    (ws / "data").mkdir(parents=True)
    (ws / "data" / "train.csv").write_text("id,label\n1,0\n")
    (ws / SCRIPT).write_text("print('hello')\n")
    (root / "hidden").mkdir()
    return Environment(EnvSettings(
        workspace=ws, read_only_patterns=["data/*"], sandbox=sandbox, store=SnapshotStore(root / "store"),
        hidden_paths=[root / "hidden"], sandbox_home=root / "home", limits=Limits(timeout_s=30)))


def through_sandbox(box: Sandbox, spec: ExecSpec) -> Callable[[], str]:
    argv = [sys.executable, *ARGV_TAIL]
    return lambda: box.run(argv, spec).output


def bare_child(spec: ExecSpec) -> Callable[[], str]:
    argv = [sys.executable, *ARGV_TAIL]

    def run() -> str:
        done = subprocess.run(argv, cwd=spec.cwd, env=spec.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, check=False, start_new_session=True)
        return done.stdout.decode()
    return run


class DockerExec:
    """One long-lived container showing what the docker sandbox shows (the system folders, the Python
    environment, the workspace), into which each round `docker exec`s the script."""

    def __init__(self, spec: ExecSpec):
        from mlab_sandbox_docker import engine

        self.docker = engine.docker_exe() or "docker"
        self.env = {**os.environ, **engine.client_env()}
        self.name = f"mlab-bench-{os.getpid()}-{secrets.token_hex(4)}"
        self.workspace = str(spec.cwd)
        view = root_view([sys.executable], spec, named_too=True)
        mounts: list[str] = []
        for path, _target in view.links:  # an empty root has no /lib64 -> usr/lib64: mount what it points to
            mounts += ["--mount", f"type=bind,source={os.path.realpath(path)},target={path},readonly"]
        for source, target in [*view.read_only, *view.late_read_only]:
            mounts += ["--mount", f"type=bind,source={source},target={target},readonly"]
        for path in view.writable:
            mounts += ["--mount", f"type=bind,source={path},target={path}"]
        command = [self.docker, "run", "-d", "--rm", "--name", self.name, "--pull", "never", "--network", "none",
                   "--user", f"{os.getuid()}:{os.getgid()}", "--log-driver", "none", *mounts,
                   "--workdir", self.workspace, engine.image(), "/bin/sh", "-c", "exec sleep infinity"]
        subprocess.run(command, env=self.env, check=True, stdout=subprocess.DEVNULL)
        self.exec_env = [arg for key in spec.env for arg in ("-e", f"{key}={spec.env[key]}")]

    def run(self) -> str:
        done = subprocess.run([self.docker, "exec", "-w", self.workspace, *self.exec_env, self.name,
                               sys.executable, *ARGV_TAIL], env=self.env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
        return done.stdout.decode()

    def close(self) -> None:
        subprocess.run([self.docker, "rm", "-f", self.name], env=self.env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)


def measure(runners: dict[str, Callable[[], str]], rounds: int) -> dict[str, list[float]]:
    names = list(runners)
    for name in names:  # warm up: caches, page cache, the probes of namespaces and cgroups, a zygote
        out = runners[name]()
        assert "hello" in out, f"{name}: {out}"
    times: dict[str, list[float]] = {name: [] for name in names}
    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            started = time.perf_counter()
            out = runners[name]()
            times[name].append((time.perf_counter() - started) * 1000)
            assert "hello" in out, f"{name}: {out}"
    return times


def paired_interval(a: list[float], b: list[float]) -> tuple[float, float]:
    """A 95% bootstrap interval (rounds resampled as pairs) of the median of a - b: how far the noise of a loaded
    machine leaves the paired estimate from its target."""
    import numpy as np
    from scipy.stats import bootstrap

    found = bootstrap((a, b), lambda x, y: np.median(x - y), paired=True, vectorized=False,
                      n_resamples=2000, method="percentile", random_state=0)
    return float(found.confidence_interval.low), float(found.confidence_interval.high)


def report(times: dict[str, list[float]], rounds: int) -> None:
    print(f"Sandbox.run of `python -u {SCRIPT}` (a one-line script), {rounds} interleaved rounds (ms):")
    print(f"{'':<12}{'median':>9}{'mean':>9}{'p90':>9}{'min':>9}")
    med: dict[str, float] = {}
    for name, values in times.items():
        ordered = sorted(values)
        med[name] = statistics.median(ordered)
        print(f"{name:<12}{med[name]:9.1f}{statistics.mean(ordered):9.1f}"
              f"{ordered[max(0, int(len(ordered) * 0.9) - 1)]:9.1f}{ordered[0]:9.1f}")

    def paired(name: str, floor: str) -> float:
        """The median of the rounds' own ratios: a round's load weighs on both of its measures alike."""
        return statistics.median(a / b for a, b in zip(times[name], times[floor], strict=True))

    def verdict(ok: bool) -> str:
        return "OK" if ok else "OVER TARGET"

    print("Ratios of the medians (median of each round's ratio in brackets):")
    for name in ("unconfined", "local", "local-fresh", "bwrap"):
        if name in med:
            ratio = med[name] / med["bare"]
            target = (f" (target <= {LOCAL_TARGET_RATIO:g}x): {verdict(ratio <= LOCAL_TARGET_RATIO)}"
                      if name == "local" else "")
            print(f"{name} / bare: {ratio:.2f}x [{paired(name, 'bare'):.2f}x], {med[name] - med['bare']:+.1f} ms"
                  f"{target}")
    if "bwrap" in med and "local" in med:
        extra = med["bwrap"] - med["local"]
        own = statistics.median(b - a for b, a in zip(times["bwrap"], times["local"], strict=True))
        print(f"bwrap - local: {extra:+.1f} ms [{own:+.1f} ms] (target <= {BWRAP_TARGET_MS:g} ms): "
              f"{verdict(extra <= BWRAP_TARGET_MS)}")
        low, high = paired_interval(times["bwrap"], times["local"])
        print(f"  95% interval of the median of each round's difference: {low:+.1f} to {high:+.1f} ms")
    if "docker" in med and "docker-exec" in med:
        ratio = med["docker"] / med["docker-exec"]
        print(f"docker / docker-exec: {ratio:.2f}x [{paired('docker', 'docker-exec'):.2f}x], "
              f"{med['docker'] - med['docker-exec']:+.1f} ms (target <= {DOCKER_TARGET_RATIO:g}x): "
              f"{verdict(ratio <= DOCKER_TARGET_RATIO)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--no-own-engine", action="store_true", help="never start a Docker engine for docker")
    parser.add_argument("--load", type=int, default=0, help="busy loops running beside the rounds")
    parser.add_argument("--load-session", choices=["own", "harness"], default="own",
                        help="each busy loop in a session of its own (other commands), or in this one's (a busy "
                             "harness: with sched_autogroup the harness then gets a share of its session's CPU)")
    parser.add_argument("--sandboxes", default="unconfined,local,local-fresh,bwrap,docker")
    args = parser.parse_args()
    boxes = sandboxes(not args.no_own_engine, set(args.sandboxes.split(",")))
    scratch = Path(tempfile.mkdtemp(prefix="mlab-sandbox-bench-"))
    envs: dict[str, Environment] = {}
    exec_box: DockerExec | None = None
    load = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP], start_new_session=args.load_session == "own")
            for _ in range(args.load)]
    if load:
        where = "sessions of their own" if args.load_session == "own" else "the harness's session"
        print(f"load: {len(load)} busy loops, in {where}")
    try:
        envs = {name: environment(scratch / name, box) for name, box in boxes.items()}
        bare_env = environment(scratch / "bare", UnconfinedSandbox())
        envs["bare"] = bare_env
        runners: dict[str, Callable[[], str]] = {"bare": bare_child(bare_env.exec_spec())}
        for name, box in boxes.items():
            runners[name] = through_sandbox(box, envs[name].exec_spec())
        if "docker" in boxes:
            docker_env = environment(scratch / "docker-exec", UnconfinedSandbox())
            envs["docker-exec"] = docker_env
            exec_box = DockerExec(docker_env.exec_spec())
            runners["docker-exec"] = exec_box.run
        report(measure(runners, args.rounds), args.rounds)
    finally:
        for busy in load:
            busy.kill()
            busy.wait()
        if exec_box is not None:
            exec_box.close()
        for env in envs.values():
            env.close()
        for box in boxes.values():
            box.close()
        shutil.rmtree(scratch, ignore_errors=True)
        if "docker" in boxes and not args.no_own_engine:
            docker_engine().stop()  # only stops a daemon this script started


if __name__ == "__main__":
    main()
