"""Train a small convolutional network on 8x8 digit images and write class probabilities for the test images."""
import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)  # the network is tiny: more threads only add overhead

PIXELS = [f"pixel{i}" for i in range(64)]
EPOCHS = 5
BATCH_SIZE = 128
LEARNING_RATE = 0.1


def to_images(frame):
    # Pixel values run from 0 to 16; scale them to [0, 1].
    return torch.tensor(frame[PIXELS].to_numpy(np.float32) / 16.0).view(-1, 1, 8, 8)


train = pd.read_csv("data/train.csv")
test = pd.read_csv("data/test.csv")

# Hold out a fifth of the training images to see how well the model generalises.
is_valid = np.zeros(len(train), dtype=bool)
is_valid[np.random.permutation(len(train))[: len(train) // 5]] = True
x_train, y_train = to_images(train[~is_valid]), torch.tensor(train.loc[~is_valid, "label"].to_numpy())
x_valid, y_valid = to_images(train[is_valid]), torch.tensor(train.loc[is_valid, "label"].to_numpy())
x_test = to_images(test)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, kernel_size=3, padding=1)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        return self.fc(torch.flatten(x, 1))


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        return (model(x).argmax(dim=1) == y).float().mean().item()


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)

for epoch in range(EPOCHS):
    model.train()
    order = torch.randperm(len(x_train))
    total_loss = 0.0
    for start in range(0, len(order), BATCH_SIZE):
        batch = order[start:start + BATCH_SIZE]
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x_train[batch]), y_train[batch])
        loss.backward()
        optimizer.step()
        total_loss += loss.item() * len(batch)
    print(f"epoch {epoch + 1}: loss {total_loss / len(x_train):.4f}, "
          f"train accuracy {accuracy(model, x_train, y_train):.4f}, "
          f"validation accuracy {accuracy(model, x_valid, y_valid):.4f}")

# One row per test image: its id and the predicted probability of each class.
model.eval()
with torch.no_grad():
    probabilities = F.softmax(model(x_test), dim=1).numpy()
submission = pd.DataFrame(probabilities, columns=[str(c) for c in range(10)])
submission.insert(0, "id", test["id"].to_numpy())
submission.to_csv("submission.csv", index=False)
print(f"Validation accuracy: {accuracy(model, x_valid, y_valid):.4f}")
print(f"Wrote submission.csv with {len(submission)} rows")
