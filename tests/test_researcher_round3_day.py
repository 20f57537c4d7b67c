"""Issue 44, items 6-16: the rough edges a researcher met in a day's work, one test (or a few) each."""
from __future__ import annotations

import time
from pathlib import Path

from tests.fixtures.cli import mlab_in_process


# ---- item 6: `mlab runs` of a large bench reads its results.db once, not once per run ----------------------------
def _fake_bench(root: Path, runs: int) -> Path:
    """A bench folder listing `runs` finished runs of lite/wine (traces written, nothing run)."""
    from mlab.core.bench.results import ResultsDB
    from mlab.core.models import RunConfig, Trace
    from mlab.core.run.trace import write_trace

    bench = root / "bench"
    with ResultsDB(bench / "results.db") as db:
        for seed in range(runs):
            rel = f"runs/wine--s{seed}"
            (bench / rel).mkdir(parents=True)
            write_trace(bench / rel, Trace(run_id=f"s{seed}", config=RunConfig(task="lite/wine", agent="baseline",
                                                                                  seed=seed),
                                           status="finished", started_at=time.time(), final_score=0.7))
            db.upsert_run(f"lite/wine|baseline|-|s{seed}", task="lite/wine", agent="baseline", llm=None, seed=seed,
                          run_dir=rel, status="finished", steps=0, final_score=0.7, higher_is_better=1)
        db.set_baseline("lite/wine", 0.6, "stored")
    return bench


def test_runs_of_a_bench_opens_its_database_a_fixed_number_of_times_whatever_its_size(tmp_path, monkeypatch):
    from mlab.core.bench.results import ResultsDB

    opened: list[Path] = []
    real = ResultsDB.__init__

    def counting(self, path, *args, **kwargs):
        opened.append(Path(path))
        real(self, path, *args, **kwargs)

    monkeypatch.setattr(ResultsDB, "__init__", counting)
    counts = []
    for runs in (2, 8):
        bench = _fake_bench(tmp_path / str(runs), runs)
        opened.clear()
        shown = mlab_in_process("runs", "--json", bench, home=tmp_path / "home")
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.count('"improvement": 0.16') == runs  # each judged against the bench's baseline
        counts.append(len(opened))
    assert counts[0] == counts[1] <= 2, counts  # before: once per run (504 runs: 504 x 504 folders resolved)


# ---- item 8: `mlab grade -T`, and a run folder graded with the run's own task parameters -------------------------
PARAM_TASK = """\
name: shifted
description: "Predict y for the test ids (which start at ROWS)."
research_problem: predict y for test.csv into submission.csv (id,y).
metric: mse
answers: {file: answers.csv, id_column: id, column: y}
prepare: prepare.py
files:
  public: {train.py: train.py}
read_only: [test.csv]
params:
  rows: {type: int, default: 20, help: the first test id}
"""
PARAM_PREPARE = """\
import json, os
from pathlib import Path
rows = json.loads(os.environ["MLAB_PARAMS"])["rows"]
ids = range(rows, rows + 5)
Path(os.environ["MLAB_PUBLIC_DIR"], "test.csv").write_text("id\\n" + "".join(f"{i}\\n" for i in ids))
Path(os.environ["MLAB_HIDDEN_DIR"], "answers.csv").write_text("id,y\\n" + "".join(f"{i},1\\n" for i in ids))
"""
PARAM_TRAIN = """\
import csv
ids = [r["id"] for r in csv.DictReader(open("test.csv"))]
open("submission.csv", "w").write("id,y\\n" + "".join(f"{i},0\\n" for i in ids))
"""


def _param_task(root: Path) -> Path:
    folder = root / "shifted"
    folder.mkdir()
    (folder / "task.yaml").write_text(PARAM_TASK)
    (folder / "prepare.py").write_text(PARAM_PREPARE)
    (folder / "train.py").write_text(PARAM_TRAIN)
    return folder


