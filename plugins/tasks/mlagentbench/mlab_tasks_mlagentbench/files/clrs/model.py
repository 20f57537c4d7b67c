"""BaselineModel: encode the graph, run the processor once per algorithm step, decode predecessor pointers."""
import json
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from processors import TripletMPNN


class BaselineModel(nn.Module):
    def __init__(self, hidden_size=128, nb_triplet_fts=8, use_hints=True):
        super().__init__()
        self.config = {"hidden_size": hidden_size, "nb_triplet_fts": nb_triplet_fts, "use_hints": use_hints}
        self.node_in = nn.Linear(1, hidden_size)
        self.edge_in = nn.Linear(2, hidden_size)
        self.processor = TripletMPNN(hidden_size, nb_triplet_fts)
        self.pointer_a = nn.Linear(hidden_size, hidden_size)
        self.pointer_b = nn.Linear(hidden_size, hidden_size)

    def decode(self, edge_fts):
        """Pointer logits [B, n(i), n(j), n(k)]: how likely k is the node before j on a path from i."""
        a = self.pointer_a(edge_fts)  # (i, k)
        b = self.pointer_b(edge_fts)  # (k, j)
        return torch.einsum("bikh,bkjh->bijk", a, b) / a.shape[-1] ** 0.5

    def forward(self, pos, A, adj):
        """Pointer logits after every step: a list of n tensors [B, n, n, n]."""
        z = self.node_in(pos[..., None])
        edge_fts = self.edge_in(torch.stack([A, adj], dim=-1))
        full = torch.ones_like(adj)  # every node may send to every other node
        logits = []
        for _step in range(pos.shape[1]):
            z, edge_fts = self.processor(z, edge_fts, full)
            logits.append(self.decode(edge_fts))
        return logits

    def loss(self, batch):
        logits = self(batch["pos"], batch["A"], batch["adj"])
        n = batch["pos"].shape[1]
        final = F.cross_entropy(logits[-1].reshape(-1, n), batch["pi"].reshape(-1))
        if not self.config["use_hints"]:
            return final
        hint_loss = sum(F.cross_entropy(l.reshape(-1, n), batch["hints"][:, t].reshape(-1))
                        for t, l in enumerate(logits)) / n
        return final + hint_loss

    @torch.no_grad()
    def predict(self, pos, A, adj):
        """The predicted predecessor matrix [B, n, n]."""
        return self(pos, A, adj)[-1].argmax(dim=-1)

    def save(self, folder):
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "model_config.json").write_text(json.dumps(self.config))
        torch.save(self.state_dict(), folder / "best.pt")

    @classmethod
    def load(cls, folder):
        folder = Path(folder)
        model = cls(**json.loads((folder / "model_config.json").read_text()))
        model.load_state_dict(torch.load(folder / "best.pt", map_location="cpu", weights_only=True))
        return model.eval()
