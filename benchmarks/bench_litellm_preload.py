"""Wall and CPU time of a small `mlab bench` of a litellm model, with litellm imported once in the zygote the runs fork
from (LLM.preload) against every run importing it itself.

Each bench is `mlab bench` in its own process, as a user runs it: fixture-llm-stepper, --runs N (default 4) with
as many workers, 2 steps, the model openai/gpt-4o-mini served by a 127.0.0.1 OpenAI-compatible server
(--llm-api-base, no key). "before" names the same backend through a subclass whose preload does nothing
(`litellm-no-preload:openai/...`), so every forked run imports litellm as it did before preloading. The two
alternate (before, after, after, before, ...) for --rounds rounds, so drifting load hits both alike. Printed
as JSON: each side's wall times, when its last run started, the CPU seconds of all its processes (which other
load on the machine changes far less than wall time), and the ratios of the medians before/after.

Usage: python benchmarks/bench_litellm_preload.py [--runs 4] [--rounds 2]
Run from the repository root (the zygote imports this module and the fixture plugins from tests/).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
REGISTRY = "benchmarks.bench_litellm_preload:registry"
MODEL = "openai/gpt-4o-mini"
NO_PRELOAD = "litellm-no-preload"


def registry():
    """The bench fixtures' registry plus the litellm backend without its preload (what "before" runs)."""
    from mlab_llm_litellm.backend import LiteLLMBackend
    from tests.fixtures.bench_plugins import bench_registry

    class NoPreload(LiteLLMBackend):
        name = NO_PRELOAD
        handles_unprefixed = False

        @classmethod
        def preload(cls) -> None:
            pass  # each run imports litellm when it builds its backend

    reg = bench_registry()
    reg.items["llms"][NO_PRELOAD] = NoPreload
    reg.providers["llms"][NO_PRELOAD] = "benchmarks"
    return reg


def one_bench(root: Path, name: str, llm: str, base_url: str, runs: int) -> tuple[float, float, float]:
    """The bench's wall time; when (from the bench's start) its last run began its first step, litellm
    imported by then; and the CPU seconds of all its processes (driver, zygote, runs: each waited for, so
    counted), which other load on the machine changes far less than wall time."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["MLAB_HOME"] = str(root / "home")
    command = [sys.executable, "-m", "mlab.cli.main", "bench", "--tasks", "fixture/counter", "--agents",
               "fixture-llm-stepper", "--agent-option", "steps=2", "--llm", llm, "--llm-api-base", base_url,
               "--runs", str(runs), "--workers", str(runs), "--bench-dir", str(root / name), "--registry", REGISTRY]
    cpu_before = _children_cpu_s()
    started, started_epoch = time.perf_counter(), time.time()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - started
    cpu = _children_cpu_s() - cpu_before
    assert done.returncode == 0, done.stderr
    from mlab.core.bench.results import ResultsDB

    with ResultsDB(root / name / "results.db") as db:
        rows = db.runs()
    assert len(rows) == runs and all(r["status"] == "finished" for r in rows), rows
    return wall, max(r["started_at"] for r in rows) - started_epoch, cpu


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    from tests.fixtures.llm_server import FakeLLMServer

    walls: dict[str, list[float]] = {"before": [], "after": []}
    last_starts: dict[str, list[float]] = {"before": [], "after": []}
    cpus: dict[str, list[float]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer(lambda body: "go on") as server:
        for i in range(args.rounds):
            order = ["before", "after"] if i % 2 == 0 else ["after", "before"]
            for side in order:
                llm = f"{NO_PRELOAD}:{MODEL}" if side == "before" else MODEL
                wall, last_start, cpu = one_bench(Path(tmp), f"{side}{i}", llm, server.base_url, args.runs)
                walls[side].append(wall)
                last_starts[side].append(last_start)
                cpus[side].append(cpu)
    before, after = statistics.median(walls["before"]), statistics.median(walls["after"])
    print(json.dumps({"runs": args.runs, "cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
                      "before_s": [round(w, 2) for w in walls["before"]],
                      "after_s": [round(w, 2) for w in walls["after"]],
                      "last_run_started_before_s": [round(w, 2) for w in last_starts["before"]],
                      "last_run_started_after_s": [round(w, 2) for w in last_starts["after"]],
                      "cpu_before_s": [round(c, 1) for c in cpus["before"]],
                      "cpu_after_s": [round(c, 1) for c in cpus["after"]],
                      "median_before_s": round(before, 2), "median_after_s": round(after, 2),
                      "ratio_before_over_after": round(before / after, 2),
                      "cpu_ratio_before_over_after": round(statistics.median(cpus["before"])
                                                           / statistics.median(cpus["after"]), 2)}))


if __name__ == "__main__":
    main()
