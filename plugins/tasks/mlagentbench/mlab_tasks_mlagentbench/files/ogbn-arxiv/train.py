"""Node classification on ogbn-arxiv (subject area of arXiv CS papers) with a small MLP on node features."""
import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch.optim.lr_scheduler import ReduceLROnPlateau

ROOT = "networks/ogbn-arxiv"


def load(name):
    return torch.from_numpy(np.load(f"{ROOT}/{name}.npy"))


x = load("node_feat")  # [num_nodes, 128] float
edge_index = load("edge_index")  # [2, num_edges] citing -> cited (not used by the MLP)
y = load("labels")  # [num_nodes]; -1 on the test nodes, whose labels are held out
split_idx = {part: load(f"{part}_idx") for part in ("train", "valid", "test")}
num_classes = int(y.max()) + 1
train_idx = split_idx["train"]


class MLP(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels, num_layers, dropout):
        super().__init__()
        self.lins = torch.nn.ModuleList([torch.nn.Linear(in_channels, hidden_channels)])
        self.bns = torch.nn.ModuleList([torch.nn.BatchNorm1d(hidden_channels)])
        for _ in range(num_layers - 2):
            self.lins.append(torch.nn.Linear(hidden_channels, hidden_channels))
            self.bns.append(torch.nn.BatchNorm1d(hidden_channels))
        self.lins.append(torch.nn.Linear(hidden_channels, out_channels))
        self.dropout = dropout

    def forward(self, x):
        for lin, bn in zip(self.lins[:-1], self.bns):
            x = F.dropout(F.relu(bn(lin(x))), p=self.dropout, training=self.training)
        return torch.log_softmax(self.lins[-1](x), dim=-1)

    @torch.no_grad()
    def inference(self, x, device, batch_size=4096):
        return torch.cat([self(chunk.to(device)).cpu() for chunk in x.split(batch_size)])


device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = MLP(x.size(-1), hidden_channels=16, out_channels=num_classes, num_layers=2, dropout=0).to(device)
epochs = 4
optimizer = torch.optim.Adam(model.parameters(), lr=1)
scheduler = ReduceLROnPlateau(optimizer, "max", patience=7)


def accuracy(pred, part):
    idx = split_idx[part]
    return (pred[idx] == y[idx]).float().mean().item()


for epoch in range(epochs):
    model.train()
    total_loss = 0.0
    order = train_idx[torch.randperm(train_idx.numel())]
    batches = order.split(1024)
    for batch in batches:
        optimizer.zero_grad()
        out = model(x[batch].to(device))
        loss = F.nll_loss(out, y[batch].to(device))
        loss.backward()
        optimizer.step()
        total_loss += loss.item()
    model.eval()
    pred = model.inference(x, device).argmax(dim=-1)
    train_acc, val_acc = accuracy(pred, "train"), accuracy(pred, "valid")
    scheduler.step(val_acc)
    print(f"Epoch {epoch:02d}, loss {total_loss / len(batches):.4f}, Train: {train_acc:.4f}, Val: {val_acc:.4f}")

# Predicted labels of the test nodes, in the order of test_idx, one per row.
model.eval()
y_pred = model.inference(x, device).argmax(dim=-1, keepdim=True)
pd.DataFrame(y_pred[split_idx["test"]].numpy()).to_csv("submission.csv", index=False)
