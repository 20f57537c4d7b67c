"""imdb: fine-tune DistilBERT for review sentiment; accuracy of the argmax of the submitted probabilities.

The data is the Stanford aclImdb_v1 archive (the source of Hugging Face's "imdb" dataset, 25k/25k reviews),
written to CSV files; the test labels are held out and the test reviews shuffled (seed 0) so their order says
nothing about their labels.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from mlab.core import Metric, MlabError, PrepareContext, Resources, ValidationSplit

from .. import acquire
from ..base import ORIGINAL_FIXED_BASELINE, PACK, MLAgentBenchTask
from ..submission import class_probabilities
from . import validation as splits

ACL_IMDB = acquire.Source(url="https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",
                          filename="aclImdb_v1.tar.gz", md5="7c2ac02c03563afcf9b574c7e56c153a", size=84_125_825,
                          terms="https://ai.stanford.edu/~amaas/data/sentiment/")
# The model the problem names, copied into the task so runs load it offline and inside any sandbox.
DISTILBERT = "distilbert-base-uncased"
DISTILBERT_FILES = [acquire.Source(url=f"https://huggingface.co/distilbert/{DISTILBERT}/resolve/main/{name}",
                                   filename=f"{DISTILBERT}-{name}", terms=f"https://huggingface.co/distilbert/{DISTILBERT}")
                    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                                 "vocab.txt")]


VALID_FILE = "data/valid.csv"
VALID_LABELS = "valid_labels.npy"  # in the hidden folder, read by evaluate in place of test_labels.npy


def check_distilbert(folder: Path) -> None:
    """No checksum is published with the weights: config.json must name a DistilBERT, and the weights and
    WordPiece vocabulary be there."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise MlabError(f"{folder}/config.json: unreadable ({exc})") from None
    if not isinstance(config, dict) or config.get("model_type") != "distilbert":
        raise MlabError(f"{folder}/config.json does not describe a DistilBERT model")
    if not (folder / "model.safetensors").is_file() or not (folder / "vocab.txt").is_file():
        raise MlabError(f"{folder} lacks model.safetensors or vocab.txt")


def check_reviews(root: Path) -> None:
    """An unpacked aclImdb/ has no checksum: every split needs its pos and neg folders of reviews."""
    for split in ("train", "test"):
        for label in ("pos", "neg"):
            folder = root / "aclImdb" / split / label
            if not folder.is_dir() or not any(folder.glob("*.txt")):
                raise MlabError(f"{folder}: missing or empty; not the aclImdb archive's layout")


def read_split(root: Path, split: str):
    import pandas as pd

    rows = []
    for label, folder in ((0, "neg"), (1, "pos")):
        for path in sorted((root / split / folder).glob("*.txt")):
            rows.append((path.read_text(encoding="utf-8", errors="replace"), label))
    return pd.DataFrame(rows, columns=["text", "label"])


