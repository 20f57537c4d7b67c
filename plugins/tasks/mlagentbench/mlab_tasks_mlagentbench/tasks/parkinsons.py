"""parkinsons (Kaggle amp-parkinsons-disease-progression-prediction): forecast UPDRS scores; SMAPE+1.

Split as the original: random.seed(42), then random.sample of 2 of the clinical data's patients (in order of
first appearance) become the test patients, served by a local time-series API. Answers are the ratings at
visit_month + 0/6/12/24 months (visit_month + wait <= 108) that exist. supplemental_clinical_data.csv reaches the
agent as in the original: its header and no rows.
"""
from __future__ import annotations

import random
from pathlib import Path

from mlab.core import InvalidSubmission, Metric, PrepareContext, Resources, ValidationSplit

from .. import acquire
from ..base import PACK, MLAgentBenchTask
from ..submission import align, numbers, read_csv, require_columns
from . import validation as splits

COMPETITION = "amp-parkinsons-disease-progression-prediction"
SUPPLEMENTAL = "supplemental_clinical_data.csv"
FILES = ["train_clinical_data.csv", "train_peptides.csv", "train_proteins.csv", SUPPLEMENTAL]
HORIZONS = [0, 6, 12, 24]
LAST_MONTH = 108
VALID_VISITS = "valid_visits.csv"  # the validation patients' visits, as example_test_files/test.csv lists the test's
VALID_SAMPLE = "valid_sample_submission.csv"  # the prediction ids Validate Submission expects, rated 0


def forecast_split(clinical, patients):
    """(visits, answers) of a set of patients: their visits as the time-series API serves them (one row per
    visit and UPDRS part), and the ratings to forecast at each visit + 0/6/12/24 months that exist."""
    import pandas as pd

    chosen = clinical[clinical["patient_id"].isin(patients)]
    mock = pd.concat([chosen.assign(level=i, updrs_test=f"updrs_{i}") for i in range(1, 5)])
    mock["row_id"] = [f"{p}_{int(m)}_updrs_{i}" for p, m, i in mock[["patient_id", "visit_month", "level"]]
                      .itertuples(index=False)]
    rating = {(p, int(m), i): row[f"updrs_{i}"] for _, row in chosen.iterrows()
              for p, m, i in [(row["patient_id"], row["visit_month"], i) for i in range(1, 5)]}
    rows = []
    for wait in HORIZONS:
        for p, m, i in mock[["patient_id", "visit_month", "level"]].itertuples(index=False):
            if m + wait <= LAST_MONTH:
                rows.append((f"{p}_{int(m)}_updrs_{i}_plus_{wait}_months", rating.get((p, int(m) + wait, i)),
                             int(m)))
    answer = pd.DataFrame(rows, columns=["prediction_id", "rating", "visit_month"]).dropna(subset=["rating"])
    return mock[["visit_id", "patient_id", "visit_month", "row_id", "updrs_test"]], answer


def smape_plus_one(truth, predicted) -> float:
    import numpy as np

    denominator = (truth + predicted) / 2 + 1
    return float(np.mean(np.abs(predicted - truth) / denominator) * 100)


