"""What the CLI says when it cannot go on, and its help: a missing task folder is named as missing, a mistyped
name gets a did-you-mean, and help summaries are whole sentences."""
from __future__ import annotations

import re

from tests.fixtures.cli import mlab, mlab_in_process


def test_check_task_of_a_missing_folder_says_the_folder_does_not_exist(tmp_path):
    checked = mlab("check-task", str(tmp_path / "my-task"))
    assert checked.returncode == 2
    assert "does not exist" in checked.stderr and "unknown task" not in checked.stderr, checked.stderr
    (tmp_path / "empty").mkdir()
    checked = mlab("check-task", str(tmp_path / "empty"))
    assert checked.returncode == 2 and "without a task.yaml" in checked.stderr, checked.stderr


def test_a_mistyped_task_or_agent_name_gets_a_did_you_mean(tmp_path):
    for args, meant in ((("--task", "lite/wien", "--agent", "baseline"), "did you mean lite/wine?"),
                        (("--task", "wien", "--agent", "baseline"), "did you mean wine?"),
                        (("--task", "lite/wine", "--agent", "basline"), "did you mean baseline?")):
        shown = mlab_in_process("run", *args, "--run-dir", tmp_path / "run", home=tmp_path / "home")
        assert shown.returncode == 2 and meant in shown.stderr, shown.stderr
        assert len(shown.stderr.strip().splitlines()) == 1


def test_help_summaries_are_whole_sentences():
    shown = mlab("--help", env={"COLUMNS": "200"})
    commands = shown.stdout[shown.stdout.index("Commands:"):]
    assert not re.search(r"\.\.\.\s*$", commands, re.M), commands
    assert "e.g...." not in commands and "with..." not in commands