class Imdb(MLAgentBenchTask):
    short = "imdb"
    name = f"{PACK}/imdb"
    description = "Fine-tune DistilBERT on IMDb review sentiment; accuracy, higher is better"
    files = "imdb"
    reference = "imdb"
    needs = {"torch": "torch"}
    downloads = [(ACL_IMDB.filename, ACL_IMDB)] + [
        (f"{DISTILBERT}/{s.filename.removeprefix(DISTILBERT + '-')}", s) for s in DISTILBERT_FILES]
    local_check = (f"an unpacked aclImdb/ with train and test pos/neg reviews; {DISTILBERT}/config.json names a "
                   "DistilBERT, model.safetensors and vocab.txt present")
    cpu_variant: str | None = f"{PACK}/imdb-cpu"
    metric = Metric(name="accuracy", higher_is_better=True)
    # The starter leaves the model to the agent and submits nothing; the original judges against chance.
    fixed_baseline = 0.5
    fixed_baseline_source = ORIGINAL_FIXED_BASELINE
    read_only_files = ["data/*", f"{DISTILBERT}/*"]
    # Reviews have no id: held out by their text (a duplicate of a validation review goes with it).
    validation = ValidationSplit(inputs=VALID_FILE, predictions=splits.VALID_PREDICTIONS, submission="submission.csv",
                                 answers={VALID_LABELS: "test_labels.npy"}, test_inputs="data/test.csv",
                                 held_out={"data/train.csv": "text"})
    resources = Resources(gpu="required", ram_gb=8.0, network_for_prepare=True, baseline_seconds=10.0,
                          extras=["torch", "text (transformers, for DistilBERT)"])
    research_problem = (
        "Fill out train.py to 1) fine-tune DistilBERT on the IMDb dataset to determine whether a movie review is "
        "positive or negative and 2) save the per-class probabilities of the test reviews to submission.csv. The "
        "dataset is in data/train.csv and data/test.csv (the test labels are held out). train.py has skeleton "
        "code for loading the dataset and saving predictions to submission.csv. DistilBERT's weights and tokenizer are "
        f"in {DISTILBERT}/ (from_pretrained(\"{DISTILBERT}\") in the workspace loads them; there is no "
        "network).")

    def prepare_data(self, ctx: PrepareContext) -> None:
        import numpy as np

        with acquire.Scratch(ctx.public_dir.parent) as scratch:
            root = acquire.obtain_archive(ctx.source_dir, ACL_IMDB, scratch, ctx.log, "aclImdb", task=self.name,
                                          check=check_reviews) / "aclImdb"
            train, test = read_split(root, "train"), read_split(root, "test")
        self._model(ctx)
        train = train.sample(frac=1, random_state=0).reset_index(drop=True)
        test = test.sample(frac=1, random_state=0).reset_index(drop=True)
        (ctx.public_dir / "data").mkdir()
        train.to_csv(ctx.public_dir / "data" / "train.csv", index=False)
        test.rename_axis("idx").reset_index()[["idx", "text"]].to_csv(ctx.public_dir / "data" / "test.csv",
                                                                      index=False)
        np.save(ctx.hidden_dir / "test_labels.npy", test.label.to_numpy(dtype=np.int64))
        valid = train.iloc[splits.pick(len(train))].reset_index(drop=True)  # reviews of train.csv
        valid.rename_axis("idx").reset_index()[["idx", "text"]].to_csv(ctx.public_dir / VALID_FILE, index=False)
        np.save(ctx.hidden_dir / VALID_LABELS, valid.label.to_numpy(dtype=np.int64))
        ctx.log(f"{self.name}: {len(train)} training reviews, {len(test)} test reviews")

    def _model(self, ctx: PrepareContext) -> None:
        target = ctx.public_dir / DISTILBERT
        local = acquire.find_folder_with(ctx.source_dir, ["config.json", "vocab.txt"], [DISTILBERT]) \
            if ctx.source_dir else None
        if local is not None:
            check_distilbert(local)
            acquire.copy_tree(local, target)
            return
        target.mkdir()
        for source in DISTILBERT_FILES:
            path = acquire.download(source, ctx.log, task=self.name)
            shutil.copyfile(path, target / source.filename.removeprefix(DISTILBERT + "-"))
        check_distilbert(target)

    def evaluate(self, workspace: Path, hidden_dir: Path) -> float:
        import numpy as np

        labels = np.load(Path(hidden_dir) / "test_labels.npy")
        predicted = class_probabilities(workspace, len(labels), 2, index_label="idx",
                                        max_bytes=self.max_submission_bytes)
        return float((predicted == labels).mean())


class ImdbCpu(Imdb):
    name = f"{PACK}/imdb-cpu"
    description = "imdb scaled for a CPU: a small fine-tuning budget; accuracy, higher is better"
    cpu_variant = None
    resources = Resources(gpu="optional", ram_gb=8.0, network_for_prepare=True, baseline_seconds=10.0,
                          extras=["torch", "text (transformers, for DistilBERT)"])
    research_problem = Imdb.research_problem + (
        "\nThis machine has no GPU: keep fine-tuning within about an hour of CPU time, e.g. train on a few "
        "thousand reviews truncated to 128 tokens for one epoch, or use a smaller model.")
