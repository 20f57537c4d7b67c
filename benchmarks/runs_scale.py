"""`mlab runs` against `mlab eval` on a large bench (issue 44 item 6): listing a bench must cost a fraction of
scoring it.

One real run (lite/wine, the baseline agent) is made, its steps log padded to --steps steps, and copied to --runs
run folders of a generated bench (a results.db listing them, as `mlab bench` writes it). Then `mlab runs`,
`mlab runs --json` and `mlab eval` of the bench are each timed as the command a user types; the figure kept is
runs' time as a fraction of eval's (machines differ; the ratio does less).

Usage: python benchmarks/runs_scale.py [--runs 504] [--steps 30] [--keep DIR] [--profile]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MLAB = [sys.executable, "-m", "mlab.cli.main"]
TASKS, AGENTS = ("lite/wine",), ("agent-x", "agent-y", "agent-z")


def make_bench(root: Path, runs: int, steps: int) -> Path:
    """A bench folder of `runs` copies of one real run, each with its own agent and seed in its trace."""
    from mlab.core.bench.results import ResultsDB
    from mlab.core.run.trace import read_trace, write_trace
    from mlab.core.run.trace_log import STEPS_FILE

    template = root / "template"
    subprocess.run([*MLAB, "run", "--task", TASKS[0], "--agent", "baseline", "--run-dir", str(template)],
                   check=True, stdout=subprocess.DEVNULL)
    trace = read_trace(template)
    # a run of `steps` steps to read, as a real one has
    trace.steps = [trace.steps[i % len(trace.steps)].model_copy(update={"index": i + 1}) for i in range(steps)]
    (template / STEPS_FILE).unlink(missing_ok=True)
    bench = root / "bench"
    per_agent = -(-runs // len(AGENTS))
    with ResultsDB(bench / "results.db") as db:
        made = 0
        for agent in AGENTS:
            for seed in range(per_agent):
                if made == runs:
                    break
                rel = f"runs/wine--{agent}--s{seed}"
                shutil.copytree(template, bench / rel, symlinks=True)
                trace.config.agent, trace.config.seed = agent, seed
                write_trace(bench / rel, trace)
                db.upsert_run(f"{TASKS[0]}|{agent}|-|s{seed}", task=TASKS[0], agent=agent, llm=None, seed=seed,
                              run_dir=rel, status="finished", steps=len(trace.steps), final_score=trace.final_score,
                              higher_is_better=1)
                made += 1
        db.set_baseline(TASKS[0], 0.6, "stored")
    return bench


def timed(*args: str) -> float:
    began = time.perf_counter()
    subprocess.run([*MLAB, *args], check=True, stdout=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "160"})
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=504)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--keep", type=Path, help="Make the bench here and keep it (for a profiler).")
    parser.add_argument("--profile", action="store_true", help="Also print `mlab runs`' top functions (cProfile).")
    args = parser.parse_args()
    scratch = args.keep or Path(tempfile.mkdtemp(prefix="mlab-runs-scale-"))
    try:
        os.environ.setdefault("MLAB_HOME", str(scratch / "home"))
        bench = scratch / "bench"
        if not bench.is_dir():
            bench = make_bench(scratch, args.runs, args.steps)
        result = {"runs": args.runs, "steps_per_run": args.steps, "cores": os.cpu_count()}
        for name, cmd in (("runs_s", ["runs", str(bench)]), ("runs_json_s", ["runs", "--json", str(bench)]),
                          ("eval_s", ["eval", str(bench)])):
            result[name] = round(timed(*cmd), 2)
        result["runs_over_eval"] = round(result["runs_s"] / result["eval_s"], 3)
        print(json.dumps(result, indent=1))
        if args.profile:
            subprocess.run([sys.executable, "-m", "cProfile", "-o", str(scratch / "runs.prof"), "-m", "mlab.cli.main",
                            "runs", "--json", str(bench)], stdout=subprocess.DEVNULL, check=True)
            import pstats
            pstats.Stats(str(scratch / "runs.prof"), stream=sys.stdout).sort_stats("cumulative").print_stats(30)
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
