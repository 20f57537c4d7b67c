"""Fit a classifier to the wine data and write the predicted cultivar of each test wine."""
import pandas as pd
from sklearn.metrics import accuracy_score
from sklearn.model_selection import train_test_split
from sklearn.neighbors import KNeighborsClassifier

train = pd.read_csv("data/train.csv")
test = pd.read_csv("data/test.csv")

FEATURES = [column for column in train.columns if column not in ("id", "label")]
X, y = train[FEATURES], train["label"]

# Hold out a fifth of the training rows to see how well the model generalises.
X_train, X_valid, y_train, y_valid = train_test_split(X, y, test_size=0.2, random_state=0, stratify=y)

model = KNeighborsClassifier(n_neighbors=5)
model.fit(X_train, y_train)

print(f"Train accuracy: {accuracy_score(y_train, model.predict(X_train)):.4f}")
print(f"Validation accuracy: {accuracy_score(y_valid, model.predict(X_valid)):.4f}")

# One row per test wine: its id and the predicted cultivar (0, 1 or 2).
submission = pd.DataFrame({"id": test["id"], "label": model.predict(test[FEATURES])})
submission.to_csv("submission.csv", index=False)
print(f"Wrote submission.csv with {len(submission)} rows")
