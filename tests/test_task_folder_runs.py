"""`mlab run --task ./folder` runs a declarative task folder that is not installed, `mlab eval` scores the run
again from the folder its config records, and task parameters (-T NAME=VALUE) declared by a task reach prepare,
are recorded in the run's config and are shown by `mlab runs` and in runs.csv; runs carry tags and notes
(--tag, --meta) that `mlab runs --tag` selects by (issue 34, items 5 and 8)."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from mlab.core import PrepareContext, Task, TaskParam
from mlab.core.errors import MlabError
from mlab.core.run.task_lookup import bind
from mlab.core.run.taskdata import TaskHome
from tests.fixtures.cli import mlab, mlab_in_process

TASK_YAML = """\
name: rows-fit
description: "Predict y from x (MSE); the training set has ROWS rows."
research_problem: train.csv has x and y; predict y for test.csv into submission.csv (id,y).
metric: mse
answers: {file: answers.csv, id_column: id, column: y}
prepare: prepare.py
files:
  public: {train.py: train.py}
read_only: [train.csv, test.csv]
params:
  rows:
    type: int
    default: 20
    help: rows of train.csv
"""
PREPARE = """\
import csv, json, os, random
from pathlib import Path
rows = json.loads(os.environ["MLAB_PARAMS"])["rows"]
rng = random.Random(7)
public, hidden = Path(os.environ["MLAB_PUBLIC_DIR"]), Path(os.environ["MLAB_HIDDEN_DIR"])
def write(path, header, table):
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([header, *table])
train = [[i, x, 2 * x + rng.gauss(0, 0.1)] for i, x in ((i, rng.uniform(0, 1)) for i in range(rows))]
test = [[i, rng.uniform(0, 1)] for i in range(10)]
write(public / "train.csv", ["id", "x", "y"], train)
write(public / "test.csv", ["id", "x"], test)
write(hidden / "answers.csv", ["id", "y"], [[i, 2 * x + rng.gauss(0, 0.1)] for i, x in test])
"""
TRAIN = """\
import csv
ys = [float(r["y"]) for r in csv.DictReader(open("train.csv"))]
mean = sum(ys) / len(ys)
with open("submission.csv", "w") as f:
    f.write("id,y\\n" + "".join(f"{r['id']},{mean}\\n" for r in csv.DictReader(open("test.csv"))))
"""

SOLVE = """\
import csv
with open("submission.csv", "w") as f:
    f.write("id,y\\n" + "".join(f"{r['id']},{2 * float(r['x'])}\\n" for r in csv.DictReader(open("test.csv"))))
