"""Floyd-Warshall samples in the style of the CLRS Algorithmic Reasoning Benchmark (our own implementation).

Each sample is a random undirected weighted Erdos-Renyi graph. Inputs: pos (a random position per node),
A (edge weights, 0 where there is no edge) and adj (edges plus self loops). Output: pi, the predecessor matrix:
pi[i, j] is the node before j on a shortest path from i to j (i itself when j == i or j is unreachable).
Hints: the predecessor matrix after each outer iteration k of the algorithm (n of them).
"""
import numpy as np

TRAIN_LENGTHS = [4, 7, 11, 13, 16]  # graph sizes used for training
VAL_LENGTH = 16
TEST_LENGTH = 64  # the test graphs are 4 times larger: out-of-distribution generalisation


def floyd_warshall(A, adj):
    """Predecessor hints [n, n, n] (one per k) and the final predecessor matrix [n, n]."""
    n = len(A)
    dist = np.where(adj > 0, A, np.inf)
    np.fill_diagonal(dist, 0.0)
    pi = np.tile(np.arange(n)[:, None], (1, n))  # pi[i, j] = i
    hints = np.empty((n, n, n), dtype=np.int64)
    for k in range(n):
        through = dist[:, k:k + 1] + dist[k:k + 1, :]
        better = through < dist
        dist = np.where(better, through, dist)
        pi = np.where(better, np.broadcast_to(pi[k:k + 1, :], (n, n)), pi)
        hints[k] = pi
    return hints, pi


def sample(n, rng):
    p = rng.choice(np.arange(0.1, 1.0, 0.1))
    upper = np.triu(rng.random((n, n)) < p, 1)
    edges = upper | upper.T
    weights = rng.uniform(0.1, 1.0, (n, n))
    weights = np.triu(weights, 1) + np.triu(weights, 1).T
    A = np.where(edges, weights, 0.0)
    adj = (edges | np.eye(n, dtype=bool)).astype(np.float32)
    hints, pi = floyd_warshall(A, adj)
    return {"pos": rng.random(n).astype(np.float32), "A": A.astype(np.float32), "adj": adj,
            "hints": hints, "pi": pi}


def batch(n, size, rng):
    """A batch of `size` graphs with n nodes, stacked: pos [B, n], A and adj [B, n, n], hints [B, n, n, n]."""
    samples = [sample(n, rng) for _ in range(size)]
    return {key: np.stack([s[key] for s in samples]) for key in samples[0]}


def train_batches(batch_size, seed):
    """An endless stream of training batches, cycling through the training graph sizes."""
    rng = np.random.default_rng(seed)
    while True:
        for n in TRAIN_LENGTHS:
            yield batch(n, batch_size, rng)


def pointer_accuracy(predicted, truth):
    """The benchmark's score for pi: the fraction of (i, j) pairs whose predecessor is right, averaged over graphs."""
    return float((np.asarray(predicted) == np.asarray(truth)).reshape(len(truth), -1).mean(axis=1).mean())
