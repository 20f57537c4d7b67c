"""The observation of a scored Validate Submission call: the harness writes it (run.validation) and agents read
their node's fitness from it (read_validation), so the two share this one format."""
from __future__ import annotations

import re

_SCORED = re.compile(r"^Validation .+ of .+: (\S+) \((higher|lower) is better\), on the rows of ")


def scored_observation(metric: str, predictions: str, score: float, higher_is_better: bool, inputs: str,
                       call: int, max_calls: int) -> str:
    direction = "higher" if higher_is_better else "lower"
    return (f"Validation {metric} of {predictions}: {score:.6g} ({direction} is better), on the rows of {inputs} "
            f"(labels held by the harness; the test set was not used). Validate Submission call {call} of "
            f"{max_calls}.")


def read_validation(observation: str) -> tuple[float, str] | None:
    """(score, "higher" or "lower" is better) from a Validate Submission observation, None when it scored
    nothing (an EnvError)."""
    found = _SCORED.match(observation)
    if found is None:
        return None
    try:
        return float(found.group(1)), found.group(2)
    except ValueError:
        return None
