"""feedback (ELLIPSE, Kaggle feedback-prize-english-language-learning): score essays on six measures; MCRMSE.

Split as the original: shuffle the competition's train.csv with pandas (random_state=42), first 98% train, the
rest the test set; the original's wrong download folder is not reproduced.
"""
from __future__ import annotations

from pathlib import Path

from mlab.core import Metric, PrepareContext, Resources

from .. import acquire
from ..base import PACK, MLAgentBenchTask
from ..submission import align, numbers, read_csv, require_columns
from . import validation as splits

COMPETITION = "feedback-prize-english-language-learning"
DIMENSIONS = ["cohesion", "syntax", "vocabulary", "phraseology", "grammar", "conventions"]
COLUMNS = ["text_id", "full_text", *DIMENSIONS]
VALID_FILE = "valid.csv"


class Feedback(MLAgentBenchTask):
    short = "feedback"
    name = f"{PACK}/feedback"
    description = "Score learners' essays on six measures (Kaggle ELLIPSE); MCRMSE, lower is better"
    files = "feedback"
    reference = "feedback"
    competition = COMPETITION
    competition_files = ["train.csv"]
    local_check = "train.csv has text_id, full_text and the six score columns (3,911 essays in the original)"
    metric = Metric(name="mcrmse", higher_is_better=False)
    read_only_files = ["train.csv", "test.csv", VALID_FILE, "data_description.txt", "evaluation_details.txt",
                       "sample_submission.csv"]
    validation = splits.split(VALID_FILE, "test.csv", held_out={"train.csv": "text_id"})
    resources = Resources(gpu="none", ram_gb=2.0, network_for_prepare=True, baseline_seconds=10.0,
                          extras=["kaggle (only to download; not needed with --data-dir)",
                                  "text (optional: transformers for language models)"])
    research_problem = (
        "Read data_description.txt to understand the data and the machine learning task, and keep notes in "
        "your research log. Then fill in the provided train.py script to train a language model to get a good "
        "performance. Finally, submit the predictions of your best model for the test set as submission.csv, "
        "as described in evaluation_details.txt.\n"
        "Do not read the CSV files directly; work through scripts. Execute your changes to check how well they "
        "perform.")

    def prepare_data(self, ctx: PrepareContext) -> None:
        import pandas as pd

        with acquire.Scratch(ctx.public_dir.parent) as scratch:
            folder = acquire.obtain_competition(ctx.source_dir, COMPETITION, ["train.csv"],
                                                ["feedback", COMPETITION], scratch, ctx.log,
                                                accept=acquire.has_columns("train.csv", COLUMNS))
            acquire.require_columns(folder / "train.csv", COLUMNS)  # the Kaggle download, unchecked so far
            data = pd.read_csv(folder / "train.csv")
        data = data.sample(frac=1, random_state=42).reset_index(drop=True)
        cut = int(len(data) * 0.98)
        train, test = data.iloc[:cut], data.iloc[cut:]
        train.to_csv(ctx.public_dir / "train.csv", index=False)
        test[["text_id", "full_text"]].to_csv(ctx.public_dir / "test.csv", index=False)
        test[["text_id"] + DIMENSIONS].to_csv(ctx.hidden_dir / "answer.csv", index=False)
        valid = train.iloc[splits.pick(len(train))]  # essays of train.csv, which keeps them
        valid[["text_id", "full_text"]].to_csv(ctx.public_dir / VALID_FILE, index=False)
        valid[["text_id"] + DIMENSIONS].to_csv(ctx.hidden_dir / splits.VALID_ANSWER, index=False)
        test[["text_id"]].assign(**dict.fromkeys(DIMENSIONS, 3.0)).to_csv(ctx.public_dir / "sample_submission.csv",
                                                                          index=False)
        ctx.log(f"{self.name}: {len(train)} training essays ({len(valid)} of them also the validation split), "
                f"{len(test)} test essays")

    def evaluate(self, workspace: Path, hidden_dir: Path) -> float:
        import numpy as np
        import pandas as pd

        answer = pd.read_csv(Path(hidden_dir) / "answer.csv", dtype={"text_id": str})
        frame = read_csv(workspace, dtype={"text_id": str}, max_rows=len(answer),
                         max_bytes=self.max_submission_bytes)
        require_columns(frame, ["text_id"] + DIMENSIONS)
        frame = align(frame, "text_id", answer.text_id.tolist())
        errors = [np.sqrt(np.mean((numbers(frame, d) - answer[d].to_numpy(dtype=float)) ** 2)) for d in DIMENSIONS]
        return float(np.mean(errors))
