"""What the search agent asks its model: one whole solution script per operator."""
from __future__ import annotations

from .fitness import METRIC_TAG

ROLE = ("You are an experienced machine-learning engineer. You solve the task below by writing complete, "
        "self-contained Python scripts; each one is run as it is and judged by its validation score.")
HARNESS_SCORE = "the harness's validation score"  # what a node's fitness is called when the harness validates


def score_name(validated: bool) -> str:
    return HARNESS_SCORE if validated else METRIC_TAG


def metric_rule(direction: str | None) -> str:
    if direction is None:
        return ("print the validation score as a number where higher is better (print minus the value of an "
                "error or a loss)")
    return f"print the task's metric on the validation data ({direction} is better)"


def requirements(direction: str | None, validation: tuple[str, str] | None = None) -> str:
    """What every script must do; with validation (what the harness says of its validation split, the file the
    script writes its predictions for it to) the harness scores the script instead of a line it prints."""
    if validation is None:
        measure = [
            "- It trains only on the training data and holds part of it out (or cross-validates) to measure itself.",
            f"- It must {metric_rule(direction)} on one line of its own, exactly like `{METRIC_TAG}: 0.8123`.",
        ]
    else:
        about, predictions = validation
        measure = [
            f"- The harness scores it on a validation split whose labels it keeps. {about}",
            f"- Besides the submission, it writes its predictions for those validation inputs, in the format of "
            f"the submission, to `{predictions}` (exactly this path), from a model fitted without the validation "
            "rows; the submission's model may then use all the training data.",
        ]
    return "\n".join([
        "Requirements for every script:",
        "- It runs from the workspace folder as `python SCRIPT`, unattended, with the packages already installed.",
        *measure,
        "- It writes the submission file exactly as the task says, in the workspace folder.",
        "- It finishes in a few minutes: no long hyperparameter sweeps.",
    ])


def context(task: str, listing: str, starter_name: str, starter: str, direction: str | None,
            validation: tuple[str, str] | None = None) -> str:
    return (f"{ROLE}\n\n# Task\n{task}\n\n# Files in the workspace\n{listing}\n\n"
            f"# The task's starter script, {starter_name}\n```python\n{starter}\n```\n\n"
            f"{requirements(direction, validation)}")


def reply_format() -> str:
    return ("Reply with a short plan (two to five sentences: what the script does and why), then the whole "
            "script in a single ```python code block. Nothing after the code block.")


def draft(results: str) -> str:
    return ("# Your job: a new solution\nWrite a new, reasonably simple solution to the task, different from the "
            f"earlier drafts listed below.\n\n# Results so far\n{results}\n\n{reply_format()}")


def improve(code: str, output: str, fitness: float, results: str, score: str = METRIC_TAG) -> str:
    return ("# Your job: improve a working solution\nThe script below ran and got "
            f"{score} = {fitness:g}. Make one focused change likely to improve that score (a feature, a "
            "model, a hyperparameter, a training detail), and keep everything that works.\n\n"
            f"```python\n{code}\n```\n\nIts output:\n```\n{output}\n```\n\n# Results so far\n{results}\n\n"
            f"{reply_format()}")


def debug(code: str, output: str, problem: str) -> str:
    return ("# Your job: fix a failing solution\nThe script below did not work: "
            f"{problem}. Find the cause and fix it, keeping the approach; if it ran too long, make it faster.\n\n"
            f"```python\n{code}\n```\n\nIts output:\n```\n{output}\n```\n\n{reply_format()}")


def crossover(first: tuple[str, float], second: tuple[str, float], results: str, score: str = METRIC_TAG) -> str:
    (code_a, fit_a), (code_b, fit_b) = first, second
    return ("# Your job: combine two working solutions\nSolution A got "
            f"{score} = {fit_a:g} and solution B {score} = {fit_b:g}. Write one script that combines "
            "the strongest ideas of both (e.g. B's features with A's model, or an ensemble of the two).\n\n"
            f"Solution A:\n```python\n{code_a}\n```\n\nSolution B:\n```python\n{code_b}\n```\n\n"
            f"# Results so far\n{results}\n\n{reply_format()}")


def correction(problem: str) -> str:
    return f"That reply could not be used: {problem}. {reply_format()}"
