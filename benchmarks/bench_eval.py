"""Throughput of `mlab eval --intermediate`: 100 runs x 50 step snapshots, scored in parallel.

One real run is made (step 1 runs the task's starter script, which writes a submission; then notes are appended
until step 50), then copied to 100 run folders; each is scored at its final snapshot and at its 50 steps, i.e.
5,100 evaluations. Reports runs/second and snapshots/second for 1 worker and for --workers.

Usage: python benchmarks/bench_eval.py [--task fixture/counter|lite/wine] [--runs 100] [--steps 50] [--workers N]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mlab.core import Action, Agent, RunState  # noqa: E402
from mlab.core.agentkit import AgentOptions  # noqa: E402


class StepsOption(AgentOptions):
    steps: int = 50


class StarterThenNotes(Agent):
    name = "bench-starter-then-notes"
    description = "runs the starter script, then appends notes until the last step"
    needs_llm = False
    Options = StepsOption

    def step(self, state: RunState):
        if state.step_index == 1:
            return Action(name="Execute Script", args={"script_name": self.ctx.starter_script})
        if state.step_index >= self.options.steps:
            return Action(name="Final Answer", args={"final_answer": "done"})
        return Action(name="Append File", args={"file_name": "notes.txt", "content": f"step {state.step_index}\n"})


def registry():
    from tests.fixtures.bench_plugins import bench_registry

    reg = bench_registry()
    reg.items["agents"][StarterThenNotes.name] = StarterThenNotes
    return reg


def main() -> None:
    from mlab.core.bench.evaluate import eval_rows
    from mlab.core.models import RunConfig
    from mlab.core.run.runner import Runner

    parser = argparse.ArgumentParser()
    parser.add_argument("--task", default="fixture/counter")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--skip-serial", action="store_true", help="Only time --workers.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mlab-bench-eval-") as scratch:
        root = Path(scratch)
        os.environ.setdefault("MLAB_HOME", str(root / "home"))
        reg = registry()
        task = reg.get("tasks", args.task)
        config = RunConfig(task=task.name, agent=StarterThenNotes.name, max_steps=args.steps + 1,
                           agent_options={"steps": args.steps}, action_timeout_s=600)
        t = time.perf_counter()
        trace = Runner(root / "template", config, reg).start()
        made = time.perf_counter() - t
        assert len(trace.steps) == args.steps and trace.final_score is not None, (
            trace.end_reason, trace.final_score_error)
        runs = []
        for i in range(args.runs):
            shutil.copytree(root / "template", root / f"run{i:03d}", symlinks=True)
            runs.append(root / f"run{i:03d}")
        evaluations = args.runs * (args.steps + 1)
        result = {"task": task.name, "runs": args.runs, "snapshots_per_run": args.steps, "evaluations": evaluations,
                  "cores": os.cpu_count(), "template_run_s": round(made, 2)}
        for workers in [args.workers] + ([1] if not args.skip_serial else []) + [args.workers]:
            t = time.perf_counter()
            rows = eval_rows(runs, intermediate=True, workers=workers, registry=reg)
            took = time.perf_counter() - t
            assert len(rows) == args.runs and all(len(r["step_scores"]) == args.steps for r in rows)
            assert all(r["score"] == trace.final_score for r in rows)
            # a first pass at --workers warms the caches; the later passes are the ones kept
            result[f"workers_{workers}"] = {"seconds": round(took, 2), "runs_per_s": round(args.runs / took, 2),
                                            "snapshots_per_s": round(evaluations / took, 1)}
        print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