def test_grade_takes_task_parameters_and_a_run_folders_own(tmp_path):
    import json

    from tests.fixtures.cli import mlab

    _param_task(tmp_path)
    home = tmp_path / "home"
    sub = tmp_path / "submission.csv"
    sub.write_text("id,y\n" + "".join(f"{i},1\n" for i in range(7, 12)))
    graded = mlab_in_process("grade", "./shifted", sub, "-T", "rows=7", "--json", "--sandbox", "local", cwd=tmp_path,
                             home=home)
    assert graded.returncode == 0, graded.stdout + graded.stderr
    assert json.loads(graded.stdout)["score"] == 0.0 and json.loads(graded.stdout)["task_params"] == {"rows": 7}
    defaults = mlab_in_process("grade", "./shifted", sub, "--sandbox", "local", cwd=tmp_path, home=home)
    assert defaults.returncode == 1  # the defaults' answers have other ids

    made = mlab("run", "--task", "./shifted", "--agent", "baseline", "--run-dir", "runs/seven", "-T", "rows=7",
                "--sandbox", "local", cwd=tmp_path, home=home)
    assert made.returncode == 0, made.stderr
    for given in ("runs/seven", "runs/seven/workspace", "runs/seven/workspace/submission.csv"):
        graded = mlab_in_process("grade", "./shifted", given, "--sandbox", "local", cwd=tmp_path, home=home)
        assert graded.returncode == 0, (given, graded.stdout, graded.stderr)
        assert "mse = 1 " in graded.stdout and "rows=7 (the run's)" in graded.stdout, graded.stdout


# ---- item 9: hints that name what works: did you mean, `mlab baseline ./folder`, eval and a run's end ------------
def test_a_mistyped_task_or_agent_name_gets_a_did_you_mean(tmp_path):
    for args, meant in ((("--task", "lite/wien", "--agent", "baseline"), "did you mean lite/wine?"),
                        (("--task", "wien", "--agent", "baseline"), "did you mean wine?"),
                        (("--task", "lite/wine", "--agent", "basline"), "did you mean baseline?")):
        shown = mlab_in_process("run", *args, "--run-dir", tmp_path / "run", home=tmp_path / "home")
        assert shown.returncode == 2 and meant in shown.stderr, shown.stderr
        assert len(shown.stderr.strip().splitlines()) == 1


# ---- item 16: `make run` shows each package pip collects and installs, not one line per stage ---------------------
CANNED_PIP = """\
Collecting numpy==2.1.0
  Downloading numpy-2.1.0-cp311-cp311-manylinux_2_17_x86_64.whl (16.3 MB)
Requirement already satisfied: packaging in ./.venv/lib/python3.11/site-packages (from torch) (24.1)
Collecting scipy
  Using cached scipy-1.14.0-cp311-cp311-manylinux_2_17_x86_64.whl (41.1 MB)
Building wheels for collected packages: mlab
  Building wheel for mlab (pyproject.toml): started
Installing collected packages: numpy, scipy, mlab
Successfully installed mlab-0.1.0 numpy-2.1.0 scipy-1.14.0
"""


def test_make_run_shows_each_package_pip_collects_and_installs(tmp_path):
    import subprocess

    from tests.fixtures.cli import REPO

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (tmp_path / "pip.txt").write_text(CANNED_PIP)
    # a stand-in venv python: pip's output as pip prints it, or nothing under -q (as pip does)
    stand_in = f'#!/bin/bash\ncase " $* " in *" -q "*) exit 0;; *"pip install"*) cat {tmp_path}/pip.txt;; esac\n'
    for name in ("python", "mlab"):
        (venv / "bin" / name).write_text(stand_in)
        (venv / "bin" / name).chmod(0o755)
    made = subprocess.run(["make", "--no-print-directory", "run", f"VENV={venv}", "LITE_TASKS=",
                           f"SETUP_LOG={tmp_path / 'setup.log'}", f"DEMO_DIR={tmp_path / 'demo'}"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stdout + made.stderr
    shown = [line.split(": ", 1)[1] for line in made.stdout.splitlines() if line.startswith("  ") and " s: " in line]
    stages = [line for line in shown if line.startswith("pip install")]
    assert len(stages) >= 5, made.stdout
    for package in ("collecting numpy==2.1.0", "collecting scipy", "building wheel for mlab",
                    "installing numpy, scipy, mlab"):
        assert sum(line.strip() == package for line in shown) == len(stages), (package, made.stdout)
    assert not any("Requirement already satisfied" in line or "Downloading" in line for line in shown), made.stdout
    assert all(len(line) <= 88 for line in shown), made.stdout
    assert "Successfully installed" in (tmp_path / "setup.log").read_text()  # the whole output stays in the log
