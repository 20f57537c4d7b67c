"""Where mlab.core's export table finds ScoringContext and scoring_context: they live with the other contexts a
task's methods get (mlab.core.task_context)."""
from mlab.core.task_context import ScoringContext, scoring_context, scoring_with

__all__ = ["ScoringContext", "scoring_context", "scoring_with"]
