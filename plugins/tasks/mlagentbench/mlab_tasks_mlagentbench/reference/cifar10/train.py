"""Reference solution (ours, for `mlab check-task`): a wider CNN with batch norm, Adam and flips, 10 epochs."""
import pickle

import pandas as pd
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

DATA = "data/cifar-10-batches-py"
torch.manual_seed(0)


def load_batch(name):
    with open(f"{DATA}/{name}", "rb") as f:
        batch = pickle.load(f, encoding="bytes")
    images = torch.tensor(batch[b"data"].reshape(-1, 3, 32, 32), dtype=torch.float32) / 255.0
    labels = batch.get(b"labels")
    return (images - 0.5) / 0.5, (torch.tensor(labels) if labels is not None else None)


def block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(),
                         nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(2))


model = nn.Sequential(block(3, 16), block(16, 32), block(32, 64), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                      nn.Dropout(0.2), nn.Linear(64, 10))
device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
model.to(device)

parts = [load_batch(f"data_batch_{i}") for i in range(1, 6)]
train_images = torch.cat([p[0] for p in parts])
train_labels = torch.cat([p[1] for p in parts])
test_images, _ = load_batch("test_batch")

loader = DataLoader(TensorDataset(train_images, train_labels), batch_size=64, shuffle=True)
epochs = 10
optimizer = torch.optim.Adam(model.parameters(), lr=2e-3, weight_decay=5e-4)
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=2e-3, total_steps=epochs * len(loader))
criterion = nn.CrossEntropyLoss()
for epoch in range(epochs):
    model.train()
    correct = total = 0
    for inputs, labels in loader:
        flip = torch.rand(inputs.size(0)) < 0.5
        inputs = torch.where(flip[:, None, None, None], inputs.flip(3), inputs)
        inputs, labels = inputs.to(device), labels.to(device)
        optimizer.zero_grad()
        outputs = model(inputs)
        loss = criterion(outputs, labels)
        loss.backward()
        optimizer.step()
        scheduler.step()
        correct += (outputs.argmax(1) == labels).sum().item()
        total += labels.size(0)
    print(f"Epoch [{epoch + 1}/{epochs}], Train Accuracy: {100 * correct / total:.2f}%")

model.eval()
with torch.no_grad():
    probabilities = torch.cat([torch.softmax(model(c.to(device)), dim=1).cpu() for c in test_images.split(512)])
pd.DataFrame(probabilities.numpy(), columns=list(range(10))).to_csv("submission.csv")
