"""Harness-held validation: a lite task's validation split (rows of its training data, labels in the hidden folder),
the Validate Submission action offered only with --allow-validate, scoring only that split with the task's own
evaluate, the test answers out of its reach, and the flag recorded in the run and shown by eval and report."""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from mlab.core.errors import MlabError
from mlab.core.models import Action
from mlab.core.plugins.registry import load_registry
from mlab.core.run.checktask import REPRODUCIBLE, check_reproducible_prepare, check_task, prepared_sums
from mlab.core.run.environment import Environment
from mlab.core.run.harness import Harness
from mlab.core.run.snapshot import SnapshotStore
from mlab.core.run.taskdata import TaskHome
from mlab_tasks_lite.tasks import DiabetesTask, DigitsTask, WineTask
from tests.fixtures.cli import mlab, mlab_in_process

LITE = {"lite/wine": WineTask(), "lite/diabetes": DiabetesTask(), "lite/digits": DigitsTask()}


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def write_predictions(path: Path, task, answers: list[dict[str, str]], wrong: bool = False) -> None:
    """Predictions in the task's submission format: the given answers, or (wrong) a different answer for each."""
    with open(path, "w", newline="") as f:
        out = csv.writer(f, lineterminator="\n")
        if isinstance(task, DigitsTask):
            out.writerow(["id", *task.classes])
            for r in answers:
                label = (int(r["label"]) + wrong) % 10
                out.writerow([r["id"], *("1" if c == label else "0" for c in range(10))])
        elif isinstance(task, WineTask):
            out.writerow(["id", "label"])
            out.writerows([r["id"], (int(r["label"]) + wrong) % 3] for r in answers)
        else:
            out.writerow(["id", "target"])
            out.writerows([r["id"], float(r["target"]) + (1000.0 if wrong else 0.0)] for r in answers)


@pytest.fixture
def staged(tmp_path):
    """A prepared home and a function giving a run's environment over a fresh workspace of a lite task."""
    home = TaskHome(tmp_path / "home")
    harness = Harness(load_registry(), home, sandbox="local")
    made: list[Environment] = []

    def environment(name: str, allow_validate: bool) -> Environment:
        task = harness.task(name)
        harness.prepare(task)
        folder = tmp_path / f"run{len(made)}"
        workspace = harness.new_workspace(task, folder / "workspace", allow_validate=allow_validate)
        env = harness.environment(task, workspace, store=SnapshotStore(folder / "store"),
                                  sandbox_home=folder / "home", timeout_s=60, allow_validate=allow_validate)
        made.append(env)
        return env

    yield harness, environment
    for env in made:
        env.close()


def act(env: Environment, **args) -> tuple[str, bool]:
    return env.execute(Action(name="Validate Submission", args=args))


# ---- the split ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "lite/digits" else n
                                  for n in sorted(LITE)])
def test_the_split_is_training_rows_with_the_labels_hidden_and_no_test_row(tmp_path, name):
    task = LITE[name]
    home = TaskHome(tmp_path / "home")
    home.prepare(task, log=lambda _m: None)
    public, hidden = home.public_dir(task), home.hidden_dir(task)
    train = {r["id"]: r for r in rows(public / "data/train.csv")}
    valid, answers = rows(public / "data/valid.csv"), rows(hidden / "valid_answers.csv")
    test_ids = {r["id"] for r in rows(public / "data/test.csv")}
    assert task.target not in valid[0] and [r["id"] for r in valid] == [r["id"] for r in answers]
    assert 0.15 * len(train) < len(valid) < 0.25 * len(train)
    # copied from the training data (train.csv is what it is without the flag), never from the test set
    assert all(r["id"] in train and train[r["id"]][task.target] == r[task.target] for r in answers)
    assert not {r["id"] for r in valid} & test_ids
    features = [c for c in valid[0] if c != "id"]
    assert all(train[r["id"]][c] == r[c] for r in valid for c in features)
    assert task.validation is not None and task.validation.inputs == "data/valid.csv"


