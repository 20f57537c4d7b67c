# Predict which passengers of the Spaceship Titanic were transported to another dimension.
import pandas as pd
from sklearn.linear_model import LogisticRegression


def split_cabin(frame):
    """Cabin is deck/num/side: three features hide in one column."""
    frame = frame.copy()
    frame[["Deck", "Cabin_num", "Side"]] = frame["Cabin"].str.split("/", expand=True)
    return frame.drop("Cabin", axis=1)


def encode(frame, columns, like=None):
    """One-hot encode the categorical columns; `like` makes another frame use the same columns."""
    encoded = pd.get_dummies(frame[columns])
    if like is not None:
        encoded = encoded.reindex(columns=like.columns, fill_value=0)
    return encoded


# Shuffle, then keep 80% for training and 20% to validate the model on.
df = pd.read_csv("train.csv")
df = df.sample(frac=1, random_state=1)
cut = int(0.8 * len(df))
train_data = split_cabin(df[:cut])
val_data = split_cabin(df[cut:])

train_y = train_data["Transported"]
val_y = val_data["Transported"]

# A few categorical features to start with; look at the others too.
select_columns = ["HomePlanet", "CryoSleep", "Destination", "VIP", "Deck", "Side"]
train_X = encode(train_data, select_columns)
val_X = encode(val_data, select_columns, like=train_X)

# ======================================================================================
# Your part: build and train a model on train_X / train_y.
# When done, `model` must be the trained model (with a .predict method), and
# train_accuracy / val_accuracy its accuracy on the training and validation parts.
# ======================================================================================


# ======================================================================================
# End of your part.
# ======================================================================================

print(f"Train Accuracy: {train_accuracy}")
print(f"Validation Accuracy: {val_accuracy}")

test_data = split_cabin(pd.read_csv("test.csv"))
test_X = encode(test_data, select_columns, like=train_X)
test_preds = model.predict(test_X)

pd.DataFrame({"PassengerId": test_data.PassengerId, "Transported": test_preds}).to_csv("submission.csv",
                                                                                       index=False)
