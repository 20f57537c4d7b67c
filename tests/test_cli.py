"""The command line: clear one-line errors with exit code 2, never a traceback."""
from __future__ import annotations

import json
import subprocess

import pytest

from tests.fixtures.cli import entry, mlab, mlab_in_process
from tests.fixtures.harness import fixture_registry


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr and lines[0].startswith("mlab: error:")
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.mark.parametrize("args, fragments", [
    (["run", "--task", "no-such-task"], ["unknown task 'no-such-task'", "valid:"]),
    (["run", "--task", "lite/digits", "--agent", "no-such-agent"], ["unknown agent 'no-such-agent'", "baseline"]),
    (["run", "--task", "lite/digits", "--max-time", "soon"], ["'soon' is not a duration"]),
    (["run", "--task", "lite/digits", "--max-steps", "0"], ["--max-steps"]),
    (["run", "--task", "lite/digits", "--llm", "nobackend"], ["no LLM backend for 'nobackend'", "scripted"]),
    (["run", "--task", "lite/digits", "--llm", "scripted:/does/not/exist.jsonl"], ["scripted"]),
    (["run", "--task", "lite/digits", "--sandbox", "nope"], ["unknown sandbox 'nope'", "local"]),
    (["run", "--task", "lite/digits", "--agent-option", "novalue"], ["KEY=VALUE"]),
    (["run"], ["--task is required"]),
    (["run", "--resume", "/does/not/exist"], ["not a run directory"]),
    (["run", "--bogus"], ["No such option"]),
    (["eval", "/does/not/exist"], ["does not exist", "a run folder (with trace.json)"]),
    (["prepare", "no-such-task"], ["unknown task"]),
    (["prepare", "lite/digits", "--data-dir", "/does/not/exist"], ["does not exist"]),
    (["baseline", "no-such-task"], ["unknown task"]),
    (["nosuchcommand"], ["No such command"]),
])
@pytest.mark.slow  # over 2 s on two cores
def test_bad_input_is_one_line_and_exit_2(args, fragments):
    assert_one_line_error(mlab_in_process(*args), *fragments)


def test_bad_input_from_a_process_is_one_line_and_exit_2():
    assert_one_line_error(mlab("run", "--task", "no-such-task"), "unknown task 'no-such-task'")


def test_corrupt_trace_is_one_line_error(tmp_path):
    (tmp_path / "trace.json").write_text("{not json")
    assert_one_line_error(mlab_in_process("eval", tmp_path), "not a valid trace")


def test_run_dir_that_is_not_empty_is_refused(tmp_path):
    (tmp_path / "keep.txt").write_text("precious")
    result = mlab_in_process("run", "--task", "lite/wine", "--run-dir", tmp_path)
    assert_one_line_error(result, "not empty")
    assert (tmp_path / "keep.txt").read_text() == "precious"


@pytest.mark.slow  # over 2 s on two cores
def test_eval_reports_each_run(tmp_path):
    runs = []
    for n in (2, 4):
        run_dir = tmp_path / f"run{n}"
        made = mlab(run_dir, "--steps", n, entry=entry("tests.fixtures.harness", "stepper-run"))
        assert made.returncode == 0, made.stderr
        runs.append(run_dir)
    # eval through the fixture registry: the fixture task is registered in-process only
    result = mlab_in_process("eval", "--json", *runs, registry=fixture_registry)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [r["score"] for r in rows] == [None, 1.0]
    assert "no log.txt" in rows[0]["error"]
    assert [r["steps"] for r in rows] == [2, 4]
    assert all(r["status"] == "finished" and r["task"] == "fixture/counter" for r in rows)


@pytest.mark.parametrize("command, key, column", [("tasks", "name", "task"), ("list-plugins", "name", "plugin")])
def test_listings_in_an_80_column_terminal_show_names_whole_and_name_what_they_leave_out(command, key, column):
    listed = json.loads(mlab_in_process(command, "--json").stdout)
    names = [row[key] for row in (listed["plugins"] if command == "list-plugins" else listed)]
    narrow = mlab_in_process(command, env={"COLUMNS": "80"})
    assert narrow.returncode == 0, narrow.stderr
    lines = narrow.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    # each name whole on its own row, in the first column (a squeezed table cut them to "lit…")
    assert [line.split("│")[1].strip() for line in lines if line.startswith("│") and line.split("│")[1].strip()] \
        == names
    assert any(f" {column} " in line for line in lines[:4])
    assert "left out at this width:" in narrow.stdout
