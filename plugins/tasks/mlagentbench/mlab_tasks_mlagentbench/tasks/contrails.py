"""identify-contrails (Kaggle google-research-identify-contrails-reduce-global-warming): segment contrails.

As the original: the competition's validation records become the test set (their masks held out); the score
is the mean per-record Dice of the run-length encoded masks.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from mlab.core import InvalidSubmission, Metric, MlabError, PrepareContext, Resources

from .. import acquire
from ..base import PACK, MLAgentBenchTask
from ..submission import align, read_csv, require_columns

COMPETITION = "google-research-identify-contrails-reduce-global-warming"
SHAPE = (256, 256)
MASK = "human_pixel_masks.npy"


def link_or_copy(source: Path, target: Path) -> None:
    """Hard-link big files when source and target share a file system (the data is hundreds of GB)."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def decode(text, row: int):
    """A run-length string as a flat 0/1 mask, or InvalidSubmission saying what is wrong with it."""
    import numpy as np

    mask = np.zeros(SHAPE[0] * SHAPE[1], dtype=np.uint8)
    text = str(text).strip()
    if text in ("-", "", "nan"):
        return mask.reshape(SHAPE, order="F")
    try:
        values = [int(v) for v in text.split()]
    except ValueError:
        raise InvalidSubmission(f"submission.csv row {row}: encoded_pixels is not whole numbers") from None
    if len(values) % 2:
        raise InvalidSubmission(f"submission.csv row {row}: encoded_pixels needs start/length pairs")
    end = 0
    for start, length in zip(values[0::2], values[1::2], strict=True):
        if start < 1 or length < 1 or start - 1 < end or start - 1 + length > mask.size:
            raise InvalidSubmission(f"submission.csv row {row}: runs must be positive, sorted, non-overlapping "
                                    f"and inside the {SHAPE[0]}x{SHAPE[1]} image")
        mask[start - 1:start - 1 + length] = 1
        end = start - 1 + length
    return mask.reshape(SHAPE, order="F")


class IdentifyContrails(MLAgentBenchTask):
    short = "identify-contrails"
    competition = COMPETITION
    competition_files = ["train", "validation"]
    local_check = "train/ and validation/ hold one folder of band_*.npy arrays per record"
    name = f"{PACK}/identify-contrails"
    description = "Segment aviation contrails in GOES-16 infrared images; mean Dice, higher is better"
    files = "identify-contrails"
    reference = "identify-contrails"
    reference_script = "reference_train.py"
    needs = {"torch": "torch"}
    cpu_variant: str | None = f"{PACK}/identify-contrails-cpu"
    max_train_records: int | None = None
    max_test_records: int | None = None
    metric = Metric(name="dice", higher_is_better=True)
    read_only_files = ["train/*", "test/*", "train_metadata.json", "validation_metadata.json", "encode.py",
                       "data_description.txt", "evaluation_details.txt", "sample_submission.csv"]
    resources = Resources(gpu="required", ram_gb=16.0, network_for_prepare=True, baseline_seconds=3600.0,
                          extras=["torch", "kaggle (only to download)"])
    research_problem = (
        "Read data_description.txt to understand the data and the machine learning task, and keep notes in "
        "your research log. Then fill in the provided train.py script to train a model, and iterate over "
        "different models or feature selections to get a better performance. Finally, submit the predictions "
        "of your best model for the test set as submission.csv, as described in evaluation_details.txt.\n"
        "Do not read the CSV files directly; work through scripts. Execute your changes to check how well they "
        "perform.")

    def prepare_data(self, ctx: PrepareContext) -> None:
        import numpy as np
        import pandas as pd

        with acquire.Scratch(ctx.public_dir.parent) as scratch:
            folder = acquire.obtain_competition(ctx.source_dir, COMPETITION, ["train", "validation"],
                                                ["identify-contrails", "contrails", COMPETITION], scratch, ctx.log)
            train_ids = sorted(p.name for p in (folder / "train").iterdir() if p.is_dir())
            test_ids = sorted(p.name for p in (folder / "validation").iterdir() if p.is_dir())
            train_ids = train_ids[: self.max_train_records] if self.max_train_records else train_ids
            test_ids = test_ids[: self.max_test_records] if self.max_test_records else test_ids
            if not train_ids or not test_ids:
                raise MlabError(f"{folder}: no records in train/ or validation/")
            for record in train_ids:
                (ctx.public_dir / "train" / record).mkdir(parents=True)
                for path in (folder / "train" / record).iterdir():
                    link_or_copy(path, ctx.public_dir / "train" / record / path.name)
            masks = {}
            for record in test_ids:
                (ctx.public_dir / "test" / record).mkdir(parents=True)
                for path in (folder / "validation" / record).iterdir():
                    if path.name == MASK:
                        masks[record] = np.load(path).reshape(SHAPE).astype(np.uint8)
                    elif path.name != "human_individual_masks.npy":
                        link_or_copy(path, ctx.public_dir / "test" / record / path.name)
                if record not in masks:
                    raise MlabError(f"validation record {record} has no {MASK}")
            for name in ("train_metadata.json", "validation_metadata.json"):
                if (folder / name).is_file():
                    shutil.copyfile(folder / name, ctx.public_dir / name)
        np.savez_compressed(ctx.hidden_dir / "masks.npz", **masks)
        pd.DataFrame({"record_id": test_ids, "encoded_pixels": "-"}).to_csv(ctx.public_dir / "sample_submission.csv",
                                                                           index=False)
        ctx.log(f"{self.name}: {len(train_ids)} training records, {len(test_ids)} test records")

    def evaluate(self, workspace: Path, hidden_dir: Path) -> float:
        import numpy as np

        with np.load(Path(hidden_dir) / "masks.npz") as stored:
            truth = {record: stored[record] for record in stored.files}
        records = sorted(truth)
        frame = read_csv(workspace, dtype={"record_id": str, "encoded_pixels": str}, keep_default_na=False,
                         max_bytes=self.max_submission_bytes)
        require_columns(frame, ["record_id", "encoded_pixels"])
        frame = align(frame, "record_id", records)
        scores = []
        for row, (record, text) in enumerate(zip(records, frame["encoded_pixels"], strict=True), start=1):
            predicted = decode(text, row).astype(np.float64)
            target = truth[record].astype(np.float64)
            intersection = float((predicted * target).sum())
            union = float(predicted.sum() + target.sum())
            scores.append((2 * intersection + 1e-6) / (union + 1e-6))
        return float(np.mean(scores))


class IdentifyContrailsCpu(IdentifyContrails):
    name = f"{PACK}/identify-contrails-cpu"
    description = "identify-contrails scaled for a CPU: 2,000 training and 200 test records; mean Dice"
    cpu_variant = None
    max_train_records = 2000
    max_test_records = 200
    resources = Resources(gpu="optional", ram_gb=8.0, network_for_prepare=True, baseline_seconds=900.0,
                          extras=["torch", "kaggle (only to download)"])
    research_problem = IdentifyContrails.research_problem + (
        "\nThis machine has no GPU: the data is a subset (the first 2,000 training and 200 test records); keep "
        "each training run under an hour.")
