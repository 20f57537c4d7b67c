"""Segment aviation contrails in GOES-16 infrared images; save run-length encoded masks to submission.csv."""
import os

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, Dataset

from encode import list_to_string, rle_encode


def dice_score(y_p, y_t, smooth=1e-6):
    y_p = y_p[:, :, 2:-2, 2:-2]
    y_p = torch.argmax(F.softmax(y_p, dim=1), dim=1, keepdim=True)
    i = torch.sum(y_p * y_t, dim=(2, 3))
    u = torch.sum(y_p, dim=(2, 3)) + torch.sum(y_t, dim=(2, 3))
    return torch.mean((2 * i + smooth) / (u + smooth))


def ce_loss(y_p, y_t):
    y_p = y_p[:, :, 2:-2, 2:-2]
    y_t = y_t.squeeze(dim=1)
    weight = torch.Tensor([0.57, 4.17]).to(y_t.device)  # contrail pixels are rare
    return nn.CrossEntropyLoss(weight)(y_p, y_t)


def false_color(band11, band14, band15):
    """The 'ash' false-colour image that makes contrails visible, as [h, w, 3] in [0, 1]."""
    def normalize(band, bounds):
        return (band - bounds[0]) / (bounds[1] - bounds[0])

    r = normalize(band15 - band14, (-4, 2))
    g = normalize(band14 - band11, (-4, 5))
    b = normalize(band14, (243, 303))
    return np.clip(np.stack([r, g, b], axis=2), 0, 1)


class ICRGWDataset(Dataset):
    def __init__(self, tar_path, ids, padding_size):
        self.tar_path = tar_path
        self.ids = ids
        self.padding_size = padding_size

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, idx):
        n_times_before = 4  # the labelled frame
        sample_path = f"{self.tar_path}/{self.ids[idx]}"
        band11 = np.load(f"{sample_path}/band_11.npy")[..., n_times_before]
        band14 = np.load(f"{sample_path}/band_14.npy")[..., n_times_before]
        band15 = np.load(f"{sample_path}/band_15.npy")[..., n_times_before]
        image = torch.Tensor(false_color(band11, band14, band15)).permute(2, 0, 1)
        p = self.padding_size
        image = F.pad(image, (p, p, p, p), mode="reflect")
        try:
            label = torch.Tensor(np.load(f"{sample_path}/human_pixel_masks.npy")).to(torch.int64).permute(2, 0, 1)
        except FileNotFoundError:  # test records have no labels
            label = torch.zeros((1, image.shape[1], image.shape[2]))
        return image, label


if __name__ == "__main__":
    data_path = "./train"
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")

    image_ids = sorted(os.listdir(data_path))
    ids_train, ids_valid = train_test_split(image_ids, test_size=0.1, random_state=42)
    print(f"TrainSize: {len(ids_train)}, ValidSize: {len(ids_valid)}")

    batch_size = 8
    epochs = 1
    lr = 1e-5

    train_dataloader = DataLoader(ICRGWDataset(data_path, ids_train, 2), batch_size, shuffle=True, num_workers=0)
    valid_dataloader = DataLoader(ICRGWDataset(data_path, ids_valid, 2), 1, shuffle=False, num_workers=0)

    model = nn.Conv2d(3, 2, 1)  # TODO: replace with your model
    model = model.to(device)
    optimizer = optim.Adam(model.parameters(), lr=lr)

    bst_dice = 0
    for epoch in range(epochs):
        model.train()
        tot_loss = tot_score = count = 0
        for X, y in train_dataloader:
            X, y = X.to(device), y.to(device)
            pred = model(X)
            loss = ce_loss(pred, y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            tot_loss += loss.item()
            tot_score += dice_score(pred, y).item()
            count += 1
        print(f"epoch {epoch + 1}: TrainLoss {tot_loss / count:.4f}, TrainDice {tot_score / count:.4f}")

        model.eval()
        with torch.no_grad():
            valid_dice = np.mean([dice_score(model(X.to(device)), y.to(device)).item() for X, y in valid_dataloader])
        print(f"epoch {epoch + 1}: ValidDice {valid_dice:.4f}")
        if valid_dice > bst_dice:
            bst_dice = valid_dice
            torch.save(model.state_dict(), "u-net.pth")
            print("current model saved!")

    # Masks for the test records, run-length encoded, into submission.csv.
    submission = pd.read_csv("sample_submission.csv", index_col="record_id", dtype={"record_id": str})
    test_ids = sorted(os.listdir("test"))
    test_dataset = ICRGWDataset("test/", test_ids, 2)
    model.eval()
    with torch.no_grad():
        for idx, (X, _y) in enumerate(test_dataset):
            pred = model(X.unsqueeze(0).to(device))[:, :, 2:-2, 2:-2]  # remove padding
            pred = torch.argmax(pred, dim=1)[0].cpu().numpy()
            submission.loc[test_ids[idx], "encoded_pixels"] = list_to_string(rle_encode(pred))
    submission.to_csv("submission.csv")
