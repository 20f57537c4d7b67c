"""Declarative tasks: a folder with task.yaml is a task, a pack whose entry point names a folder of them is a
plugin; bad task files are one line naming the file, the line and the field."""
from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from mlab.core import ExecResult, ExecSpec, InvalidSubmission, Limits, MlabError, PrepareContext  # noqa: E402
from mlab.core.declarative.pack import FOLDER_PACK  # noqa: E402
from mlab.core.declarative.task import MAX_SCORE_BYTES, DeclarativeTask  # noqa: E402
from mlab.core.declarative.yamlfile import TaskFileError  # noqa: E402
from mlab.core.plugins.registry import load_registry  # noqa: E402
from mlab.core.sandbox.local import UnconfinedSandbox  # noqa: E402
from mlab.core.sandbox.resolve import resolve_sandbox  # noqa: E402
from mlab.core.task import ValidationSplit  # noqa: E402
from mlab.core.task_context import ScoringContext, scoring_with  # noqa: E402
from tests.fixtures.agents_fixtures import edit_reply, research_response, write_script  # noqa: E402
from tests.fixtures.cli import mlab, mlab_in_process  # noqa: E402
from tests.fixtures.venvs import make_venv  # noqa: E402

DECLARATIVE_PACK = REPO / "examples" / "task-pack-declarative"
EXAMPLE_TASKS = DECLARATIVE_PACK / "mlab_example_declarative"
PACK, DIST = "example-yaml", "mlab-example-declarative"


def task_folder(root: Path, text: str, files: dict[str, str] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "task.yaml").write_text(text)
    for name, content in (files or {}).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(content)
    return root


MINIMAL = """\
name: tiny
description: "A tiny task."
research_problem: Predict y.
metric: {metric}
answers: {{file: answers.csv, column: y}}
files:
  public: {{train.py: train.py}}
  hidden: {{answers.csv: answers.csv}}
"""
ANSWERS = "id,y\n1,1\n2,0\n3,1\n4,1\n"


def minimal_task(tmp_path: Path, metric: str = "accuracy", extra: str = "", answers: str = ANSWERS,
                 files: dict[str, str] | None = None) -> DeclarativeTask:
    folder = task_folder(tmp_path / "tiny", MINIMAL.format(metric=metric) + extra,
                         {"train.py": "print('hi')\n", "answers.csv": answers, **(files or {})})
    return DeclarativeTask.from_folder(folder, FOLDER_PACK)


def in_auto_sandbox(argv: list[str], spec: ExecSpec) -> ExecResult:
    """What the harness hands a prepare as its run (PrepareContext.run): the confining sandbox `auto` picks."""
    sandbox = resolve_sandbox(load_registry(), "auto")()
    try:
        return sandbox.run(argv, spec)
    finally:
        sandbox.close()


def prepared(task: DeclarativeTask, root: Path) -> tuple[Path, Path]:
    public, hidden = root / "public", root / "hidden"
    public.mkdir(parents=True)
    hidden.mkdir(parents=True)
    task.prepare(PrepareContext(public_dir=public, hidden_dir=hidden, log=lambda _m: None, run=in_auto_sandbox))
    return public, hidden


# ---- malformed task.yaml: one line, file:line, the field, exit 2 ------------------------------------------------

def scaffolded(tmp_path: Path, name: str = "good") -> Path:
    result = mlab_in_process("new-task", str(tmp_path / name))
    assert result.returncode == 0, result.stderr
    return tmp_path / name


def line_of(text: str, start: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith(start))


