"""Multi-label classification of sea-floor animals in FathomNet images (290 categories)."""
import ast
import json

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from PIL import Image
from sklearn.model_selection import train_test_split

N_CLASSES = 290
SIZE = 96  # CPU-scaled: small images (the smallest the four 5x5 conv blocks accept)
IMAGE_DIR = "images/"


def label_map(category, n_classes=N_CLASSES):
    """'[1.0, 9.0]' -> a 0/1 vector with ones at categories 1 and 9 (ids start at 1)."""
    labels = [0] * n_classes
    for category_id in ast.literal_eval(category):
        labels[int(category_id) - 1] = 1
    return labels


def load_image(path):
    """An image as a [3, SIZE, SIZE] uint8 array."""
    with Image.open(path) as img:
        return np.asarray(img.convert("RGB").resize((SIZE, SIZE))).transpose(2, 0, 1).copy()


def block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 5), nn.ReLU(), nn.BatchNorm2d(cout), nn.MaxPool2d(2), nn.Dropout(0.2))


if __name__ == "__main__":
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    train_df = pd.read_csv("multilabel_classification/train.csv")
    X = np.stack([load_image(IMAGE_DIR + image_id + ".png") for image_id in train_df["id"]])
    y = np.array([label_map(c) for c in train_df["categories"]], dtype=np.float32)
    X_train, X_test, y_train, y_test = train_test_split(X, y, random_state=20, test_size=0.3)

    model = nn.Sequential(block(3, 16), block(16, 32), block(32, 64), block(64, 64), nn.Flatten(),
                          nn.LazyLinear(128), nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, 64), nn.ReLU(),
                          nn.Dropout(0.5), nn.Linear(64, N_CLASSES)).to(device)
    model(torch.zeros(1, 3, SIZE, SIZE, device=device))  # materialise the lazy layer
    optimizer = torch.optim.Adam(model.parameters())
    criterion = nn.BCEWithLogitsLoss()  # binary cross entropy per label

    def batches(X_, y_, batch_size, shuffle=False):
        order = np.random.permutation(len(X_)) if shuffle else np.arange(len(X_))
        for start in range(0, len(X_), batch_size):
            idx = order[start:start + batch_size]
            yield (torch.tensor(X_[idx], dtype=torch.float32, device=device) / 255.0,
                   torch.tensor(y_[idx], device=device))

    EPOCH = 1
    BATCH_SIZE = 64
    for epoch in range(EPOCH):
        model.train()
        for inputs, targets in batches(X_train, y_train, BATCH_SIZE, shuffle=True):
            optimizer.zero_grad()
            loss = criterion(model(inputs), targets)
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            val_loss = np.mean([criterion(model(i), t).item() for i, t in batches(X_test, y_test, BATCH_SIZE)])
        print(f"epoch {epoch + 1}: train loss {loss.item():.4f}, validation loss {val_loss:.4f}")

    # Predict the categories of the evaluation images and save them to submission.csv.
    valid_df = pd.DataFrame(json.load(open("object_detection/eval.json"))["images"])
    predict_list = []
    model.eval()
    threshold = 0.5
    with torch.no_grad():
        for file_name in valid_df["file_name"]:
            img = torch.tensor(load_image(IMAGE_DIR + file_name)[None], dtype=torch.float32, device=device) / 255.0
            proba = torch.sigmoid(model(img))[0].cpu().numpy()
            predict_list.append(" ".join(str(i + 1) for i in np.flatnonzero(proba >= threshold)))  # category ids

    valid_id = [name[:-4] for name in valid_df["file_name"]]
    valid_osd = [1] * len(valid_id)  # out-of-sample flag
    pd.DataFrame({"id": valid_id, "categories": predict_list, "osd": valid_osd}).to_csv("submission.csv",
                                                                                        index=False)
