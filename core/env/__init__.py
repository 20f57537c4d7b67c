"""mlab tasks as environments for training agents: a trainer drives a run turn by turn.

`Episode` is one run: `start()` gives the task's prompt (and `tools`, the run's actions as function tools), each
`call(tool, **arguments)` is a step of the run through its own environment and sandbox, `finish()` ends it and
gives its `Outcome`: the task's verdict (as `mlab eval` gives it) and the reward. `score_now()` is an
intermediate reward. Each episode is a run folder (`mlab eval`, `mlab view`, the report and exports read it).

The trainers' shapes: `TaskEnv` (OpenEnv's reset/step/state) and `trl_environment(task)` (TRL's
environment_factory). `prepare_task` makes a task ready for many episodes at once.
"""
from mlab.core.env.episode import Episode, EpisodeOver, Turn
from mlab.core.env.openenv import EpisodeState, TaskEnv, TaskObservation, ToolAction
from mlab.core.env.outcome import INVALID_REWARD, Outcome
from mlab.core.env.prepare import prepare_task
from mlab.core.env.trl import trl_environment

__all__ = ["INVALID_REWARD", "Episode", "EpisodeOver", "EpisodeState", "Outcome", "TaskEnv", "TaskObservation",
           "ToolAction", "Turn", "prepare_task", "trl_environment"]
