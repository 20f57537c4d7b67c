"""Train a small CNN on CIFAR-10 and save per-class probabilities for the test images to submission.csv."""
import pickle

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

DATA = "data/cifar-10-batches-py"


def load_batch(name):
    """Images as float tensors [n, 3, 32, 32] scaled to [-1, 1], and labels (None for the test batch)."""
    with open(f"{DATA}/{name}", "rb") as f:
        batch = pickle.load(f, encoding="bytes")
    images = torch.tensor(batch[b"data"].reshape(-1, 3, 32, 32), dtype=torch.float32) / 255.0
    images = (images - 0.5) / 0.5
    labels = batch.get(b"labels")
    return images, (torch.tensor(labels) if labels is not None else None)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")

parts = [load_batch(f"data_batch_{i}") for i in range(1, 6)]
train_images = torch.cat([p[0] for p in parts])
train_labels = torch.cat([p[1] for p in parts])
test_images, _ = load_batch("test_batch")  # the test labels are held out

batch_size = 128
train_dataloader = DataLoader(TensorDataset(train_images, train_labels), batch_size=batch_size, shuffle=True)
eval_dataloader = DataLoader(TensorDataset(train_images, train_labels), batch_size=512)

model = Net().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
criterion = nn.CrossEntropyLoss()


def accuracy(dataloader):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for inputs, labels in dataloader:
            predicted = model(inputs.to(device)).argmax(dim=1)
            correct += (predicted == labels.to(device)).sum().item()
            total += labels.size(0)
    return 100 * correct / total


epochs = 5
for epoch in range(epochs):
    model.train()
    running_loss = 0.0
    for i, (inputs, labels) in enumerate(train_dataloader):
        inputs, labels = inputs.to(device), labels.to(device)
        optimizer.zero_grad()
        loss = criterion(model(inputs), labels)
        loss.backward()
        optimizer.step()
        running_loss += loss.item()
        if i % 100 == 99:
            print(f"[{epoch + 1}, {i + 1:5d}] loss: {running_loss / 100:.3f}")
            running_loss = 0.0
    print(f"Epoch [{epoch + 1}/{epochs}], Train Accuracy: {accuracy(eval_dataloader):.2f}%")

# Per-class probabilities of every test image, one row per image in test_batch order.
model.eval()
with torch.no_grad():
    probabilities = torch.cat([torch.softmax(model(chunk.to(device)), dim=1).cpu()
                               for chunk in test_images.split(512)])
submission = pd.DataFrame(probabilities.numpy(), columns=list(range(10)))
submission.to_csv("submission.csv")
