"""Forecast UPDRS scores of Parkinson's patients; predictions go through the time-series API."""
import numpy as np
import pandas as pd
from sklearn.ensemble import RandomForestRegressor
from sklearn.metrics import make_scorer
from sklearn.model_selection import GroupKFold, cross_val_score
from sklearn.utils import check_consistent_length

from public_timeseries_testing_util import MockApi

TARGETS = ["updrs_1", "updrs_2", "updrs_3", "updrs_4"]
HORIZONS = [0, 6, 12, 24]


def smapep1(y_true, y_pred):
    """SMAPE of y + 1: a nonnegative float, 100 for 100% error, smaller is better. y_true may have gaps."""
    check_consistent_length(y_true, y_pred)
    y_true = np.asarray(y_true, dtype=float).ravel()
    y_pred = np.asarray(y_pred, dtype=float).ravel()
    keep = np.isfinite(y_true)
    y_true, y_pred = y_true[keep], y_pred[keep]
    if (y_true < 0).any():
        raise ValueError("y_true < 0")
    if (y_pred < 0).any():
        raise ValueError("y_pred < 0")
    denominator = (y_true + y_pred) / 2 + 1
    return np.average(np.abs(y_pred - y_true) / denominator) * 100


# For cross_val_score, which maximises: the negated SMAPE.
smapep1_scorer = make_scorer(smapep1, greater_is_better=False)


def get_predictions(visits, model):
    """Ratings for every visit, updrs part and horizon, as rows (prediction_id, rating)."""
    visits = visits.fillna(0)
    rows = []
    for target in TARGETS:
        predicted = model[target].predict(visits["visit_month"].to_numpy().reshape(-1, 1))
        for (visit_id, _month), values in zip(visits[["visit_id", "visit_month"]].itertuples(index=False),
                                              predicted):
            for horizon, value in zip(HORIZONS, values):
                rows.append((f"{visit_id}_{target}_plus_{horizon}_months", value))
    return pd.DataFrame(rows, columns=["prediction_id", "rating"]).drop_duplicates()


if __name__ == "__main__":
    data_proteins = pd.read_csv("train_proteins.csv")
    data_clinical = pd.read_csv("train_clinical_data.csv")
    data_peptides = pd.read_csv("train_peptides.csv")
    data_supplemental = pd.read_csv("supplemental_clinical_data.csv")
    merged_data = pd.concat([data_clinical, data_supplemental])

    # TODO: data cleaning and feature engineering. For now only the visit month and the targets are used:
    # for every visit, the scores at the same visit and 6, 12 and 24 months later.
    data_for_train = {}
    for target in TARGETS:
        rows = []
        for patient, visits in merged_data.groupby("patient_id"):
            score_at = dict(zip(visits.visit_month, visits[target]))
            for month in visits.visit_month:
                future = [score_at.get(month + h) for h in HORIZONS]
                if all(v is not None for v in future):
                    rows.append([month, patient] + future)
        frame = pd.DataFrame(rows, columns=["month", "patient_id"] + [f"{target}+{h}" for h in HORIZONS])
        data_for_train[target] = frame.dropna()

    # Train one model per updrs part, and cross-validate it over patients.
    model = {}
    overall_score = []
    for target in TARGETS:
        X = data_for_train[target][["month"]].to_numpy()
        y = data_for_train[target].iloc[:, 2:6]
        model[target] = RandomForestRegressor().fit(X, y)
        scores = cross_val_score(RandomForestRegressor(), X=X, y=y, groups=data_for_train[target]["patient_id"],
                                 scoring=smapep1_scorer, cv=GroupKFold(n_splits=8), error_score="raise")
        print(f"Cross-validation scores {target}:", -scores.round(1), -scores.mean().round(1))
        overall_score.append(-scores)
    print(f"Overall cv score of the group model: {np.array(overall_score).mean():.2f}")

    # Predict the test set through the API; it writes submission.csv at the end.
    env = MockApi()
    for test_clinical_data, test_peptides, test_proteins, sample_submission in env.iter_test():
        # TODO: make your predictions here by modifying the 'rating' column of sample_submission
        pred = get_predictions(test_clinical_data, model).round(0)
        ratings = dict(zip(pred.prediction_id, pred.rating))
        sample_submission["rating"] = sample_submission["prediction_id"].map(ratings).fillna(0)
        env.predict(sample_submission)
