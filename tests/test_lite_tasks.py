"""The built-in lite task pack: prepare, baseline, a baseline-agent run and eval through the real CLI; strict
scoring of malformed submissions; and a reference solution beating each recorded baseline by more than 10%."""
from __future__ import annotations

import csv
import json
import re
import subprocess
from pathlib import Path

import pytest

from mlab.core import InvalidSubmission, PrepareContext
from mlab.core.run.readonly import is_read_only
from mlab_tasks_lite import reference
from mlab_tasks_lite.tasks import DiabetesTask, DigitsTask, WineTask
from tests.fixtures.cli import mlab, mlab_in_process

REPO = Path(__file__).resolve().parents[1]
TASKS = {"lite/digits": DigitsTask(), "lite/diabetes": DiabetesTask(), "lite/wine": WineTask()}
NAMES = list(TASKS)
# lite/digits draws its 1,797 8x8 images stroke by stroke: its cases of the heavier checks are slow
WITH_DIGITS_SLOW = [pytest.param(n, marks=pytest.mark.slow) if n == "lite/digits" else n for n in NAMES]
# The columns a submission holds besides id.
SUBMISSION_COLUMNS = {"lite/digits": [str(c) for c in range(10)], "lite/diabetes": ["target"], "lite/wine": ["label"]}


# ---- helpers and shared set-up ---------------------------------------------------------------------------

def task_dir(home: Path, name: str) -> Path:
    return home / "tasks" / name.replace("/", "__")


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def files_below(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """One MLAB_HOME for the module, so each task is prepared and its baseline measured once."""
    return tmp_path_factory.mktemp("lite-home")


@pytest.fixture(scope="module")
def measured(home):
    """Task name -> (prepare output, baseline output), running `mlab prepare` and `mlab baseline` on first use."""
    done: dict[str, tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]] = {}

    def get(name: str):
        if name not in done:
            prepared = mlab("prepare", name, home=home, cwd=home)
            assert prepared.returncode == 0, prepared.stderr
            base = mlab("baseline", name, home=home, cwd=home)
            assert base.returncode == 0, base.stdout + base.stderr
            done[name] = (prepared, base)
        return done[name]
    return get


@pytest.fixture(scope="module")
def in_process(tmp_path_factory):
    """Task name -> (public, hidden) folders written by calling Task.prepare directly (no CLI, no baseline)."""
    done: dict[str, tuple[Path, Path]] = {}

    def get(name: str) -> tuple[Path, Path]:
        if name not in done:
            root = tmp_path_factory.mktemp(name.replace("/", "__"))
            public, hidden = root / "public", root / "hidden"
            public.mkdir()
            hidden.mkdir()
            TASKS[name].prepare(PrepareContext(public_dir=public, hidden_dir=hidden, log=lambda _m: None))
            done[name] = (public, hidden)
        return done[name]
    return get


# ---- registration -----------------------------------------------------------------------------------------

def test_lite_tasks_are_listed_with_their_metrics(home):
    result = mlab_in_process("tasks", "--json", home=home, cwd=home)
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert {"lite/digits", "lite/diabetes", "lite/wine"} <= set(rows)
    expected = {"lite/digits": ("accuracy", "higher"), "lite/diabetes": ("MAE", "lower"),
                "lite/wine": ("accuracy", "higher")}
    for name, (metric, direction) in expected.items():
        assert (rows[name]["metric"], rows[name]["direction"]) == (metric, direction)
        assert rows[name]["offline_ready"] and rows[name]["gpu"] == "none"
        assert rows[name]["provider"].startswith("mlab-tasks-lite")
        # what the task needs of the machine, as its Resources declare it
        resources = TASKS[name].resources
        assert (rows[name]["ram_gb"], rows[name]["baseline_seconds"], rows[name]["extras"]) == (
            resources.ram_gb, resources.baseline_seconds, resources.extras)
    for task in TASKS.values():
        assert 0 < task.resources.baseline_seconds <= 60 and task.resources.gpu == "none"
        assert "submission.csv" in task.research_problem and "hidden" in task.research_problem


def test_makefile_lite_tasks_match_the_pack():
    line = next(row for row in (REPO / "Makefile").read_text().splitlines() if row.startswith("LITE_TASKS"))
    assert line.split(":=", 1)[1].split() == NAMES


