"""Live progress on the terminal: the step in progress while it runs, rows never dropped silently, Ctrl-C hints
that work, and what `--run-dir` / `--resume` say about a run that exists."""
from __future__ import annotations

import fcntl
import functools
import json
import os
import pty
import re
import select
import shlex
import signal
import struct
import subprocess
import termios
import time
from pathlib import Path

import pytest

from mlab.core.ticker import ticker
from tests.fixtures.cli import REPO, cli_env, entry
from tests.fixtures.cli import mlab as cli_mlab
from tests.fixtures.gated_run import GATES_VARIABLE
from tests.fixtures.waiting import wait_until

ANSI = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[=>]")


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as at a terminal, even when the suite runs in the background


GATED = entry("tests.fixtures.gated_run", "mlab")  # the CLI with the bench fixtures and fixture-gated registered
mlab = functools.partial(cli_mlab, entry=GATED)


def mlab_cmd(*args: object) -> list[str]:
    return [*GATED, *map(str, args)]


def steps_traced(run_dir: Path) -> int:
    try:
        return len(json.loads((run_dir / "trace.json").read_text())["steps"])
    except (OSError, ValueError, KeyError):
        return 0


def live_step(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / "live.json").read_text())
    except (OSError, ValueError):
        return None


class Terminal:
    """A command on a pseudo-terminal of a given size; what it drew, as text without escape sequences."""

    def __init__(self, argv: list[str], rows: int, cols: int):
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.proc = subprocess.Popen(argv, cwd=REPO, stdin=slave, stdout=slave, stderr=slave, close_fds=True,
                                     env=cli_env({"TERM": "xterm-256color", "COLUMNS": str(cols), "LINES": str(rows)}),
                                     preexec_fn=_default_sigint)
        os.close(slave)
        self.master = master
        self.raw = bytearray()

    def _read(self, wait_s: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], wait_s)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # the command ended and closed the terminal
            return False
        self.raw += chunk
        return bool(chunk)

    @property
    def text(self) -> str:
        return ANSI.sub(b"", bytes(self.raw)).decode("utf-8", errors="replace")

    def wait_for(self, pattern: str, timeout_s: float = 60) -> re.Match:
        deadline = time.monotonic() + timeout_s
        while True:
            found = re.search(pattern, self.text)
            if found:
                return found
            if time.monotonic() > deadline or (not self._read(0.1) and self.proc.poll() is not None):
                raise AssertionError(f"{pattern!r} never showed; the screen had:\n{self.text[-3000:]}")

    def finish(self, timeout_s: float = 120) -> int:
        deadline = time.monotonic() + timeout_s
        while self._read(0.1) and time.monotonic() < deadline:
            pass
        return self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        os.close(self.master)


# ---- the step in progress ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_run_shows_the_current_action_an_elapsed_ticker_and_the_running_scripts_output(tmp_path, monkeypatch):
    gates, run_dir = tmp_path / "gates", tmp_path / "run"
    gates.mkdir()
    monkeypatch.setenv(GATES_VARIABLE, str(gates))
    term = Terminal(mlab_cmd("run", "--task", "fixture/counter", "--agent", "fixture-gated", "--run-dir", run_dir),
                    rows=40, cols=160)
    try:
        term.wait_for(r"step 1: waiting for the agent — \d+ s")
        (gates / "step1").touch()
        wait_until(lambda: steps_traced(run_dir) == 1, "step 1")
        (run_dir / "workspace" / "hold.txt").write_text("1")  # show.py prints, then waits for release.txt
        (gates / "step2").touch()
        term.wait_for(r"step 2: Execute Script \(script_name=show\.py\) — \d+ s")
        term.wait_for(r"epoch 3 loss 0\.333")  # the running script's output, while it runs
        # the ticker moves while the step runs: the view redraws without waiting for the step to end
        term.wait_for(r"step 2: Execute Script \(script_name=show\.py\) — [1-9]\d* s", timeout_s=30)
        assert steps_traced(run_dir) == 1
        (run_dir / "workspace" / "release.txt").write_text("1")
        (gates / "step3").touch()
        (gates / "step4").touch()
        assert term.finish() == 0, term.text[-3000:]
        assert "run finished: final answer; 4 steps" in term.text
    finally:
        term.close()


