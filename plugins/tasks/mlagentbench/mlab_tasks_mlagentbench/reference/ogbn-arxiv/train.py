"""Reference solution (ours, for `mlab check-task`): propagated features (X, AX, A^2X, A^3X) and an MLP."""
import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = "networks/ogbn-arxiv"
torch.manual_seed(0)


def load(name):
    return torch.from_numpy(np.load(f"{ROOT}/{name}.npy"))


x, edge_index, y = load("node_feat").float(), load("edge_index"), load("labels")
split_idx = {part: load(f"{part}_idx") for part in ("train", "valid", "test")}
n, num_classes = x.size(0), int(y.max()) + 1

# Symmetric normalised adjacency with self loops, as a sparse matrix.
loops = torch.arange(n)
rows = torch.cat([edge_index[0], edge_index[1], loops])
cols = torch.cat([edge_index[1], edge_index[0], loops])
degree = torch.zeros(n).index_add_(0, rows, torch.ones(rows.numel()))
weights = degree[rows].rsqrt() * degree[cols].rsqrt()
adjacency = torch.sparse_coo_tensor(torch.stack([rows, cols]), weights, (n, n)).coalesce()

hops = [(x - x.mean(0)) / (x.std(0) + 1e-6)]
for _ in range(3):
    hops.append(torch.sparse.mm(adjacency, hops[-1]))
features = torch.cat(hops, dim=1)

model = nn.Sequential(nn.Linear(features.size(1), 512), nn.BatchNorm1d(512), nn.ReLU(), nn.Dropout(0.5),
                      nn.Linear(512, 256), nn.BatchNorm1d(256), nn.ReLU(), nn.Dropout(0.5),
                      nn.Linear(256, num_classes))
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4)
train_idx = split_idx["train"]
best_val, best_state = -1.0, None
for epoch in range(30):
    model.train()
    for batch in train_idx[torch.randperm(train_idx.numel())].split(1024):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(features[batch]), y[batch])
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        pred = model(features).argmax(1)
    val = (pred[split_idx["valid"]] == y[split_idx["valid"]]).float().mean().item()
    if val > best_val:
        best_val, best_state = val, {k: v.clone() for k, v in model.state_dict().items()}
    print(f"Epoch {epoch:02d}, Train: {(pred[train_idx] == y[train_idx]).float().mean():.4f}, Val: {val:.4f}")

model.load_state_dict(best_state)
model.eval()
with torch.no_grad():
    pred = model(features).argmax(1, keepdim=True)
pd.DataFrame(pred[split_idx["test"]].numpy()).to_csv("submission.csv", index=False)
