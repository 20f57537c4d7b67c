"""cifar10: improve a small CNN on CIFAR-10; accuracy of the argmax of submitted class probabilities."""
from __future__ import annotations

import pickle
import shutil
from pathlib import Path

from mlab.core import Metric, MlabError, PrepareContext, Resources

from .. import acquire
from ..base import PACK, MLAgentBenchTask
from ..submission import class_probabilities

CIFAR10 = acquire.Source(url="https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
                         filename="cifar-10-python.tar.gz", md5="c58f30108f718f92721af3b95e74349a",
                         size=170_498_071, terms="https://www.cs.toronto.edu/~kriz/cifar.html")
FOLDER = "cifar-10-batches-py"
TRAIN_BATCHES = [f"data_batch_{i}" for i in range(1, 6)]
IMAGES_PER_BATCH = 10_000  # the original's batches; a smaller copy is used with a note (tests use stand-ins)


def check_batches(root: Path, log=print) -> None:
    """An unpacked copy has no checksum: each batch must unpickle to uint8 images of 3,072 values and as many
    labels 0..9, or it is not CIFAR-10."""
    import numpy as np

    counts = []
    for name in TRAIN_BATCHES + ["test_batch"]:
        path = root / FOLDER / name
        try:
            with open(path, "rb") as f:
                batch = pickle.load(f, encoding="bytes")
            data, labels = np.asarray(batch[b"data"]), np.asarray(batch[b"labels"])
        except (OSError, pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError) as exc:
            raise MlabError(f"{path}: not a CIFAR-10 batch ({type(exc).__name__}: {exc})") from None
        if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072 or len(labels) != len(data) \
                or labels.min() < 0 or labels.max() > 9:
            raise MlabError(f"{path}: not a CIFAR-10 batch (want uint8 images of 3072 values and labels 0..9)")
        counts.append(len(data))
    if any(n != IMAGES_PER_BATCH for n in counts):
        log(f"note: {root / FOLDER} holds {counts} images per batch; the original has {IMAGES_PER_BATCH:,} each")


class Cifar10(MLAgentBenchTask):
    short = "cifar10"
    name = f"{PACK}/cifar10"
    description = "Improve a small CNN on CIFAR-10 (official split); accuracy, higher is better"
    files = "cifar10"
    reference = "cifar10"
    needs = {"torch": "torch"}
    downloads = [(CIFAR10.filename, CIFAR10)]
    local_check = "an unpacked cifar-10-batches-py/: every batch unpickles to 3,072-value images and labels 0..9"
    metric = Metric(name="accuracy", higher_is_better=True)
    read_only_files = ["data/*"]
    resources = Resources(gpu="optional", ram_gb=4.0, network_for_prepare=True, baseline_seconds=600.0,
                          extras=["torch"])
    research_problem = (
        "train.py trains a model on CIFAR-10 with its current hyperparameters. Improve on the performance of "
        "that model. Keep training within 10 epochs to save time. Save the per-class probabilities of the test "
        "images to submission.csv the way train.py does (one row per image of data/cifar-10-batches-py/"
        "test_batch, in order, an index column and one column per class). The test labels are held out: "
        "estimate how well you do on part of the training data.")

    def prepare_data(self, ctx: PrepareContext) -> None:
        import numpy as np

        with acquire.Scratch(ctx.public_dir.parent) as scratch:
            root = acquire.obtain_archive(ctx.source_dir, CIFAR10, scratch, ctx.log, FOLDER, task=self.name,
                                          check=lambda found: check_batches(found, ctx.log))
            source = root / FOLDER
            target = ctx.public_dir / "data" / FOLDER
            target.mkdir(parents=True)
            for name in TRAIN_BATCHES + ["batches.meta"]:
                shutil.copyfile(source / name, target / name)
            with open(source / "test_batch", "rb") as f:
                test = pickle.load(f, encoding="bytes")
            labels = np.asarray(test.pop(b"labels"), dtype=np.int64)
            with open(target / "test_batch", "wb") as f:  # the same format, minus the labels
                pickle.dump(test, f, protocol=2)
            np.save(ctx.hidden_dir / "test_labels.npy", labels)
        ctx.log(f"{self.name}: {len(labels)} test images, labels held out")

    def evaluate(self, workspace: Path, hidden_dir: Path) -> float:
        import numpy as np

        labels = np.load(Path(hidden_dir) / "test_labels.npy")
        predicted = class_probabilities(workspace, len(labels), 10, max_bytes=self.max_submission_bytes)
        return float((predicted == labels).mean())
