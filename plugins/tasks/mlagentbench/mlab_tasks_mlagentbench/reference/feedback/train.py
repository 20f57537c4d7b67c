"""Reference solution (ours, for `mlab check-task`): TF-IDF word and character n-grams with ridge regression."""
import numpy as np
import pandas as pd
from scipy.sparse import hstack
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import Ridge
from sklearn.model_selection import train_test_split

DIMENSIONS = ["cohesion", "syntax", "vocabulary", "phraseology", "grammar", "conventions"]

train = pd.read_csv("train.csv", index_col="text_id").dropna()
test = pd.read_csv("test.csv", index_col="text_id")
words = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
chars = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4), min_df=2, sublinear_tf=True)


def fit_predict(texts, targets, others):
    X = hstack([words.fit_transform(texts), chars.fit_transform(texts)]).tocsr()
    model = Ridge(alpha=3.0).fit(X, targets)
    return [np.clip(model.predict(hstack([words.transform(t), chars.transform(t)]).tocsr()), 1, 5) for t in others]


X_train, X_valid, y_train, y_valid = train_test_split(train.full_text, train[DIMENSIONS].to_numpy(), test_size=0.1,
                                                      random_state=42)
(valid_pred,) = fit_predict(X_train, y_train, [X_valid])
print("final MCRMSE on validation set: ", np.mean(np.sqrt(((valid_pred - y_valid) ** 2).mean(axis=0))))
(test_pred,) = fit_predict(train.full_text, train[DIMENSIONS].to_numpy(), [test.full_text])
pd.DataFrame(test_pred, columns=DIMENSIONS, index=test.index).to_csv("submission.csv")
