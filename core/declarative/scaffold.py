"""`mlab new-task`: a working declarative task folder (and, for a pack, the distribution around it).

The scaffold is a small synthetic problem whose starter predicts a constant and whose reference fits a line, so
`mlab check-task` passes on it as written; the author replaces the data, the problem text and the scripts.
"""
from __future__ import annotations

import re
from pathlib import Path

from mlab.core.declarative.metrics import METRICS
from mlab.core.errors import MlabError
from mlab.core.hookspecs import NAME_PART

# The metrics the scaffold's synthetic data suits: a regression target, or two balanced classes.
SCAFFOLD_METRICS = ("mse", "rmse", "mae", "accuracy", "balanced-accuracy", "f1-macro")

_TASK_YAML = """\
# A declarative mlab task: every field is documented in mlab's CONTRIBUTING.md ("Declarative task packs").
# `mlab check-task {folder}` checks it: two prepares write the same files, and the reference beats the starter.
name: {name}
# {{metric}}, {{metric_description}} and {{direction}} (higher or lower) are filled in from `metric:` when the task
# loads, so the metric is named in one place.
description: "Predict y from three features ({{metric}}, {{direction}} is better)."
research_problem: |
  train.csv has the columns id, x1, x2, x3 and y; test.csv has the same columns without y.
  Improve train.py so that it predicts y for every row of test.csv as well as possible, measured by
  {{metric}} ({{metric_description}}; {{direction}} is better). train.py must write submission.csv with the
  columns id and y, one row per row of test.csv. Do not change train.csv or test.csv.

metric: {metric}
answers: {{file: answers.csv, id_column: id, column: y}}
submission: {{file: submission.csv, id_column: id, column: y}}

prepare: prepare.py                # writes the data; run with mlab's Python, told where by $MLAB_*_DIR
files:
  public:
    train.py: starter/train.py     # workspace path: path in this folder
starter: train.py
read_only: [train.csv, test.csv, valid.csv]
reference: reference/solve.py      # a better script, which `mlab check-task` runs
# Training rows the agent may score predictions on in runs with --allow-validate (Validate Submission); those
# runs get train.csv without them (held_out: training file -> the id column it shares with the inputs).
validation: {{inputs: valid.csv, answers: valid_answers.csv, test_inputs: test.csv, held_out: {{train.csv: id}}}}

# baseline: {{fixed: 1.0, source: "where the number comes from"}}   # default: the starter's measured score
# success_margin: 0.10
resources:
  ram_gb: 0.5
  baseline_seconds: 2
"""

_PREPARE = '''\
"""Writes the task's data: public files to $MLAB_PUBLIC_DIR, the answers to $MLAB_HIDDEN_DIR.

Every draw comes from one seeded generator, so each prepare writes the same files (mlab check-task checks it).
$MLAB_SOURCE_DIR, when set, is a local copy of raw data the user gave with --data-dir."""
import csv
import os
import random
from pathlib import Path

SEED = 12345
N_TRAIN, N_TEST = 300, 150
N_VALID = 60  # training rows also written as the validation split (held out of train.csv with --allow-validate)
CLASSES = {classes}  # True: y is a class (0 or 1), else a number


def write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


rng = random.Random(SEED)
rows = []
for row_id in range(N_TRAIN + N_TEST):
    x = [rng.uniform(-1.0, 1.0) for _ in range(3)]
    signal = 2.0 * x[0] - 1.0 * x[1] + 0.5 * x[2]
    y = int(signal + rng.gauss(0.0, 0.3) > 0) if CLASSES else 5.0 + signal + rng.gauss(0.0, 0.2)
    rows.append([row_id, *(f"{{v:.6f}}" for v in x), y if CLASSES else f"{{y:.6f}}"])
rng.shuffle(rows)
train, test = rows[:N_TRAIN], rows[N_TRAIN:]
public, hidden = Path(os.environ["MLAB_PUBLIC_DIR"]), Path(os.environ["MLAB_HIDDEN_DIR"])
write_csv(public / "train.csv", ["id", "x1", "x2", "x3", "y"], train)
write_csv(public / "test.csv", ["id", "x1", "x2", "x3"], [row[:4] for row in test])
write_csv(hidden / "answers.csv", ["id", "y"], [[row[0], row[4]] for row in test])
# The validation split is drawn from the training rows, never the test set; its answers stay hidden.
valid = train[:N_VALID]
write_csv(public / "valid.csv", ["id", "x1", "x2", "x3"], [row[:4] for row in valid])
write_csv(hidden / "valid_answers.csv", ["id", "y"], [[row[0], row[4]] for row in valid])
print(f"wrote {{len(train)}} training ({{N_VALID}} also for validation) and {{len(test)}} test rows")
'''