@pytest.mark.slow
def test_run_table_says_how_many_earlier_steps_it_leaves_out(tmp_path):
    run_dir = tmp_path / "run"
    # 16 lines leave room for 6 rows; fixture-appender takes 12 steps
    term = Terminal(mlab_cmd("run", "--task", "fixture/counter", "--agent", "fixture-appender", "--agent-option",
                             "steps=12", "--run-dir", run_dir), rows=16, cols=160)
    try:
        assert term.finish() == 0, term.text[-3000:]
    finally:
        term.close()
    screen = term.text
    assert "run finished: final answer; 12 steps" in screen
    last = screen[screen.rindex("12/50 steps"):]  # the table as it was left
    assert "6 earlier step(s) not shown" in last
    assert re.search(r"│ 12 +│ Final Answer", last) and re.search(r"│ 7 +│ Append File", last)
    assert not re.search(r"│ 6 +│ Append File", last)


# ---- Ctrl-C, --resume and --run-dir -----------------------------------------------------------------------
@pytest.mark.slow
def test_ctrl_c_gives_a_resume_hint_that_works_and_run_dir_says_what_a_folder_holds(tmp_path, monkeypatch):
    gates, run_dir = tmp_path / "gates", tmp_path / "run"
    gates.mkdir()
    monkeypatch.setenv(GATES_VARIABLE, str(gates))
    args = ("run", "--task", "fixture/counter", "--agent", "fixture-gated", "--run-dir", run_dir)
    proc = subprocess.Popen(mlab_cmd(*args), cwd=REPO, env=cli_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    try:
        (gates / "step1").touch()
        wait_until(lambda: steps_traced(run_dir) == 1, "step 1")
        (run_dir / "workspace" / "hold.txt").write_text("1")  # step 2's script is running when Ctrl-C comes
        (gates / "step2").touch()
        wait_until(lambda: (live_step(run_dir) or {}).get("output_tail", "").endswith("epoch 3 loss 0.333"),
                   "step 2's script to run")
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    hint = next(line for line in err.splitlines() if "interrupted" in line)
    assert f"interrupted after step 1 of at most 50; continue with: mlab run --resume {run_dir}" in hint
    assert not (run_dir / "live.json").exists()  # nothing is in progress any more

    # the folder holds a stopped run: a new run there is refused, and says how to continue it
    again = mlab(*args)
    assert again.returncode == 2 and again.stderr.count("\n") == 1, again.stderr
    assert f"holds a run stopped after step 1; continue it with: mlab run --resume {run_dir}" in again.stderr

    # the hint's command, as printed, continues the run to its end
    for n in (3, 4):
        (gates / f"step{n}").touch()
    resumed = mlab(*shlex.split(hint.split("continue with: mlab ", 1)[1]))
    assert resumed.returncode == 0, resumed.stderr
    assert "run finished: final answer; 4 steps" in resumed.stdout
    assert f"see it: mlab view {run_dir}" in resumed.stdout

    for retry in (args, ("run", "--resume", run_dir)):  # neither sends the user round in circles
        ended = mlab(*retry)
        assert ended.returncode == 2 and ended.stderr.count("\n") == 1, ended.stderr
        assert "(finished: final answer)" in ended.stderr and f"see it with: mlab view {run_dir}" in ended.stderr
        assert "--resume to continue" not in ended.stderr


def test_run_dir_holding_something_else_is_refused_with_one_line(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    result = mlab("run", "--task", "fixture/counter", "--agent", "fixture-appender", "--run-dir", tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "is not empty and holds no run; give a new or empty folder" in result.stderr
    assert (tmp_path / "notes.txt").read_text() == "mine"


# ---- the live state itself ----------------------------------------------------------------------------------
def test_output_tail_keeps_the_last_lines_as_a_terminal_shows_them():
    from mlab.core.run.live import output_tail

    data = b"".join(f"line {i}\n".encode() for i in range(30)) + b"progress 10%\rprogress 50%\rprogress 90%"
    assert output_tail(data, lines=3) == "line 28\nline 29\nprogress 90%"
    assert output_tail("caf\u00e9\n".encode()[:-2] + b"\n") == "caf\ufffd"  # a character cut in two


@pytest.mark.slow  # over 2 s on two cores
def test_live_state_follows_a_step_and_is_gone_when_it_ends(tmp_path):
    from mlab.core.models import Action
    from mlab.core.run.live import LiveStep
    from mlab.core.view.live import read_live

    live = LiveStep(tmp_path)
    live.begin(3)
    assert live.state["step"] == 3
    wait_until(lambda: read_live(tmp_path), "the step on disk")
    assert read_live(tmp_path)["action"] is None
    live.acting(Action(name="Execute Script", args={"script_name": "train.py", "big": "x" * 10_000}))
    on_disk = wait_until(lambda: (read_live(tmp_path) or {}).get("action") and read_live(tmp_path), "the action")
    assert on_disk["action"] == "Execute Script" and on_disk["args"]["script_name"] == "train.py"
    assert len(on_disk["args"]["big"]) <= 201
    live.output(b"epoch 1\n")
    live.output(b"epoch 2\n")  # within the write interval: written a little later, not lost
    wait_until(lambda: (read_live(tmp_path) or {}).get("output_tail") == "epoch 1\nepoch 2", "the output tail")
    live.end()
    assert read_live(tmp_path) is None and live.state is None
    (tmp_path / "live.json").write_text('{"step": "x"')
    assert read_live(tmp_path) is None  # garbage is no step


@pytest.mark.slow  # over 2 s on two cores
def test_short_steps_are_never_written_and_a_new_step_hides_the_last_one(tmp_path):
    """A step shorter than SHOW_AFTER_S costs no file write (hundreds of runs on a few cores take a step each
    every second or two); a longer one shows, and the next step's start removes it at once."""
    from mlab.core.models import Action
    from mlab.core.run.live import SHOW_AFTER_S, LiveStep
    from mlab.core.view.live import read_live

    live = LiveStep(tmp_path)
    for index in range(1, 6):
        began = time.monotonic()
        live.begin(index)
        live.acting(Action(name="Append File", args={"file_name": "log.txt", "content": "x"}))
        assert not (tmp_path / "live.json").exists() or time.monotonic() - began >= SHOW_AFTER_S
    shown = wait_until(lambda: read_live(tmp_path), "a step lasting longer than SHOW_AFTER_S")
    assert shown["step"] == 5 and shown["action"] == "Append File"
    live.begin(6)
    assert read_live(tmp_path) is None  # not step 5 any more, and step 6 is not old enough to show
    assert wait_until(lambda: read_live(tmp_path), "step 6")["step"] == 6
    live.end()
    assert read_live(tmp_path) is None and live.state is None
    assert not ticker().wanted(live)  # no tick writes it again


def test_a_run_is_in_progress_while_its_lock_is_held(tmp_path):
    from mlab.core.view.live import RUN_LOCK_FILE, run_in_progress

    assert run_in_progress(tmp_path) is False  # no lock file: never started here
    with open(tmp_path / RUN_LOCK_FILE, "w") as lock:
        assert run_in_progress(tmp_path) is False  # a lock file nobody holds: a run that stopped
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert run_in_progress(tmp_path) is True
        fcntl.flock(lock, fcntl.LOCK_UN)
    assert run_in_progress(tmp_path) is False


# ---- the bench view -----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_bench_view_counts_right_after_ctrl_c_and_keeps_a_line_for_every_finished_run(tmp_path, monkeypatch):
    gates, bench_dir = tmp_path / "gates", tmp_path / "bench"
    gates.mkdir()
    monkeypatch.setenv(GATES_VARIABLE, str(gates))
    args = ("bench", "--tasks", "fixture/counter", "--agents", "fixture-gated", "--runs", "6", "--workers", "2",
            "--bench-dir", bench_dir, "--registry", "tests.fixtures.gated_run:gated_registry")
    term = Terminal(mlab_cmd(*args), rows=40, cols=200)
    try:
        # two runs wait for their agent (the current action, not the last one done), four wait for a worker
        term.wait_for(r"0 finished, 2 running, 0 failed, 0 interrupted, 4 pending \(of 6\)")
        term.wait_for(r"fixture-gated\|[^|]*\|s1 +1/50 +waiting for the agent")
        wait_until(lambda: len(list((bench_dir / "runs").glob("*/live.json"))) == 2, "both runs to start")
        term.proc.send_signal(signal.SIGINT)
        assert term.finish() == 130, term.text[-3000:]
    finally:
        term.close()
    screen = term.text
    assert "0 finished, 0 running, 0 failed, 2 interrupted, 4 pending (of 6)" in screen
    assert len(re.findall(r"\|s[01]: interrupted \(resumable\)", screen)) == 2
    assert "rerun the same command to resume the others" in screen

    for n in range(1, 5):
        (gates / f"step{n}").touch()
    term = Terminal(mlab_cmd(*args), rows=12, cols=200)  # fewer lines than runs: each still gets its line
    try:
        assert term.finish() == 0, term.text[-3000:]
    finally:
        term.close()
    screen = term.text
    assert "6 finished, 0 running, 0 failed, 0 interrupted, 0 pending (of 6)" in screen
    for seed in range(6):
        assert re.search(rf"fixture-gated\|[^|]*\|s{seed}: finished \(final answer\); score 1\b", screen), seed
