# Predict the sale price of houses in Ames, Iowa.
import pandas as pd
from sklearn.ensemble import RandomForestRegressor
from sklearn.metrics import mean_absolute_error
from sklearn.model_selection import train_test_split

home_data = pd.read_csv("train.csv")
y = home_data.SalePrice

# A first choice of numeric features; data_description.txt explains all of them.
features = ["MSSubClass", "LotArea", "OverallQual", "OverallCond", "YearBuilt", "YearRemodAdd", "1stFlrSF",
            "2ndFlrSF", "LowQualFinSF", "GrLivArea", "FullBath", "HalfBath", "BedroomAbvGr", "KitchenAbvGr",
            "TotRmsAbvGrd", "Fireplaces", "WoodDeckSF", "OpenPorchSF", "EnclosedPorch", "3SsnPorch",
            "ScreenPorch", "PoolArea", "MiscVal", "MoSold", "YrSold"]
X = home_data[features]

# Hold out part of the training data to estimate how well the model does on unseen houses.
train_X, valid_X, train_y, valid_y = train_test_split(X, y, random_state=1)

# ======================================================================================
# Your part: build and train a model on train_X / train_y.
# When done, `model` must be the trained model (with a .predict method), and
# train_mae / valid_mae the mean absolute errors on the training and validation parts.
# ======================================================================================


# ======================================================================================
# End of your part.
# ======================================================================================

print("Train MAE: {:,.0f}".format(train_mae))
print("Validation MAE: {:,.0f}".format(valid_mae))

test_data = pd.read_csv("test.csv")
test_preds = model.predict(test_data[features])

pd.DataFrame({"Id": test_data.Id, "SalePrice": test_preds}).to_csv("submission.csv", index=False)
