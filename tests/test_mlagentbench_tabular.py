"""MLAgentBench pack: the pack's registration, and house-price / spaceship-titanic end to end.

The small tier generates a few rows in the competitions' real format; the shared_data tier uses the original
Kaggle train.csv files from ../shared/data and checks the split matches the original's exactly.
"""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from mlab.core import InvalidSubmission, MlabError
from mlab.core.plugins.registry import load_registry
from mlab.core.run import taskdata
from tests.fixtures.harness import SCRIPT_TIMEOUT_S, check_task, measure_baseline
from tests.fixtures.lazy import lazy
from tests.fixtures.mlagentbench import tabular

pd = lazy("pandas")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("MLAB_SHARED_DIR", REPO.parent / "shared")) / "data"

EXPECTED_TASKS = {"house-price", "spaceship-titanic"}


def get_task(short: str):
    return load_registry().get("tasks", f"mlagentbench/{short}")


def rows_of(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


# ---- the pack ------------------------------------------------------------------------------------
def test_pack_registers_its_tasks_without_heavy_imports():
    code = ("import sys, mlab_tasks_mlagentbench as m; from mlab.core.plugins.registry import load_registry; "
            "r = load_registry(); names = sorted(n for n in r.items['tasks'] if n.startswith('mlagentbench/')); "
            "heavy = [x for x in ('pandas', 'numpy', 'torch', 'sklearn') if x in sys.modules]; "
            "import json; print(json.dumps({'names': names, 'heavy': heavy}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "MLAB_LOAD_PLUGINS": "mlagentbench"})
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["heavy"] == []
    assert EXPECTED_TASKS <= {n.split("/", 1)[1] for n in result["names"]}


def test_metadata_of_the_tabular_tasks():
    house, ship = get_task("house-price"), get_task("spaceship-titanic")
    # The original's fixed baselines: its starters submit nothing (MAE 1e10, chance accuracy).
    assert (house.metric.name, house.metric.higher_is_better, house.fixed_baseline) == ("mae", False, 1e10)
    assert (ship.metric.name, ship.metric.higher_is_better, ship.fixed_baseline) == ("accuracy", True, 0.5)
    assert "plot.py" in house.fixed_baseline_source and "plot.py" in ship.fixed_baseline_source
    for task in (house, ship):
        assert task.resources.gpu == "none" and task.resources.network_for_prepare
        assert "train.csv" in task.read_only_files and task.starter_script == "train.py"


# ---- house-price on small data --------------------------------------------------------------------
@pytest.fixture
def house(tmp_path):
    source = tabular.house_prices(tmp_path / "src", rows=60)
    task = get_task("house-price")
    assert taskdata.prepare(task, source, log=lambda _m: None) is True
    return task, source


def test_house_prepare_splits_first_80_percent_without_shuffling(house):
    task, source = house
    public, hidden = taskdata.public_dir(task), taskdata.hidden_dir(task)
    original = rows_of(source / "train.csv")
    assert rows_of(public / "train.csv") == original[:49]  # header + int(60 * 0.8) rows, as written
    test = rows_of(public / "test.csv")
    assert test[0] == [c for c in original[0] if c != "SalePrice"] and len(test) == 13
    assert [r[0] for r in test[1:]] == [r[0] for r in original[49:]]
    assert rows_of(hidden / "answer.csv") == [["Id", "SalePrice"]] + [[r[0], r[-1]] for r in original[49:]]
    assert not (public / "answer.csv").exists()
    assert {"train.py", "data_description.txt", "sample_submission.csv"} <= {p.name for p in public.iterdir()}
    assert taskdata.prepare(task, source, log=lambda _m: None) is False  # a second prepare does nothing


def test_house_prepare_from_a_kaggle_zip_and_failure_leaves_nothing(tmp_path):
    task = get_task("house-price")
    empty = tmp_path / "nothing"
    empty.mkdir()
    with pytest.raises(MlabError, match="train.csv"):
        taskdata.prepare(task, empty, log=lambda _m: None)
    assert not taskdata.task_dir(task).exists()
    assert not any(p.name.startswith(".staging") for p in taskdata.data_root().iterdir())
    src = tabular.house_prices(tmp_path / "raw", rows=20)
    archive = tmp_path / "zipped" / "home-data-for-ml-course.zip"
    archive.parent.mkdir()
    with zipfile.ZipFile(archive, "w") as zf:
        for name in ("train.csv", "data_description.txt"):
            zf.write(src / name, name)
    assert taskdata.prepare(task, archive.parent, log=lambda _m: None)
    assert len(rows_of(taskdata.public_dir(task) / "train.csv")) == 17


def write_submission(workspace: Path, text: str) -> Path:
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "submission.csv").write_text(text)
    return workspace


def test_house_evaluate_scores_mae_and_rejects_malformed_submissions(house, tmp_path):
    task, _ = house
    hidden = taskdata.hidden_dir(task)
    answer = pd.read_csv(hidden / "answer.csv")
    shuffled = answer.sample(frac=1, random_state=3)
    ws = write_submission(tmp_path / "ok", shuffled.assign(SalePrice=shuffled.SalePrice + 1000).to_csv(index=False))
    assert task.evaluate(ws, hidden) == pytest.approx(1000.0)
    ids = answer.Id.tolist()
    bad = {
        "missing": None,
        "empty": "",
        "wrong columns": "Id,Price\n" + "".join(f"{i},1\n" for i in ids),
        "too few rows": "Id,SalePrice\n" + "".join(f"{i},1\n" for i in ids[:-1]),
        "too many rows": "Id,SalePrice\n" + "".join(f"{i},1\n" for i in ids + [99999]),
        "duplicate id": "Id,SalePrice\n" + "".join(f"{i},1\n" for i in ids[:-1] + ids[:1]),
        "NaN": "Id,SalePrice\n" + "".join(f"{i},{'nan' if n == 2 else 1}\n" for n, i in enumerate(ids)),
        "text": "Id,SalePrice\n" + "".join(f"{i},cheap\n" for i in ids),
        "binary": "\x00\x01\x02garbage\xff",
    }
    for label, text in bad.items():
        ws = tmp_path / label.replace(" ", "_")
        ws.mkdir()
        if text is not None:
            (ws / "submission.csv").write_text(text, errors="surrogateescape")
        with pytest.raises(InvalidSubmission):
            task.evaluate(ws, hidden)


@pytest.mark.timeout(SCRIPT_TIMEOUT_S * 3)
@pytest.mark.slow
def test_house_baseline_is_the_fixed_value_and_the_reference_beats_it(tmp_path):
    source = tabular.house_prices(tmp_path / "src", rows=60)
    report = check_task(get_task("house-price"), data_dir=source, timeout_s=SCRIPT_TIMEOUT_S)
    assert report.status == "passed", report
    assert report.baseline == 1e10  # the starter's model section is empty: no submission
    assert report.starter is None and report.baseline_source.startswith("fixed")
    assert "NameError" in report.output_tail["baseline"]
    assert 0 < report.reference < 50000
    assert report.steps.get("validation split", "ok") == "ok"  # the step of tasks that declare a split
    assert {k: v for k, v in report.steps.items() if k != "validation split"} == {
        "prepare": "ok", "reproducible prepare": "ok", "invalid submission": "ok", "baseline": "ok", "reference": "ok"}


# ---- spaceship-titanic on small data --------------------------------------------------------------
@pytest.mark.slow  # over 2 s on two cores
@pytest.mark.timeout(SCRIPT_TIMEOUT_S * 3)
def test_spaceship_prepare_evaluate_and_baseline(tmp_path):
    task = get_task("spaceship-titanic")
    source = tabular.spaceship(tmp_path / "src", rows=80, with_descriptor=False)
    taskdata.prepare(task, source, log=lambda _m: None)
    public, hidden = taskdata.public_dir(task), taskdata.hidden_dir(task)
    original = rows_of(source / "train.csv")
    assert rows_of(public / "train.csv") == original[:65]
    assert "Transported" not in rows_of(public / "test.csv")[0]
    assert "Transported" in (public / "task_descriptor.txt").read_text()  # our copy when the source has none
    answer = pd.read_csv(hidden / "answer.csv", dtype=str)
    assert answer.columns.tolist() == ["PassengerId", "Transported"] and len(answer) == 16
    truth = answer.Transported.str.lower() == "true"
    flipped = answer.assign(Transported=[(not t) if i < 4 else t for i, t in enumerate(truth)])
    assert task.evaluate(write_submission(tmp_path / "a", flipped.to_csv(index=False)), hidden) == 0.75
    numeric = answer.assign(Transported=truth.astype(int))
    assert task.evaluate(write_submission(tmp_path / "b", numeric.to_csv(index=False)), hidden) == 1.0
    maybe = answer.assign(Transported="maybe")
    with pytest.raises(InvalidSubmission, match="not True or False"):
        task.evaluate(write_submission(tmp_path / "c", maybe.to_csv(index=False)), hidden)
    with pytest.raises(InvalidSubmission, match="missing"):
        task.evaluate(write_submission(tmp_path / "d", answer[:-2].to_csv(index=False)), hidden)
    # The starter submits nothing, so there is nothing to measure: the task's fixed baseline stands instead.
    with pytest.raises(MlabError, match="nothing was measured or recorded; runs are judged against the task's "
                                        "fixed baseline accuracy = 0.5"):
        measure_baseline(task, record=False, timeout_s=SCRIPT_TIMEOUT_S)


# ---- the original data (../shared/data) -----------------------------------------------------------
@pytest.mark.shared_data
@pytest.mark.parametrize("short, folder, id_column, target, n_train, n_test", [
    ("house-price", "house-prices", "Id", "SalePrice", 1168, 292),
    ("spaceship-titanic", "spaceship-titanic", "PassengerId", "Transported", 6954, 1739),
])
def test_shared_data_split_matches_the_original(short, folder, id_column, target, n_train, n_test):
    task = get_task(short)
    source = SHARED_DATA / folder
    taskdata.prepare(task, SHARED_DATA, log=lambda _m: None)  # the data root: the task finds its folder
    public, hidden = taskdata.public_dir(task), taskdata.hidden_dir(task)
    raw = pd.read_csv(source / "train.csv")
    train, test = pd.read_csv(public / "train.csv"), pd.read_csv(public / "test.csv")
    answer = pd.read_csv(hidden / "answer.csv")
    assert (len(train), len(test), len(answer)) == (n_train, n_test, n_test)
    # The original: pandas iloc[:int(n * 0.8)] and the rest, same columns, target dropped from test.
    cut = int(len(raw) * 0.8)
    pd.testing.assert_frame_equal(train, raw.iloc[:cut].reset_index(drop=True))
    pd.testing.assert_frame_equal(test, raw.iloc[cut:].drop(columns=[target]).reset_index(drop=True))
    pd.testing.assert_frame_equal(answer, raw.iloc[cut:][[id_column, target]].reset_index(drop=True))
    assert (public / task.description_file).read_bytes() == (source / task.description_file).read_bytes()


@pytest.mark.shared_data
def test_shared_data_metrics_are_the_originals(tmp_path):
    house = get_task("house-price")
    taskdata.prepare(house, SHARED_DATA / "house-prices", log=lambda _m: None)
    answer = pd.read_csv(taskdata.hidden_dir(house) / "answer.csv")
    train = pd.read_csv(taskdata.public_dir(house) / "train.csv")
    guess = answer.assign(SalePrice=train.SalePrice.median())
    expected = sum(abs(guess.SalePrice - answer.SalePrice)) / len(answer)  # the original's formula
    ws = write_submission(tmp_path / "h", guess.to_csv(index=False))
    assert house.evaluate(ws, taskdata.hidden_dir(house)) == pytest.approx(expected)

    ship = get_task("spaceship-titanic")
    taskdata.prepare(ship, SHARED_DATA / "spaceship-titanic", log=lambda _m: None)
    answer = pd.read_csv(taskdata.hidden_dir(ship) / "answer.csv")
    guess = answer.assign(Transported=True)
    expected = (guess.Transported == answer.Transported).sum() / len(answer)
    ws = write_submission(tmp_path / "s", guess.to_csv(index=False))
    assert ship.evaluate(ws, taskdata.hidden_dir(ship)) == pytest.approx(expected)


@pytest.mark.shared_data
@pytest.mark.parametrize("short, folder, fixed, lo, hi", [
    ("house-price", "house-prices", 1e10, 5000, 30000),
    ("spaceship-titanic", "spaceship-titanic", 0.5, 0.72, 0.9),
])
@pytest.mark.timeout(SCRIPT_TIMEOUT_S * 3)
@pytest.mark.slow
def test_shared_data_check_task_passes(short, folder, fixed, lo, hi):
    report = check_task(get_task(short), data_dir=SHARED_DATA / folder, timeout_s=SCRIPT_TIMEOUT_S)
    assert report.status == "passed", report
    assert report.baseline == fixed and lo < report.reference < hi
