"""Writes the data of example-yaml/line-fit: the same seeded draws on every machine, so prepares reproduce."""
import csv
import os
import random
from pathlib import Path

SLOPE, INTERCEPT, NOISE_SD = 3.2, -4.5, 1.5
N_TRAIN, N_TEST = 200, 100
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
print(f"wrote {N_TRAIN} training and {N_TEST} test rows")
