"""The mlagentbench pack README's deviation table says what the code does (issue 44 item 3): each fact a test can
pin is read from the code, not copied into the test."""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from tests.fixtures.lazy import lazy

pd = lazy("pandas")

README = Path(__file__).resolve().parents[1] / "plugins" / "tasks" / "mlagentbench" / "README.md"


def readme() -> str:
    return README.read_text(encoding="utf-8")


def deviation_rows() -> list[str]:
    table = readme().split("## Deviations from the original", 1)[1]
    return [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| deviation")]


def row(*words: str) -> str:
    """The one deviation row whose first cell holds every word."""
    found = [r for r in deviation_rows() if all(w in r.split(" | ")[0] for w in words)]
    assert len(found) == 1, (words, [r[:80] for r in found])
    return found[0]


def test_allow_validate_is_a_deviation_row_as_the_code_implements_it():
    from mlab.core.run.validation import ALLOW_VALIDATE_FLAG
    from mlab.core.task import ValidationSplit
    from mlab_tasks_mlagentbench.tasks.validation import VALID_FRACTION

    text = row(f"`{ALLOW_VALIDATE_FLAG}`")
    assert VALID_FRACTION == 0.2 and "a seeded fifth of the training rows" in text
    assert "`Validate Submission`" in text
    assert f"at most {ValidationSplit.__dataclass_fields__['max_calls'].default} calls" in text
    assert "17,339" in text and "17,188" in text  # its measured effect on the reference's score


def test_the_denominator_row_states_the_out_of_memory_rule_the_code_applies_and_the_originals():
    from mlab.core.bench import results
    from mlab.core.bench.metrics import ORIGINAL_EXCLUDED_END, ORIGINAL_EXCLUDES

    text = row('"success (original)" denominator')
    for pattern in results._OOM.pattern.split("|"):  # every message mlab takes for out of memory
        assert f"`{pattern}`" in text, pattern
    for step in results._RUNS_CODE:  # and where it looks for them
        assert step in text, step
    assert "out_of_memory" in ORIGINAL_EXCLUDES and ORIGINAL_EXCLUDED_END in text
    # the original's own rule, and what else it drops that mlab keeps
    for original in ('"CUDA out of memory"', "MKL", "OpenBLAS", '"Connection aborted"', "overall_time.txt"):
        assert original in text, original
    # its GPT-4 runs are exempt from the error.txt and connection filters only
    assert "does not filter its GPT-4 runs at all" not in readme()
    assert "still drops their out-of-memory and MKL" in text


def test_infinity_is_a_row_because_mlab_refuses_what_the_original_counts():
    from mlab.core.run.scoring import is_valid

    assert not is_valid(math.inf)
    assert "+inf" in row("+inf")


def test_the_house_price_mae_row_gives_the_ulps_the_original_sum_can_differ_by():
    """The original's `sum(abs(a - b)) / len` against np.mean, on 300 seeded submissions of house-price's 292 test
    rows: differences beyond 2 ulps are common, so "1-2 ulps" was wrong."""
    rng = np.random.default_rng(0)
    answers = pd.Series(rng.lognormal(12, 0.4, 292))
    ulps = []
    for _ in range(300):
        errors = abs(answers * np.exp(rng.normal(0, 0.15, 292)) - answers)
        original, ours = sum(errors) / len(answers), float(np.mean(errors.to_numpy()))
        ulps.append(abs(original - ours) / np.spacing(ours))
    assert max(ulps) > 4
    text = row("house-price MAE")
    assert "1-2 ulps" not in text and "2 of them by 4 ulps" in text
    assert re.search(r"up to \d+ ulps", text)


def test_known_gaps_and_the_speed_rows_agree():
    text = readme()
    gaps = text.split("Known gaps:", 1)[1].split("\n\n", 1)[0]
    # the timer counts every process of the worker's tree, ended ones too (time_pair.py), and llama-inference
    # compares the generated tokens with the starter's: neither is a gap
    assert "never waits for" not in gaps and "does not check the generated tokens" not in gaps
    from mlab_tasks_mlagentbench.time_pair import SAME_TOKENS

    assert f"{SAME_TOKENS:.0%}" in row("llama-inference: random token sequences")
    # an unchanged vectorization starter is not "within a few %" at any load
    assert "whatever the load" not in row("vectorization: the score is measured by the scorer")
    assert "-42%" in row("vectorization: the score is measured by the scorer")
