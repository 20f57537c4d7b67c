"""Reference solution (ours, for `mlab check-task`): the same model and budget, trained on some larger graphs
too and selected on 32-node validation graphs, for better generalisation to the 64-node test graphs.
Train the baseline model on Floyd-Warshall and save the best checkpoint (by validation score)."""
import clrs_data
import numpy as np
import torch
from model import BaselineModel

SEED = 42
TRAIN_STEPS = 500
BATCH_SIZE = 32
LEARNING_RATE = 0.001
EVAL_EVERY = 50
GRAD_CLIP = 1.0

torch.manual_seed(SEED)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def to_tensors(batch):
    return {"pos": torch.tensor(batch["pos"], device=device), "A": torch.tensor(batch["A"], device=device),
            "adj": torch.tensor(batch["adj"], device=device), "hints": torch.tensor(batch["hints"], device=device),
            "pi": torch.tensor(batch["pi"], device=device)}


def score(model, batch):
    t = to_tensors(batch)
    model.eval()
    predicted = model.predict(t["pos"], t["A"], t["adj"]).cpu().numpy()
    model.train()
    return clrs_data.pointer_accuracy(predicted, batch["pi"])


if __name__ == "__main__":
    val = clrs_data.batch(32, 32, np.random.default_rng(SEED + 1))
    model = BaselineModel(hidden_size=128, nb_triplet_fts=8).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    best = -1.0
    rng = np.random.default_rng(SEED)
    sizes = clrs_data.TRAIN_LENGTHS + [24, 32]

    def batches():
        while True:
            for n in sizes:
                yield clrs_data.batch(n, BATCH_SIZE if n <= 16 else BATCH_SIZE // 4, rng)

    for step, batch in enumerate(batches(), start=1):
        loss = model.loss(to_tensors(batch))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        optimizer.step()
        if step % EVAL_EVERY == 0 or step == TRAIN_STEPS:
            val_score = score(model, val)
            print(f"step {step}: loss {loss.item():.4f}, validation score {val_score:.4f}")
            if val_score > best:
                best = val_score
                model.save("checkpoints")
                print(f"checkpoint saved (best validation score {best:.4f})")
        if step >= TRAIN_STEPS:
            break
