"""One unreadable run does not make `mlab eval` or `mlab report` refuse a folder (issue 34 item 3): it is left out
with one line saying why, and the rest are scored, as `mlab runs` and `mlab view` already did."""
from __future__ import annotations

import functools
import json
import shutil

import pytest

from tests.fixtures import cli
from tests.fixtures.verdict_tasks import verdict_registry

mlab = functools.partial(cli.mlab, entry=cli.entry("tests.fixtures.verdict_tasks"))
# eval and report read the folder: the process is not what these cases are about
read_in_process = functools.partial(cli.mlab_in_process, registry=verdict_registry)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("unreadable")
    home, runs = root / "home", root / "runs"
    made = mlab("run", "--task", "fixture/fixed-two", "--agent", "baseline", "--run-dir", runs / "good",
                "--max-steps", 3, home=home)
    assert made.returncode == 0, made.stderr
    shutil.copytree(runs / "good", runs / "broken")
    for name in ("trace.json", "steps.jsonl"):  # what a trace is read from
        (runs / "broken" / name).write_text("{ not json")
    return home, runs


@pytest.mark.parametrize("command", [("eval", "--json"), ("report", "--json", "--no-plots", "--no-html")])
def test_a_folder_with_an_unreadable_run_is_scored_without_it(folder, command):
    home, runs = folder
    result = read_in_process(*command, runs, home=home)
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "broken" in line]
    assert len(warnings) == 1 and "skipped" in warnings[0], result.stderr
    assert "Traceback" not in result.stderr
    out = json.loads(result.stdout)
    rows = out if isinstance(out, list) else out["runs"]
    assert len(rows) == 1 and rows[0]["score"] == 1.0


def test_a_folder_of_only_unreadable_runs_is_one_line_and_exit_2(folder, tmp_path):
    home, runs = folder
    shutil.copytree(runs / "broken", tmp_path / "only" / "broken")
    for command in (("eval",), ("report", "--no-plots", "--no-html")):
        result = read_in_process(*command, tmp_path / "only", home=home)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
