"""MLAgentBench pack: imdb, fathomnet and identify-contrails (GPU tasks and their CPU-scaled variants) on small
generated data in the original formats: the GPU refusal, prepare, evaluate and the self-check."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from mlab.core import InvalidSubmission, MlabError
from mlab.core.plugins.registry import load_registry
from mlab.core.run import taskdata
from tests.fixtures.harness import check_task
from tests.fixtures.lazy import lazy
from tests.fixtures.mlagentbench import images, text

pd = lazy("pandas")

QUIET = {"log": lambda _m: None}
needs_pillow = pytest.mark.skipif(importlib.util.find_spec("PIL") is None,
                                  reason="pillow is not installed (the pack's 'vision' extra)")


def get_task(name: str):
    return load_registry().get("tasks", f"mlagentbench/{name}")


def workspace_with(tmp_path, name, content):
    ws = tmp_path / name
    ws.mkdir()
    if content is not None:
        (ws / "submission.csv").write_text(content)
    return ws


@pytest.fixture
def no_gpu_check(monkeypatch):
    monkeypatch.setenv("MLAB_ALLOW_NO_GPU", "1")


@pytest.mark.slow
def test_gpu_tasks_refuse_without_a_gpu_and_name_their_cpu_variant(tmp_path, monkeypatch):
    monkeypatch.delenv("MLAB_ALLOW_NO_GPU", raising=False)
    from mlab_tasks_mlagentbench.base import gpu_available

    if gpu_available():
        pytest.skip("this machine has a GPU")
    source = text.acl_imdb(tmp_path / "src", per_class=3)
    for name, variant in (("imdb", "imdb-cpu"), ("fathomnet", "fathomnet-cpu"),
                          ("identify-contrails", "identify-contrails-cpu")):
        task = get_task(name)
        assert task.resources.gpu == "required"
        with pytest.raises(MlabError, match=f"needs a GPU.*mlagentbench/{variant}"):
            taskdata.prepare(task, source, **QUIET)
        assert not taskdata.task_dir(task).exists()
        assert get_task(variant).resources.gpu == "optional"
    report = check_task(get_task("imdb"), data_dir=source)
    assert report.status == "skipped" and "needs a GPU" in report.reason


# ---- imdb ----------------------------------------------------------------------------------------
def test_imdb_prepare_shuffles_and_hides_test_labels(tmp_path):
    task = get_task("imdb-cpu")
    taskdata.prepare(task, text.acl_imdb(tmp_path / "src", per_class=20), **QUIET)
    public, hidden = taskdata.public_dir(task) / "data", taskdata.hidden_dir(task)
    train, test = pd.read_csv(public / "train.csv"), pd.read_csv(public / "test.csv")
    assert (len(train), len(test)) == (40, 40) and test.columns.tolist() == ["idx", "text"]
    labels = np.load(hidden / "test_labels.npy")
    assert sorted(labels.tolist()) == [0] * 20 + [1] * 20 and labels[:20].tolist() != sorted(labels[:20].tolist())
    probabilities = np.eye(2)[labels] * 0.8 + 0.1
    probabilities[:4] = probabilities[:4, ::-1]
    good = pd.DataFrame(probabilities, columns=[0, 1], index=pd.Index(range(40), name="idx"))
    assert task.evaluate(workspace_with(tmp_path, "good", good.to_csv()), hidden) == pytest.approx(0.9)
    for label, content in {"missing": None, "three columns": good.assign(x=0.1).to_csv(),
                           "no idx": good.to_csv(index_label="id"), "short": good.iloc[:-1].to_csv()}.items():
        with pytest.raises(InvalidSubmission):
            task.evaluate(workspace_with(tmp_path, label.replace(" ", "-"), content), hidden)


@pytest.mark.slow
def test_imdb_cpu_check_task(tmp_path):
    report = check_task(get_task("imdb-cpu"), data_dir=text.acl_imdb(tmp_path / "src", per_class=40))
    assert report.status == "passed", report
    # The starter submits nothing: judged against the original's fixed chance accuracy, which the variant keeps.
    assert report.baseline == 0.5 and report.starter is None and "NoneType" in report.output_tail["baseline"]
    assert report.reference > 0.8


# ---- fathomnet -----------------------------------------------------------------------------------
def test_fathomnet_prepare_split_and_map_at_20(tmp_path, no_gpu_check):
    task = get_task("fathomnet")
    source = images.fathomnet(tmp_path / "src", n_images=150)
    taskdata.prepare(task, source, **QUIET)
    public, hidden = taskdata.public_dir(task), taskdata.hidden_dir(task)
    raw = pd.read_csv(source / "multilabel_classification" / "train.csv").sample(frac=1, random_state=42)
    train = pd.read_csv(public / "multilabel_classification" / "train.csv")
    assert train["id"].tolist() == raw["id"].iloc[:147].tolist()
    answer = pd.read_csv(hidden / "answer.csv")
    assert answer["id"].tolist() == raw["id"].iloc[147:].tolist() and (answer.osd == 0).all()
    eval_images = json.loads((public / "object_detection" / "eval.json").read_text())["images"]
    assert [x["file_name"][:-4] for x in eval_images] == answer["id"].tolist()
    detection = json.loads((public / "object_detection" / "train.json").read_text())
    assert len(detection["images"]) == 147 and {a["image_id"] for a in detection["annotations"]} <= set(range(1, 148))
    assert len(list((public / "images").iterdir())) == 150
    from mlab_tasks_mlagentbench.tasks.fathomnet import category_ids

    truth = [category_ids(c) for c in answer.categories]
    perfect = answer.assign(categories=[" ".join(map(str, t)) for t in truth], osd=0.5)
    assert task.evaluate(workspace_with(tmp_path, "perfect", perfect.to_csv(index=False)), hidden) == 1.0
    # The original starter's list format ("[1, 2]") is read too; a wrong first guess halves the precision.
    listed = answer.assign(categories=[str([999] + t[:1]) for t in truth], osd=1)
    expected = np.mean([0.5 / min(len(t), 20) for t in truth])
    scored = task.evaluate(workspace_with(tmp_path, "listed", listed.to_csv(index=False)), hidden)
    assert scored == pytest.approx(expected)
    for label, content in {"missing": None, "no categories": answer[["id"]].to_csv(index=False),
                           "no osd": perfect[["id", "categories"]].to_csv(index=False),
                           "osd not a number": perfect.assign(osd="unsure").to_csv(index=False),
                           "other ids": perfect.assign(id="x" + perfect.id).to_csv(index=False)}.items():
        with pytest.raises(InvalidSubmission):
            task.evaluate(workspace_with(tmp_path, label.replace(" ", "-"), content), hidden)


@needs_pillow
@pytest.mark.slow
def test_fathomnet_cpu_check_task(tmp_path):
    report = check_task(get_task("fathomnet-cpu"), data_dir=images.fathomnet(tmp_path / "src", n_images=120))
    assert report.status == "passed", report


# ---- identify-contrails --------------------------------------------------------------------------
def test_contrails_prepare_moves_validation_to_test_and_scores_dice(tmp_path, no_gpu_check):
    task = get_task("identify-contrails")
    source = images.contrails(tmp_path / "src", n_train=2, n_valid=3, times=5)
    taskdata.prepare(task, source, **QUIET)
    public, hidden = taskdata.public_dir(task), taskdata.hidden_dir(task)
    records = sorted(p.name for p in (source / "validation").iterdir())
    assert sorted(p.name for p in (public / "test").iterdir()) == records
    assert not list((public / "test").rglob("human_*")) and (public / "encode.py").is_file()
    assert len(list((public / "train").iterdir())) == 2
    masks = {r: np.load(source / "validation" / r / "human_pixel_masks.npy")[:, :, 0] for r in records}
    spec = importlib.util.spec_from_file_location("shipped_encode", public / "encode.py")
    shipped = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shipped)

    def encode(mask):
        text = shipped.list_to_string(shipped.rle_encode(mask))
        assert (shipped.rle_decode(text) == mask).all()
        return text

    exact = pd.DataFrame({"record_id": records,
                          "encoded_pixels": [encode(masks[r]) for r in records]})
    assert task.evaluate(workspace_with(tmp_path, "exact", exact.to_csv(index=False)), hidden) == pytest.approx(1.0)
    empty = exact.assign(encoded_pixels="-")
    assert task.evaluate(workspace_with(tmp_path, "empty", empty.to_csv(index=False)), hidden) < 1e-6
    for label, bad in {"unsorted": "10 2 1 2", "odd": "1 2 3", "outside": "65536 5", "words": "a b",
                       "overlap": "1 5 3 2"}.items():
        frame = exact.copy()
        frame.loc[1, "encoded_pixels"] = bad
        with pytest.raises(InvalidSubmission):
            task.evaluate(workspace_with(tmp_path, label, frame.to_csv(index=False)), hidden)
    with pytest.raises(InvalidSubmission):
        task.evaluate(workspace_with(tmp_path, "short", exact.iloc[:-1].to_csv(index=False)), hidden)


@pytest.mark.slow
def test_contrails_test_data_is_beyond_the_starters_untrained_model(tmp_path, monkeypatch):
    """The starter's model is an untrained 1x1 convolution; on data one threshold separates, some random
    initialisations already match the masks and check-task then sees the reference gain nothing."""
    import torch
    import torch.nn.functional as F

    import mlab_tasks_mlagentbench

    files = Path(mlab_tasks_mlagentbench.__file__).parent / "files" / "identify-contrails"
    monkeypatch.syspath_prepend(str(files))  # train.py imports the shipped encode.py
    monkeypatch.setitem(sys.modules, "encode", None)  # so the import below is undone after the test
    del sys.modules["encode"]
    spec = importlib.util.spec_from_file_location("contrails_starter", files / "train.py")
    starter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(starter)
    source = images.contrails(tmp_path / "src", n_train=1, n_valid=2, times=5)
    images_in, masks = [], []
    for record in sorted((source / "validation").iterdir()):
        bands = [np.load(record / f"band_{b}.npy")[..., 4] for b in (11, 14, 15)]
        images_in.append(torch.Tensor(starter.false_color(*bands)).permute(2, 0, 1))
        masks.append(torch.from_numpy(np.load(record / "human_pixel_masks.npy")[:, :, 0]).float())
    batch, truth = torch.stack(images_in), torch.stack(masks)
    dice = []
    for seed in range(300):
        torch.manual_seed(seed)
        with torch.no_grad():
            predicted = F.softmax(torch.nn.Conv2d(3, 2, 1)(batch), dim=1).argmax(1).float()
        per_record = (2 * (predicted * truth).sum((1, 2)) + 1e-6) / (predicted.sum((1, 2)) + truth.sum((1, 2)) + 1e-6)
        dice.append(per_record.mean().item())
    assert max(dice) < 0.3, f"an untrained 1x1 convolution scores {max(dice):.3f} Dice on the test data"


@pytest.mark.slow
def test_contrails_cpu_check_task(tmp_path):
    report = check_task(get_task("identify-contrails-cpu"),
                        data_dir=images.contrails(tmp_path / "src", n_train=4, n_valid=2, times=5))
    assert report.status == "passed", report
    assert report.reference > 0.8
