"""ogbn-arxiv: improve a weak MLP for node classification; test accuracy of the submitted labels.

The data is OGB's own arxiv.zip (raw CSVs and the official time split), converted to numpy arrays so the starter
needs only torch; the test nodes' labels are held out. torch_geometric and ogb are an optional extra.
"""
from __future__ import annotations

from pathlib import Path

from mlab.core import InvalidSubmission, Metric, MlabError, PrepareContext, Resources

from .. import acquire
from ..base import ORIGINAL_FIXED_BASELINE, PACK, MLAgentBenchTask
from ..submission import numbers, read_csv

ARXIV = acquire.Source(url="http://snap.stanford.edu/ogb/data/nodeproppred/arxiv.zip", filename="arxiv.zip",
                       sha256="49f85c801589ecdcc52cfaca99693aaea7b8af16a9ac3f41dd85a5f3193fe276",
                       terms="https://ogb.stanford.edu/docs/nodeprop/#ogbn-arxiv")
MARKER = "raw/node-feat.csv.gz"
NUM_CLASSES = 40


def read_ints(path: Path):
    import pandas as pd

    return pd.read_csv(path, header=None, dtype="int64").to_numpy()


class OgbnArxiv(MLAgentBenchTask):
    short = "ogbn-arxiv"
    name = f"{PACK}/ogbn-arxiv"
    description = "Improve a weak MLP on OGB ogbn-arxiv node classification; test accuracy, higher is better"
    files = "ogbn-arxiv"
    reference = "ogbn-arxiv"
    needs = {"torch": "torch"}
    downloads = [(ARXIV.filename, ARXIV)]
    local_check = "an unpacked arxiv/: raw/*.csv.gz and split/time/*.csv.gz, node counts agreeing (169,343)"
    metric = Metric(name="accuracy", higher_is_better=True)
    fixed_baseline = 0.3134
    fixed_baseline_source = ORIGINAL_FIXED_BASELINE
    read_only_files = ["networks/*"]
    resources = Resources(gpu="optional", ram_gb=4.0, network_for_prepare=True, baseline_seconds=120.0,
                          extras=["torch", "graph (optional: torch_geometric and ogb for your own models)"])
    research_problem = (
        "train.py trains a model on the ogbn-arxiv node classification dataset with its current hyperparameters. "
        "Improve on the performance of that model. Keep training within 10 epochs to save time. The script "
        "writes the predicted class of every test node (in the order of test_idx) to submission.csv; keep that "
        "format. The graph is in networks/ogbn-arxiv as numpy arrays; the test nodes' labels are held out "
        "(-1). torch_geometric and ogb are available if the task's 'graph' extra is installed.")

    def prepare_data(self, ctx: PrepareContext) -> None:
        import numpy as np
        import pandas as pd

        with acquire.Scratch(ctx.public_dir.parent) as scratch:
            root = acquire.obtain_archive(ctx.source_dir, ARXIV, scratch, ctx.log, MARKER, task=self.name)
            target = ctx.public_dir / "networks" / "ogbn-arxiv"
            target.mkdir(parents=True)
            features = pd.read_csv(root / "raw" / "node-feat.csv.gz", header=None, dtype="float32").to_numpy()
            edges = read_ints(root / "raw" / "edge.csv.gz").T.copy()
            labels = read_ints(root / "raw" / "node-label.csv.gz").reshape(-1)
            split = {part: read_ints(root / "split" / "time" / f"{part}.csv.gz").reshape(-1)
                     for part in ("train", "valid", "test")}
            n = len(features)
            if len(labels) != n or edges.max() >= n or any(s.max() >= n for s in split.values()):
                raise MlabError(f"{root}: node counts of the features, labels, edges and split disagree")
            np.save(target / "node_feat.npy", features)
            np.save(target / "edge_index.npy", edges)
            year = root / "raw" / "node_year.csv.gz"
            if year.exists():
                np.save(target / "node_year.npy", read_ints(year).reshape(-1))
            public_labels = labels.copy()
            public_labels[split["test"]] = -1
            np.save(target / "labels.npy", public_labels)
            for part, idx in split.items():
                np.save(target / f"{part}_idx.npy", idx)
            np.save(ctx.hidden_dir / "test_labels.npy", labels[split["test"]])
        ctx.log(f"{self.name}: {n} nodes, {edges.shape[1]} edges, {len(split['test'])} test nodes held out")

    def evaluate(self, workspace: Path, hidden_dir: Path) -> float:
        import numpy as np

        truth = np.load(Path(hidden_dir) / "test_labels.npy")
        frame = read_csv(workspace, max_rows=len(truth), max_bytes=self.max_submission_bytes)
        if frame.shape[1] != 1:
            raise InvalidSubmission(f"submission.csv has {frame.shape[1]} columns; expected one: the predicted "
                                    "class of each test node")
        if len(frame) != len(truth):
            raise InvalidSubmission(f"submission.csv has {len(frame)} rows, expected {len(truth)} (one per test node)")
        predicted = numbers(frame, frame.columns[0])
        if (predicted != np.round(predicted)).any() or predicted.min() < 0 or predicted.max() >= NUM_CLASSES:
            raise InvalidSubmission(f"submission.csv: predictions must be class numbers 0..{NUM_CLASSES - 1}")
        return float((predicted.astype(np.int64) == truth).mean())
