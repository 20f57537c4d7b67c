"""Validation rows held out of the training data: a run started with --allow-validate gets, in place of each training
file its task's validation split names, the file without the validation rows (written at prepare into the hidden
folder), so the Validate Submission score is on rows no model of the run trained on; runs without the flag, baselines
and check-task see the full file, byte for byte."""
from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from mlab.core.declarative.pack import FOLDER_PACK
from mlab.core.declarative.task import DeclarativeTask
from mlab.core.declarative.yamlfile import TaskFileError
from mlab.core.errors import MlabError
from mlab.core.models import Action, RunConfig
from mlab.core.plugins.registry import load_registry
from mlab.core.run.checktask import check_reproducible_prepare, prepared_sums
from mlab.core.run.harness import Harness
from mlab.core.run.held_out import HELD_OUT_DIR, held_out_path
from mlab.core.run.runner import Runner
from mlab.core.run.snapshot import SnapshotStore
from mlab.core.run.taskdata import TaskHome
from tests.fixtures.cli import mlab

REGISTRY = load_registry()
LITE = sorted(name for name in REGISTRY.items["tasks"] if name.startswith("lite/"))
QUIET = {"log": lambda _m: None}
# The script an agent would run: the ids (first column) of the training file as agent code reads it.
SEEN_IDS = '''import csv, sys
with open(sys.argv[1] if len(sys.argv) > 1 else "{train}", newline="") as f:
    rows = list(csv.reader(f))
with open("seen_ids.txt", "w") as out:
    out.write("\\n".join(r[0] for r in rows[1:] if r))
print(len(rows) - 1, "training rows")
'''


def records(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return [r for r in csv.reader(f) if r]


def column(path: Path, name: str) -> list[str]:
    head, *rows = records(path)
    return [r[head.index(name)] for r in rows]


def raw_records(path: Path) -> list[tuple[str, list[str]]]:
    """Each CSV record with the exact text it takes in the file (a quoted field may span lines)."""
    raw: list[str] = []
    out: list[tuple[str, list[str]]] = []
    with open(path, newline="", encoding="utf-8") as f:
        def lines():
            for line in f:
                raw.append(line)
                yield line
        for record in csv.reader(lines()):
            out.append(("".join(raw), record))
            raw.clear()
    return out


def without(public: Path, key: str, dropped: set[str]) -> str:
    """The expected held-out text: the public file's records (header first, byte for byte) but those keyed in
    `dropped`."""
    (head_text, head), *rows = raw_records(public)
    at = head.index(key)
    return head_text + "".join(text for text, row in rows if len(row) <= at or row[at] not in dropped)


@pytest.fixture
def harness(tmp_path):
    return Harness(REGISTRY, TaskHome(tmp_path / "home"), sandbox="local")


def environment(harness: Harness, task, folder: Path, allow_validate: bool, sandbox=None):
    workspace = harness.new_workspace(task, folder / "workspace", allow_validate=allow_validate)
    return harness.environment(task, workspace, store=SnapshotStore(folder / "store"), sandbox_home=folder / "home",
                               timeout_s=120, allow_validate=allow_validate, sandbox=sandbox)


def execute(env, script: str, text: str) -> str:
    (env.workspace / script).write_text(text)
    observation, failed = env.execute(Action(name="Execute Script", args={"script_name": script}))
    assert not failed, observation
    return observation


# ---- lite tasks: what agent code reads in the sandbox ------------------------------------------------------------

@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "lite/digits" else n for n in LITE])
def test_with_the_flag_agent_code_reads_the_training_file_without_the_validation_rows(harness, tmp_path, name):
    task = harness.task(name)
    harness.prepare(task)
    split = task.validation
    assert split is not None and list(split.held_out) == ["data/train.csv"]
    public = harness.home.public_dir(task)
    valid_ids = set(column(public / split.inputs, "id"))
    train_ids = column(public / "data/train.csv", "id")
    assert valid_ids and valid_ids < set(train_ids)

    env = environment(harness, task, tmp_path / "flagged", allow_validate=True)
    try:
        execute(env, "seen.py", SEEN_IDS.format(train="data/train.csv"))
        seen = (env.workspace / "seen_ids.txt").read_text().split("\n")
    finally:
        env.close()
    # none of the validation rows, every other training row, in the file's order, each record unchanged
    assert seen == [i for i in train_ids if i not in valid_ids]
    assert (env.workspace / "data/train.csv").read_text() == without(public / "data/train.csv", "id", valid_ids)

    plain = environment(harness, task, tmp_path / "plain", allow_validate=False)
    try:
        execute(plain, "seen.py", SEEN_IDS.format(train="data/train.csv"))
        assert (plain.workspace / "seen_ids.txt").read_text().split("\n") == train_ids
    finally:
        plain.close()
    assert (plain.workspace / "data/train.csv").read_bytes() == (public / "data/train.csv").read_bytes()


