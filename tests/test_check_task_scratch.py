"""`mlab check-task` without --home prepares into a temporary home, which a process of its own removes after the
command (issue 42 item 4: removing 200,000 prepared files took minutes after the report was out): the command
leaves nothing behind, and the reference it measured is kept in MLAB_HOME."""
from __future__ import annotations

import functools
import time
from pathlib import Path

from tests.fixtures import cli

TASK = "fixture/with-reference"
mlab = functools.partial(cli.mlab, entry=cli.entry("tests.fixtures.verdict_tasks"))
DEADLINE_S = 120


def test_the_temporary_home_is_removed_after_the_command(tmp_path):
    tmp, home = tmp_path / "tmp", tmp_path / "home"
    tmp.mkdir()
    done = mlab("check-task", TASK, home=home, env={"TMPDIR": str(tmp)})
    assert done.returncode == 0, done.stdout + done.stderr
    deadline = time.monotonic() + DEADLINE_S
    while any(tmp.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not list(tmp.iterdir())
    assert (home / "tasks" / "fixture__with-reference" / "reference.json").is_file()
    assert not list(Path(home).glob("tasks/*/public"))  # prepared in the temporary home, not in MLAB_HOME