class Parkinsons(MLAgentBenchTask):
    short = "parkinsons"
    competition = COMPETITION
    competition_files = FILES
    local_check = "the four CSV files are present"
    name = f"{PACK}/parkinsons"
    description = "Forecast Parkinson's UPDRS scores (Kaggle AMP-PD); SMAPE+1, lower is better"
    files = "parkinsons"
    reference = "parkinsons"
    metric = Metric(name="smape", higher_is_better=False)
    read_only_files = FILES + ["example_test_files/*", "public_timeseries_testing_util.py",
                               "data_description.txt", "evaluation_details.txt", VALID_VISITS, VALID_SAMPLE]
    # The validation patients' visits, proteins and peptides leave the training files (supplemental has no rows).
    validation = ValidationSplit(inputs=VALID_VISITS, predictions=splits.VALID_PREDICTIONS, submission="submission.csv",
                                 answers={splits.VALID_ANSWER: "answer.csv"},
                                 held_out={name: "patient_id" for name in FILES if name != SUPPLEMENTAL},
                                 more_inputs=[VALID_SAMPLE])
    resources = Resources(gpu="none", ram_gb=2.0, network_for_prepare=True, baseline_seconds=120.0,
                          extras=["kaggle (only to download; not needed with --data-dir)"])
    research_problem = (
        "Read data_description.txt to understand the data and the machine learning task, and keep notes in "
        "your research log. Then fill in the provided train.py script to train a model, and iterate over "
        "different models or feature selections to get a better performance (for the SMAPE score, lower is "
        "better). Finally, submit the predictions of your best model for the test set as submission.csv, as "
        "described in evaluation_details.txt (through the time-series API, as train.py does).\n"
        "Do not read the CSV files directly; work through scripts. Execute your changes to check how well they "
        "perform.")

    def prepare_data(self, ctx: PrepareContext) -> None:
        import pandas as pd

        with acquire.Scratch(ctx.public_dir.parent) as scratch:
            folder = acquire.obtain_competition(ctx.source_dir, COMPETITION, FILES, ["parkinsons", COMPETITION],
                                                scratch, ctx.log)
            data = {name: pd.read_csv(folder / name) for name in FILES}
        clinical = data["train_clinical_data.csv"]
        rng = random.Random(42)  # the original's choice, to hold out the same two patients
        test_patients = rng.sample(clinical["patient_id"].unique().tolist(), 2)
        for name, frame in data.items():
            if name == SUPPLEMENTAL:  # as the original left it: the header and no rows
                frame = frame.iloc[:0]
            frame[~frame["patient_id"].isin(test_patients)].to_csv(ctx.public_dir / name, index=False)
        tests = ctx.public_dir / "example_test_files"
        tests.mkdir()
        for name in ("peptides", "proteins"):
            frame = data[f"train_{name}.csv"]
            frame[frame["patient_id"].isin(test_patients)].to_csv(tests / f"test_{name}.csv", index=False)
        mock, answer = forecast_split(clinical, test_patients)
        mock.to_csv(tests / "test.csv", index=False)
        answer.to_csv(ctx.hidden_dir / "answer.csv", index=False)
        answer.assign(rating=0).to_csv(tests / "sample_submission.csv", index=False)
        # Validation: patients of the training data, asked as the test patients are.
        training = [p for p in clinical["patient_id"].unique().tolist() if p not in test_patients]
        valid_patients = [training[i] for i in splits.pick(len(training))]
        valid_mock, valid_answer = forecast_split(clinical, valid_patients)
        valid_mock.to_csv(ctx.public_dir / VALID_VISITS, index=False)
        valid_answer.to_csv(ctx.hidden_dir / splits.VALID_ANSWER, index=False)
        valid_answer.assign(rating=0).to_csv(ctx.public_dir / VALID_SAMPLE, index=False)
        ctx.log(f"{self.name}: test patients {test_patients}, {len(answer)} ratings to forecast")

    def evaluate(self, workspace: Path, hidden_dir: Path) -> float:
        import pandas as pd

        answer = pd.read_csv(Path(hidden_dir) / "answer.csv", dtype={"prediction_id": str})
        frame = read_csv(workspace, dtype={"prediction_id": str}, max_rows=len(answer),
                         max_bytes=self.max_submission_bytes)
        require_columns(frame, ["prediction_id", "rating"])
        frame = align(frame, "prediction_id", answer.prediction_id.tolist())
        predicted = numbers(frame, "rating")
        if (predicted < 0).any():
            raise InvalidSubmission("submission.csv: ratings cannot be negative")
        return smape_plus_one(answer.rating.to_numpy(dtype=float), predicted)