@pytest.mark.parametrize("case, edit, field, says", [
    ("bad indentation", lambda t: t.replace("  baseline_seconds: 2", "    baseline_seconds: 2"),
     "baseline_seconds", "is not valid YAML"),
    ("unknown field", lambda t: t.replace("starter: train.py", "starter: train.py\nread_onyl: [x.csv]"),
     "read_onyl", "did you mean 'read_only'"),
    ("wrong type", lambda t: t.replace("ram_gb: 0.5", "ram_gb: lots"), "resources.ram_gb", "valid number"),
    ("missing required field", lambda t: "\n".join(x for x in t.splitlines() if not x.startswith("description:")),
     "description", "is required but missing"),
    ("unknown metric", lambda t: t.replace("metric: mse", "metric: mean-squared"), "metric", "unknown metric"),
    ("key given twice", lambda t: t.replace("starter: train.py", "starter: train.py\nstarter: main.py"),
     "starter", "is given twice"),
    ("path outside the folder", lambda t: t.replace("prepare: prepare.py", "prepare: ../prepare.py"),
     "prepare", "inside the folder"),
    ("file not in the folder", lambda t: t.replace("reference: reference/solve.py", "reference: nope.py"),
     "reference", "is not in the task folder"),
])
def test_a_malformed_task_file_is_one_line_with_file_line_and_field(tmp_path, case, edit, field, says):
    folder = scaffolded(tmp_path)
    path = folder / "task.yaml"
    text = edit(path.read_text())
    path.write_text(text)
    result = mlab_in_process("check-task", str(folder))  # bad input: the exit code and the line, no process needed
    assert result.returncode == 2, (case, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    first_key = {"bad indentation": "    baseline_seconds", "unknown field": "read_onyl", "wrong type": "  ram_gb",
                 "missing required field": "name:", "unknown metric": "metric:", "key given twice": "starter: main",
                 "path outside the folder": "prepare:", "file not in the folder": "reference:"}[case]
    assert f"{path}:{line_of(text, first_key)}: field '{field}': " in lines[0], lines[0]
    assert says in lines[0], lines[0]


def test_the_error_is_raised_as_a_task_file_error_with_its_parts(tmp_path):
    folder = task_folder(tmp_path / "t", "name: t\ndescription: d\nresearch_problem: p\nmetric: accuracy\n"
                                         "answers: {file: a.csv, column: y}\nfiles: {public: {x: x}}\n"
                                         "success_margin: -1\n", {"x": ""})
    with pytest.raises(TaskFileError) as caught:
        DeclarativeTask.from_folder(folder, FOLDER_PACK)
    assert (caught.value.line, caught.value.field) == (7, "success_margin")
    assert isinstance(caught.value, MlabError) and "greater than or equal to 0" in caught.value.problem


def test_a_scorer_needs_a_direction_and_a_builtin_metric_keeps_its_own(tmp_path):
    scorer = MINIMAL.format(metric="score") + "scorer: score.py\n"
    folder = task_folder(tmp_path / "s", scorer, {"score.py": "", "train.py": "", "answers.csv": ANSWERS})
    with pytest.raises(TaskFileError, match=r"task.yaml:\d+: field 'direction': is required with a scorer"):
        DeclarativeTask.from_folder(folder, FOLDER_PACK)
    with pytest.raises(TaskFileError, match="accuracy is higher is better"):
        minimal_task(tmp_path, extra="direction: lower\n")


# ---- built-in metrics -------------------------------------------------------------------------------------------

def test_a_builtin_metric_scores_the_submission_as_scikit_learn_does(tmp_path):
    from sklearn.metrics import f1_score, mean_squared_error

    task = minimal_task(tmp_path / "a", metric="f1-macro")
    assert task.name == "folder/tiny" and task.metric.higher_is_better
    public, hidden = prepared(task, tmp_path / "home")
    assert (public / "train.py").is_file() and (hidden / "answers.csv").read_text() == ANSWERS
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "submission.csv").write_text("id,y,extra\n4,1.0,x\n3,0,x\n2,0,x\n1,1,x\n")
    assert task.evaluate(workspace, hidden) == pytest.approx(f1_score([1, 0, 1, 1], [1, 0, 0, 1], average="macro"))

    regression = minimal_task(tmp_path / "b", metric="mse", answers="id,y\na,1.5\nb,2\n")
    assert not regression.metric.higher_is_better
    _public, hidden = prepared(regression, tmp_path / "home2")
    (workspace / "submission.csv").write_text("id,y\nb,3\na,1\n")
    assert regression.evaluate(workspace, hidden) == pytest.approx(mean_squared_error([1.5, 2], [1, 3]))