@pytest.mark.slow
def test_reproducible_prepare_still_passes_check_task(tmp_path):
    harness = Harness(load_registry(), TaskHome(tmp_path / "home"), sandbox="local")
    task = harness.task("lite/wine")
    report = check_task(harness, task, timeout_s=120)
    assert report.steps[REPRODUCIBLE] == "ok" and report.passed, report.reason
    digest = prepared_sums(harness.home, task)
    assert {"public/data/valid.csv", "hidden/valid_answers.csv"} <= set(digest)
    # two more prepares in fresh homes (not this home's) write the same bytes, the split included
    assert check_reproducible_prepare(harness, task, None, prepared_now=False) == "ok"


# ---- the action -------------------------------------------------------------------------------------------

def test_refused_without_the_flag_naming_it(staged):
    _harness, environment = staged
    env = environment("lite/wine", allow_validate=False)
    assert "Validate Submission" not in env.available_actions()
    obs, err = act(env, predictions_file="valid_submission.csv")
    assert err and obs == ("EnvError: Validate Submission is offered only in runs started with --allow-validate; "
                           "this run was not")


def test_offered_with_the_flag_and_the_default_file_named(staged):
    _harness, environment = staged
    env = environment("lite/wine", allow_validate=True)
    spec = env.available_actions()["Validate Submission"]
    assert "data/valid.csv" in spec.description and "default valid_submission.csv" in spec.usage()
    obs, err = act(env)
    assert err and obs.startswith("EnvError: there is no 'valid_submission.csv' in the workspace")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "lite/digits" else n
                                  for n in sorted(LITE)])
def test_only_the_validation_split_is_scored(staged, name):
    harness, environment = staged
    env = environment(name, allow_validate=True)
    task = harness.task(name)
    hidden, ws = harness.home.hidden_dir(task), env.workspace
    test_answers, valid_answers = rows(hidden / "answers.csv"), rows(hidden / "valid_answers.csv")
    best, worst = (1.0, 0.0) if task.metric.higher_is_better else (0.0, 1000.0)

    # perfect on the test set, wrong on validation: the test score is perfect, the validation score is not
    write_predictions(ws / "submission.csv", task, test_answers)
    write_predictions(ws / "valid_submission.csv", task, valid_answers, wrong=True)
    assert task.evaluate(ws, hidden) == pytest.approx(best)
    obs, err = act(env)
    assert not err, obs
    assert obs.startswith(f"Validation {task.metric.name} of valid_submission.csv: {worst:g} (")

    # perfect on validation, wrong on the test set: the other way round
    write_predictions(ws / "submission.csv", task, test_answers, wrong=True)
    write_predictions(ws / "mine.csv", task, valid_answers)
    assert task.evaluate(ws, hidden) == pytest.approx(worst)
    obs, err = act(env, predictions_file="mine.csv")
    assert not err and obs.startswith(f"Validation {task.metric.name} of mine.csv: {best:g} (")
    assert "the test set was not used" in obs

    # the test submission itself is not a validation submission: its ids are the test set's
    obs, err = act(env, predictions_file="submission.csv")
    assert err and "invalid predictions in 'submission.csv'" in obs and "data/valid.csv" in obs


def test_the_test_answers_are_out_of_reach(staged, tmp_path):
    harness, environment = staged
    env = environment("lite/wine", allow_validate=True)
    task = harness.task("lite/wine")
    answers = harness.home.hidden_dir(task) / "answers.csv"
    os.symlink(answers, env.workspace / "linked.csv")
    refused = {
        "data/test.csv": "is one of the task's data files, not predictions",
        "data/valid.csv": "is one of the task's data files, not predictions",
        "data/train.csv": "is one of the task's data files, not predictions",
        str(answers): "absolute paths are not allowed",
        "../../home/tasks/lite__wine/hidden/answers.csv": "points outside the workspace",
        "linked.csv": "points outside the workspace",
    }
    for given, why in refused.items():
        obs, err = act(env, predictions_file=given)
        assert err and why in obs, (given, obs)
        assert "0." not in obs.split(":", 1)[0]  # no score came back


