"""Mean absolute error of ./submission.csv against $MLAB_ANSWERS, written to $MLAB_SCORE_FILE.

Runs in mlab's scoring sandbox with the submission folder as its working directory. An unusable submission
exits with code 1 and says why on its last line of output."""
import csv
import math
import os
import sys


def refuse(why):
    print(why)
    sys.exit(1)


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


if not os.path.isfile("submission.csv"):
    refuse("there is no submission.csv")
answers = {row["id"]: float(row["y"]) for row in read(os.environ["MLAB_ANSWERS"])}
try:
    rows = read("submission.csv")
    predictions = {row["id"]: float(row["y"]) for row in rows}
except (KeyError, TypeError, ValueError, csv.Error, UnicodeDecodeError) as exc:
    refuse(f"submission.csv needs the columns id and y with numbers: {exc}")
if set(predictions) != set(answers) or len(rows) != len(answers):
    refuse(f"submission.csv needs exactly one row per test.csv id ({len(answers)} rows)")
if not all(math.isfinite(value) for value in predictions.values()):
    refuse("submission.csv has a y that is not a finite number")
error = sum(abs(predictions[key] - value) for key, value in answers.items()) / len(answers)
with open(os.environ["MLAB_SCORE_FILE"], "w") as f:
    f.write(f"{error!r}\n")
print(f"MAE {error:.4f}")
