"""Issue 44, items 9 and 11: `mlab run` and `mlab eval` say what works. A task folder's missing baseline is
hinted as a command that measures it (not `mlab baseline folder/name`, which is refused), at grade, eval and the
run's end, which also shows the improvement; `--resume` of a run still going says so in one line, first."""
from __future__ import annotations

import pytest

from tests.fixtures.cli import mlab_in_process
from tests.fixtures.param_task import param_task


# ---- item 11: --resume of a run still going says so in one line, before anything else --------------------------
@pytest.mark.slow
def test_resume_of_a_run_still_running_says_it_is_running_and_prints_nothing_else(tmp_path):
    import fcntl
    import json

    from tests.fixtures.cli import entry, mlab

    home = tmp_path / "home"
    run_dir = tmp_path / "going"
    done = mlab("run", "--task", "fixture/counter", "--agent", "fixture-appender", "--run-dir", run_dir,
                "--sandbox", "local", entry=entry("tests.fixtures.gated_run", "mlab"), home=home)
    assert done.returncode == 0, done.stderr
    trace = json.loads((run_dir / "trace.json").read_text())
    trace["status"] = "running"  # as while its process goes on, holding the run's lock
    (run_dir / "trace.json").write_text(json.dumps(trace))
    with open(run_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        resumed = mlab("run", "--resume", run_dir, entry=entry("tests.fixtures.gated_run", "mlab"), home=home)
    assert resumed.returncode == 2, resumed.stdout + resumed.stderr
    assert resumed.stdout == "" and "resumed after" not in resumed.stderr, resumed.stdout
    lines = resumed.stderr.strip().splitlines()
    assert len(lines) == 1 and "is running in another mlab process" in lines[0], resumed.stderr


# ---- item 9: a task folder's missing baseline hinted as a command that works; a run's end judged ----------
@pytest.mark.slow  # over 2 s on two cores
def test_grade_and_eval_hint_a_baseline_command_that_works_for_a_task_folder(tmp_path):
    from tests.fixtures.cli import mlab

    folder = param_task(tmp_path)
    home = tmp_path / "home"
    sub = tmp_path / "submission.csv"
    sub.write_text("id,y\n" + "".join(f"{i},1\n" for i in range(7, 12)))
    graded = mlab_in_process("grade", "./shifted", sub, "-T", "rows=7", "--sandbox", "local", cwd=tmp_path,
                             home=home)
    hint = f"mlab baseline {folder} -T rows=7"
    assert graded.returncode == 0 and hint in graded.stdout, graded.stdout
    made = mlab("run", "--task", "./shifted", "--agent", "baseline", "--run-dir", "runs/seven", "-T", "rows=7",
                "--sandbox", "local", cwd=tmp_path, home=home)
    assert made.returncode == 0, made.stderr
    assert "improvement: none (no baseline" in made.stdout and hint in made.stdout, made.stdout  # the run's end
    shown = mlab_in_process("eval", "runs/seven", cwd=tmp_path, home=home)
    assert shown.returncode == 0 and hint in shown.stdout, shown.stdout
    worked = mlab_in_process(*hint.split()[1:], "--runs", "1", "--sandbox", "local", cwd=tmp_path, home=home)
    assert worked.returncode == 0, worked.stderr
    again = mlab_in_process("eval", "runs/seven", cwd=tmp_path, home=home)
    assert "not measured" not in again.stdout and "+0.0%" in again.stdout, again.stdout