_STARTER = '''\
"""Starter: predicts {what} for every test row. Improve it."""
import csv
from collections import Counter

with open("train.csv", newline="") as f:
    train = list(csv.DictReader(f))
with open("test.csv", newline="") as f:
    test = list(csv.DictReader(f))

{predict}
with open("submission.csv", "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["id", "y"])
    for row in test:
        writer.writerow([row["id"], guess])
print(f"predicted {{guess}} for {{len(test)}} rows")
'''

_CONSTANT = {True: ("the most common class", 'guess = Counter(row["y"] for row in train).most_common(1)[0][0]'),
             False: ("the mean of y", 'guess = sum(float(row["y"]) for row in train) / len(train)')}

_REFERENCE = '''\
"""Reference solution: least squares on x1..x3 (normal equations, solved by Gaussian elimination){rounding}."""
import csv

FEATURES = ["x1", "x2", "x3"]
CLASSES = {classes}


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


train, test = read("train.csv"), read("test.csv")
X = [[1.0, *(float(row[c]) for c in FEATURES)] for row in train]
y = [float(row["y"]) for row in train]
size = len(X[0])
A = [[sum(r[i] * r[j] for r in X) for j in range(size)] + [sum(r[i] * t for r, t in zip(X, y))] for i in range(size)]
for col in range(size):
    pivot = max(range(col, size), key=lambda r: abs(A[r][col]))
    A[col], A[pivot] = A[pivot], A[col]
    for r in range(size):
        if r != col:
            factor = A[r][col] / A[col][col]
            A[r] = [a - factor * b for a, b in zip(A[r], A[col])]
w = [A[i][size] / A[i][i] for i in range(size)]

with open("submission.csv", "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["id", "y"])
    for row in test:
        value = w[0] + sum(wi * float(row[c]) for wi, c in zip(w[1:], FEATURES))
        writer.writerow([row["id"], int(value > 0.5) if CLASSES else value])
print("weights", [round(v, 4) for v in w])
'''

_PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{distribution}"
version = "0.1.0"
description = "mlab task pack {pack}"
readme = "README.md"
requires-python = ">=3.10"
dependencies = ["mlab", "scikit-learn>=1.4"]  # mlab computes its built-in metrics with scikit-learn

# The entry point names the folder of task folders; its name is the prefix of the tasks' names ({pack}/...).
[project.entry-points.mlab]
{pack} = "{package}"

[tool.setuptools]
packages = ["{package}"]  # a folder of task folders, not of Python modules

[tool.setuptools.package-data]
{package} = ["**/*"]
"""

_README = """\
# {distribution}

An mlab task pack of declarative tasks: each folder under `{package}/` with a `task.yaml` is the task
`{pack}/<name>`. Add a task with `mlab new-task {package}/<name>`.

```sh
pip install .
mlab tasks                      # lists {pack}/{name}
mlab check-task {pack}/{name}
```
"""


def slug(text: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9]+", "-", text.lower())).strip("-")


def scaffold(directory: Path, name: str | None = None, metric: str = "mse", pack: str | None = None) -> Path:
    """Write a task folder at directory (or, with pack, a pack distribution there holding one); returns the task
    folder. Refuses a directory that exists and is not empty: nothing already there is touched."""
    directory = Path(directory)
    name = name or slug(directory.name)
    if not re.fullmatch(NAME_PART, name):
        raise MlabError(f"task name {name!r} must be lowercase letters, digits and single hyphens (give --name)")
    if metric not in SCAFFOLD_METRICS:
        raise MlabError(f"the scaffold's data suits the metrics {', '.join(SCAFFOLD_METRICS)}, not {metric!r}; "
                        f"start from one and change the data (mlab's metrics: {', '.join(METRICS)})")
    if pack is not None and not re.fullmatch(NAME_PART, pack):
        raise MlabError(f"pack name {pack!r} must be lowercase letters, digits and single hyphens")
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise MlabError(f"{directory} already exists and is not an empty folder; give a new one")
    files: dict[Path, str] = {}
    task_folder = directory
    if pack is not None:
        package = f"mlab_{pack.replace('-', '_')}_tasks"
        distribution = f"mlab-{pack}-tasks"
        task_folder = directory / package / name
        fields = {"pack": pack, "package": package, "distribution": distribution, "name": name}
        files[directory / "pyproject.toml"] = _PYPROJECT.format(**fields)
        files[directory / "README.md"] = _README.format(**fields)
    classes = not METRICS[metric].numeric
    what, predict = _CONSTANT[classes]
    files[task_folder / "task.yaml"] = _TASK_YAML.format(
        folder=task_folder, name=name, metric=metric)
    files[task_folder / "prepare.py"] = _PREPARE.format(classes=classes)
    files[task_folder / "starter" / "train.py"] = _STARTER.format(what=what, predict=predict)
    files[task_folder / "reference" / "solve.py"] = _REFERENCE.format(
        classes=classes, rounding=", thresholded at 0.5 for classes" if classes else "")
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return task_folder
