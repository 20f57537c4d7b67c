"""Trace write time per step, early in a run and late: the whole trace.json rewritten each step (as before)
beside the append-only trace (steps.jsonl + state objects + trace.json updated in place), the same run written
by each in turn.

The states are shaped like the research agent's with retrieval on: a research log gaining an entry of about
600 characters a step, summaries of long observations every third step, a recalled passage rewritten each
step; the environment's undo history gaining a backup every other step; LLM usage changing each step. Both
writers see the same trace (the same seed), in alternating order from run to run.
Target (issue 14): the write at step 200 <= 1.5x the write at step 1, and bytes growing linearly in steps.

Usage: python benchmarks/trace_write.py [--steps 200] [--repeats 3] [--dir PARENT]
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from mlab.core.models import Action, RunConfig, Step, Trace, Usage
from mlab.core.run.trace import write_trace
from mlab.core.run.trace_log import TraceLog

WINDOW = 10  # "step 1" is the median of the first WINDOW steps, "step N" of the last WINDOW
TARGET_RATIO = 1.5


def words(rng: random.Random, chars: int) -> str:
    vocabulary = ["loss", "accuracy", "epoch", "learning", "rate", "model", "baseline", "improved", "batch",
                  "validation", "train.py", "feature", "dropout", "the", "and", "of", "to", "score"]
    out: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(vocabulary)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)


class ResearchLikeRun:
    """A research-agent-like run's state, one step at a time."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.research_log: list[dict[str, object]] = []
        self.summaries: dict[str, str] = {}
        self.backups: dict[str, list[str]] = {}
        self.usage = Usage()

    def step(self, index: int) -> Step:
        rng = self.rng
        self.research_log.append({"step": index, "text": words(rng, 600)})
        if index % 3 == 0:
            self.summaries[str(index)] = words(rng, 800)
        if index % 2 == 0:
            self.backups.setdefault(f"train_v{index % 4}.py", []).append(f"{rng.getrandbits(256):064x}")
        self.usage.calls += 3
        self.usage.prompt_tokens += 4000 + index * 40
        self.usage.completion_tokens += 600
        entries = {"Reflection": words(rng, 400), "Research Plan and Status": words(rng, 1200),
                   "Fact Check": words(rng, 300), "Thought": words(rng, 200)}
        action = Action(name="Edit Script (AI)", args={"script_name": "train.py", "edit_instruction":
                                                       words(rng, 300), "save_name": "train.py"},
                        entries=entries, raw_response=words(rng, 2500))
        return Step(index=index, action=action, observation=words(rng, 2000), started_at=time.time(),
                    duration_s=rng.uniform(1, 60), snapshot=f"step_{index:04d}",
                    agent_state={"seen": index - 1, "summaries": dict(self.summaries),
                                 "research_log": list(self.research_log), "recalled": words(rng, 1500),
                                 "invalid_responses": 0},
                    env_state={"backups": {k: list(v) for k, v in self.backups.items()}},
                    llm_state={"backends": {"main": {}, "fast": {"same_as": "main"}},
                               "usage": self.usage.model_dump()},
                    usage=self.usage.model_copy())


def tree_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def one_run(parent: Path, steps: int, seed: int, writer: str) -> dict[str, Any]:
    """One run's trace written by `writer` ("old" or "new") alone: interleaved step by step, the old writer's
    growing rewrites would slow the new one's fdatasync (one ext4 journal commits both files' data)."""
    with tempfile.TemporaryDirectory(prefix="mlab-trace-bench-", dir=parent) as scratch:
        folder = Path(scratch)
        config = RunConfig(task="lite/wine", agent="research", llm="scripted", agent_options={"retrieval": True})
        trace = Trace(run_id="bench", config=config, started_at=time.time())
        log = TraceLog(folder)
        begin, write = (log.begin, log.append) if writer == "new" else (lambda t: write_trace(folder, t),) * 2
        begin(trace)
        run = ResearchLikeRun(seed)
        times: dict[str, list[float]] = {writer: [], f"{writer}_cpu": []}
        for index in range(1, steps + 1):
            trace.steps.append(run.step(index))
            trace.usage = trace.steps[-1].usage
            began, began_cpu = time.perf_counter(), time.thread_time()
            write(trace)
            times[writer].append(time.perf_counter() - began)
            times[f"{writer}_cpu"].append(time.thread_time() - began_cpu)
        log.close()
        return {**times, f"{writer}_bytes": tree_bytes(folder)}


def both_writers(parent: Path, steps: int, seed: int) -> dict[str, Any]:
    """The same run written by each writer in turn, which goes first alternating with the seed."""
    order = ("old", "new") if seed % 2 else ("new", "old")
    result: dict[str, Any] = {}
    for writer in order:
        os.sync()  # the other writer's data is on disk before this one starts
        result.update(one_run(parent, steps, seed, writer))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where the runs are written (a real disk: "
                                                               "fsync cost is part of the figure)")
    args = parser.parse_args()
    if args.steps < 2 * WINDOW:
        parser.error(f"--steps must be at least {2 * WINDOW}")
    runs = [both_writers(args.dir or Path(tempfile.gettempdir()), args.steps, seed) for seed in range(args.repeats)]
    half = args.steps // 2
    print(f"trace write per step, ms (median of steps 1-{WINDOW} / {half - WINDOW // 2 + 1}-"
          f"{half + WINDOW // 2} / {args.steps - WINDOW + 1}-{args.steps}, {args.repeats} runs):")
    ratios = {}
    for name in ("old", "new"):
        for kind in (name, f"{name}_cpu"):
            def window(start: int, kind: str = kind) -> float:
                return statistics.median(t for r in runs for t in r[kind][start:start + WINDOW])
            early, middle, late = window(0), window(half - WINDOW // 2), window(args.steps - WINDOW)
            ratios[kind] = late / early
            label = "wall" if kind == name else "CPU "
            print(f"  {name} {label}: {early * 1e3:7.2f} / {middle * 1e3:7.2f} / {late * 1e3:7.2f}   "
                  f"step {args.steps} / step 1 = {late / early:5.2f}x")
        size = statistics.median(r[f"{name}_bytes"] for r in runs)
        print(f"  {name} bytes after {args.steps} steps: {size / 1e6:.2f} MB")
    verdict = "meets" if ratios["new"] <= TARGET_RATIO else "misses"
    print(f"append-only trace {verdict} the target (step {args.steps} <= {TARGET_RATIO}x step 1, wall): "
          f"{ratios['new']:.2f}x, CPU {ratios['new_cpu']:.2f}x (whole rewrite: {ratios['old']:.2f}x, "
          f"CPU {ratios['old_cpu']:.2f}x)")


if __name__ == "__main__":
    main()