# ---- the whole flow through the CLI -------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
@pytest.mark.slow
def test_prepare_baseline_run_and_eval(name, home, measured, tmp_path):
    task = TASKS[name]
    prepared, base = measured(name)
    assert f"{name}: prepared in" in prepared.stdout

    # What the agent gets: the starter and the data, and no answers.
    public, hidden = task_dir(home, name) / "public", task_dir(home, name) / "hidden"
    assert files_below(public) == {"train.py", "data/train.csv", "data/test.csv", "data/valid.csv"}
    # the training file without the validation rows, for runs with --allow-validate
    assert files_below(hidden) == {"answers.csv", "valid_answers.csv", "without_validation/data/train.csv"}
    train, test, answers = (read_rows(public / "data/train.csv"), read_rows(public / "data/test.csv"),
                            read_rows(hidden / "answers.csv"))
    assert task.target in train[0] and task.target not in test[0]
    assert [r["id"] for r in test] == [r["id"] for r in answers]
    assert not {r["id"] for r in train} & {r["id"] for r in test}
    assert all(is_read_only(rel, task.read_only_files) for rel in ("data/train.csv", "data/test.csv",
                                                                   "data/valid.csv"))
    assert not is_read_only("train.py", task.read_only_files)
    assert not is_read_only("submission.csv", task.read_only_files)

    # The recorded baseline is a valid score.
    recorded = json.loads((task_dir(home, name) / "baseline.json").read_text())
    assert recorded["task"] == name and recorded["scores"] == [recorded["score"]] and recorded["runs"] == 1
    low, high = (0.5, 0.9) if task.metric.higher_is_better else (45.0, 90.0)
    assert low < recorded["score"] < high
    assert f"baseline {task.metric.name} = " in base.stdout

    # The baseline agent runs the starter and submits; the starter is deterministic, so it scores the same.
    run_dir = tmp_path / "run"
    result = mlab("run", "--task", name, "--agent", "baseline", "--run-dir", str(run_dir), home=home, cwd=home)
    assert result.returncode == 0, result.stdout + result.stderr
    trace = json.loads((run_dir / "trace.json").read_text())
    assert trace["status"] == "finished" and trace["final_score_error"] is None
    assert trace["final_score"] == pytest.approx(recorded["score"], abs=1e-9)
    workspace = run_dir / "workspace"
    assert (workspace / "submission.csv").is_file()
    assert "answers.csv" not in {p.name for p in run_dir.rglob("*")}
    assert (hidden / "answers.csv").read_bytes() not in {p.read_bytes() for p in workspace.rglob("*") if p.is_file()}

    evaluated = mlab_in_process("eval", str(run_dir), "--json", home=home, cwd=home)
    assert evaluated.returncode == 0, evaluated.stderr
    [row] = json.loads(evaluated.stdout)
    assert row["task"] == name and row["error"] is None
    assert row["score"] == pytest.approx(trace["final_score"], abs=1e-12)
    assert row["baseline"] == pytest.approx(recorded["score"], abs=1e-12)
    assert row["improvement"] == pytest.approx(0.0, abs=1e-9) and row["success"] is False


# That the reference beats the starter by more than 10% is the check-task case's (below): it runs both.


# ---- preparing ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", WITH_DIGITS_SLOW)
def test_prepare_is_deterministic(name, in_process, tmp_path):
    public, hidden = in_process(name)
    again_public, again_hidden = tmp_path / "public", tmp_path / "hidden"
    again_public.mkdir()
    again_hidden.mkdir()
    TASKS[name].prepare(PrepareContext(public_dir=again_public, hidden_dir=again_hidden, log=lambda _m: None))
    for first, second in ((public, again_public), (hidden, again_hidden)):
        assert files_below(first) == files_below(second)
        for rel in files_below(first):
            assert (first / rel).read_bytes() == (second / rel).read_bytes(), rel


# ---- the data is generated: the test labels live only in the hidden folder ---------------------------------------

@pytest.mark.parametrize("name", NAMES)
@pytest.mark.slow
def test_test_labels_are_in_no_public_file(name, in_process):
    task = TASKS[name]
    public, hidden = in_process(name)
    test_ids = {row["id"] for row in read_rows(hidden / "answers.csv")}
    assert test_ids == {row["id"] for row in read_rows(public / "data/test.csv")}
    answers_text = (hidden / "answers.csv").read_text()
    for rel in files_below(public):
        assert answers_text not in (public / rel).read_text(), rel
        if rel.endswith(".csv"):
            rows = read_rows(public / rel)
            # no public table pairs a test id with a target
            if task.target in rows[0]:
                assert not {row["id"] for row in rows} & test_ids, rel
    # the pack itself ships code only: no data file a label could hide in
    package = Path(reference.__file__).resolve().parents[1]
    assert {p.suffix for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts} == {".py"}


