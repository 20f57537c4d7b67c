"""The validation splits of the pack's tasks whose data is a training table: a seeded fifth of the training rows
(or patients) written again as validation inputs, their answers to the hidden folder. The public training data
keeps the rows, so runs without --allow-validate get the original's task; runs with it get the training files
without them (ValidationSplit.held_out)."""
from __future__ import annotations

import random

from mlab.core import ValidationSplit

VALID_FRACTION = 0.2
VALID_SEED = 20240  # any fixed number: the split must be the same at every prepare
VALID_ANSWER = "valid_answer.csv"  # in the hidden folder, read by evaluate in place of answer.csv
VALID_PREDICTIONS = "valid_submission.csv"


def pick(n: int, seed: int = VALID_SEED) -> list[int]:
    """Positions of the validation rows among n training rows, in their order in the training file."""
    return sorted(random.Random(seed).sample(range(n), round(n * VALID_FRACTION)))


def split(inputs: str, test_inputs: str, held_out: dict[str, str]) -> ValidationSplit:
    return ValidationSplit(inputs=inputs, predictions=VALID_PREDICTIONS, submission="submission.csv",
                           answers={VALID_ANSWER: "answer.csv"}, test_inputs=test_inputs, held_out=held_out)
