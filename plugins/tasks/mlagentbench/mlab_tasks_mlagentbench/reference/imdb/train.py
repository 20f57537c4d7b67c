"""Reference solution (ours, for `mlab check-task`): TF-IDF n-grams and logistic regression.

Not the DistilBERT fine-tuning the task asks of the agent: a fast check that the data and metric work.
"""
import pandas as pd
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression

train = pd.read_csv("data/train.csv")
test = pd.read_csv("data/test.csv")
vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=2, max_features=200000, sublinear_tf=True)
X = vectorizer.fit_transform(train.text)
model = LogisticRegression(C=4.0, max_iter=1000).fit(X, train.label)
print("train accuracy:", model.score(X, train.label))
probabilities = model.predict_proba(vectorizer.transform(test.text))
pd.DataFrame(probabilities, columns=[0, 1], index=test.idx).to_csv("submission.csv", index_label="idx")
