"""Where a bench's CPU goes, run by run (issue 42 item 3): each phase of a run in a process forked by the local
engine (a host: engines.hosts() sets how many runs share one) against the same phase of runs done in this process
(the run loop's own cost), plus what is paid per run outside the run's thread: the zygote's fork, the host's own
work and its exit, the driver.

The bench is bench_parallel.py's (fixture-llm-stepper, one model call a step to a backend that sleeps --latency).
Its zygote and runs carry a probe (benchmarks/run_phases_probe/sitecustomize.py, on PYTHONPATH) that adds up the
CPU (user + system) and minor page faults of each phase, inclusive of the phases inside it; the in-process runs
carry the same probe (no latency, the least of --rounds rounds per phase: other load only adds). CPU figures on a
shared machine vary from run to run: compare the two columns of one invocation.

Usage: python benchmarks/bench_run_phases.py [--runs 64] [--steps 20] [--latency 0.5] [--rounds 3]
Run from the repository root (workers import the fixture plugins from tests/).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROBE = REPO / "benchmarks" / "run_phases_probe"
sys.path.insert(0, str(REPO))
REGISTRY = "tests.fixtures.bench_plugins:bench_registry"
Sums = dict[str, list[float]]


def bench(root: Path, name: str, runs: int, steps: int, latency: float) -> float:
    """Run the bench; the driver's CPU seconds."""
    from mlab.core.bench.driver import Bench, BenchSpec

    spec = BenchSpec(tasks=["fixture/counter"], agents=["fixture-llm-stepper"], llms=[f"fixture-sleepy:{latency}"],
                     runs=runs, max_steps=steps + 5, agent_options={"steps": steps})
    before = resource.getrusage(resource.RUSAGE_SELF)
    status = Bench(root / name, spec, workers=runs, registry_factory=REGISTRY).run()
    after = resource.getrusage(resource.RUSAGE_SELF)
    assert status.done == runs, status
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def in_process(root: Path, steps: int, rounds: int, runs_per_round: int = 4) -> Sums:
    """The probe's sums per run for runs done in this process: per phase, the least of the rounds."""
    sys.path.insert(0, str(PROBE))
    import sitecustomize as probe  # the probe's module (this process started without it)

    from mlab.core.bench import engines
    from mlab.core.models import RunConfig
    from tests.fixtures.bench_plugins import bench_registry

    probe.install()
    registry = bench_registry()
    config = RunConfig(task="fixture/counter", agent="fixture-llm-stepper", llm="fixture-sleepy:0",
                       max_steps=steps + 5, agent_options={"steps": steps}).model_dump()
    made = 0

    def one_run() -> None:
        nonlocal made
        made += 1
        job = {"mode": "start", "config": config, "run_dir": str(root / "in-process" / f"run-{made}"), "key": str(made)}
        result = engines.execute_job(job, registry)  # type: ignore[arg-type]
        assert result["status"] == "finished", result

    one_run()  # imports what a run needs, outside the sums
    best: Sums = {}
    for _ in range(rounds):
        probe.sums.clear()
        for _ in range(runs_per_round):
            one_run()
        for phase, (user, system, faults, calls) in probe.sums.items():
            got = [user / runs_per_round, system / runs_per_round, faults / runs_per_round, calls / runs_per_round]
            if phase not in best or sum(got[:2]) < sum(best[phase][:2]):
                best[phase] = got
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--latency", type=float, default=0.5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.chdir(REPO)
    with tempfile.TemporaryDirectory(prefix="mlab-run-phases-") as scratch:
        root = Path(scratch)
        os.environ["MLAB_HOME"] = str(root / "home")
        bench(root, "warm-up", 1, 2, 0.0)  # prepares the task data, outside the sums
        out = root / "phases"
        out.mkdir()
        os.environ["MLAB_PHASES_OUT"] = str(out)
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROBE), os.environ.get("PYTHONPATH")]))
        driver_cpu = bench(root, "bench", args.runs, args.steps, args.latency)
        del os.environ["MLAB_PHASES_OUT"]
        runs = [json.loads(p.read_text()) for p in out.glob("run-*.json")]
        host_sums = [json.loads(p.read_text()) for p in out.glob("host-*.json")]
        zygotes = [json.loads(p.read_text()) for p in out.glob("zygote-*.json")]
        assert len(runs) == args.runs and len(zygotes) == 1, (len(runs), len(zygotes))
        assert sum(h["runs"] for h in host_sums) == args.runs, host_sums
        alone = in_process(root, args.steps, args.rounds)
    n = len(runs)
    forked: Sums = {}
    for sums in runs:
        for phase, values in sums.items():
            entry = forked.setdefault(phase, [0.0, 0.0, 0.0, 0.0])
            for i, value in enumerate(values):
                entry[i] += value / n
    zygote = zygotes[0]
    run_total = forked["run thread"]
    hosts_self = [sum(h["self"][i] for h in host_sums) / n for i in range(3)]
    # CPU of the ended hosts the zygote reaped, beyond what they had used when the probe last looked: the
    # process's exit (its memory and page tables freed)
    exits = [zygote["children"][i] / n - hosts_self[i] for i in range(3)]
    ready = zygote["ready"]  # its start-up (imports, registry), paid once per bench
    per_run = {"zygote's start-up": [v / n for v in ready],
               "zygote after (forks, messages)": [(v - r) / n for v, r in zip(zygote["self"], ready, strict=True)],
               "host (fork to its first run)": [sum(h["forked"][i] for h in host_sums) / n for i in range(3)],
               "host after, besides its runs' threads": [hosts_self[i] - run_total[i]
                                                         - sum(h["forked"][i] for h in host_sums) / n
                                                         for i in range(3)],
               "hosts' exits": exits, "driver": [driver_cpu / n, 0.0, 0.0]}
    total = sum(run_total[:2]) + sum(sum(v[:2]) for v in per_run.values())
    print(f"{n} runs of {args.steps} steps at {args.latency} s a model call, in {len(host_sums)} processes forked by "
          "the local engine, against "
          f"runs in this process (least of {args.rounds} rounds): CPU ms per run by phase (inclusive), of which "
          "system, and minor page faults")
    print(f"{'phase':54s} {'bench':>8s} {'sys':>7s} {'faults':>7s}   {'alone':>8s} {'sys':>7s} {'faults':>7s}")
    for phase in sorted(set(forked) | set(alone), key=_order):
        row = f"{'  ' * phase.count('/') + phase.rsplit('/', 1)[-1]:54s}"
        for sums in (forked, alone):
            if phase in sums:
                user, system, faults, _ = sums[phase]
                row += f" {(user + system) * 1000:8.2f} {system * 1000:7.2f} {faults:7.0f}  "
            else:
                row += f" {'':8s} {'':7s} {'':7s}  "
        print(row)
    for phase, (user, system, faults) in per_run.items():
        print(f"{phase:54s} {(user + system) * 1000:8.2f} {system * 1000:7.2f} {faults:7.0f}")
    loop = forked["execute_job/start/loop"]
    alone_loop = alone["execute_job/start/loop"]
    print(json.dumps({"runs": n, "hosts": len(host_sums), "steps": args.steps, "cpu_ms_per_run": round(total * 1000, 2),
                      "cpu_ms_per_step": round(total * 1000 / args.steps, 3),
                      "outside_the_loop_ms_per_run": round((total - sum(loop[:2])) * 1000, 2),
                      "loop_ms_per_step": round(sum(loop[:2]) * 1000 / args.steps, 3),
                      "alone_run_ms": round(sum(alone["execute_job"][:2]) * 1000, 2),
                      "alone_loop_ms_per_step": round(sum(alone_loop[:2]) * 1000 / args.steps, 3)}))


def _order(phase: str) -> tuple[int, str]:
    """Runs' phases in the order a run goes through them, nested under the phase that holds them."""
    first = ("execute_job", "hand the result over", "run thread")
    top = phase.split("/", 1)[0]
    return (first.index(top) if top in first else len(first), phase)


if __name__ == "__main__":
    main()