def test_the_held_out_file_is_read_only_and_a_change_is_restored_to_it_not_to_the_full_file(harness, tmp_path):
    """unconfined mounts nothing read-only: the guard puts the file back, and must put back the held-out one."""
    task = harness.task("lite/wine")
    harness.prepare(task)
    from mlab.core.sandbox.local import UnconfinedSandbox

    env = environment(harness, task, tmp_path / "run", allow_validate=True, sandbox=UnconfinedSandbox())
    try:
        held = held_out_path(harness.home.hidden_dir(task), "data/train.csv").read_bytes()
        assert (env.workspace / "data/train.csv").read_bytes() == held
        observation = execute(env, "clobber.py", "open('data/train.csv', 'w').write('id,label\\n')\n")
        assert "restored: data/train.csv" in observation
        assert (env.workspace / "data/train.csv").read_bytes() == held
    finally:
        env.close()


@pytest.mark.slow
def test_a_run_with_the_flag_records_the_held_out_files_and_one_without_is_unchanged(tmp_path, monkeypatch):
    monkeypatch.setenv("MLAB_HOME", str(tmp_path / "home"))
    registry = load_registry()
    traces = {}
    for flag in (True, False):
        config = RunConfig(task="lite/wine", agent="baseline", sandbox="local", allow_validate=flag, max_steps=5)
        traces[flag] = Runner(tmp_path / f"run-{flag}", config, registry).start()
        assert traces[flag].status == "finished", traces[flag].errors
    home = TaskHome(tmp_path / "home")
    task = registry.get("tasks", "lite/wine")
    public, hidden = home.public_dir(task), home.hidden_dir(task)
    assert traces[True].held_out == ["data/train.csv"] and traces[False].held_out == []
    on_disk = json.loads((tmp_path / "run-True" / "trace.json").read_text())
    assert on_disk["held_out"] == ["data/train.csv"] and on_disk["config"]["allow_validate"] is True
    assert (tmp_path / "run-True/workspace/data/train.csv").read_bytes() == \
        held_out_path(hidden, "data/train.csv").read_bytes()
    assert (tmp_path / "run-False/workspace/data/train.csv").read_bytes() == (public / "data/train.csv").read_bytes()
    # the starter trained on what it was given and submitted in both runs
    assert traces[True].final_score is not None and traces[False].final_score is not None


def test_the_validate_action_says_the_rows_are_out_of_the_training_data(harness, tmp_path):
    task = harness.task("lite/wine")
    harness.prepare(task)
    env = environment(harness, task, tmp_path / "run", allow_validate=True)
    try:
        description = env.available_actions()["Validate Submission"].description
    finally:
        env.close()
    assert "leave them out" not in description
    assert "data/valid.csv" in description and "removed from this run's data/train.csv" in description


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "lite/digits" else n for n in LITE])
def test_prepare_twice_writes_identical_held_out_files(harness, name):
    task = harness.task(name)
    harness.prepare(task)
    digest = prepared_sums(harness.home, task)
    assert f"hidden/{HELD_OUT_DIR}/data/train.csv" in digest
    assert check_reproducible_prepare(harness, task, None, prepared_now=True) == "ok"


