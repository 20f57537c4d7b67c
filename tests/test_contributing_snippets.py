"""Every Python example in CONTRIBUTING.md runs as written: each block in a fresh folder, by the venv's Python in a
process of its own. Its registration hooks (register_tasks, register_agents, ...) are called and what they register
is checked: a Lazy declaration is well formed, a class is of its kind; a program agent is run for real, a run of
lite/wine against a scripted model.

A marker on the line before a block says otherwise, visibly in the markdown:
  <!-- snippet: file NAME -->         the block is the file NAME, beside every later block (not run alone)
  <!-- snippet: not run: REASON -->   a shell block, or a Python one only compiled (a fragment); few, each with why
TOML blocks are parsed; a `text` block (a folder tree) is no code.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass

import pytest
import tomllib

from tests.fixtures.cli import REPO, cli_env

CONTRIBUTING = REPO / "CONTRIBUTING.md"
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)[ \t]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
MARKER = re.compile(r"<!-- snippet: (?P<what>.*?) -->")
SHELL = ("sh", "bash")
NOT_PYTHON = {"toml", "text", *SHELL}
MOST_NOT_RUN = 6

# Calls each registration hook the block defines and checks what it registers; a program agent is run for real.
RUNNER = r'''
import json, runpy, sys
from mlab.core import LLM, Agent, Lazy, ProgramAgent, Sandbox, Task

KINDS = {"register_tasks": Task, "register_agents": Agent, "register_llms": LLM, "register_sandboxes": Sandbox}
namespace = runpy.run_path(sys.argv[1], run_name="snippet")
registered = []
for hook, kind in KINDS.items():
    if hook not in namespace:
        continue
    found = []
    namespace[hook](found.append)
    for obj in found:
        if isinstance(obj, Lazy):
            assert obj.problem() is None, obj.problem()
        else:
            assert isinstance(obj, kind) or (isinstance(obj, type) and issubclass(obj, kind)), (hook, obj)
        program = isinstance(obj, type) and issubclass(obj, ProgramAgent)
        registered.append([hook, obj.name, program])
        if program:
            from mlab.cli.main import main
            from mlab.core.plugins.registry import load_registry

            registry = load_registry()
            registry.items["agents"][obj.name] = obj
            registry.providers["agents"][obj.name] = "CONTRIBUTING.md"
            try:
                main(["run", "--task", "lite/wine", "--agent", obj.name, "--llm", "scripted:replies.jsonl",
                      "--run-dir", "run", "--max-steps", "5"])
            except SystemExit as exit_:
                assert not exit_.code, exit_.code
print(json.dumps(registered))
'''
# The model a program agent's run talks to: it runs the task's starter, then says it is done.
REPLIES = [json.dumps("import runpy\nrunpy.run_path('train.py')"), json.dumps("DONE")]


@dataclass
class Block:
    line: int
    lang: str
    code: str
    marker: str  # what the marker before it says; "" without one


def blocks() -> list[Block]:
    text = CONTRIBUTING.read_text(encoding="utf-8")
    found = []
    for fence in FENCE.finditer(text):
        before = [line.strip() for line in text[:fence.start()].splitlines() if line.strip()]
        marker = MARKER.fullmatch(before[-1]) if before else None
        found.append(Block(text.count("\n", 0, fence.start()) + 1, fence["lang"],
                           textwrap.dedent(fence["body"]), marker["what"] if marker else ""))
    return found


def python_blocks() -> list[Block]:
    return [block for block in blocks() if block.lang == "python"]


def not_run_reason(block: Block) -> str | None:
    return block.marker.removeprefix("not run:").strip() if block.marker.startswith("not run:") else None


def file_name(block: Block) -> str | None:
    return block.marker.removeprefix("file ").strip() if block.marker.startswith("file ") else None


def _cases() -> list:
    cases = []
    for block in python_blocks():
        if file_name(block) is not None:
            continue
        slow = "(ProgramAgent)" in block.code and "register_agents" in block.code  # a real run
        cases.append(pytest.param(block, id=f"line-{block.line}", marks=[pytest.mark.slow] if slow else []))
    return cases


@pytest.mark.parametrize("block", _cases())
def test_the_example_runs_as_written(block, tmp_path):
    if not_run_reason(block) is not None:
        compile(block.code, f"CONTRIBUTING.md:{block.line}", "exec")  # a fragment: it parses, at least
        return
    for earlier in python_blocks():
        if earlier.line < block.line and (name := file_name(earlier)) is not None:
            (tmp_path / name).write_text(earlier.code)
    (tmp_path / "snippet.py").write_text(block.code)
    (tmp_path / "runner.py").write_text(RUNNER)
    (tmp_path / "replies.jsonl").write_text("\n".join(REPLIES) + "\n")
    done = subprocess.run([sys.executable, "runner.py", "snippet.py"], cwd=tmp_path, capture_output=True, text=True,
                          env=cli_env(home=tmp_path / "home"), timeout=600)
    assert done.returncode == 0, f"CONTRIBUTING.md:{block.line} failed:\n{done.stderr[-3000:]}"
    registered = json.loads(done.stdout.splitlines()[-1])
    if any(program for _hook, _name, program in registered):  # it ran: one step per model call, the workspace scored
        trace = json.loads((tmp_path / "run" / "trace.json").read_text())
        assert trace["status"] == "finished" and trace["end_reason"] == "agent program exited (code 0)", trace
        assert len(trace["steps"]) == len(REPLIES) and trace["final_score"] is not None, registered


def test_few_examples_are_not_run_and_each_says_why():
    """Code that is not run (a shell block, a Python fragment) says why where it stands, and stays the exception."""
    code = [block for block in blocks() if block.lang in ("python", *SHELL)]
    assert all(not_run_reason(block) is not None for block in code if block.lang in SHELL), \
        [block.line for block in code if block.lang in SHELL and not_run_reason(block) is None]
    reasons = [reason for block in code if (reason := not_run_reason(block)) is not None]
    assert len(reasons) <= MOST_NOT_RUN, reasons
    assert all(len(reason.split()) >= 4 for reason in reasons), reasons
    markers = [block.marker for block in blocks() if block.marker]
    assert all(m.startswith(("not run:", "file ")) for m in markers), markers  # no other, misspelled marker


def test_every_block_says_its_language_and_toml_ones_parse():
    found = blocks()
    assert len(python_blocks()) >= 10, "the fences were not found"
    assert all(block.lang == "python" or block.lang in NOT_PYTHON for block in found), \
        [(block.line, block.lang) for block in found if block.lang != "python" and block.lang not in NOT_PYTHON]
    for block in found:
        if block.lang == "toml":
            tomllib.loads(block.code)