@pytest.mark.parametrize("submission, says", [
    (None, "there is no submission.csv"),
    ("id,prediction\n1,1\n", "has no column 'y'"),
    ("id,y\n1,1\n2,0\n3,1\n", "1 missing"),
    ("id,y\n1,1\n2,0\n3,1\n4,1\n9,1\n", "1 unknown"),
    ("id,y\n1,1\n1,0\n3,1\n4,1\n", "appears twice"),
    ("id,y\n1,1\n2,nan\n3,1\n4,1\n", "not a finite number"),
    ("id,y\n1,1\n2,1,7\n", "has 3 cells"),
    ("", "is empty"),
])
def test_every_unusable_submission_is_an_invalid_submission(tmp_path, submission, says):
    task = minimal_task(tmp_path, metric="mae")
    _public, hidden = prepared(task, tmp_path / "home")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    if submission is not None:
        (workspace / "submission.csv").write_text(submission)
    with pytest.raises(InvalidSubmission, match=says):
        task.evaluate(workspace, hidden)


def test_a_submission_over_the_size_limit_or_a_symlink_is_refused_unread(tmp_path):
    task = minimal_task(tmp_path, extra="max_submission_bytes: 30\n")
    _public, hidden = prepared(task, tmp_path / "home")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "submission.csv").write_text("id,y\n" + "".join(f"{i},1\n" for i in range(1, 5)) + " " * 30)
    with pytest.raises(InvalidSubmission, match="more than the 30 allowed"):
        task.evaluate(workspace, hidden)
    (workspace / "submission.csv").unlink()
    (workspace / "submission.csv").symlink_to(hidden / "answers.csv")
    with pytest.raises(InvalidSubmission, match="symbolic link"):
        task.evaluate(workspace, hidden)


# ---- scorer scripts: run in the scoring sandbox, their output untrusted ----------------------------------------

SCORED = """\
name: scored
description: "Scored by a script."
research_problem: Write submission.txt.
metric: closeness
direction: higher
scorer: score.py
answers: {file: answers.txt}
files:
  public: {train.py: train.py}
  hidden: {answers.txt: answers.txt}
"""


@pytest.mark.parametrize("scorer, outcome", [
    ("import os\nopen(os.environ['MLAB_SCORE_FILE'], 'w').write(str(1 + float(open('submission.txt').read()) "
     "+ float(open(os.environ['MLAB_ANSWERS']).read())))\n", 3.5),
    ("print('no submission.txt in sight'); raise SystemExit(4)\n", "exit code 4.*no submission.txt in sight"),
    ("print('done')\n", "wrote no score"),
    ("import os\nopen(os.environ['MLAB_SCORE_FILE'], 'w').write('1' * 100000)\n", f"more than {MAX_SCORE_BYTES}"),
    ("import os\nopen(os.environ['MLAB_SCORE_FILE'], 'w').write('inf')\n", "not finite"),
    ("import os\nopen(os.environ['MLAB_SCORE_FILE'], 'w').write('great')\n", "not a number"),
    ("import os\nopen('written-here', 'w')\n", "exit code 1.*Read-only file system|exit code 1.*ermission"),
])
def test_a_scorer_script_scores_in_the_sandbox_and_its_output_is_checked(tmp_path, scorer, outcome):
    folder = task_folder(tmp_path / "scored", SCORED, {"score.py": scorer, "train.py": "", "answers.txt": "2"})
    task = DeclarativeTask.from_folder(folder, FOLDER_PACK)
    _public, hidden = prepared(task, tmp_path / "home")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "submission.txt").write_text("0.5")
    if isinstance(outcome, float):
        assert task.evaluate(workspace, hidden) == outcome
    else:
        with pytest.raises(InvalidSubmission, match=outcome):
            task.evaluate(workspace, hidden)
    assert not (workspace / "written-here").exists()


