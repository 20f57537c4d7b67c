"""`mlab new-task`: a pack's next step is a path pip installs, and the task's text follows the metric named in
task.yaml."""
from __future__ import annotations

import re

from tests.fixtures.cli import mlab, mlab_in_process


def test_new_task_pack_prints_a_path_pip_installs_not_a_name_it_looks_up(tmp_path):
    made = mlab("new-task", "mypack", "--pack", "mypack", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert "pip install ./mypack;" in made.stdout, made.stdout


def test_new_task_metric_text_follows_the_metric_in_task_yaml(tmp_path):
    """The scaffold names its metric once (metric:); what the agent is told follows that field when it changes."""
    from mlab.core.declarative.task import DeclarativeTask

    made = mlab_in_process("new-task", tmp_path / "my-task", "--metric", "mse")
    assert made.returncode == 0, made.stderr
    task_yaml = tmp_path / "my-task" / "task.yaml"
    assert re.findall(r"\bmse\b", task_yaml.read_text()) == ["mse"], task_yaml.read_text()
    task_yaml.write_text(task_yaml.read_text().replace("metric: mse", "metric: accuracy"))
    task = DeclarativeTask.from_folder(tmp_path / "my-task", "local")
    for told in (task.description, task.research_problem):
        assert "accuracy" in told and "higher is better" in told and "mse" not in told and "{" not in told, told