def _sklearn_copy(name: str):
    from sklearn import datasets

    if name == "lite/digits":
        return datasets.load_digits().data
    if name == "lite/wine":
        return datasets.load_wine().data
    return datasets.load_diabetes(scaled=False).data


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.slow
def test_sklearns_bundled_copy_matches_no_test_row(name, in_process):
    """The old attack: look each test row up in scikit-learn's copy of the dataset and read off its label."""
    import numpy as np

    public, _hidden = in_process(name)
    test = read_rows(public / "data/test.csv")
    columns = [c for c in test[0] if c != "id"]
    generated = np.array([[float(row[c]) for c in columns] for row in test])
    bundled = _sklearn_copy(name)
    assert generated.shape[1] == bundled.shape[1]
    # not one test row is a row of the bundled data, nor even close to one (in units of each column's spread)
    spread = bundled.std(axis=0) + 1e-9
    nearest = np.array([np.abs((bundled - row) / spread).max(axis=1).min() for row in generated])
    assert (nearest > 0.01).all(), nearest.min()


@pytest.mark.slow
def test_generators_depend_on_the_seed_only():
    import numpy as np

    from mlab_tasks_lite import generate

    for make in (generate.digits, generate.wine, generate.diabetes):
        (names, X, y), (names2, X2, y2) = make(5), make(5)
        assert names == names2 and np.array_equal(X, X2) and np.array_equal(y, y2)
        _names, X3, _y3 = make(6)
        assert not np.array_equal(X, X3)


@pytest.mark.slow
def test_the_digits_task_draws_the_same_images_it_always_has():
    """The drawing is batched for speed; the images (and so every baseline and recorded score) must not move."""
    import hashlib

    from mlab_tasks_lite import generate

    _names, X, y = generate.digits(DigitsTask.seed)
    digest = hashlib.sha256(X.astype("<f8").tobytes() + y.astype("<i8").tobytes()).hexdigest()
    assert digest == "6d40253fccffcd87840c9cf34687efb9c34c64c03bfe1a71c20a010795db7c64"


# ---- scoring ----------------------------------------------------------------------------------------------------

def perfect_rows(name: str, hidden: Path) -> list[list[str]]:
    """A header and one row per test id with the right answer."""
    columns = SUBMISSION_COLUMNS[name]
    rows = [["id", *columns]]
    for answer in read_rows(hidden / "answers.csv"):
        if name == "lite/digits":
            rows.append([answer["id"], *("1.0" if c == answer["label"] else "0.0" for c in columns)])
        else:
            rows.append([answer["id"], answer[columns[0]]])
    return rows


def write_rows(path: Path, rows: list[list[str]]) -> None:
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(rows)


@pytest.mark.slow  # over 2 s on two cores
@pytest.mark.parametrize("name", NAMES)
def test_perfect_submission_gets_the_best_score_in_any_row_and_column_order(name, in_process, tmp_path):
    task = TASKS[name]
    _public, hidden = in_process(name)
    rows = perfect_rows(name, hidden)
    best = 1.0 if task.metric.higher_is_better else 0.0
    write_rows(tmp_path / "submission.csv", rows)
    assert task.evaluate(tmp_path, hidden) == best

    # Reversed rows and columns, a byte-order mark and a trailing blank line are still the same submission.
    flipped = [row[::-1] for row in [rows[0], *reversed(rows[1:])]]
    write_rows(tmp_path / "submission.csv", flipped)
    with open(tmp_path / "submission.csv", "a") as f:
        f.write("\n")
    (tmp_path / "submission.csv").write_bytes(b"\xef\xbb\xbf" + (tmp_path / "submission.csv").read_bytes())
    assert task.evaluate(tmp_path, hidden) == best


@pytest.mark.slow  # over 2 s on two cores
def test_scores_count_mistakes(in_process, tmp_path):
    _public, hidden = in_process("lite/diabetes")
    rows = perfect_rows("lite/diabetes", hidden)
    rows[1][1] = str(float(rows[1][1]) + 133.0)  # one prediction off by 133
    write_rows(tmp_path / "submission.csv", rows)
    assert TASKS["lite/diabetes"].evaluate(tmp_path, hidden) == pytest.approx(133.0 / (len(rows) - 1))

    _public, hidden = in_process("lite/digits")
    rows = perfect_rows("lite/digits", hidden)
    rows[1][1:] = ["0.1"] * 10  # a tie: the first class wins, so this is right only if the label is 0
    wrong = 0 if read_rows(hidden / "answers.csv")[0]["label"] == "0" else 1
    write_rows(tmp_path / "submission.csv", rows)
    assert TASKS["lite/digits"].evaluate(tmp_path, hidden) == pytest.approx(1 - wrong / (len(rows) - 1))