def test_a_packs_scorer_runs_only_in_a_confining_sandbox_it_is_handed(tmp_path):
    """The scorer runs where the harness (here: the caller) hands it; an unconfined one is refused, never swapped
    for one looked up in the registry."""
    scorer = "import os\nopen(os.environ['MLAB_SCORE_FILE'], 'w').write('1')\n"
    folder = task_folder(tmp_path / "scored", SCORED, {"score.py": scorer, "train.py": "", "answers.txt": "2"})
    task = DeclarativeTask.from_folder(folder, FOLDER_PACK)
    _public, hidden = prepared(task, tmp_path / "home")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    unconfined = ScoringContext(new_sandbox=UnconfinedSandbox, limits=Limits())
    with scoring_with(unconfined), pytest.raises(MlabError, match="runs only confined"):
        task.evaluate(workspace, hidden)
    confining = resolve_sandbox(load_registry(), "auto")
    with scoring_with(ScoringContext(new_sandbox=UnconfinedSandbox, limits=Limits(), task_sandbox=confining)):
        assert task.evaluate(workspace, hidden) == 1.0


# ---- prepare scripts, validation splits --------------------------------------------------------------------------

def test_a_prepare_script_runs_only_in_the_sandbox_prepare_is_handed(tmp_path):
    """Without the harness's run, a pack's prepare script is refused in one line, never run in a sandbox looked
    up from the registry."""
    task = minimal_task(tmp_path, extra="prepare: prepare.py\n",
                        files={"prepare.py": "print('ran')\n"})
    public, hidden = tmp_path / "public", tmp_path / "hidden"
    public.mkdir()
    hidden.mkdir()
    with pytest.raises(MlabError, match="runs only in the sandbox the harness hands it") as raised:
        task.prepare(PrepareContext(public_dir=public, hidden_dir=hidden, log=lambda _m: None))
    assert "\n" not in str(raised.value)


def test_a_failing_prepare_script_says_why_in_one_line(tmp_path):
    task = minimal_task(tmp_path, extra="prepare: prepare.py\n",
                        files={"prepare.py": "import sys\nprint('reading the raw data')\nsys.exit('no raw data')\n"})
    with pytest.raises(MlabError, match="prepare script prepare.py exited with code 1: no raw data"):
        prepared(task, tmp_path / "home")


def test_a_prepare_script_writes_where_its_environment_says(tmp_path):
    script = ("import os, pathlib\npathlib.Path(os.environ['MLAB_PUBLIC_DIR'], 'data.csv').write_text('x\\n1\\n')\n"
              "pathlib.Path(os.environ['MLAB_HIDDEN_DIR'], 'key.txt').write_text(os.environ['PYTHONHASHSEED'])\n")
    task = minimal_task(tmp_path, extra="prepare: prepare.py\n", files={"prepare.py": script})
    public, hidden = prepared(task, tmp_path / "home")
    assert (public / "data.csv").read_text() == "x\n1\n" and (hidden / "key.txt").read_text() == "0"


def test_a_validation_split_maps_onto_the_task_contract(tmp_path):
    task = DeclarativeTask.from_folder(EXAMPLE_TASKS / "line-fit", PACK)
    assert task.validation == ValidationSplit(inputs="valid.csv", predictions="valid_submission.csv",
                                              submission="submission.csv", answers={"valid_answers.csv": "answers.csv"},
                                              test_inputs="test.csv")
    public, hidden = prepared(task, tmp_path / "home")
    valid_ids = {line.split(",")[0] for line in (public / "valid.csv").read_text().splitlines()[1:]}
    test_ids = {line.split(",")[0] for line in (public / "test.csv").read_text().splitlines()[1:]}
    assert len(valid_ids) == 40 and (hidden / "valid_answers.csv").is_file()
    # validation rows are training rows: their x values are in train.csv, not in test.csv
    train_x = {line.split(",")[0] for line in (public / "train.csv").read_text().splitlines()[1:]}
    valid_x = {line.split(",")[1] for line in (public / "valid.csv").read_text().splitlines()[1:]}
    assert valid_x <= train_x and valid_ids <= test_ids | set(map(str, range(200)))
    with pytest.raises(TaskFileError, match="validation.answers"):
        minimal_task(tmp_path / "v", extra="validation: {inputs: v.csv, answers: answers.csv}\n")