# ---- a home prepared before held-out files existed ---------------------------------------------------------------

def test_a_home_prepared_before_says_prepare_again_in_one_line(tmp_path):
    home = TaskHome(tmp_path / "home")
    task = REGISTRY.get("tasks", "lite/wine")
    home.prepare(task, **QUIET)
    shutil.rmtree(home.hidden_dir(task) / HELD_OUT_DIR)  # as prepare left it before this change
    done = mlab("run", "--task", "lite/wine", "--agent", "baseline", "--sandbox", "local",
                "--allow-validate", "--run-dir", str(tmp_path / "run"), home=home.root, cwd=home.root)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "prepare it again: mlab prepare lite/wine --force" in lines[0]
    assert not (tmp_path / "run").exists()
    harness = Harness(REGISTRY, home, sandbox="local")
    with pytest.raises(MlabError, match="prepare it again: mlab prepare lite/wine --force"):
        harness.new_workspace(task, tmp_path / "ws", allow_validate=True)
    # without the flag the old home is as good as ever
    assert harness.new_workspace(task, tmp_path / "ws2").joinpath("data/train.csv").is_file()


# ---- MLAgentBench tasks whose data is a training table -----------------------------------------------------------

def mlagentbench_sources(root: Path) -> dict[str, Path]:
    from tests.fixtures.mlagentbench import kaggle, tabular, text

    return {"house-price": tabular.house_prices(root / "hp", rows=60),
            "spaceship-titanic": tabular.spaceship(root / "st", rows=80),
            "feedback": kaggle.feedback(root / "fb", essays=120),
            "parkinsons": kaggle.parkinsons(root / "pk"),
            "imdb-cpu": text.acl_imdb(root / "imdb", per_class=20)}


EXPECTED = {"house-price": {"train.csv": "Id"}, "spaceship-titanic": {"train.csv": "PassengerId"},
            "feedback": {"train.csv": "text_id"},
            "parkinsons": {"train_clinical_data.csv": "patient_id", "train_peptides.csv": "patient_id",
                           "train_proteins.csv": "patient_id"},
            "imdb-cpu": {"data/train.csv": "text"}}


@pytest.mark.parametrize("short", sorted(EXPECTED))
def test_mlagentbench_tables_hold_the_validation_rows_out(harness, tmp_path, short):
    task = harness.task(f"mlagentbench/{short}")
    assert task.validation is not None and task.validation.held_out == EXPECTED[short]
    harness.prepare(task, mlagentbench_sources(tmp_path / "src")[short])
    public, hidden = harness.home.public_dir(task), harness.home.hidden_dir(task)
    flagged = harness.new_workspace(task, tmp_path / "flagged", allow_validate=True)
    plain = harness.new_workspace(task, tmp_path / "plain")
    for rel, key in EXPECTED[short].items():
        keys = set(column(public / task.validation.inputs, key))
        full = column(public / rel, key)
        assert keys & set(full), rel
        held = flagged / rel
        assert held.read_text(encoding="utf-8") == without(public / rel, key, keys)
        assert not keys & set(column(held, key)) and len(records(held)) < len(records(public / rel))
        assert (plain / rel).read_bytes() == (public / rel).read_bytes()
        assert held.read_bytes() == held_out_path(hidden, rel).read_bytes()


# ---- declarative tasks: validation.held_out in task.yaml -----------------------------------------------------------

