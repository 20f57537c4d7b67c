"""`mlab run --max-connections N` bounds one run's model requests in flight."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

from mlab.core import Action, Agent, RunState
from tests.fixtures.cli import mlab_in_process
from tests.fixtures.llm_server import FakeLLMServer
from tests.test_task_folder_runs import config_of


class ParallelAsker(Agent):
    """Asks its model CALLS times at once from threads (as an agent fanning out may), then ends the run."""

    name = "test-parallel-asker"
    description = "three model calls in parallel, then a final answer"
    CALLS = 3

    def step(self, state: RunState):
        threads = [threading.Thread(target=self.llm.complete, args=(f"question {i}",)) for i in range(self.CALLS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return Action(name="Final Answer", args={"final_answer": "asked"})


def registry_with_parallel_asker():
    from tests.fixtures.bench_plugins import bench_registry

    registry = bench_registry()
    registry.items["agents"][ParallelAsker.name] = ParallelAsker
    registry.providers["agents"][ParallelAsker.name] = "tests"
    return registry


def most_in_flight_of_one_run(tmp_path: Path, hold_s: float, *extra: str) -> int:
    from tests.test_bench_run_control import KEYS, ConcurrencyCounter

    # a request waits (at most hold_s) until all three are in flight: only a limit keeps them apart
    counter = ConcurrencyCounter(together=ParallelAsker.CALLS, hold_s=hold_s, expected=ParallelAsker.CALLS)
    run_dir = tmp_path / f"run{len(extra)}"
    with FakeLLMServer(counter) as server:
        result = mlab_in_process("run", "--task", "fixture/counter", "--agent", ParallelAsker.name, "--llm",
                                 "openai/gpt-4o-mini", "--llm-api-base", server.base_url, "--run-dir", run_dir,
                                 *extra, registry=registry_with_parallel_asker, env=KEYS, home=tmp_path / "home")
        assert result.returncode == 0, result.stderr
        assert len(server.requests) == ParallelAsker.CALLS
    return counter.most


@pytest.mark.slow
def test_max_connections_bounds_the_model_requests_of_one_run(tmp_path):
    # long waits, so that a loaded machine still gets the requests together (the limited ones wait it out)
    assert most_in_flight_of_one_run(tmp_path, 30) == ParallelAsker.CALLS
    assert most_in_flight_of_one_run(tmp_path, 5, "--max-connections", "2") == 2
    assert config_of(tmp_path / "run2")["max_connections"] == 2  # kept for --resume
    bad = mlab_in_process("run", "--task", "fixture/counter", "--max-connections", "0", home=tmp_path / "home")
    assert bad.returncode == 2 and "--max-connections" in bad.stderr
    resumed = mlab_in_process("run", "--resume", tmp_path / "run2", "--max-connections", "3", home=tmp_path / "home")
    assert resumed.returncode == 2 and "drop --max-connections" in resumed.stderr