@pytest.mark.parametrize("scored_by", ["metric", "scorer"])
def test_validate_submission_scores_only_the_declared_split(tmp_path, scored_by):
    from mlab.core.models import Action
    from mlab.core.plugins.registry import load_registry
    from mlab.core.run.harness import Harness
    from mlab.core.run.snapshot import SnapshotStore
    from mlab.core.run.taskdata import TaskHome

    folder = tmp_path / "line-fit"
    shutil.copytree(EXAMPLE_TASKS / "line-fit", folder)
    if scored_by == "scorer":  # the MAE scorer of the other example, on the same files
        shutil.copyfile(EXAMPLE_TASKS / "line-fit-scored" / "score.py", folder / "score.py")
        text = (folder / "task.yaml").read_text().replace("metric: mse", "metric: MAE\ndirection: lower\n"
                                                                         "scorer: score.py")
        (folder / "task.yaml").write_text(text)
    task = DeclarativeTask.from_folder(folder, PACK)
    harness = Harness(load_registry(), TaskHome(tmp_path / "home"), sandbox="local")
    harness.prepare(task)
    hidden = harness.home.hidden_dir(task)
    workspace = harness.new_workspace(task, tmp_path / "run" / "workspace")
    env = harness.environment(task, workspace, store=SnapshotStore(tmp_path / "run" / "store"),
                              sandbox_home=tmp_path / "run" / "home", timeout_s=60, allow_validate=True)
    try:
        # the validation answers themselves score perfectly; the test answers are not predictions for it
        shutil.copyfile(hidden / "valid_answers.csv", env.workspace / "valid_submission.csv")
        shutil.copyfile(hidden / "answers.csv", env.workspace / "test_answers.csv")
        observation, failed = env.execute(Action(name="Validate Submission", args={}))
        assert not failed and observation.startswith(f"Validation {task.metric.name} of valid_submission.csv: 0 ")
        observation, failed = env.execute(Action(name="Validate Submission",
                                                 args={"predictions_file": "test_answers.csv"}))
        assert failed and "invalid predictions in 'test_answers.csv'" in observation
    finally:
        env.close()


@pytest.mark.slow
def test_check_task_fails_a_declared_validation_split_that_prepare_did_not_write(tmp_path):
    from mlab.core.plugins.registry import load_registry
    from mlab.core.run.checktask import check_task
    from mlab.core.run.harness import Harness
    from mlab.core.run.taskdata import TaskHome

    task = DeclarativeTask.from_folder(EXAMPLE_TASKS / "line-fit", PACK)
    task.prepare = lambda ctx: DeclarativeTask.prepare(task, ctx) or (ctx.public_dir / "valid.csv").unlink()
    harness = Harness(load_registry(), TaskHome(tmp_path / "home"), sandbox="local")
    report = check_task(harness, task)
    assert report.status == "failed" and report.steps["validation split"] == "prepare wrote no validation inputs "\
        "valid.csv", report.steps
    assert "validation split: prepare wrote no validation inputs valid.csv" in report.reason


# ---- new-task and check-task -------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("metric", ["mse", "balanced-accuracy"])
def test_new_task_scaffolds_a_task_that_check_task_passes(tmp_path, metric):
    result = mlab("new-task", str(tmp_path / "My Task"), "--metric", metric)
    assert result.returncode == 0, result.stderr
    folder = tmp_path / "My Task"
    assert "name: my-task" in (folder / "task.yaml").read_text()
    checked = mlab("check-task", str(folder / "task.yaml"), "--json")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    report = json.loads(checked.stdout)[0]
    assert report["task"] == "folder/my-task" and report["status"] == "passed", report
    assert report["steps"]["reproducible prepare"] == "ok" and report["steps"]["validation split"] == "ok"
    assert report["improvement"] > report["margin"]


def test_new_task_refuses_a_folder_in_use_and_bad_names(tmp_path):
    used = tmp_path / "used"
    used.mkdir()
    (used / "notes.txt").write_text("mine")
    for args, says in [((str(used),), "already exists and is not an empty folder"),
                       ((str(tmp_path / "x"), "--name", "Bad_Name"), "task name 'Bad_Name'"),
                       ((str(tmp_path / "y"), "--metric", "roc-auc"), "the scaffold's data suits"),
                       ((str(tmp_path / "z"), "--pack", "No Pack"), "pack name 'No Pack'")]:
        result = mlab("new-task", *args)
        assert result.returncode == 2 and says in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    assert [p.name for p in used.iterdir()] == ["notes.txt"] and (used / "notes.txt").read_text() == "mine"
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists() and not (tmp_path / "z").exists()


