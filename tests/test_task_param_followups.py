"""Task parameters (-T) beyond `mlab run`: the Inspect export finds the research problem of a run with other values,
check-task keeps the reference score it measured for the values given; and `mlab run --max-connections N` bounds
one run's model requests in flight."""
from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from mlab.core import Action, Agent, RunState, TaskParam
from mlab.core.run.taskdata import TaskHome
from tests.fixtures.cli import mlab, mlab_in_process
from tests.fixtures.harness import ReferenceTask
from tests.fixtures.llm_server import FakeLLMServer
from tests.test_task_folder_runs import TASK_YAML, config_of, task_folder


@pytest.mark.slow
def test_the_inspect_export_of_a_bench_with_parameter_values_carries_the_tasks_research_problem(tmp_path):
    pytest.importorskip("inspect_ai.log", reason="inspect-ai is not installed (pip install -e '.[inspect]')")
    from inspect_ai.log import read_eval_log

    task_folder(tmp_path)
    home = tmp_path / "home"
    for rows in (6, 7):
        ran = mlab("bench", "--tasks", "./rows-fit", "--agents", "baseline", "--runs", "1", "-T", f"rows={rows}",
                   "--bench-dir", "b", cwd=tmp_path, home=home)
        assert ran.returncode == 0, ran.stderr
    result = mlab("export", "--format", "inspect", "b", "--out", tmp_path / "logs", "--json", cwd=tmp_path, home=home)
    assert result.returncode == 0, result.stderr
    logs = [read_eval_log(path) for path in json.loads(result.stdout)["logs"]]
    # each value's runs are a task of their own, as the report names it, whose input is the task's problem
    assert sorted(log.eval.task for log in logs) == ["folder/rows-fit [rows=6]", "folder/rows-fit [rows=7]"]
    problem = TASK_YAML.split("research_problem: ", 1)[1].split("\n", 1)[0]
    for log in logs:
        [sample] = log.samples
        assert isinstance(sample.input, str) and sample.input.startswith(problem), sample.input

class LinesReference(ReferenceTask):
    """The starter appends one line; the reference appends 2n (a parameter), so each value scores otherwise."""

    name = "test/lines-reference"
    params = [TaskParam(name="n", type="int", default=3, help="half the reference's lines")]

    def reference_solution(self, workspace: Path) -> str:
        (workspace / "more.py").write_text(f"open('log.txt', 'a').write('x\\n' * {2 * self.param_values['n']})\n")
        return "more.py"


def registry_with_lines_reference():
    from tests.fixtures.harness import harness_registry

    registry = harness_registry()
    registry.items["tasks"][LinesReference.name] = LinesReference()
    registry.providers["tasks"][LinesReference.name] = "tests"
    return registry


def test_check_task_in_a_scratch_home_keeps_the_reference_of_the_values_given(tmp_path):
    from mlab.core.run.scoring import recorded_reference

    home = tmp_path / "home"
    for given in ((), ("-T", "n=5")):
        checked = mlab_in_process("check-task", LinesReference.name, *given, "--sandbox", "local", "--json",
                                  registry=registry_with_lines_reference, home=home)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert json.loads(checked.stdout)[0]["status"] == "passed"
    # each value's reference, measured in a scratch home, is kept in MLAB_HOME under its own name
    assert recorded_reference(TaskHome(home), LinesReference.name) == 6.0
    assert recorded_reference(TaskHome(home), f"{LinesReference.name} [n=5]") == 10.0


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