def _malform(kind: str, rows: list[list[str]], path: Path) -> None:
    """Write a submission broken in one way to path (rows is a valid submission, header first)."""
    header, body = rows[0], [list(r) for r in rows[1:]]
    if kind == "missing":
        return
    if kind == "directory":
        path.mkdir()
        return
    if kind == "symlink":
        target = path.with_name("real.csv")
        write_rows(target, rows)
        path.symlink_to(target)
        return
    if kind == "empty":
        path.write_text("")
        return
    if kind == "binary":
        path.write_bytes(bytes(range(256)) * 4)
        return
    if kind == "nul":
        path.write_bytes(b"id,x\n1,\x002\n")
        return
    if kind == "header only":
        body = []
    elif kind == "renamed column":
        header = [*header[:-1], "prediction"]
    elif kind == "missing column":
        header, body = header[:-1], [r[:-1] for r in body]
    elif kind == "extra column":
        header, body = [*header, "extra"], [[*r, "0"] for r in body]
    elif kind == "repeated column":
        header, body = [*header, header[-1]], [[*r, r[-1]] for r in body]
    elif kind == "no id column":
        header = ["index", *header[1:]]
    elif kind == "too few rows":
        body = body[:-1]
    elif kind == "too many rows":
        body = [*body, body[0]]
    elif kind == "duplicate id":
        body[-1][0] = body[0][0]
    elif kind == "unknown id":
        body[-1][0] = "987654321"
    elif kind == "text id":
        body[0][0] = "first"
    elif kind == "fractional id":
        body[0][0] = body[0][0] + ".5"
    elif kind in ("nan", "inf", "text value", "empty value"):
        body[0][-1] = {"nan": "nan", "inf": "-inf", "text value": "high", "empty value": ""}[kind]
    elif kind == "short row":
        body[0] = body[0][:-1]
    elif kind == "long row":
        body[0] = [*body[0], "1"]
    elif kind == "label out of range":
        body[0][-1] = "3"
    elif kind == "fractional label":
        body[0][-1] = "1.5"
    else:
        raise AssertionError(kind)
    write_rows(path, [header, *body])


# kind -> words the reason must contain, so the agent can tell what to fix
MALFORMED = {
    "missing": "no submission.csv", "directory": "not a regular file", "symlink": "symbolic link",
    "empty": "empty", "binary": "UTF-8", "nul": "NUL", "header only": "0 data rows",
    "renamed column": "wrong columns", "missing column": "missing", "extra column": "unexpected",
    "repeated column": "repeated", "no id column": "wrong columns", "too few rows": "data rows",
    "too many rows": "data rows", "duplicate id": "more than once", "unknown id": "not in the test set",
    "text id": "not a whole number", "fractional id": "not a whole number", "nan": "not a finite number",
    "inf": "not a finite number", "text value": "is not a number", "empty value": "is not a number",
    "short row": "fields", "long row": "fields",
}
WINE_ONLY = {"label out of range": "must be one of", "fractional label": "must be one of"}
CASES = [(name, kind) for name in NAMES for kind in MALFORMED] + [("lite/wine", kind) for kind in WINE_ONLY]


@pytest.mark.slow  # over 2 s on two cores
@pytest.mark.parametrize("name, kind", CASES, ids=[f"{n.split('/')[1]}-{k.replace(' ', '-')}" for n, k in CASES])
def test_malformed_submission_is_invalid_with_a_reason(name, kind, in_process, tmp_path):
    _public, hidden = in_process(name)
    _malform(kind, perfect_rows(name, hidden), tmp_path / "submission.csv")
    with pytest.raises(InvalidSubmission) as caught:
        TASKS[name].evaluate(tmp_path, hidden)
    message = str(caught.value)
    assert {**MALFORMED, **WINE_ONLY}[kind] in message, message
    assert len(message.splitlines()) == 1 and len(message) < 400
    assert not re.search(r"Traceback|Error\b", message)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_check_task_passes_for_a_lite_task(name, tmp_path):
    """`mlab check-task` runs the starter and the pack's reference in the sandbox; the reference must win."""
    result = mlab_in_process("check-task", name, "--json", home=tmp_path / "home")
    assert result.returncode == 0, result.stderr
    [report] = json.loads(result.stdout)
    assert report["status"] == "passed" and report["improvement"] > 0.10
    assert report["steps"].get("validation split", "ok") == "ok"  # the step of tasks that declare a split
    assert {k: v for k, v in report["steps"].items() if k != "validation split"} == {
        "prepare": "ok", "reproducible prepare": "ok", "invalid submission": "ok", "baseline": "ok", "reference": "ok"}
