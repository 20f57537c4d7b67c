"""cifar10 and imdb read submission rows by their index label, as the original does (`submission.loc[idx]`):
a correct submission in any row order scores 1.0; a row label that is missing or repeated is invalid."""
from __future__ import annotations

import numpy as np
import pytest

from mlab.core import InvalidSubmission
from mlab.core.plugins.registry import load_registry
from tests.fixtures.lazy import lazy

pd = lazy("pandas")


@pytest.mark.parametrize(("task_name", "classes", "index_label"), [
    ("mlagentbench/cifar10", 10, None), ("mlagentbench/imdb", 2, "idx"), ("mlagentbench/imdb-cpu", 2, "idx")])
def test_a_shuffled_perfect_submission_scores_one(tmp_path, task_name, classes, index_label):
    task = load_registry().get("tasks", task_name)
    rng = np.random.default_rng(0)
    labels = rng.integers(0, classes, 200)
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    np.save(hidden / "test_labels.npy", labels)
    perfect = pd.DataFrame(np.eye(classes)[labels], columns=list(range(classes)),
                           index=pd.Index(range(len(labels)), name=index_label))
    for seed in range(3):
        shuffled = perfect.sample(frac=1, random_state=seed)
        assert not shuffled.index.equals(perfect.index)
        workspace = tmp_path / f"shuffled-{seed}"
        workspace.mkdir()
        (workspace / "submission.csv").write_text(shuffled.to_csv())
        assert task.evaluate(workspace, hidden) == 1.0
    repeated = perfect.rename(index={1: 0})  # row 1 missing, row 0 twice
    workspace = tmp_path / "repeated"
    workspace.mkdir()
    (workspace / "submission.csv").write_text(repeated.to_csv())
    with pytest.raises(InvalidSubmission):
        task.evaluate(workspace, hidden)
