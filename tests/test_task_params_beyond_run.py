"""Task parameters (-T) beyond `mlab run`: the Inspect export finds the research problem of a run with other
values, and check-task keeps the reference score it measured for the values given."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlab.core import TaskParam
from mlab.core.run.taskdata import TaskHome
from tests.fixtures.cli import mlab, mlab_in_process
from tests.fixtures.harness import ReferenceTask
from tests.test_task_folder_runs import TASK_YAML, task_folder


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
