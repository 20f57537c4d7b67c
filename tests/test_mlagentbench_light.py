"""MLAgentBench pack: cifar10, vectorization, ogbn-arxiv, feedback and parkinsons on small generated data.

Each task: prepare from a local copy in the original's format, evaluate good and malformed submissions, and the
whole self-check (baseline and reference solution in the sandbox) via mlab.core.run.checktask.
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from mlab.core import InvalidSubmission
from mlab.core.plugins.registry import load_registry
from mlab.core.run import taskdata
from tests.fixtures.harness import SCRIPT_TIMEOUT_S, check_task
from tests.fixtures.lazy import lazy
from tests.fixtures.mlagentbench import cifar, graph, kaggle

pd = lazy("pandas")

QUIET = {"log": lambda _m: None}


def get_task(short: str):
    return load_registry().get("tasks", f"mlagentbench/{short}")


def workspace_with(tmp_path: Path, name: str, text: str | None, filename: str = "submission.csv") -> Path:
    ws = tmp_path / name
    ws.mkdir(parents=True)
    if text is not None:
        (ws / filename).write_text(text)
    return ws


def assert_all_invalid(task, hidden: Path, tmp_path: Path, cases: dict[str, str | None]) -> None:
    for label, text in cases.items():
        ws = workspace_with(tmp_path, "bad-" + label.replace(" ", "-"), text)
        with pytest.raises(InvalidSubmission):
            task.evaluate(ws, hidden)


def passed(report) -> None:
    assert report.status == "passed", (report.reason, report.output_tail)
    assert report.steps.get("validation split", "ok") == "ok"  # the step of tasks that declare a split
    assert {k: v for k, v in report.steps.items() if k != "validation split"} == {
        "prepare": "ok", "reproducible prepare": "ok", "invalid submission": "ok", "baseline": "ok", "reference": "ok"}


# ---- cifar10 -------------------------------------------------------------------------------------
def test_cifar10_prepare_hides_test_labels_and_evaluate(tmp_path):
    task = get_task("cifar10")
    source = cifar.cifar(tmp_path / "src", per_batch=20, n_test=30)  # unpacked: a stand-in tarball fails the real md5
    taskdata.prepare(task, source, **QUIET)
    public, hidden = taskdata.public_dir(task), taskdata.hidden_dir(task)
    folder = public / "data" / "cifar-10-batches-py"
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [f"data_batch_{i}" for i in range(1, 6)] + ["batches.meta", "test_batch"])
    with open(folder / "test_batch", "rb") as f:
        test = pickle.load(f, encoding="bytes")
    assert b"labels" not in test and test[b"data"].shape == (30, 3072)
    labels = np.load(hidden / "test_labels.npy")
    probabilities = np.full((30, 10), 0.01)
    probabilities[np.arange(30), labels] = 0.9
    probabilities[:3] = np.roll(probabilities[:3], 1, axis=1)  # three wrong answers
    good = pd.DataFrame(probabilities, columns=list(range(10)))
    assert task.evaluate(workspace_with(tmp_path, "good", good.to_csv()), hidden) == pytest.approx(27 / 30)
    shuffled = good.sample(frac=1, random_state=0)  # rows in any order: the index says which image
    assert task.evaluate(workspace_with(tmp_path, "shuffled", shuffled.to_csv()), hidden) == pytest.approx(27 / 30)
    with_nan = good.copy()
    with_nan.iloc[4, 2] = np.nan
    assert_all_invalid(task, hidden, tmp_path, {
        "missing": None, "nine classes": good.iloc[:, :9].to_csv(), "short": good.iloc[:-1].to_csv(),
        "nan": with_nan.to_csv(), "no index": good.to_csv(index=False), "words": "a,b\nc,d\n"})


@pytest.mark.timeout(SCRIPT_TIMEOUT_S * 3)
@pytest.mark.slow
def test_cifar10_check_task(tmp_path):
    passed(check_task(get_task("cifar10"), data_dir=cifar.cifar(tmp_path / "src", per_batch=40, n_test=60),
                      timeout_s=SCRIPT_TIMEOUT_S))


# ---- vectorization -------------------------------------------------------------------------------
def test_the_last_recorded_time_is_read(tmp_path):
    """llama-inference's score: the time on the last line (the original read the first)."""
    from mlab_tasks_mlagentbench.tasks.vectorization import last_recorded_time

    assert last_recorded_time(workspace_with(tmp_path, "ws", "12.5\n3.25\n\n") / "submission.csv") == 3.25
    for label, text in {"blank": "\n\n", "words": "fast\n", "zero": "1.0\n0\n", "nan": "nan\n",
                        "negative": "-1\n"}.items():
        with pytest.raises(InvalidSubmission):
            last_recorded_time(workspace_with(tmp_path, label, text) / "submission.csv")


