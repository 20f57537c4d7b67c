"""`mlab run --resume` goes on where the run stopped: the step count and the live table continue from
the steps already done, and without a terminal the first line says where it resumed."""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.fixtures.cli import REPO, cli_env, entry, mlab
from tests.fixtures.gated_run import GATES_VARIABLE
from tests.fixtures.tmux import Tmux

GATED = entry("tests.fixtures.gated_run", "mlab")  # the CLI with the bench fixtures and fixture-gated registered


def _killed_after_two_steps(tmp_path) -> tuple[Path, Path]:
    """A gated run killed while its agent waits to choose step 3: a run to resume, with steps 1 and 2 done."""
    from mlab.core.run.trace import read_trace

    gates, run_dir = tmp_path / "gates", tmp_path / "run"
    gates.mkdir()
    for n in (1, 2):
        (gates / f"step{n}").write_text("")
    proc = subprocess.Popen([*GATED, "run", "--task", "fixture/counter", "--agent", "fixture-gated", "--run-dir",
                             str(run_dir), "--max-steps", "10", "--sandbox", "local"], cwd=REPO,
                            env=cli_env({GATES_VARIABLE: str(gates)}), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not ((run_dir / "trace.json").is_file() and len(read_trace(run_dir).steps) == 2):
            assert time.monotonic() < deadline and proc.poll() is None, "the run never finished its step 2"
            time.sleep(0.1)
    finally:
        proc.kill()
        proc.wait()
    for n in (3, 4):
        (gates / f"step{n}").write_text("")
    return gates, run_dir


@pytest.mark.slow
def test_resume_continues_the_step_count_and_table_from_the_steps_already_done(tmp_path):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (apt-get install tmux)")
    gates, run_dir = _killed_after_two_steps(tmp_path)
    argv = [*GATED, "run", "--resume", str(run_dir)]
    env = cli_env({"TERM": "xterm-256color", "COLUMNS": None, "LINES": None, GATES_VARIABLE: str(gates)})
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items() if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k))
    command = f"cd {shlex.quote(str(REPO))} && env -i {exports} {shlex.join(argv)}; echo EXIT=$?; sleep 600"
    tmux = Tmux(tmp_path / "tmux.sock", command, cols=80, rows=40)
    try:
        final = tmux.wait_for(r"EXIT=\d+")
    finally:
        tmux.close()
    assert "EXIT=0" in final, final
    left = final[final.rindex("fixture-gated on"):]  # the table left in the scrollback
    assert "4/10 steps" in left and "0/10" not in final and "1/10" not in final, final
    assert "resumed after step 2" in left, final
    rows = {m.group(1): m.group(2).strip() for m in re.finditer(r"^│ *(\d+) *│ ([^│]+)│", left, re.M)}
    assert rows == {"1": "Write File", "2": "Execute Script", "3": "Append File", "4": "Final Answer"}, final


@pytest.mark.slow  # over 2 s on two cores
def test_resume_without_a_terminal_says_where_it_resumed(tmp_path):
    gates, run_dir = _killed_after_two_steps(tmp_path)
    resumed = mlab("run", "--resume", run_dir, entry=GATED, env={GATES_VARIABLE: str(gates)})
    assert resumed.returncode == 0, resumed.stderr
    lines = resumed.stdout.splitlines()
    assert lines[0].startswith("resumed after step 2"), resumed.stdout
    assert [line.split(":")[0] for line in lines if line.startswith("step ")] == ["step 3", "step 4"], resumed.stdout
