"""What the lite tasks share: a fixed-seed split of generated data into public and hidden files."""
from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

from mlab.core import PrepareContext, Task, ValidationSplit

from .submission import number_text, read_answers, write_csv

DATA_DIR = "data"
TRAIN_FILE = f"{DATA_DIR}/train.csv"
TEST_FILE = f"{DATA_DIR}/test.csv"
VALID_FILE = f"{DATA_DIR}/valid.csv"
ANSWERS_FILE = "answers.csv"
VALID_ANSWERS_FILE = "valid_answers.csv"
SUBMISSION_FILE = "submission.csv"
VALID_SUBMISSION_FILE = "valid_submission.csv"
VALID_FRACTION = 0.2  # of the training rows; only runs with --allow-validate get train.csv without them

# Validate Submission scores predictions for data/valid.csv with evaluate, as it scores submission.csv.
LITE_VALIDATION = ValidationSplit(inputs=VALID_FILE, predictions=VALID_SUBMISSION_FILE, submission=SUBMISSION_FILE,
                                  answers={VALID_ANSWERS_FILE: ANSWERS_FILE}, test_inputs=TEST_FILE,
                                  held_out={TRAIN_FILE: "id"})


def split_indices(y, test_fraction: float, seed: int, stratify: bool):
    """(train, test) row indices, the same on every machine: numpy's legacy RandomState stream never changes."""
    import numpy as np

    rng = np.random.RandomState(seed)
    groups = [np.flatnonzero(y == c) for c in np.unique(y)] if stratify else [np.arange(len(y))]
    test = []
    for group in groups:
        group = rng.permutation(group)
        test.extend(group[: int(round(len(group) * test_fraction))].tolist())
    test_set = set(test)
    train = [i for i in range(len(y)) if i not in test_set]
    return train, sorted(test)


class LiteTask(Task):
    """Subclasses give the data (load), the target column and how a submission is scored (evaluate)."""

    read_only_files = [f"{DATA_DIR}/*"]
    starter_script = "train.py"
    seed: int = 0
    test_fraction: float = 0.3
    stratify: bool = False
    target: str = "target"
    target_first: bool = False  # the target right after id (image convention) rather than last (tabular)
    starter_file: str = ""  # the starter's file name in mlab_tasks_lite/starters
    validation = LITE_VALIDATION

    def load(self):
        """(feature names, X, y) as numpy arrays."""
        raise NotImplementedError

    def prepare(self, ctx: PrepareContext) -> None:
        import numpy as np

        names, X, y = self.load()
        # Ids in a random order, so a row's id says nothing about its class or where it was generated.
        ids = np.random.RandomState(self.seed + 1).permutation(len(y))
        train, test = split_indices(y, self.test_fraction, self.seed, self.stratify)
        train.sort(key=lambda i: ids[i])
        test.sort(key=lambda i: ids[i])

        def features(i):
            return [number_text(v) for v in X[i]]

        (ctx.public_dir / DATA_DIR).mkdir()
        if self.target_first:
            header = ["id", self.target, *names]
            rows = ([ids[i], number_text(y[i]), *features(i)] for i in train)
        else:
            header = ["id", *names, self.target]
            rows = ([ids[i], *features(i), number_text(y[i])] for i in train)
        write_csv(ctx.public_dir / TRAIN_FILE, header, rows)
        write_csv(ctx.public_dir / TEST_FILE, ["id", *names], ([ids[i], *features(i)] for i in test))
        write_csv(ctx.hidden_dir / ANSWERS_FILE, ["id", self.target], ([ids[i], number_text(y[i])] for i in test))
        valid = self.validation_rows(y, train)
        write_csv(ctx.public_dir / VALID_FILE, ["id", *names], ([ids[i], *features(i)] for i in valid))
        write_csv(ctx.hidden_dir / VALID_ANSWERS_FILE, ["id", self.target],
                  ([ids[i], number_text(y[i])] for i in valid))
        with resources.as_file(resources.files("mlab_tasks_lite.starters") / self.starter_file) as starter:
            shutil.copyfile(starter, ctx.public_dir / self.starter_script)
        ctx.log(f"{self.name}: wrote {len(train)} training rows ({len(valid)} of them also the validation split), "
                f"{len(test)} test rows and the starter {self.starter_script}")

    def validation_rows(self, y, train: list[int]) -> list[int]:
        """Row indices of the validation split: a seeded share of the training rows (stratified as the test
        split is), in the training file's order."""
        import numpy as np

        _kept, drawn = split_indices(np.asarray(y)[train], VALID_FRACTION, self.seed + 2, self.stratify)
        chosen = {train[k] for k in drawn}
        return [i for i in train if i in chosen]

    def reference_solution(self, workspace: Path) -> str:
        """A better train.py over the starter, for `mlab check-task`."""
        from .reference import write_script

        write_script(self.name, Path(workspace) / self.starter_script)
        return self.starter_script

    def answers(self, hidden_dir: Path) -> dict[int, float]:
        return read_answers(Path(hidden_dir) / ANSWERS_FILE, self.target)