@pytest.mark.timeout(SCRIPT_TIMEOUT_S * 3)
@pytest.mark.slow
def test_vectorization_check_task():
    task = type(get_task("vectorization"))()
    task.most_pairs = 4  # the least: how the pairs are timed is tests/test_pack_timing.py's subject
    report = check_task(task, timeout_s=SCRIPT_TIMEOUT_S)
    passed(report)
    assert report.reference < report.baseline / 5  # a vectorised forward pass is much faster


# ---- ogbn-arxiv ----------------------------------------------------------------------------------
def test_ogbn_arxiv_prepare_and_evaluate(tmp_path):
    task = get_task("ogbn-arxiv")
    source = graph.arxiv(tmp_path / "src", n=200, zipped=False)  # an unpacked copy, e.g. an OGB root folder
    taskdata.prepare(task, source, **QUIET)
    public, hidden = taskdata.public_dir(task) / "networks" / "ogbn-arxiv", taskdata.hidden_dir(task)
    labels, test_idx = np.load(public / "labels.npy"), np.load(public / "test_idx.npy")
    assert (labels[test_idx] == -1).all() and (labels[np.load(public / "train_idx.npy")] >= 0).all()
    assert np.load(public / "node_feat.npy").shape == (200, 128) and np.load(public / "edge_index.npy").shape[0] == 2
    truth = np.load(hidden / "test_labels.npy")
    guess = truth.copy()
    guess[:10] = (guess[:10] + 1) % 8
    good = pd.DataFrame(guess.reshape(-1, 1))
    assert task.evaluate(workspace_with(tmp_path, "good", good.to_csv(index=False)), hidden) == 1 - 10 / len(truth)
    assert_all_invalid(task, hidden, tmp_path, {
        "missing": None, "two columns": good.assign(x=1).to_csv(index=False),
        "short": good.iloc[:-1].to_csv(index=False), "class 40": good.assign(**{"0": 40}).to_csv(index=False),
        "fraction": good.assign(**{"0": 0.5}).to_csv(index=False), "nan": "0\n1\n\n" + "nan\n" * len(truth)})


@pytest.mark.timeout(SCRIPT_TIMEOUT_S * 3)
@pytest.mark.slow
def test_ogbn_arxiv_check_task(tmp_path):
    source = graph.arxiv(tmp_path / "src", zipped=False)  # a stand-in arxiv.zip fails the real sha256
    passed(check_task(get_task("ogbn-arxiv"), data_dir=source, timeout_s=SCRIPT_TIMEOUT_S))


