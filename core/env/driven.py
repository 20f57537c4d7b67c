"""The agent of an episode: the runner asks it for each step as it asks any agent, and it answers with the action
the trainer hands over (Episode.act). So an episode is a run like any other: the same loop, environment, sandbox,
snapshots, trace and scoring, in a thread of its own."""
from __future__ import annotations

import queue
import threading
from typing import Any

from mlab.core.agent import Agent
from mlab.core.agent_context import AgentContext, RunState
from mlab.core.errors import MlabError
from mlab.core.models import Action, StopRun
from mlab.core.plugins.registry import Registry

AGENT_NAME = "trainer"

# What the run's thread tells the trainer's: ("asking", (ctx, state)) the run waits for an action; ("step", Step)
# a step is on disk; ("ended", Trace | Exception) the run is over (scored), or failed to start.
Event = tuple[str, Any]


class Turns:
    """The hand-over between the trainer's thread and the run's: one action at a time."""

    def __init__(self) -> None:
        self.actions: queue.Queue[Action | StopRun] = queue.Queue()
        self.events: queue.Queue[Event] = queue.Queue()


_handed = threading.local()  # the Turns of the run this thread drives: the runner builds its agent in it


def hand_over(turns: Turns | None) -> None:
    """The agent the runner builds in this thread takes its actions from `turns`."""
    _handed.turns = turns


class TrainerAgent(Agent):
    name = AGENT_NAME
    description = "Takes each action from a training loop (mlab.core.env): one tool call, one step."
    needs_llm = False

    def __init__(self, ctx: AgentContext):
        super().__init__(ctx)
        turns = getattr(_handed, "turns", None)
        if turns is None:  # `mlab run --agent trainer` would wait forever for a trainer
            raise MlabError(f"agent {AGENT_NAME!r} takes its actions from a training loop (mlab.core.env.Episode); "
                            "it does not run by itself")
        self.turns: Turns = turns

    def step(self, state: RunState) -> Action | StopRun:
        self.turns.events.put(("asking", (self.ctx, state)))
        return self.turns.actions.get()


def with_trainer_agent(registry: Registry) -> Registry:
    """The registry with the trainer's agent in it (in this process only: no plugin lists it)."""
    agents = registry.items["agents"]
    if AGENT_NAME not in agents:
        agents[AGENT_NAME] = TrainerAgent
        registry.providers["agents"][AGENT_NAME] = "mlab.core.env"
    elif agents[AGENT_NAME] is not TrainerAgent:
        raise MlabError(f"an installed plugin ({registry.provider('agents', AGENT_NAME)}) registers an agent named "
                        f"{AGENT_NAME!r}, the name episodes record their runs under")
    return registry
