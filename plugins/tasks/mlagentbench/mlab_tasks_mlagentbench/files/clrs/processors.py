"""The processor of the baseline model: a message-passing network with triplet (edge-to-edge) messages."""
import torch
import torch.nn as nn


def get_triplet_msgs(z, edge_fts, nb_triplet_fts, layers):
    """Triplet messages: for every pair (i, j), a max over all intermediate nodes k of a function of
    node i, j, k and edges (i, k), (k, j), (i, j). Returns [B, n, n, nb_triplet_fts].

    z: node features [B, n, H]; edge_fts: edge features [B, n, n, H]; layers: the linear maps.
    This is the core message function of the model.
    """
    t_i, t_j, t_k = layers["t_i"](z), layers["t_j"](z), layers["t_k"](z)  # [B, n, T]
    t_ik, t_kj, t_ij = layers["t_e_ik"](edge_fts), layers["t_e_kj"](edge_fts), layers["t_e_ij"](edge_fts)
    triplets = (t_i[:, :, None, None, :]            # i    [B, n, 1, 1, T]
                + t_j[:, None, :, None, :]          # j    [B, 1, n, 1, T]
                + t_k[:, None, None, :, :]          # k    [B, 1, 1, n, T]
                + t_ik[:, :, None, :, :]            # i-k  [B, n, 1, n, T]
                + t_kj.transpose(1, 2)[:, None, :, :, :]  # k-j  [B, 1, n, n, T] indexed [b, ., j, k]
                + t_ij[:, :, :, None, :])           # i-j  [B, n, n, 1, T]
    return triplets.max(dim=3).values  # [B, n(i), n(j), T]


class TripletMPNN(nn.Module):
    """One step: node messages (max over neighbours) and edge messages from triplets, gated updates."""

    def __init__(self, hidden, nb_triplet_fts):
        super().__init__()
        self.nb_triplet_fts = nb_triplet_fts
        self.triplet_layers = nn.ModuleDict({name: nn.Linear(hidden, nb_triplet_fts) for name in
                                             ("t_i", "t_j", "t_k", "t_e_ik", "t_e_kj", "t_e_ij")})
        self.edge_out = nn.Linear(nb_triplet_fts, hidden)
        self.msg_1, self.msg_2, self.msg_e = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.node_update = nn.Linear(2 * hidden, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.edge_norm = nn.LayerNorm(hidden)

    def forward(self, z, edge_fts, adj):
        tri = get_triplet_msgs(z, edge_fts, self.nb_triplet_fts, self.triplet_layers)
        edge_fts = self.edge_norm(edge_fts + torch.relu(self.edge_out(tri)))
        messages = self.msg_1(z)[:, :, None, :] + self.msg_2(z)[:, None, :, :] + self.msg_e(edge_fts)
        messages = messages.masked_fill(adj[..., None] == 0, -1e9).max(dim=1).values  # aggregate senders i
        z = self.norm(z + torch.relu(self.node_update(torch.cat([z, messages], dim=-1))))
        return z, edge_fts
