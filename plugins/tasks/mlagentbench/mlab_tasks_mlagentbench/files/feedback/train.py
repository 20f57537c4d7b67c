"""Score essays of English language learners on six analytic measures (the ELLIPSE corpus)."""
import random

import numpy as np
import pandas as pd
from sklearn.model_selection import train_test_split

DIMENSIONS = ["cohesion", "syntax", "vocabulary", "phraseology", "grammar", "conventions"]
SEED = 42

random.seed(SEED)
np.random.seed(SEED)


def compute_metrics_for_regression(y_test, y_test_pred):
    """The root mean squared error of each measure."""
    y_test, y_test_pred = np.asarray(y_test, dtype=float), np.asarray(y_test_pred, dtype=float)
    return {f"rmse_{task}": float(np.sqrt(np.mean((y_test[:, i] - y_test_pred[:, i]) ** 2)))
            for i, task in enumerate(DIMENSIONS)}


def train_model(X_train, y_train, X_valid, y_valid):
    # TODO: define and train a model; return it.
    model = None
    return model


def predict(model, X):
    # TODO: predict with the model; must return an array [len(X), 6].
    y_pred = np.random.rand(len(X), len(DIMENSIONS))
    return y_pred


if __name__ == "__main__":
    ellipse_df = pd.read_csv("train.csv", index_col="text_id")
    ellipse_df = ellipse_df.dropna(axis=0)

    X = list(ellipse_df.full_text.to_numpy())
    y = ellipse_df[DIMENSIONS].to_numpy()

    # Hold out 10% of the essays to validate on.
    X_train, X_valid, y_train, y_valid = train_test_split(X, y, test_size=0.10, random_state=SEED)

    model = train_model(X_train, y_train, X_valid, y_valid)

    y_valid_pred = predict(model, X_valid)
    metrics = compute_metrics_for_regression(y_valid, y_valid_pred)
    print(metrics)
    print("final MCRMSE on validation set: ", np.mean(list(metrics.values())))

    # Predictions for the test essays, one row per text_id.
    test_df = pd.read_csv("test.csv", index_col="text_id")
    y_submission = predict(model, list(test_df.full_text.to_numpy()))
    submission_df = pd.DataFrame(y_submission, columns=DIMENSIONS, index=test_df.index)
    submission_df.to_csv("submission.csv")
