"""`mlab run`'s live step table in a real terminal (tmux) at common widths: step, action and time stay whole,
input and observation take what is left."""
from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

from tests.fixtures.agents_fixtures import edit_reply, react_response, write_script
from tests.fixtures.cli import REPO, cli_env, entry
from tests.fixtures.tmux import Tmux

GATED = entry("tests.fixtures.gated_run", "mlab")  # the CLI with the fixture task registered


# waits for go.txt, so the test can read the screen while step 5 is in progress
WAIT_SCRIPT = ("import os, time\nfor _ in range(1200):\n    if os.path.exists('go.txt'):\n        break\n"
               "    time.sleep(0.05)\nprint('released')\n")


ACTIONS = ["List Files", "Inspect Script Lines", "Edit Script (AI)", "Copy File", "Execute Script", "Final Answer"]


def _script(path: Path) -> Path:
    long = "a long instruction that says a great deal more than any terminal column can hold " * 3
    return write_script(path, [
        react_response("List Files", {"dir_path": "."}, 1),
        react_response("Inspect Script Lines", {"script_name": "step.py", "start_line_number": 1,
                                                "end_line_number": 6}, 2),
        react_response("Edit Script (AI)", {"script_name": "wait.py", "save_name": "wait.py",
                                            "edit_instruction": long}, 3),
        edit_reply(WAIT_SCRIPT),
        react_response("Copy File", {"source": "wait.py", "destination": "wait_copy.py"}, 4),
        react_response("Execute Script", {"script_name": "wait.py"}, 5),
        react_response("Final Answer", {"final_answer": "done"}, 6),
    ])


def _rows(table: str) -> dict[str, str]:
    """step number -> action cell, from the step table's rows."""
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^│ *(\d+) *│ ([^│]+)│", table, re.M)}


@pytest.mark.slow
@pytest.mark.parametrize("cols", [80, 110])
def test_live_step_table_keeps_every_action_name_whole_at_80_and_110_columns(tmp_path, cols):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (apt-get install tmux)")
    run_dir = tmp_path / "run"
    script = _script(tmp_path / "script.jsonl")
    argv = [*GATED, "run", "--task", "fixture/counter", "--agent", "react", "--llm", f"scripted:{script}",
            "--run-dir", str(run_dir), "--max-steps", "10"]
    env = cli_env({"TERM": "xterm-256color", "COLUMNS": None, "LINES": None})
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items() if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k))
    # the pane stays after the run, so its last screen (the table left in the scrollback) can be read
    command = (f"cd {shlex.quote(str(REPO))} && env -i {exports} {shlex.join(argv)}; echo EXIT=$?; sleep 600")
    tmux = Tmux(tmp_path / "tmux.sock", command, cols=cols, rows=40)
    try:
        live = tmux.wait_for(r"step 5: Execute Script")
        rows = _rows(live)
        assert [rows.get(str(n)) for n in range(1, 5)] == ACTIONS[:4], live
        (run_dir / "workspace" / "go.txt").write_text("1")
        final = tmux.wait_for(r"EXIT=\d+")
    finally:
        tmux.close()
    assert "EXIT=0" in final, final
    left = final[final.rindex("6/10 steps"):]
    rows = _rows(left)
    assert [rows.get(str(n)) for n in range(1, 7)] == ACTIONS, left
    table_lines = [line for line in left.splitlines() if line.startswith(("│", "┃", "┏", "└", "┗", "┡", "╇"))]
    assert table_lines and all(len(line) <= cols for line in table_lines), left
    # what is left goes to input and observation: an observation shows some of its text at both widths
    listing = re.search(r"^│ *1 *│ List Files *│ ([^│]*)│ ([^│]*)│", left, re.M)
    assert listing and "dir_path=." in listing.group(1) and listing.group(2).strip(), left
    # the long edit instruction is cut with an ellipsis, not wrapped onto more lines
    assert re.search(r"^│ *3 *│ Edit Script \(AI\) *│ [^│]*…", left, re.M), left
