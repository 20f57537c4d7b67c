"""Fit y = w * x + b to train.csv by gradient descent, then write predictions for test.csv to submission.csv."""
import csv

EPOCHS = 3
LEARNING_RATE = 0.01


def read_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


train = read_rows("train.csv")
xs = [float(row["x"]) for row in train]
ys = [float(row["y"]) for row in train]
n = len(xs)

w, b = 0.0, 0.0
for epoch in range(1, EPOCHS + 1):
    errors = [w * x + b - y for x, y in zip(xs, ys)]
    w -= LEARNING_RATE * 2 * sum(e * x for e, x in zip(errors, xs)) / n
    b -= LEARNING_RATE * 2 * sum(errors) / n
    mse = sum((w * x + b - y) ** 2 for x, y in zip(xs, ys)) / n
    print(f"epoch {epoch}: train MSE {mse:.4f}")

test = read_rows("test.csv")
with open("submission.csv", "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["id", "y"])
    for row in test:
        writer.writerow([row["id"], w * float(row["x"]) + b])
print(f"fitted w={w:.4f} b={b:.4f}; wrote submission.csv with {len(test)} rows")
