"""Writes the data of example-yaml/line-fit: the same seeded draws on every machine, so prepares reproduce."""
import csv
import os
import random
from pathlib import Path

SLOPE, INTERCEPT, NOISE_SD = 3.2, -4.5, 1.5
N_TRAIN, N_TEST = 200, 100
N_VALID = 40  # training rows also written as the validation split (they stay in train.csv)
SEED = 20240501


def write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


rng = random.Random(SEED)


def sample():
    x = rng.uniform(0.0, 10.0)
    return x, SLOPE * x + INTERCEPT + rng.gauss(0.0, NOISE_SD)


train = [sample() for _ in range(N_TRAIN)]
test = [sample() for _ in range(N_TEST)]
public, hidden = Path(os.environ["MLAB_PUBLIC_DIR"]), Path(os.environ["MLAB_HIDDEN_DIR"])
write_csv(public / "train.csv", ["x", "y"], [(f"{x:.6f}", f"{y:.6f}") for x, y in train])
write_csv(public / "test.csv", ["id", "x"], [(i, f"{x:.6f}") for i, (x, _y) in enumerate(test)])
write_csv(hidden / "answers.csv", ["id", "y"], [(i, f"{y:.6f}") for i, (_x, y) in enumerate(test)])
# The validation split comes from the training rows, never the test set; its answers stay hidden.
valid = sorted(random.Random(SEED + 1).sample(range(N_TRAIN), N_VALID))
write_csv(public / "valid.csv", ["id", "x"], [(i, f"{train[i][0]:.6f}") for i in valid])
write_csv(hidden / "valid_answers.csv", ["id", "y"], [(i, f"{train[i][1]:.6f}") for i in valid])
print(f"wrote {N_TRAIN} training ({N_VALID} also for validation) and {N_TEST} test rows")
