# Reference solution (ours, for `mlab check-task`): gradient boosting on numeric and encoded features.
import numpy as np
import pandas as pd
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.metrics import mean_absolute_error
from sklearn.model_selection import train_test_split

home_data = pd.read_csv("train.csv")
test_data = pd.read_csv("test.csv")
y = home_data.SalePrice

numeric = [c for c in home_data.columns if c not in ("Id", "SalePrice") and home_data[c].dtype.kind in "if"]
categorical = [c for c in home_data.columns if c not in ("Id", "SalePrice") and c not in numeric]


def features(frame):
    X = frame[numeric].astype(float).copy()
    X["TotalSF"] = frame[["TotalBsmtSF", "1stFlrSF", "2ndFlrSF"]].fillna(0).sum(axis=1) if "TotalBsmtSF" in frame else 0
    for column in categorical:  # integer codes with a fixed vocabulary from the training data
        vocabulary = {v: i for i, v in enumerate(sorted(home_data[column].dropna().astype(str).unique()))}
        X[column] = frame[column].astype(str).map(vocabulary).astype(float)
    return X


X, test_X = features(home_data), features(test_data)
train_X, valid_X, train_y, valid_y = train_test_split(X, y, random_state=1)


def fit(X_, y_):
    model = HistGradientBoostingRegressor(max_iter=300, learning_rate=0.05,
                                          min_samples_leaf=10, random_state=0)
    return model.fit(X_, np.log(y_))


model = fit(train_X, train_y)
train_mae = mean_absolute_error(train_y, np.exp(model.predict(train_X)))
valid_mae = mean_absolute_error(valid_y, np.exp(model.predict(valid_X)))
print(f"Train MAE: {train_mae:,.0f}")
print(f"Validation MAE: {valid_mae:,.0f}")

model = fit(X, y)
pd.DataFrame({"Id": test_data.Id, "SalePrice": np.exp(model.predict(test_X))}).to_csv("submission.csv", index=False)