@pytest.mark.slow
def test_the_declarative_examples_pass_check_task():
    result = mlab("check-task", str(EXAMPLE_TASKS / "line-fit"), str(EXAMPLE_TASKS / "line-fit-scored"), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    reports = {r["task"]: r for r in json.loads(result.stdout)}
    assert set(reports) == {"folder/line-fit", "folder/line-fit-scored"}
    assert all(r["status"] == "passed" for r in reports.values()), reports
    assert reports["folder/line-fit"]["steps"]["validation split"] == "ok"


# ---- an installed pack -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A throwaway venv with the declarative example pack, and a second pack (made by `mlab new-task --pack`)
    holding one good and one broken task."""
    root = tmp_path_factory.mktemp("declarative")
    venv = make_venv(root / "venv")
    made = mlab("new-task", str(root / "made"), "--pack", "made", "--name", "good")
    assert made.returncode == 0, made.stderr
    bad = root / "made" / "mlab_made_tasks" / "bad"
    shutil.copytree(root / "made" / "mlab_made_tasks" / "good", bad)
    text = (bad / "task.yaml").read_text().replace("name: good", "name: bad").replace("metric: mse", "metric: mape")
    (bad / "task.yaml").write_text(text)
    venv.install(DECLARATIVE_PACK, root / "made")
    return venv, line_of(text, "metric:")


@pytest.mark.slow
def test_an_installed_declarative_pack_is_listed_with_its_tasks(installed):
    venv, _bad_line = installed
    info = venv.plugins()[PACK]
    assert (info["distribution"], info["module"], info["error"]) == (DIST, "mlab_example_declarative", None)
    assert info["tasks"] == [f"{PACK}/line-fit", f"{PACK}/line-fit-scored"]
    assert info["hooks"] == ["register_tasks"]
    rows = {row["name"]: row for row in venv.mlab_json("tasks")}
    assert (rows[f"{PACK}/line-fit"]["metric"], rows[f"{PACK}/line-fit"]["direction"]) == ("mse", "lower")
    assert (rows[f"{PACK}/line-fit-scored"]["metric"], rows[f"{PACK}/line-fit-scored"]["direction"]) == ("MAE",
                                                                                                         "lower")
    listed = venv.mlab("list-plugins")
    assert listed.returncode == 0 and PACK in listed.stdout and DIST in listed.stdout
    # loading the pack reads its task files and imports nothing heavy: scikit-learn waits for scoring
    loaded = venv.run("-c", "import sys\nfrom mlab.core.plugins.registry import load_registry\n"
                            "assert 'example-yaml/line-fit' in load_registry().items['tasks']\n"
                            "print(sorted(m for m in ('sklearn', 'numpy', 'scipy') if m in sys.modules))")
    assert loaded.returncode == 0 and loaded.stdout.strip() == "[]", loaded.stdout + loaded.stderr


@pytest.mark.slow
def test_a_broken_task_file_in_a_pack_is_reported_with_its_line_and_the_good_tasks_stay(installed):
    venv, bad_line = installed
    info = venv.plugins()["made"]
    assert info["tasks"] == ["made/good"]
    assert f"mlab_made_tasks/bad/task.yaml:{bad_line}: field 'metric': unknown metric 'mape'" in info["error"]
    checked = venv.mlab("check-task", "made/good", "--json", timeout=300)
    assert checked.returncode == 0 and json.loads(checked.stdout)[0]["status"] == "passed", checked.stderr


@pytest.mark.slow
def test_an_installed_declarative_task_passes_check_task(installed):
    venv, _bad_line = installed
    result = venv.mlab("check-task", f"{PACK}/line-fit", f"{PACK}/line-fit-scored", "--json", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [r["status"] for r in json.loads(result.stdout)] == ["passed", "passed"]


@pytest.mark.slow
@pytest.mark.parametrize("task", [f"{PACK}/line-fit", f"{PACK}/line-fit-scored"])
def test_an_installed_declarative_task_runs_with_the_baseline_agent(installed, tmp_path, task):
    venv, _bad_line = installed
    run_dir = tmp_path / "run"
    result = venv.mlab("run", "--task", task, "--agent", "baseline", "--run-dir", str(run_dir), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    trace = json.loads((run_dir / "trace.json").read_text())
    assert trace["status"] == "finished" and trace["final_score_error"] is None
    assert math.isfinite(trace["final_score"]) and trace["final_score"] > 0
    assert trace["plugin_versions"][DIST] == "0.1.0"
    assert not (run_dir / "workspace" / "answers.csv").exists()


@pytest.mark.slow
def test_an_installed_declarative_task_runs_with_the_research_agent(installed, tmp_path):
    """The scripted model replaces the starter by the least-squares fit; the run's score beats the starter's."""
    venv, _bad_line = installed
    solve = (EXAMPLE_TASKS / "line-fit" / "reference" / "solve.py").read_text()
    R = research_response
    script = write_script(tmp_path / "script.jsonl", [
        R("Execute Script", {"script_name": "train.py"}, 1),
        R("Edit Script (AI)", {"script_name": "train.py", "save_name": "train.py",
                               "edit_instruction": "fit the line by least squares"}, 2),
        edit_reply(solve),
        R("Execute Script", {"script_name": "train.py"}, 3),
        R("Final Answer", {"final_answer": "least squares"}, 4),
    ])
    run_dir = tmp_path / "run"
    result = venv.mlab("run", "--task", f"{PACK}/line-fit", "--agent", "research", "--llm", f"scripted:{script}",
                       "--max-steps", "10", "--run-dir", str(run_dir), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    trace = json.loads((run_dir / "trace.json").read_text())
    assert [s["action"]["name"] for s in trace["steps"]] == [
        "Execute Script", "Edit Script (AI)", "Execute Script", "Final Answer"]
    assert "least squares: w=" in trace["steps"][2]["observation"]
    starter_score = float(trace["steps"][0]["observation"].split("train MSE ")[-1].split()[0])
    assert trace["final_score_error"] is None and 0 < trace["final_score"] < 0.5 * starter_score, \
        (trace["final_score"], starter_score)


@pytest.mark.slow
def test_an_installed_declarative_task_runs_with_the_search_agent(installed, tmp_path):
    """aide takes the data overview, writes two whole scripts (the scripted model's: a draft, then, drafts being at
    most 40% of the two nodes, an improvement), keeps the better by the metric each prints, and submits it; the
    declarative task scores that submission."""
    venv, _bad_line = installed
    solve = (EXAMPLE_TASKS / "line-fit" / "reference" / "solve.py").read_text()
    drafts = [(solve.replace("w * float(row[\"x\"]) + b]", f"w * float(row[\"x\"]) + b + {shift}]")
               + f"print('VALIDATION_METRIC: {metric}')\n") for shift, metric in ((3.0, 11.0), (0.0, 2.2))]
    assert "b + 3.0]" in drafts[0]  # the first draft predicts 3 too high
    script = write_script(tmp_path / "script.jsonl",
                          [f"Node {n}: least squares.\n\n```python\n{code}```\n"
                           for n, code in enumerate(drafts, 1)])
    run_dir = tmp_path / "run"
    result = venv.mlab("run", "--task", f"{PACK}/line-fit", "--agent", "aide", "--llm", f"scripted:{script}",
                       "--agent-option", "num_drafts=2", "--agent-option", "max_nodes=2", "--max-steps", "20",
                       "--run-dir", str(run_dir), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    trace = json.loads((run_dir / "trace.json").read_text())
    assert trace["end_reason"] == "final answer" and trace["final_score_error"] is None
    # the overview, one Python REPL step a node, the best node run as the starter, Final Answer
    assert [s["action"]["name"] for s in trace["steps"]] == ["Python REPL"] * 4 + ["Final Answer"]
    nodes = trace["steps"][-1]["agent_state"]["graph"]["nodes"]
    assert [(n["operator"], n["fitness"]) for n in nodes] == [("draft", 11.0), ("improve", 2.2)]
    assert trace["steps"][-1]["action"]["entries"]["best"] == 2
    assert "b + 3.0" not in (run_dir / "workspace" / "train.py").read_text()
    assert 0 < trace["final_score"] < 4, trace["final_score"]
