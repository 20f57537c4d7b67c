"""Fit a regression model to the diabetes data and write predictions for the test patients."""
import numpy as np
import pandas as pd
from sklearn.metrics import mean_absolute_error
from sklearn.model_selection import train_test_split
from sklearn.tree import DecisionTreeRegressor

train = pd.read_csv("data/train.csv")
test = pd.read_csv("data/test.csv")

FEATURES = ["age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6"]
X, y = train[FEATURES], train["target"]

# Hold out a fifth of the training rows to see how well the model generalises.
X_train, X_valid, y_train, y_valid = train_test_split(X, y, test_size=0.2, random_state=0)

model = DecisionTreeRegressor(random_state=0)
model.fit(X_train, y_train)

print(f"Train MAE: {mean_absolute_error(y_train, model.predict(X_train)):.2f}")
print(f"Validation MAE: {mean_absolute_error(y_valid, model.predict(X_valid)):.2f}")

# One row per test patient: its id and the predicted target.
submission = pd.DataFrame({"id": test["id"], "target": model.predict(test[FEATURES])})
submission.to_csv("submission.csv", index=False)
print(f"Wrote submission.csv with {len(submission)} rows")
