"""The metrics a declarative task may name: each compares a submission's column with the answers' column.

Computed with scikit-learn, imported only when a task is scored. Every score must be above 0 for improvement over
a baseline to be defined, so metrics that can be 0 or negative for honest submissions (R², say) are not offered.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BuiltinMetric:
    name: str
    higher_is_better: bool
    numeric: bool  # predictions must be numbers (regression, scores); else labels compared as given
    description: str
    compute: Callable[[Sequence[Any], Sequence[Any]], float]  # (answers, predictions) -> score


def _sk(function: str, **kwargs: Any) -> Callable[[Sequence[Any], Sequence[Any]], float]:
    def compute(truth: Sequence[Any], predicted: Sequence[Any]) -> float:
        from sklearn import metrics

        return float(getattr(metrics, function)(truth, predicted, **kwargs))
    return compute


def _rmse(truth: Sequence[Any], predicted: Sequence[Any]) -> float:
    from sklearn.metrics import root_mean_squared_error

    return float(root_mean_squared_error(truth, predicted))


METRICS: dict[str, BuiltinMetric] = {m.name: m for m in [
    BuiltinMetric("accuracy", True, False, "fraction of labels predicted exactly", _sk("accuracy_score")),
    BuiltinMetric("balanced-accuracy", True, False, "mean recall over classes", _sk("balanced_accuracy_score")),
    BuiltinMetric("f1", True, False, "F1 of the positive label 1 (binary)", _sk("f1_score", pos_label=1)),
    BuiltinMetric("f1-macro", True, False, "F1 averaged over classes", _sk("f1_score", average="macro")),
    BuiltinMetric("roc-auc", True, True, "area under the ROC curve of a score for label 1 (binary)",
                  _sk("roc_auc_score")),
    BuiltinMetric("mae", False, True, "mean absolute error", _sk("mean_absolute_error")),
    BuiltinMetric("mse", False, True, "mean squared error", _sk("mean_squared_error")),
    BuiltinMetric("rmse", False, True, "root mean squared error", _rmse),
]}


# What a task's description and research problem may say through the spec, so the metric is named in one place:
# changing `metric:` in task.yaml changes what the agent is told.
def with_metric_words(text: str, name: str, higher_is_better: bool) -> str:
    """`text` with {metric} (the metric's name), {metric_description} (what it measures) and {direction}
    ("higher" or "lower", as in "{direction} is better") filled in from the task's spec; other braces stay."""
    known = METRICS.get(name)
    words = {"{metric}": name, "{metric_description}": known.description if known else name,
             "{direction}": "higher" if higher_is_better else "lower"}
    for placeholder, value in words.items():
        text = text.replace(placeholder, value)
    return text
