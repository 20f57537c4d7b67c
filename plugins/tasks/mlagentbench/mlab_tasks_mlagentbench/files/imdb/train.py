"""Sentiment of IMDb movie reviews: fill in the TODOs to fine-tune a model and save test-set probabilities."""
import pandas as pd
import torch

if __name__ == "__main__":
    train = pd.read_csv("data/train.csv")  # columns: text, label (0 = negative, 1 = positive)
    test = pd.read_csv("data/test.csv")  # columns: idx, text; the labels are held out

    # TODO: preprocess data

    # TODO: define model here
    model = None

    # TODO: train model

    # Save the per-class probabilities of every test review to submission.csv: one row per idx,
    # columns 0 (negative) and 1 (positive).
    submission = pd.DataFrame(columns=list(range(2)), index=test["idx"])
    for idx, text in zip(test["idx"], test["text"]):
        pred = model(text)  # TODO: replace with proper prediction
        pred = torch.softmax(pred, dim=0)
        submission.loc[idx] = pred.tolist()
    submission.to_csv("submission.csv", index_label="idx")