PREPARE = '''import os, pathlib
public, hidden = pathlib.Path(os.environ["MLAB_PUBLIC_DIR"]), pathlib.Path(os.environ["MLAB_HIDDEN_DIR"])
rows = [(i, i % 7, 2 * (i % 7) + 1) for i in range(30)]
(public / "train.csv").write_text("id,x,y\\n" + "".join(f"{i},{x},{y}\\n" for i, x, y in rows[:20]))
(public / "test.csv").write_text("id,x\\n" + "".join(f"{i},{x}\\n" for i, x, _ in rows[20:]))
(hidden / "answers.csv").write_text("id,y\\n" + "".join(f"{i},{y}\\n" for i, _, y in rows[20:]))
(public / "valid.csv").write_text("id,x\\n" + "".join(f"{i},{x}\\n" for i, x, _ in rows[:5]))
(hidden / "valid_answers.csv").write_text("id,y\\n" + "".join(f"{i},{y}\\n" for i, _, y in rows[:5]))
'''
TASK_YAML = """\
name: holdout
description: "A task whose validation rows are held out."
research_problem: Predict y.
metric: mse
answers: {{file: answers.csv, column: y}}
prepare: prepare.py
files:
  public: {{train.py: train.py}}
read_only: [train.csv, test.csv, valid.csv]
validation:
  inputs: valid.csv
  answers: valid_answers.csv
{held_out}
"""


def declarative(tmp_path: Path, held_out: str) -> Path:
    folder = tmp_path / "holdout"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "task.yaml").write_text(TASK_YAML.format(held_out=held_out))
    (folder / "prepare.py").write_text(PREPARE)
    (folder / "train.py").write_text("print('hi')\n")
    return folder


def test_a_declarative_task_declares_its_held_out_training_file(harness, tmp_path):
    task = DeclarativeTask.from_folder(declarative(tmp_path, "  held_out: {train.csv: id}"), FOLDER_PACK)
    assert task.validation is not None and task.validation.held_out == {"train.csv": "id"}
    harness.prepare(task)
    env = environment(harness, task, tmp_path / "run", allow_validate=True)
    try:
        execute(env, "seen.py", SEEN_IDS.format(train="train.csv"))
        assert (env.workspace / "seen_ids.txt").read_text().split("\n") == [str(i) for i in range(5, 20)]
    finally:
        env.close()
    assert check_reproducible_prepare(harness, task, None, prepared_now=True) == "ok"


@pytest.mark.parametrize("held_out, field, says", [
    ("  held_out: {/tmp/train.csv: id}", "validation.held_out", "inside the folder"),
    ("  held_out: {train.csv: ''}", "validation.held_out", "an id column"),
    ("  held_out: [train.csv]", "validation.held_out", "valid dictionary"),
    ("  held_out: {valid.csv: id}", "validation.held_out", "the validation inputs themselves"),
])
def test_a_bad_held_out_field_is_one_error_with_file_and_line(tmp_path, held_out, field, says):
    folder = declarative(tmp_path, held_out)
    path = folder / "task.yaml"
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "held_out" in text)
    with pytest.raises(TaskFileError) as raised:
        DeclarativeTask.from_folder(folder, FOLDER_PACK)
    message = str(raised.value)
    assert f"{path}:{line}: field '{field}': " in message and says in message, message
    assert "\n" not in message


@pytest.mark.parametrize("held_out, says", [
    ("  held_out: {train.csv: idx}", "the validation inputs valid.csv have no column 'idx'"),
    ("  held_out: {train.py: id}", "train.py has no column 'id'"),
    ("  held_out: {nothing.csv: id}", "prepare wrote no nothing.csv to the workspace"),
])
def test_a_held_out_file_prepare_did_not_make_fails_prepare_naming_the_field(harness, tmp_path, held_out, says):
    """The held-out split runs after every prepare, a declarative one's too: its error is the harness's line."""
    task = DeclarativeTask.from_folder(declarative(tmp_path, held_out), FOLDER_PACK)
    with pytest.raises(MlabError) as raised:
        harness.prepare(task)
    assert str(raised.value) == f"folder/holdout: validation.held_out: {says}"
    assert not harness.home.is_prepared(task)


def test_a_held_out_file_without_a_validation_row_fails_prepare_in_one_line(harness, tmp_path):
    task = DeclarativeTask.from_folder(declarative(tmp_path, "  held_out: {test.csv: id}"), FOLDER_PACK)
    with pytest.raises(MlabError) as raised:
        harness.prepare(task)
    assert str(raised.value) == ("folder/holdout: validation.held_out: none of the validation rows are in test.csv "
                                 "(no id of valid.csv is in its id column)")
    assert not harness.home.is_prepared(task)