# ---- feedback ------------------------------------------------------------------------------------
def test_feedback_split_and_evaluate(tmp_path):
    task = get_task("feedback")
    source = kaggle.feedback(tmp_path / "src", essays=300)
    taskdata.prepare(task, source, **QUIET)
    public, hidden = taskdata.public_dir(task), taskdata.hidden_dir(task)
    raw = pd.read_csv(source / "train.csv").sample(frac=1, random_state=42).reset_index(drop=True)
    train, test = pd.read_csv(public / "train.csv"), pd.read_csv(public / "test.csv")
    assert len(train) == 294 and test.columns.tolist() == ["text_id", "full_text"]
    pd.testing.assert_frame_equal(train, raw.iloc[:294].reset_index(drop=True))
    answer = pd.read_csv(hidden / "answer.csv")
    assert answer.text_id.tolist() == raw.text_id.iloc[294:].tolist()
    off = answer.copy()
    off.iloc[:, 1:] += 0.5
    assert task.evaluate(workspace_with(tmp_path, "good", off.to_csv(index=False)), hidden) == pytest.approx(0.5)
    assert_all_invalid(task, hidden, tmp_path, {
        "missing": None, "no grammar": off.drop(columns=["grammar"]).to_csv(index=False),
        "wrong ids": off.assign(text_id=range(len(off))).to_csv(index=False),
        "nan": off.assign(syntax=np.nan).to_csv(index=False)})


@pytest.mark.timeout(SCRIPT_TIMEOUT_S * 3)
@pytest.mark.slow
def test_feedback_check_task(tmp_path):
    report = check_task(get_task("feedback"), data_dir=kaggle.feedback(tmp_path / "src"), timeout_s=SCRIPT_TIMEOUT_S)
    passed(report)
    assert report.baseline > 1.5  # the starter predicts uniform noise in [0, 1]


# ---- parkinsons ----------------------------------------------------------------------------------
def test_parkinsons_holds_out_two_patients_behind_the_api(tmp_path):
    task = get_task("parkinsons")
    source = kaggle.parkinsons(tmp_path / "src")
    taskdata.prepare(task, source, **QUIET)
    public, hidden = taskdata.public_dir(task), taskdata.hidden_dir(task)
    import random

    patients = pd.read_csv(source / "train_clinical_data.csv").patient_id.unique().tolist()
    held_out = random.Random(42).sample(patients, 2)
    assert set(pd.read_csv(public / "train_clinical_data.csv").patient_id) == set(patients) - set(held_out)
    test = pd.read_csv(public / "example_test_files" / "test.csv")
    assert set(test.patient_id) == set(held_out) and "updrs_1" not in test.columns
    # As the original leaves it: the supplemental visits' header and no rows.
    supplemental = pd.read_csv(public / "supplemental_clinical_data.csv")
    source_columns = pd.read_csv(source / "supplemental_clinical_data.csv").columns.tolist()
    assert len(supplemental) == 0 and supplemental.columns.tolist() == source_columns
    answer = pd.read_csv(hidden / "answer.csv")
    assert answer.prediction_id.str.match(r"^\d+_\d+_updrs_[1-4]_plus_(0|6|12|24)_months$").all()
    assert answer.rating.notna().all()
    sample = pd.read_csv(public / "example_test_files" / "sample_submission.csv")
    assert sorted(sample.prediction_id) == sorted(answer.prediction_id)
    exact = answer[["prediction_id", "rating"]]
    assert task.evaluate(workspace_with(tmp_path, "exact", exact.to_csv(index=False)), hidden) == 0.0
    zeros = exact.assign(rating=0.0)
    expected = np.mean(answer.rating / (answer.rating / 2 + 1)) * 100
    scored = task.evaluate(workspace_with(tmp_path, "zeros", zeros.to_csv(index=False)), hidden)
    assert scored == pytest.approx(expected)
    assert_all_invalid(task, hidden, tmp_path, {
        "missing": None, "negative": exact.assign(rating=-1).to_csv(index=False),
        "missing rows": exact.iloc[3:].to_csv(index=False), "no rating": exact[["prediction_id"]].to_csv(index=False)})


@pytest.mark.timeout(SCRIPT_TIMEOUT_S * 3)
@pytest.mark.slow
def test_parkinsons_check_task(tmp_path):
    passed(check_task(get_task("parkinsons"), data_dir=kaggle.parkinsons(tmp_path / "src"), timeout_s=SCRIPT_TIMEOUT_S))
