"""Every `mlab ...` command in the README's and CONTRIBUTING's code blocks runs as written, in the order written, in
a fresh folder with a fresh MLAB_HOME (the lite tasks prepare themselves offline). The only ones left out need a
real model or the network; they are listed here by their exact text, with a stand-in when later commands need
what they would have made."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "CONTRIBUTING.md")
MLAB_BIN = Path(sys.executable).parent

# command as written -> (why it is not run here, what runs instead or None)
NOT_RUN: dict[str, tuple[str, str | None]] = {
    "mlab data --all --download DIR": ("downloads every task's files from the internet", None),
    "mlab prepare --all --data-dir DIR": ("needs the files the download above fetched", None),
    "mlab bench ... --engine ray --ray-address HEAD_IP:6379 [--cpus-per-run 1]": (
        "needs a Ray cluster on other machines (HEAD_IP is a placeholder)", None),
    "mlab bench --tasks lite/digits,lite/wine --agents baseline,research --llm openai/gpt-4o --runs 8 "
    "--bench-dir bench": ("needs a real model (openai/gpt-4o)",
                          "mlab bench --tasks lite/digits,lite/wine --agents baseline --runs 1 --workers 2 "
                          "--bench-dir bench"),
    "mlab check-sandbox jail": ("jail is the sandbox the section has the reader write; not installed here",
                                "mlab check-sandbox local"),
    "mlab check-sandbox jail --case freezes_between_actions --json": (
        "the same sandbox", "mlab check-sandbox local --case freezes_between_actions --json"),
    'mlab run --task lite/wine --agent command --agent-option command="python my_agent.py" --llm openai/gpt-4o-mini':
        ("needs a real model; tests/test_contributing_snippets.py runs the same program against a scripted one", None),
}
# A command the next one needs interrupted: killed once its run has started (its trace exists), as a user's
# crash would, so `mlab run --resume` has a killed run to continue.
KILLED_ONCE_STARTED = {"mlab run --task lite/digits --agent baseline --run-dir runs/digits": "runs/digits/trace.json"}
TIMEOUT_S = 600


def documented_commands() -> list[tuple[str, str]]:
    """(document, command line) of every line starting with `mlab ` in a fenced code block, in order; a
    trailing comment stays (the shell drops it), continuation lines are joined."""
    found = []
    for doc in DOCS:
        text = (REPO / doc).read_text(encoding="utf-8")
        for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                line = line.strip().removeprefix("$ ")
                if line.startswith("mlab "):
                    found.append((doc, line))
    return found


def without_comment(line: str) -> str:
    return re.sub(r"\s+#.*$", "", line).strip()


def test_the_docs_hold_the_commands_the_list_names():
    commands = [without_comment(line) for _doc, line in documented_commands()]
    assert len(commands) >= 10, commands
    stale = [c for c in [*NOT_RUN, *KILLED_ONCE_STARTED] if c not in commands]
    assert not stale, f"listed here but no longer in the docs: {stale}"


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MLAB_LOAD_PLUGINS", "PYTHONPATH")}
    env.update({"MLAB_HOME": str(home), "PATH": f"{MLAB_BIN}{os.pathsep}{env.get('PATH', '')}", "COLUMNS": "200",
                "PYTHONDONTWRITEBYTECODE": "1"})
    return env


def _kill_once_started(line: str, marker: Path, cwd: Path, env: dict[str, str]) -> None:
    proc = subprocess.Popen(["bash", "-c", line], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not marker.is_file():
            assert proc.poll() is None, f"{line!r} ended before it could be killed:\n{proc.stdout.read()}"
            assert time.monotonic() < deadline, f"{line!r} never started a run"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
    assert json.loads(marker.read_text())["status"] == "running", "the run ended before it was killed"


@pytest.mark.slow
def test_every_documented_command_runs_as_written(tmp_path):
    env = _env(tmp_path / "mlab-home")
    work = tmp_path / "work"
    work.mkdir()
    ran = []
    for doc, line in documented_commands():
        command = without_comment(line)
        if command in NOT_RUN:
            _why, standin = NOT_RUN[command]
            if standin is None:
                continue
            line = standin
        if command in KILLED_ONCE_STARTED:
            _kill_once_started(line, work / KILLED_ONCE_STARTED[command], work, env)
            ran.append(command)
            continue
        try:
            result = subprocess.run(["bash", "-c", line], cwd=work, env=env, capture_output=True, text=True,
                                    timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{doc}: {line!r} ran past {TIMEOUT_S} s (a command that serves until stopped belongs in "
                        "NOT_RUN, with a stand-in)")
        assert result.returncode == 0 and "Traceback" not in result.stderr, \
            f"{doc}: {line!r} exited {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        ran.append(command)
    assert "mlab run --resume runs/digits" in ran
    # what the sequence promises: the killed run was continued to its end
    assert json.loads((work / "runs" / "digits" / "trace.json").read_text())["status"] == "finished"
