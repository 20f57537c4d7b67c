""""Of reference" stays "-" until `mlab check-task` has measured the task's reference solution (issue 44 item 4):
where it is shown with no reference score recorded (grade, eval, the viewer's run page), the command that records
it is named; once check-task has run, the ratio is shown instead."""
from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path

import pytest

from tests.fixtures import cli
from tests.fixtures.cli import cli_env, mlab_in_process
from tests.fixtures.verdict_tasks import verdict_registry
from tests.fixtures.webdriver import CHROMEDRIVER, CHROMIUM, MISSING, Browser

TASK = "fixture/with-reference"
HINT = f"mlab check-task {TASK}"
mlab = functools.partial(cli.mlab, entry=cli.entry("tests.fixtures.verdict_tasks"))


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def grade(home: Path, submission: Path, *more: str) -> subprocess.CompletedProcess:
    return mlab_in_process("grade", TASK, submission, *more, registry=verdict_registry, home=home)


@pytest.fixture()
def submission(tmp_path) -> Path:
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "log.txt").write_text("a\nb\n")  # two lines: the score
    return folder


def test_grade_names_check_task_until_a_reference_is_recorded(tmp_path, submission):
    home = tmp_path / "home"
    out = ok(grade(home, submission))
    assert f"of reference: - (no reference score recorded; run: {HINT})" in out, out
    assert json.loads(ok(grade(home, submission, "--json")))["reference_hint"] == HINT
    ok(mlab_in_process("check-task", TASK, "--home", home, registry=verdict_registry, home=home))
    out = ok(grade(home, submission))
    assert "check-task" not in out and "0.4 of the reference score 5" in out, out
    assert json.loads(ok(grade(home, submission, "--json")))["reference_hint"] is None


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, Path]:
    """A run of the task (it writes 2 lines) in a home where check-task has not run."""
    root = tmp_path_factory.mktemp("hints")
    home, run_dir = root / "home", root / "runs" / "measured"
    ok(mlab("run", "--task", TASK, "--agent", "fixture-appender", "--run-dir", run_dir, "--max-steps", 10,
            "--agent-option", "steps=3", home=home))
    return home, run_dir


@pytest.mark.slow
def test_eval_names_check_task_for_a_task_with_no_reference(run):
    home, run_dir = run
    out = ok(mlab("eval", run_dir, home=home))
    assert f"of reference of {TASK}: not recorded; run {HINT}" in " ".join(out.split()), out
    row, = json.loads(ok(mlab("eval", run_dir, "--json", home=home)))
    assert row["of_reference"] is None and row["reference_hint"] == HINT


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None, reason=MISSING)
def test_the_viewers_run_page_names_check_task_for_a_task_with_no_reference(run, tmp_path):
    home, run_dir = run
    proc = subprocess.Popen([*cli.entry("tests.fixtures.verdict_tasks"), "view", str(run_dir.parent)],
                            env=cli_env(home=home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = next((line.split()[1] for line in proc.stdout if line.startswith("open http://")), None)  # type: ignore[union-attr]
        assert url
        with Browser(tmp_path / "profile") as browser:
            browser.open(url + "#run=measured")
            hint = browser.wait_for("var e = document.getElementById('run-reference-hint'); return e && e.textContent;")
            assert HINT in hint
            assert browser.text("run-no-reference") == "-" and browser.text("run-of-reference") is None
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]
