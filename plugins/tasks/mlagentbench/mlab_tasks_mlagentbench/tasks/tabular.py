"""house-price and spaceship-titanic: Kaggle tabular competitions, split exactly as the original split them.

The original read the competition's train.csv, wrote its first 80% of rows (int(n * 0.8), no shuffling) as the
new train.csv, the remaining rows without the target as test.csv, and the id and target of those rows as the
answers. We split the CSV records as text, so every value reaches the agent exactly as Kaggle wrote it.
"""
from __future__ import annotations

import csv
import shutil
from pathlib import Path

from mlab.core import Metric, MlabError, PrepareContext, Resources

from .. import acquire
from ..base import FILES_DIR, ORIGINAL_FIXED_BASELINE, PACK, MLAgentBenchTask
from ..submission import align, booleans, numbers, read_csv, require_columns
from . import validation as splits

TRAIN_FRACTION = 0.8
VALID_FILE = "valid.csv"


def split_records(source: Path, public: Path, hidden: Path, id_column: str, target: str) -> tuple[int, int]:
    """Write train.csv, test.csv (public) and answer.csv (hidden), and the validation split: valid.csv (public)
    and valid_answer.csv (hidden) from rows of train.csv; returns (train rows, test rows)."""
    with open(source, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    if not rows:
        raise MlabError(f"{source} is empty")
    header, records = rows[0], [r for r in rows[1:] if r]
    for column in (id_column, target):
        if column not in header:
            raise MlabError(f"{source} has no {column} column")
    if any(len(r) != len(header) for r in records):
        raise MlabError(f"{source} has rows whose field count differs from the header's")
    cut = int(len(records) * TRAIN_FRACTION)
    target_at, id_at = header.index(target), header.index(id_column)

    def write(path: Path, table) -> None:
        with open(path, "w", newline="", encoding="utf-8") as f:
            csv.writer(f, lineterminator="\n").writerows(table)

    def without_target(row: list[str]) -> list[str]:
        return row[:target_at] + row[target_at + 1:]

    write(public / "train.csv", [header] + records[:cut])
    write(public / "test.csv", [without_target(header)] + [without_target(r) for r in records[cut:]])
    write(hidden / "answer.csv", [[id_column, target]] + [[r[id_at], r[target_at]] for r in records[cut:]])
    valid = [records[i] for i in splits.pick(cut)]
    write(public / VALID_FILE, [without_target(header)] + [without_target(r) for r in valid])
    write(hidden / splits.VALID_ANSWER, [[id_column, target]] + [[r[id_at], r[target_at]] for r in valid])
    return cut, len(records) - cut


class KaggleTabularTask(MLAgentBenchTask):
    competition: str = ""
    aliases: list[str] = []  # folder names a local copy may use, e.g. the shared data's "house-prices"
    id_column: str = ""
    target: str = ""
    description_file: str = ""  # the competition's data description, shipped alongside the data
    starter_script = "train.py"
    reference_script = "train.py"

    def prepare_data(self, ctx: PrepareContext) -> None:
        with acquire.Scratch(ctx.public_dir.parent) as scratch:
            folder = acquire.obtain_competition(ctx.source_dir, self.competition, ["train.csv"], self.aliases,
                                                scratch, ctx.log, accept=acquire.has_columns(
                                                    "train.csv", [self.id_column, self.target]))
            n_train, n_test = split_records(folder / "train.csv", ctx.public_dir, ctx.hidden_dir,
                                            self.id_column, self.target)
            description = folder / self.description_file
            if description.is_file():
                shutil.copyfile(description, ctx.public_dir / self.description_file)
            else:  # spaceship-titanic's Kaggle files have no task_descriptor.txt: ship our own
                ours = FILES_DIR / f"{self.short}-extra" / self.description_file
                if not ours.is_file():
                    raise MlabError(f"{folder} has no {self.description_file}")
                shutil.copyfile(ours, ctx.public_dir / self.description_file)
        self.write_sample_submission(ctx)
        ctx.log(f"{self.name}: {n_train} training rows, {n_test} test rows")

    def write_sample_submission(self, ctx: PrepareContext) -> None:
        """A file in the format evaluate expects, with every test id and a placeholder prediction."""

    def answers(self, hidden_dir: Path):
        import pandas as pd

        return pd.read_csv(Path(hidden_dir) / "answer.csv", dtype=str)

    def submitted(self, workspace: Path, hidden_dir: Path):
        answer = self.answers(hidden_dir)
        # Capped before parsing: one row per test id (and a little slack), so a huge file is refused unread.
        frame = read_csv(workspace, dtype={self.id_column: str}, max_rows=len(answer),
                         max_bytes=self.max_submission_bytes)
        require_columns(frame, [self.id_column, self.target])
        return align(frame, self.id_column, answer[self.id_column].tolist()), answer


class HousePrice(KaggleTabularTask):
    short = "house-price"
    name = f"{PACK}/house-price"
    description = "Predict Ames house sale prices (Kaggle home-data-for-ml-course); MAE, lower is better"
    competition = "home-data-for-ml-course"
    competition_files = ["train.csv", "data_description.txt"]
    local_check = "train.csv has the Id and SalePrice columns (1,460 rows in the original)"
    aliases = ["house-prices", "house-price", "home-data-for-ml-course"]
    id_column, target = "Id", "SalePrice"
    validation = splits.split(VALID_FILE, "test.csv", held_out={"train.csv": "Id"})
    description_file = "data_description.txt"
    files = "house-price"
    reference = "house-price"
    metric = Metric(name="mae", higher_is_better=False)
    # The starter's model section is empty, so it submits nothing: the original fixes an MAE no model exceeds.
    fixed_baseline = 1e10
    fixed_baseline_source = ORIGINAL_FIXED_BASELINE
    read_only_files = ["train.csv", "test.csv", VALID_FILE, "data_description.txt", "sample_submission.csv"]
    resources = Resources(gpu="none", ram_gb=1.0, network_for_prepare=True, baseline_seconds=5.0,
                          extras=["kaggle (only to download; not needed with --data-dir)"])
    research_problem = (
        "Start by reading data_description.txt to learn what the data and each of its features mean; keep notes "
        "of what you learn and plan in your research log.\n"
        "Then complete the provided train.py: train a model that predicts SalePrice, and try different models and "
        "feature selections to improve it. The script must write its predictions for test.csv to submission.csv "
        "(columns Id,SalePrice); the score is the mean absolute error on the held-out sale prices.\n"
        "Do not read the CSV files directly (they are too large to read whole); work through scripts. Execute "
        "your changes to check how well they perform.")

    def write_sample_submission(self, ctx: PrepareContext) -> None:
        import pandas as pd

        train = pd.read_csv(ctx.public_dir / "train.csv", usecols=["SalePrice"])
        test = pd.read_csv(ctx.public_dir / "test.csv", usecols=["Id"])
        test.assign(SalePrice=round(float(train.SalePrice.mean()), 2)).to_csv(
            ctx.public_dir / "sample_submission.csv", index=False)

    def evaluate(self, workspace: Path, hidden_dir: Path) -> float:
        import numpy as np

        frame, answer = self.submitted(workspace, hidden_dir)
        predicted = numbers(frame, "SalePrice")
        truth = answer["SalePrice"].astype(float).to_numpy()
        return float(np.mean(np.abs(predicted - truth)))


class SpaceshipTitanic(KaggleTabularTask):
    short = "spaceship-titanic"
    name = f"{PACK}/spaceship-titanic"
    description = "Predict which passengers were Transported (Kaggle spaceship-titanic); accuracy"
    competition = "spaceship-titanic"
    competition_files = ["train.csv"]
    local_check = "train.csv has the PassengerId and Transported columns (8,693 rows in the original)"
    aliases = ["spaceship-titanic", "spaceship_titanic"]
    id_column, target = "PassengerId", "Transported"
    validation = splits.split(VALID_FILE, "test.csv", held_out={"train.csv": "PassengerId"})
    description_file = "task_descriptor.txt"
    files = "spaceship-titanic"
    reference = "spaceship-titanic"
    metric = Metric(name="accuracy", higher_is_better=True)
    # The starter submits nothing, as in house-price; the original judges against chance accuracy.
    fixed_baseline = 0.5
    fixed_baseline_source = ORIGINAL_FIXED_BASELINE
    read_only_files = ["train.csv", "test.csv", VALID_FILE, "task_descriptor.txt", "sample_submission.csv"]
    resources = Resources(gpu="none", ram_gb=1.0, network_for_prepare=True, baseline_seconds=5.0,
                          extras=["kaggle (only to download; not needed with --data-dir)"])
    research_problem = (
        "Start by reading task_descriptor.txt to learn the task and the data; keep notes of what you learn and "
        "plan in your research log.\n"
        "Then complete the provided train.py: train a model that predicts whether a passenger was Transported, "
        "and try different models and feature selections to improve it. The script must write its predictions "
        "for test.csv to submission.csv (columns PassengerId,Transported with True/False); the score is the "
        "accuracy on the held-out passengers.\n"
        "Do not read the CSV files directly (they are too large to read whole); work through scripts. Execute "
        "your changes to check how well they perform.")

    def write_sample_submission(self, ctx: PrepareContext) -> None:
        import pandas as pd

        test = pd.read_csv(ctx.public_dir / "test.csv", usecols=["PassengerId"], dtype=str)
        test.assign(Transported=False).to_csv(ctx.public_dir / "sample_submission.csv", index=False)

    def evaluate(self, workspace: Path, hidden_dir: Path) -> float:
        frame, answer = self.submitted(workspace, hidden_dir)
        predicted = booleans(frame, "Transported")
        truth = booleans(answer, "Transported", name="answer.csv")
        return float((predicted == truth).mean())
