"""Reference for lite/wine: standardised features and a logistic regression."""
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

train = pd.read_csv("data/train.csv")
test = pd.read_csv("data/test.csv")
FEATURES = [column for column in train.columns if column not in ("id", "label")]

model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
model.fit(train[FEATURES], train["label"])
submission = pd.DataFrame({"id": test["id"], "label": model.predict(test[FEATURES])})
submission.to_csv("submission.csv", index=False)
print(f"Wrote submission.csv with {len(submission)} rows")