def test_a_predictions_file_past_the_tasks_cap_is_refused_unread(staged):
    harness, environment = staged
    env = environment("lite/wine", allow_validate=True)
    task = harness.task("lite/wine")
    task.max_submission_bytes = 1000  # the registry's instance: this test's own
    (env.workspace / "valid_submission.csv").write_text("id,label\n" + "1,0\n" * 1000)
    obs, err = act(env)
    assert err and obs == "EnvError: 'valid_submission.csv' is 4009 bytes, more than the 1000 the task reads"


def test_bad_predictions_get_the_tasks_own_message_about_the_file_given(staged):
    harness, environment = staged
    env = environment("lite/wine", allow_validate=True)
    (env.workspace / "preds.csv").write_text("id,label\n1,0\n")
    obs, err = act(env, predictions_file="preds.csv")
    valid = len(rows(harness.home.public_dir(harness.task("lite/wine")) / "data/valid.csv"))
    assert err and obs == (f"EnvError: Validate Submission call 1 of 10: invalid predictions in 'preds.csv': "
                           f"preds.csv has 1 data rows, but the "
                           f"validation set has {valid}; write one row per row of data/valid.csv")


# ---- the flag through the CLI: recorded in the run, shown by eval and report ---------------------------------

@pytest.mark.slow
def test_the_flag_is_recorded_and_marked_by_eval_and_report(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    flagged, plain = tmp_path / "runs" / "flagged", tmp_path / "runs" / "plain"
    for run_dir, extra in ((flagged, ["--allow-validate"]), (plain, [])):
        done = mlab("run", "--task", "lite/wine", "--agent", "baseline", "--sandbox", "local",
                    "--run-dir", str(run_dir), *extra, home=home, cwd=home)
        assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((flagged / "trace.json").read_text())["config"]["allow_validate"] is True
    assert json.loads((plain / "trace.json").read_text())["config"]["allow_validate"] is False

    evaluated = mlab_in_process("eval", str(flagged), str(plain), home=home, cwd=home)
    assert evaluated.returncode == 0, evaluated.stderr
    assert "note: flagged could score predictions on a validation split (--allow-validate)" in evaluated.stdout
    as_json = json.loads(mlab_in_process("eval", str(flagged), str(plain), "--json", home=home, cwd=home).stdout)
    assert [r["allow_validate"] for r in as_json] == [True, False]

    reported = mlab_in_process("report", str(tmp_path / "runs"), "--no-plots", "--json", home=home, cwd=home)
    assert reported.returncode == 0, reported.stderr
    data = json.loads(reported.stdout)
    assert len(data["validated_runs"]) == 1 and "flagged" in data["validated_runs"][0]
    shown = mlab_in_process("report", str(tmp_path / "runs"), "--no-plots", "--no-html", home=home, cwd=home)
    assert "note: 1 run(s) could score predictions on a validation split (--allow-validate)" in shown.stdout


def test_the_flag_on_a_task_without_a_split_is_a_usage_error(tmp_path):
    registry = load_registry()
    # an installed task (the CLI's registry), not a fixture another test added to this process's registry
    without = next(name for name, task in sorted(registry.items["tasks"].items())
                   if task.validation is None and name.split("/")[0] in ("lite", "mlagentbench"))
    done = mlab("run", "--task", without, "--agent", "baseline", "--allow-validate",
                "--run-dir", str(tmp_path / "run"), timeout=60, home=tmp_path, cwd=tmp_path)
    assert done.returncode == 2
    assert f"task {without!r} declares no validation split, so --allow-validate cannot be used with it" in done.stderr
    assert not (tmp_path / "run").exists()


# ---- the MLAgentBench tasks whose data is a training table ---------------------------------------------------

def mlagentbench_sources(root: Path) -> dict[str, tuple[Path, str]]:
    """Task -> (small data in the competition's format, the id column)."""
    from tests.fixtures.mlagentbench import kaggle, tabular

    return {"house-price": (tabular.house_prices(root / "hp", rows=60), "Id"),
            "spaceship-titanic": (tabular.spaceship(root / "st", rows=80), "PassengerId"),
            "feedback": (kaggle.feedback(root / "fb"), "text_id"),
            "parkinsons": (kaggle.parkinsons(root / "pk"), "prediction_id")}


@pytest.mark.parametrize("short", ["house-price", "spaceship-titanic", "feedback", "parkinsons"])
def test_mlagentbench_tables_declare_a_split_scored_apart_from_the_test_set(tmp_path, short):
    import pandas as pd

    source, id_column = mlagentbench_sources(tmp_path)[short]
    home = TaskHome(tmp_path / "home")
    harness = Harness(load_registry(), home, sandbox="local")
    task = harness.task(f"mlagentbench/{short}")
    harness.prepare(task, source)
    public, hidden = home.public_dir(task), home.hidden_dir(task)
    assert task.validation is not None and (public / task.validation.inputs).is_file()
    valid, test = (pd.read_csv(hidden / name, dtype=str) for name in ("valid_answer.csv", "answer.csv"))
    assert len(valid) > 0 and not set(valid[id_column]) & set(test[id_column])
    if short != "parkinsons":  # the rows are rows of train.csv, which keeps them with their targets
        train = pd.read_csv(public / "train.csv", dtype=str).set_index(id_column)
        assert set(valid[id_column]) <= set(train.index)
        target = [c for c in valid.columns if c != id_column][0]
        assert (train.loc[valid[id_column], target].to_numpy() == valid[target].to_numpy()).all()
    else:  # patients of the training data, asked as the test patients are
        patients = {p.split("_")[0] for p in valid[id_column]}
        assert patients <= set(pd.read_csv(public / "train_clinical_data.csv", dtype=str)["patient_id"])

    workspace = harness.new_workspace(task, tmp_path / "run" / "workspace", allow_validate=True)
    env = harness.environment(task, workspace, store=SnapshotStore(tmp_path / "run" / "store"),
                              sandbox_home=tmp_path / "run" / "home", timeout_s=60, allow_validate=True)
    try:
        predictions = valid.drop(columns=[c for c in ("visit_month",) if c in valid.columns])
        predictions.to_csv(workspace / "valid_submission.csv", index=False)
        test.drop(columns=[c for c in ("visit_month",) if c in test.columns]).to_csv(workspace / "submission.csv",
                                                                                     index=False)
        perfect = 1.0 if task.metric.higher_is_better else 0.0
        obs, err = act(env)
        assert not err and obs.startswith(f"Validation {task.metric.name} of valid_submission.csv: {perfect:g} ("), obs
        obs, err = act(env, predictions_file="submission.csv")  # perfect test answers are no validation answers
        assert err and "invalid predictions in 'submission.csv'" in obs
        obs, err = act(env, predictions_file="test.csv" if short != "parkinsons" else "example_test_files/test.csv")
        assert err and "is one of the task's data files" in obs
    finally:
        env.close()


# ---- the search agent takes the harness's validation score as a node's fitness ---------------------------------

WINE_SCRIPT = '''"""{plan}"""
import csv

import numpy as np


def load(path):
    with open(path) as f:
        rows = list(csv.reader(f))
    return rows[0], np.array(rows[1:], dtype=float)


head, train = load("data/train.csv")
_, test = load("data/test.csv")
_, valid = load("data/valid.csv")
features = [c for c in head if c not in ("id", "label")]
X, y = train[:, [head.index(c) for c in features]], train[:, head.index("label")].astype(int)
mean, std = X.mean(0), X.std(0) + 1e-9


def knn(X_fit, y_fit, X_new, k=5):
    d = ((((X_new - mean) / std)[:, None, :] - ((X_fit - mean) / std)[None]) ** 2).sum(-1)
    return np.array([np.bincount(r, minlength=3).argmax() for r in y_fit[np.argsort(d, axis=1)[:, :k]]])


def write(path, ids, labels):
    with open(path, "w") as f:
        f.write("id,label\\n" + "".join(f"{{int(i)}},{{int(p)}}\\n" for i, p in zip(ids, labels)))


held_out = np.isin(train[:, 0], valid[:, 0])
valid_pred = {valid_rule}
{write_valid}
write("submission.csv", test[:, 0], knn(X, y, test[:, 1:]))
print("VALIDATION_METRIC: {claimed}")
'''
HONEST = "knn(X[~held_out], y[~held_out], valid[:, 1:])"
CONSTANT = "np.zeros(len(valid), dtype=int)"


def wine_script(plan: str, valid_rule: str, claimed: float, node: int | None) -> str:
    write_valid = f'write("solutions/node_{node:03d}_valid.csv", valid[:, 0], valid_pred)' if node else ""
    return WINE_SCRIPT.format(plan=plan, valid_rule=valid_rule, claimed=claimed, write_valid=write_valid)


def test_the_search_agent_takes_the_harness_validation_score_as_fitness(tmp_path):
    from mlab.core.models import RunConfig
    from mlab.core.run.runner import Runner

    replies = [f"{plan}\n\n```python\n{code}```\n" for plan, code in [
        ("Draft: k-NN, honest about its validation rows.", wine_script("knn", HONEST, 0.10, 1)),
        ("Draft: always class 0, but it claims a high score.", wine_script("zero", CONSTANT, 0.99, 2)),
        ("Draft: forgets the validation predictions.", wine_script("none", HONEST, 0.99, None)),
    ]]
    script = tmp_path / "replies.jsonl"
    script.write_text("".join(json.dumps(r) + "\n" for r in replies))
    config = RunConfig(task="lite/wine", agent="search", llm=f"scripted:{script}", max_steps=30,
                       action_timeout_s=120, sandbox="local", allow_validate=True,
                       agent_options={"policy": "greedy", "num_drafts": 3, "max_nodes": 3})
    run_dir = tmp_path / "run"
    trace = Runner(run_dir, config, load_registry()).start()
    assert (trace.status, trace.end_reason) == ("finished", "final answer")
    assert trace.config.allow_validate is True
    nodes = trace.steps[-1].agent_state["graph"]["nodes"]
    validations = {n["id"]: trace.steps[n["validate_step"] - 1] for n in nodes if n["validate_step"]}
    for node_id, step in validations.items():
        assert step.action.name == "Validate Submission"
        assert step.action.args == {"predictions_file": f"solutions/node_{node_id:03d}_valid.csv"}
    # the fitness is the harness's score of the predictions, never the number the script printed
    for n in nodes[:2]:
        assert n["validate_step"] == n["run_step"] + 1 and n["status"] == "ok"
        assert validations[n["id"]].observation.startswith(
            f"Validation accuracy of solutions/node_{n['id']:03d}_valid.csv: {n['fitness']:g} (higher is better)")
    honest, constant, forgetful = nodes
    assert honest["fitness"] > 0.6 and constant["fitness"] < 0.5
    assert forgetful["status"] == "buggy" and forgetful["error"].startswith(
        "validation: there is no 'solutions/node_003_valid.csv' in the workspace")
    assert trace.steps[-1].action.entries["best"] == 1  # the honest k-NN, though it printed the lowest number
    assert "scored" in trace.steps[-1].action.args["final_answer"] and "on the validation split" in \
        trace.steps[-1].action.args["final_answer"]
    calls = [json.loads(line) for line in (run_dir / "llm_calls.jsonl").read_text().splitlines()]
    system = calls[0]["messages"][0]["content"]
    assert "data/valid.csv" in system and "`solutions/node_001_valid.csv`" in system
    assert "VALIDATION_METRIC" not in system  # the script need not print a metric: the harness scores it


# ---- mlab bench --allow-validate ---------------------------------------------------------------------------------

def test_bench_refuses_the_flag_when_a_task_has_no_split_in_one_line(tmp_path):
    registry = load_registry()
    # an installed task (the CLI's registry), not a fixture another test added to this process's registry
    without = next(name for name, task in sorted(registry.items["tasks"].items())
                   if task.validation is None and name.split("/")[0] in ("lite", "mlagentbench"))
    done = mlab("bench", "--tasks", f"lite/wine,{without}", "--agents", "baseline", "--allow-validate",
                "--bench-dir", str(tmp_path / "bench"), timeout=120, home=tmp_path, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"these tasks declare no validation split: {without}" in lines[0]
    assert "lite/wine" not in lines[0] and not (tmp_path / "bench" / "results.db").exists()


@pytest.mark.slow
def test_bench_runs_carry_the_flag_into_their_config_and_the_report(tmp_path):
    bench_dir = tmp_path / "bench"
    done = mlab("bench", "--tasks", "lite/wine", "--agents", "baseline", "--runs", "1", "--workers", "1",
                "--sandbox", "local", "--allow-validate", "--bench-dir", str(bench_dir), home=tmp_path, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    [trace] = [json.loads(p.read_text()) for p in bench_dir.rglob("trace.json")]
    assert trace["config"]["allow_validate"] is True
    reported = mlab_in_process("report", str(bench_dir), "--no-plots", "--no-html", home=tmp_path, cwd=tmp_path)
    assert reported.returncode == 0, reported.stderr
    assert "note: 1 run(s) could score predictions on a validation split (--allow-validate)" in reported.stdout


def test_imdb_declares_a_split_of_training_reviews_scored_by_row_number(tmp_path):
    import numpy as np
    import pandas as pd

    from tests.fixtures.mlagentbench import text

    home = TaskHome(tmp_path / "home")
    harness = Harness(load_registry(), home, sandbox="local")
    task = harness.task("mlagentbench/imdb-cpu")
    harness.prepare(task, text.acl_imdb(tmp_path / "src", per_class=20))
    public, hidden = home.public_dir(task), home.hidden_dir(task)
    valid, labels = pd.read_csv(public / "data/valid.csv"), np.load(hidden / "valid_labels.npy")
    train = pd.read_csv(public / "data/train.csv")
    assert valid.columns.tolist() == ["idx", "text"] and len(valid) == len(labels) == 8
    assert (train.set_index("text").loc[valid.text, "label"].to_numpy() == labels).all()  # training reviews
    workspace = harness.new_workspace(task, tmp_path / "run" / "workspace", allow_validate=True)
    env = harness.environment(task, workspace, store=SnapshotStore(tmp_path / "run" / "store"),
                              sandbox_home=tmp_path / "run" / "home", timeout_s=60, allow_validate=True)
    try:
        probabilities = pd.DataFrame(np.eye(2)[labels], columns=[0, 1], index=pd.Index(range(8), name="idx"))
        probabilities.to_csv(workspace / "valid_submission.csv")
        obs, err = act(env)
        assert not err and obs.startswith("Validation accuracy of valid_submission.csv: 1 ("), obs
        probabilities.iloc[:, ::-1].to_csv(workspace / "flipped.csv")
        obs, err = act(env, predictions_file="flipped.csv")
        assert not err and obs.startswith("Validation accuracy of flipped.csv: 0 ("), obs
        probabilities.iloc[:-1].to_csv(workspace / "short.csv")
        obs, err = act(env, predictions_file="short.csv")
        assert err and "short.csv has 7 rows, expected 8 (one per validation example)" in obs
    finally:
        env.close()


def test_a_home_prepared_before_the_split_existed_is_refused_at_the_start_with_the_fix(staged, tmp_path):
    harness, environment = staged
    task = harness.task("lite/wine")
    harness.prepare(task)
    (harness.home.hidden_dir(task) / "valid_answers.csv").unlink()  # as a home prepared by an older mlab
    with pytest.raises(MlabError, match=r"task 'lite/wine' was prepared without its validation split "
                                        r"\(valid_answers.csv is missing\); prepare it again: mlab prepare "
                                        r"lite/wine --force"):
        environment("lite/wine", allow_validate=True)


def test_agents_may_leave_out_the_predictions_file_as_the_environment_allows():
    from mlab.core.actions import OPT_IN_SPECS
    from mlab.core.agentkit import check_args

    spec = OPT_IN_SPECS["Validate Submission"]
    assert check_args(spec, {}) == {}
    assert check_args(spec, {"predictions_file": "p.csv"}) == {"predictions_file": "p.csv"}