"""


def task_folder(root: Path) -> Path:
    folder = root / "rows-fit"
    folder.mkdir(parents=True)
    (folder / "task.yaml").write_text(TASK_YAML)
    (folder / "prepare.py").write_text(PREPARE)
    (folder / "train.py").write_text(TRAIN)
    return folder


def config_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "config.json").read_text())


def train_rows(run_dir: Path) -> int:
    with open(run_dir / "workspace" / "train.csv") as f:
        return sum(1 for _ in f) - 1


@pytest.mark.slow
def test_a_task_folder_runs_is_scored_again_and_takes_parameters(tmp_path):
    folder = task_folder(tmp_path)
    home = tmp_path / "home"
    plain = mlab("run", "--task", "./rows-fit", "--agent", "baseline", "--run-dir", "runs/plain", "--tag", "first",
                 "--tag", "ab", "--meta", "who=me", cwd=tmp_path, home=home)
    assert plain.returncode == 0, plain.stderr
    assert "final mse:" in plain.stdout and "final mse: none" not in plain.stdout
    config = config_of(tmp_path / "runs" / "plain")
    assert config["task"] == "folder/rows-fit" and config["task_folder"] == str(folder.resolve())
    assert len(config["task_digest"]) == 64
    assert config["task_params"] == {"rows": 20} and config["tags"] == ["first", "ab"]
    assert config["meta"] == {"who": "me"}
    assert train_rows(tmp_path / "runs" / "plain") == 20

    # -T: prepare writes another training set (prepared apart), and the run records the typed value
    small = mlab("run", "--task", str(folder), "--agent", "baseline", "--run-dir", "runs/small", "-T", "rows=7",
                 "--tag", "ab", cwd=tmp_path, home=home)
    assert small.returncode == 0, small.stderr
    assert config_of(tmp_path / "runs" / "small")["task_params"] == {"rows": 7}
    assert train_rows(tmp_path / "runs" / "small") == 7
    assert train_rows(tmp_path / "runs" / "plain") == 20

    # eval scores each run from the folder its config names, without the folder being installed
    trace = json.loads((tmp_path / "runs" / "small" / "trace.json").read_text())
    scored = mlab("eval", "runs/small", "runs/plain", "--json", cwd=tmp_path, home=home)
    assert scored.returncode == 0, scored.stderr
    rows = {Path(r["run_dir"]).name: r for r in json.loads(scored.stdout)}
    assert rows["small"]["task"] == "folder/rows-fit" and rows["small"]["score"] == trace["final_score"]
    assert rows["plain"]["score"] is not None

    # mlab runs shows parameters, tags and notes, and selects by tag
    listed = mlab_in_process("runs", "runs", "--tag", "first", "--json", cwd=tmp_path, home=home)
    assert [r["run"] for r in json.loads(listed.stdout)] == ["plain"]
    both = mlab_in_process("runs", "runs", "--tag", "ab", cwd=tmp_path, home=home)
    assert "rows=7" in both.stdout and "#first #ab who=me" in both.stdout
    assert "tagged" in mlab_in_process("runs", "runs", "--tag", "nope", cwd=tmp_path, home=home).stdout

    # each value of rows has a baseline of its own; the report tells the two apart as two tasks
    for extra in ((), ("-T", "rows=7")):
        measured = mlab("baseline", "./rows-fit", *extra, cwd=tmp_path, home=home)
        assert measured.returncode == 0, measured.stderr
    # runs.csv: a column each for the parameters, the tags and the notes
    report = mlab_in_process("report", "runs", "--format", "csv", "--no-plots", "--no-html", cwd=tmp_path, home=home)
    assert report.returncode == 0, report.stderr
    with open(tmp_path / "runs" / "report" / "tables" / "runs.csv") as f:
        by_folder = {Path(r["run_dir"]).name: r for r in csv.DictReader(f)}
    assert by_folder["small"]["params"] == "rows=7" and by_folder["plain"]["params"] == "rows=20"
    assert by_folder["plain"]["tags"] == "first,ab" and by_folder["plain"]["meta"] == "who=me"
    assert by_folder["small"]["task"] == "folder/rows-fit [rows=7]" and by_folder["plain"]["task"] == "folder/rows-fit"
    assert by_folder["small"]["baseline"] and by_folder["plain"]["baseline"]
    assert by_folder["small"]["baseline"] != by_folder["plain"]["baseline"]

    # export finds the task again from the folder too
    exported = mlab_in_process("export", "runs", "--format", "inspect", "--json", cwd=tmp_path, home=home)
    assert exported.returncode == 0, exported.stderr
    assert json.loads(exported.stdout)["logs"]

    # a folder changed since the run: scoring it again would not mean the same, said in one line
    (folder / "train.py").write_text(TRAIN + "# changed\n")
    changed = mlab("eval", "runs/small", cwd=tmp_path, home=home)
    assert changed.returncode == 2 and "changed since the run" in changed.stderr
    assert "Traceback" not in changed.stderr


@pytest.mark.parametrize("args, said", [
    (("-T", "nope=1"), "takes no parameter 'nope'; its parameters: rows (int, default 20)"),
    (("-T", "rows=many"), "-T rows: 'many' is not an int"),
    (("-T", "rows"), "-T takes NAME=VALUE"),
    (("--tag", " "), "--tag takes a non-empty one-line name"),
    (("--meta", "who"), "--meta takes NAME=VALUE"),
])
def test_bad_task_parameters_and_tags_are_one_line(tmp_path, args, said):
    task_folder(tmp_path)
    result = mlab_in_process("run", "--task", "./rows-fit", "--agent", "baseline", *args, cwd=tmp_path,
                             home=tmp_path / "home")
    assert result.returncode == 2
    assert said in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "runs").exists()


def test_a_folder_task_of_another_name_is_unknown_not_a_folder(tmp_path):
    result = mlab_in_process("run", "--task", "./missing-task", "--agent", "baseline", cwd=tmp_path,
                             home=tmp_path / "home")
    assert result.returncode == 2 and "does not exist" in result.stderr


class Sized(Task):
    name = "test/sized"
    description = "A task whose data size is a parameter."
    research_problem = "none"
    params = [TaskParam(name="n", type="int", default=3, help="lines"),
              TaskParam(name="strict", type="bool", default=False, changes_data=False)]

    def prepare(self, ctx: PrepareContext) -> None:
        (ctx.public_dir / "data.txt").write_text("x\n" * self.param_values["n"])
        (ctx.public_dir / "train.py").write_text("")

    def evaluate(self, workspace: Path, hidden_dir: Path) -> float:
        return 1.0


def test_a_python_task_reads_its_parameters_and_prepares_each_data_value_apart(tmp_path):
    home = TaskHome(tmp_path)
    task = Sized()
    default, five, strict = bind(task, {}), bind(task, {"n": "5"}), bind(task, {"strict": "true"})
    assert default.param_values == {"n": 3, "strict": False} and five.param_values == {"n": 5, "strict": False}
    assert task.param_values == {}  # the registered instance is left as it was
    # the default values (and a parameter prepare does not read) keep the task's own folder
    assert home.task_dir(default) == home.task_dir(task) == home.task_dir(strict)
    assert home.task_dir(five) != home.task_dir(task)
    for bound in (default, five):
        home.prepare(bound, log=lambda _m: None)
    assert (home.public_dir(default) / "data.txt").read_text().count("x") == 3
    assert (home.public_dir(five) / "data.txt").read_text().count("x") == 5
    with pytest.raises(MlabError, match="'many' is not an int"):
        bind(task, {"n": "many"})


def test_a_bad_parameter_declaration_in_task_yaml_is_one_line(tmp_path):
    folder = task_folder(tmp_path)
    (folder / "task.yaml").write_text(TASK_YAML.replace("default: 20", "default: twenty"))
    result = mlab_in_process("check-task", str(folder), home=tmp_path / "home")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "task.yaml:" in result.stderr and "'twenty' is not an int" in result.stderr


@pytest.mark.slow
def test_baseline_and_check_task_take_a_folder_and_parameters(tmp_path):
    folder = task_folder(tmp_path)
    (folder / "solve.py").write_text(SOLVE)
    (folder / "task.yaml").write_text(TASK_YAML + "reference: solve.py\n")
    home = tmp_path / "home"
    measured = mlab("baseline", str(folder), "-T", "rows=9", cwd=tmp_path, home=home)
    assert measured.returncode == 0, measured.stderr
    assert "folder/rows-fit: baseline mse" in measured.stdout
    checked = mlab("check-task", str(folder), "-T", "rows=9", "--json", cwd=tmp_path, home=home)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert json.loads(checked.stdout)[0]["status"] == "passed"
    bad = mlab_in_process("baseline", str(folder), "-T", "rows=1.5", home=home)
    assert bad.returncode == 2 and "-T rows: '1.5' is not an int" in bad.stderr


@pytest.mark.slow
def test_bench_runs_carry_tags_and_notes_eval_selects_by_tag_and_an_undeclared_parameter_is_refused(tmp_path):
    from mlab.core.bench.evaluate import eval_rows
    from tests.fixtures.bench_cli import REGISTRY
    from tests.fixtures.bench_plugins import bench_registry

    out = tmp_path / "bench"
    args = ("bench", "--tasks", "fixture/counter", "--agents", "fixture-appender", "--runs", "1", "--bench-dir", out,
            "--registry", REGISTRY)
    result = mlab(*args, "--tag", "nightly", "--meta", "who=ci", home=tmp_path / "home")
    assert result.returncode == 0, result.stderr
    listed = json.loads(mlab("runs", out, "--tag", "nightly", "--json", home=tmp_path / "home").stdout)
    assert len(listed) == 1 and listed[0]["tags"] == ["nightly"] and listed[0]["meta"] == {"who": "ci"}
    rows = eval_rows([out], registry=bench_registry(), tags=("nightly",))
    assert len(rows) == 1 and rows[0]["score"] is not None
    with pytest.raises(MlabError, match="is tagged weekly"):
        eval_rows([out], registry=bench_registry(), tags=("weekly",))
    untagged = mlab_in_process("eval", out, "--tag", "weekly", home=tmp_path / "home")
    assert untagged.returncode == 2 and "is tagged weekly" in untagged.stderr
    bad = mlab_in_process(*args, "-T", "size=3", home=tmp_path / "home")
    assert bad.returncode == 2 and "task fixture/counter takes no parameter 'size'" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_a_task_name_is_still_a_task_beside_a_file_of_that_name(tmp_path, monkeypatch):
    from mlab.core.plugins.registry import load_registry
    from mlab.core.run.task_lookup import find_task

    (tmp_path / "digits").mkdir()  # a folder in the working directory named like lite/digits' short name
    monkeypatch.chdir(tmp_path)
    assert find_task(load_registry(), "digits").name == "lite/digits"
    with pytest.raises(MlabError, match="is a folder without a task.yaml"):
        find_task(load_registry(), "./digits")


@pytest.mark.slow
def test_a_folder_run_stopped_midway_resumes_from_its_folder_with_its_parameters(tmp_path, monkeypatch):
    from mlab.core.models import RunConfig
    from mlab.core.plugins.registry import load_registry
    from mlab.core.run.runner import Runner
    from mlab.core.run.task_lookup import find_task, run_fields

    folder = task_folder(tmp_path)
    monkeypatch.setenv("MLAB_HOME", str(tmp_path / "home"))
    registry = load_registry()
    config = RunConfig(**run_fields(find_task(registry, str(folder), {"rows": "5"})), agent="baseline")

    def stop(_step: object) -> None:
        raise KeyboardInterrupt  # as Ctrl-C after the first step is saved

    run_dir = tmp_path / "runs" / "stopped"
    runner = Runner(run_dir, config, registry, on_step=stop)
    with pytest.raises(KeyboardInterrupt):
        runner.start()
    runner._release_lock()  # the interrupted process is this test's, which goes on
    resumed = mlab("run", "--resume", run_dir, home=tmp_path / "home")
    assert resumed.returncode == 0, resumed.stderr
    trace = json.loads((run_dir / "trace.json").read_text())
    assert trace["status"] == "finished" and trace["final_score"] is not None
    assert trace["config"]["task_params"] == {"rows": 5} and train_rows(run_dir) == 5


@pytest.mark.slow
def test_a_bench_runs_a_task_folder_with_parameters(tmp_path):
    task_folder(tmp_path)
    home = tmp_path / "home"
    result = mlab("bench", "--tasks", "./rows-fit", "--agents", "baseline", "--runs", "2", "--workers", "2",
                  "-T", "rows=6", "--bench-dir", "b", cwd=tmp_path, home=home)
    assert result.returncode == 0, result.stderr
    run_dirs = sorted((tmp_path / "b" / "runs").iterdir())
    assert len(run_dirs) == 2
    for run_dir in run_dirs:
        config = config_of(run_dir)
        assert config["task"] == "folder/rows-fit" and config["task_params"] == {"rows": 6}
        assert config["task_folder"] == str((tmp_path / "rows-fit").resolve()) and train_rows(run_dir) == 6
    scored = json.loads(mlab("eval", "b", "--json", cwd=tmp_path, home=home).stdout)
    assert [row["score"] is not None for row in scored] == [True, True]
    ray = mlab_in_process("bench", "--tasks", "./rows-fit", "--agents", "baseline", "--engine", "ray",
                          "--bench-dir", "r", cwd=tmp_path, home=home)
    assert ray.returncode == 2 and "--engine local" in ray.stderr


def test_prepare_takes_parameters_and_an_unprepared_task_says_which_values_to_prepare(tmp_path):
    from mlab.core import Resources
    from mlab.core.plugins.registry import load_registry
    from mlab.core.run.harness import Harness

    folder = task_folder(tmp_path)
    result = mlab_in_process("prepare", str(folder), "-T", "rows=4", home=tmp_path / "home")
    assert result.returncode == 0, result.stderr
    where = Path(result.stdout.strip().rsplit(" in ", 1)[1])
    assert (where / "public" / "train.csv").read_text().count("\n") == 5  # the header and 4 rows

    class Downloaded(Sized):
        resources = Resources(network_for_prepare=True)

    harness = Harness(load_registry(), TaskHome(tmp_path / "other-home"))
    with pytest.raises(MlabError, match=r"run: mlab prepare test/sized -T n=5$"):
        harness.ensure_prepared(bind(Downloaded(), {"n": "5", "strict": "true"}))


@pytest.mark.slow
def test_a_bench_rerun_with_other_parameter_values_runs_them_and_judges_each_against_its_own_baseline(
        tmp_path, monkeypatch):
    import sqlite3

    from mlab.core.bench.report import load

    task_folder(tmp_path)
    home = tmp_path / "home"
    for rows in (None, 6, 7):  # no -T, then two values, into one bench folder
        given = ("-T", f"rows={rows}") if rows else ()
        result = mlab("bench", "--tasks", "./rows-fit", "--agents", "baseline", "--runs", "1", *given,
                      "--bench-dir", "b", cwd=tmp_path, home=home)
        assert result.returncode == 0, result.stderr
    rerun = mlab("bench", "--tasks", "./rows-fit", "--agents", "baseline", "--runs", "1", "-T", "rows=7",
                 "--bench-dir", "b", cwd=tmp_path, home=home)
    assert rerun.returncode == 0, rerun.stderr  # its run is finished: nothing new
    with sqlite3.connect(tmp_path / "b" / "results.db") as db:
        runs = dict(db.execute("SELECT key, run_dir FROM runs").fetchall())
        stored = dict(db.execute("SELECT task, score FROM baselines").fetchall())
    # the run without -T keeps the key it had before parameters existed
    assert sorted(runs) == ["folder/rows-fit [rows=6]|baseline|-|s0", "folder/rows-fit [rows=7]|baseline|-|s0",
                            "folder/rows-fit|baseline|-|s0"]
    rows_of = {key: train_rows(tmp_path / "b" / run_dir) for key, run_dir in runs.items()}
    assert sorted(rows_of.values()) == [6, 7, 20]
    assert set(stored) == {"folder/rows-fit", "folder/rows-fit [rows=6]", "folder/rows-fit [rows=7]"}
    monkeypatch.setenv("MLAB_HOME", str(home))
    data = load(tmp_path / "b")
    assert data.tasks == sorted(stored)
    scores = {r.task: r.final_score for r in data.records}
    for task in stored:  # each value's baseline is its own baseline agent's score, not another value's
        assert data.baselines[task] == pytest.approx(scores[task])
    assert len(set(scores.values())) == 3
    # a baseline `mlab baseline` records after the bench, for one value, is that value's (and only its) baseline
    measured = mlab("baseline", "./rows-fit", "-T", "rows=7", cwd=tmp_path, home=home)
    assert measured.returncode == 0, measured.stderr
    sources = load(tmp_path / "b").baseline_sources
    assert sources["folder/rows-fit [rows=7]"].startswith("recorded")
    assert not sources["folder/rows-fit [rows=6]"].startswith("recorded")


def test_the_reference_score_is_recorded_and_found_per_parameter_values(tmp_path):
    from mlab.core.bench.verdict import RunJudge
    from mlab.core.run.scoring import record_reference, recorded_reference
    from mlab.core.run.task_params import labelled

    home = TaskHome(tmp_path)
    default, five, strict = bind(Sized(), {}), bind(Sized(), {"n": "5"}), bind(Sized(), {"strict": "true"})
    for task, score in ((default, 1.0), (five, 2.0), (strict, 3.0)):
        record_reference(home, task, score, "local")
    # another value (even one that leaves the data as it is) does not replace the defaults' reference
    assert [recorded_reference(home, labelled(t)) for t in (default, five, strict)] == [1.0, 2.0, 3.0]
    assert recorded_reference(home, "test/sized") == 1.0
    judge = RunJudge(home)
    assert [judge.judge(tmp_path, t, 1.0).reference for t in (default, five)] == [1.0, 2.0]


def test_mlab_tasks_shows_the_parameters_each_task_declares(tmp_path):
    from mlab.core.plugins.registry import load_registry

    def with_sized() -> None:
        registry = load_registry()
        registry.items["tasks"]["test/sized"] = Sized()
        registry.providers["tasks"]["test/sized"] = "tests"

    listed = mlab_in_process("tasks", "--json", registry=with_sized, home=tmp_path)
    assert listed.returncode == 0, listed.stderr
    by_name = {row["name"]: row for row in json.loads(listed.stdout)}
    assert by_name["test/sized"]["params"] == [
        {"name": "n", "type": "int", "default": 3, "help": "lines", "changes_data": True},
        {"name": "strict", "type": "bool", "default": False, "help": "", "changes_data": False}]
    assert all(row["params"] == [] for name, row in by_name.items() if name != "test/sized")
    table = mlab_in_process("tasks", registry=with_sized, home=tmp_path, env={"COLUMNS": "400"})
    line = next(line for line in table.stdout.splitlines() if "test/sized" in line)
    assert "n=3 (int)" in line and "-T" in table.stdout
    assert "strict=false (bool)" in table.stdout


def test_the_folder_digest_covers_the_task_files_not_version_control_or_caches(tmp_path):
    from mlab.core.run.task_lookup import folder_digest

    folder = task_folder(tmp_path)
    (folder / "data").mkdir()
    (folder / "data" / "rows.csv").write_text("x\n1\n")
    before = folder_digest(folder)
    for junk in (".git/objects/ab/cdef", ".git/HEAD", ".hg/store/data", "__pycache__/prepare.cpython-312.pyc",
                 "data/__pycache__/x.pyc"):
        (folder / junk).parent.mkdir(parents=True, exist_ok=True)
        (folder / junk).write_text("changes with every commit or import")
    assert folder_digest(folder) == before
    (folder / ".git" / "HEAD").write_text("another commit")
    assert folder_digest(folder) == before
    seen = {before}
    for path, text in (("task.yaml", TASK_YAML + "# a comment\n"), ("prepare.py", PREPARE + "\n"),
                       ("data/rows.csv", "x\n2\n"), ("data/more.csv", "")):
        (folder / path).write_text(text)
        digest = folder_digest(folder)
        assert digest not in seen, path  # each changed task file changes it
        seen.add(digest)
