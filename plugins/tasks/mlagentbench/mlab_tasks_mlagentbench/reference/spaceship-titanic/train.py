# Reference solution (ours, for `mlab check-task`): gradient boosting on spending, cabin and group features.
import pandas as pd
from sklearn.ensemble import HistGradientBoostingClassifier

SPEND = ["RoomService", "FoodCourt", "ShoppingMall", "Spa", "VRDeck"]
CATEGORIES = ["HomePlanet", "CryoSleep", "Destination", "VIP", "Deck", "Side"]


def features(frame, vocabulary=None):
    frame = frame.copy()
    frame[["Deck", "Cabin_num", "Side"]] = frame["Cabin"].str.split("/", expand=True)
    X = pd.DataFrame(index=frame.index)
    X["Age"] = pd.to_numeric(frame["Age"], errors="coerce")
    X["Cabin_num"] = pd.to_numeric(frame["Cabin_num"], errors="coerce")
    group = frame["PassengerId"].str.split("_").str[0]
    X["GroupSize"] = group.map(group.value_counts())
    for column in SPEND:
        X[column] = pd.to_numeric(frame[column], errors="coerce")
    X["Spent"] = X[SPEND].fillna(0).sum(axis=1)
    vocabulary = vocabulary or {c: sorted(frame[c].dropna().astype(str).unique()) for c in CATEGORIES}
    for column in CATEGORIES:
        codes = {v: i for i, v in enumerate(vocabulary[column])}
        X[column] = frame[column].astype(str).map(codes).astype(float)
    return X, vocabulary


df = pd.read_csv("train.csv")
df = df.sample(frac=1, random_state=1)
cut = int(0.8 * len(df))
X, vocabulary = features(df)
y = df["Transported"].astype(str).str.lower().eq("true")
model = HistGradientBoostingClassifier(max_iter=300, learning_rate=0.05, random_state=0)
model.fit(X[:cut], y[:cut])
print(f"Train Accuracy: {model.score(X[:cut], y[:cut])}")
print(f"Validation Accuracy: {model.score(X[cut:], y[cut:])}")

model.fit(X, y)
test_data = pd.read_csv("test.csv")
test_X, _ = features(test_data, vocabulary)
pd.DataFrame({"PassengerId": test_data.PassengerId, "Transported": model.predict(test_X)}).to_csv(
    "submission.csv", index=False)
