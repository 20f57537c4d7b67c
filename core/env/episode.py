"""An episode: one mlab run driven turn by turn by a trainer. `start` builds the run (a fresh workspace in its
sandbox) and gives the task's prompt and tools; each tool call is one step of the run, through the run's own
environment, snapshots and trace; `finish` ends the run, scored as any run is, and gives its verdict and reward.
The run folder is a real one: `mlab eval`, `mlab view`, the report and the exports read it.

The run goes on in a thread of its own (the runner's loop, unchanged), waiting for each action; many episodes may
go on at once, each with its own sandbox."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlab.core.actions import ActionSpec
from mlab.core.agentkit.problem import research_problem
from mlab.core.agentkit.tools import action_tools, tool_name
from mlab.core.bench.verdict import RunJudge
from mlab.core.env.driven import AGENT_NAME, Turns, hand_over, with_trainer_agent
from mlab.core.env.outcome import INVALID_REWARD, Outcome, RewardKind, check_reward_source, outcome_of
from mlab.core.env.tools import action_named, offered_actions
from mlab.core.errors import MlabError
from mlab.core.models import Action, RunConfig, Step, StopRun, Trace
from mlab.core.plugins.registry import Registry, load_registry
from mlab.core.run.runner import INITIAL_SNAPSHOT, Runner
from mlab.core.run.task_lookup import find_task, run_fields

TRAINER_ENDED = "the trainer ended the episode"


class EpisodeOver(MlabError):
    """An action for an episode whose run has ended."""


@dataclass(frozen=True)
class Turn:
    """What one tool call gave: its observation (the trace's), whether it failed, and whether the run has ended
    (a final answer, the step or time limit)."""

    observation: str
    is_error: bool = False
    done: bool = False
    step: int | None = None  # the step of the run it became; None for a call refused before it was one


class Episode:
    """One run of `task` in `run_dir` (an empty or new folder), driven turn by turn. `settings` are the run's
    (RunConfig's fields: max_steps, max_time_s, action_timeout_s, seed, sandbox, llm, label, tags, meta,
    task_params, allow_validate, ...); `tools` picks the tools offered (tool or action names; default: every
    action the run offers that needs no model, or all with `llm`); `reward` is `improvement` (over the task's
    baseline, which must be known) or `score`; a submission without a valid score earns `invalid_reward`."""

    def __init__(self, task: str, run_dir: str | Path, *, registry: Registry | None = None,
                 tools: list[str] | None = None, reward: RewardKind = "improvement",
                 invalid_reward: float = INVALID_REWARD, **settings: Any):
        self.registry = with_trainer_agent(registry or load_registry())
        self.run_dir = Path(run_dir).resolve()
        found = find_task(self.registry, task, settings.pop("task_params", None))  # a task folder too
        self.config = RunConfig(**run_fields(found), agent=AGENT_NAME, **settings)
        self.reward_kind: RewardKind = reward
        self.invalid_reward = invalid_reward
        self._chosen = tools
        self._turns = Turns()
        self._lock = threading.Lock()  # one call at a time
        self._thread: threading.Thread | None = None
        self._runner: Runner | None = None
        self._ended: Trace | BaseException | None = None
        self._outcome: Outcome | None = None
        self._steps: list[Step] = []
        self.prompt = ""
        self.actions: dict[str, ActionSpec] = {}
        self.tools: list[dict[str, Any]] = []
        self.warnings: list[str] = []  # what the sandbox cannot enforce here (also in the trace and errors.log)

    # ---- the run's life --------------------------------------------------------------------------------
    def start(self) -> str:
        """Build the run and wait until it asks for its first action; returns the task's prompt."""
        with self._lock:
            if self._thread is not None:
                raise MlabError("an episode starts once: start a new Episode for the next one")
            runner = self._runner = Runner(self.run_dir, self.config, self.registry,
                                           on_step=lambda step: self._turns.events.put(("step", step)),
                                           warn=self.warnings.append)
            self._judge = RunJudge(runner.harness.home)
            check_reward_source(self._judge, self.run_dir, runner.task, self.reward_kind)
            self._thread = threading.Thread(target=self._drive, args=(runner,), daemon=True,
                                            name=f"mlab-episode-{self.run_dir.name}")
            self._thread.start()
            kind, payload = self._turns.events.get()
            if kind == "ended":
                self._end(payload)
                if isinstance(payload, BaseException):
                    raise payload
                raise MlabError(f"run {str(self.run_dir)!r} ended before its first step: {payload.end_reason}")
            ctx, _state = payload
            self.actions = offered_actions(ctx.actions, ctx.llm is not None, self._chosen)
            self.tools = action_tools(self.actions)
            self.prompt = research_problem(ctx, self.actions)
            return self.prompt

    def _drive(self, runner: Runner) -> None:
        hand_over(self._turns)  # the runner builds its agent in this thread
        ended: Trace | BaseException = MlabError("the run's thread ended without a word")
        try:
            ended = runner.start()
        except BaseException as exc:  # told to the trainer's thread, which raises it
            ended = exc
        finally:
            hand_over(None)
            self._turns.events.put(("ended", ended))

    def _end(self, ended: Trace | BaseException) -> None:
        self._ended = ended
        if self._thread is not None:
            self._thread.join()

    @property
    def started(self) -> bool:
        return self._thread is not None

    @property
    def done(self) -> bool:
        return self._ended is not None

    @property
    def steps(self) -> list[Step]:
        """The run's steps so far, as its trace holds them."""
        return list(self._steps)

    # ---- turns --------------------------------------------------------------------------------------
    def call(self, tool: str, **arguments: Any) -> Turn:
        """Call a tool by its name (execute_script) or its action's (Execute Script)."""
        action = action_named(tool, self.actions)
        if action is None:
            if not self.started:
                raise MlabError("the episode has not started: call start() first")
            return Turn(f"EnvError: tool {tool!r} is not offered; the tools are: "
                        f"{', '.join(map(tool_name, self.actions))}", is_error=True, done=self.done)
        return self.act(Action(name=action, args=arguments))

    def act(self, action: Action) -> Turn:
        """One step of the run: the action executed by the run's environment, snapshotted and traced."""
        with self._lock:
            if not self.started:
                raise MlabError("the episode has not started: call start() first")
            if self.done:
                raise EpisodeOver(f"the episode in {str(self.run_dir)!r} has ended ({self._end_reason()})")
            self._turns.actions.put(action)
            step = self._await_turn()
            observation = step.observation if step else ""
            if self.done:
                observation += f"\n\n[The episode has ended: {self._end_reason()}.]"
            return Turn(observation.strip(), is_error=step.is_error if step else True, done=self.done,
                        step=step.index if step else None)

    def _await_turn(self) -> Step | None:
        """The step the action became, once the run asks for the next action or has ended."""
        step = None
        while True:
            kind, payload = self._turns.events.get()
            if kind == "step":
                step = payload
                self._steps.append(payload)
            elif kind == "asking":
                return step
            else:
                self._end(payload)
                return step

    def _end_reason(self) -> str:
        ended = self._ended
        if isinstance(ended, Trace):
            return ended.end_reason or ended.status
        return f"{type(ended).__name__}: {ended}"

    # ---- rewards ------------------------------------------------------------------------------------
    def score_now(self) -> Outcome:
        """An intermediate reward: the workspace after the latest step (its snapshot) judged as the final one
        would be; the run goes on."""
        with self._lock:
            if self._runner is None:
                raise MlabError("the episode has not started: call start() first")
            if self.done:
                return self._finish()
            snapshot = self._steps[-1].snapshot if self._steps else INITIAL_SNAPSHOT
            runner = self._runner
            score, error = runner.harness.score_snapshot(runner.task, self.run_dir, snapshot)
            return outcome_of(self._judge, runner.task, self.run_dir, score, error, self.reward_kind,
                              self.invalid_reward, steps=len(self._steps))

    def finish(self) -> Outcome:
        """End the run (as an agent that stops does, unless it has ended) and give its verdict and reward: the run
        scored as every run is, judged as `mlab eval` judges its folder."""
        with self._lock:
            return self._finish()

    def _finish(self) -> Outcome:
        if self._outcome is not None:
            return self._outcome
        if self._runner is None:
            raise MlabError("the episode has not started: call start() first")
        if not self.done:
            self._turns.actions.put(StopRun(reason=TRAINER_ENDED))
            self._await_turn()
        ended = self._ended
        if not isinstance(ended, Trace):
            raise MlabError(f"run {str(self.run_dir)!r} failed: {self._end_reason()}") from ended
        self._outcome = outcome_of(self._judge, self._runner.task, self.run_dir, ended.final_score,
                                   ended.final_score_error, self.reward_kind, self.invalid_reward,
                                   status=ended.status, end_reason=ended.end_reason, steps=len(ended.steps))
        return self._outcome

    def close(self) -> None:
        """End the run if it is going on (it is scored, as any run that ends)."""
        if self.started and self._outcome is None and not isinstance(self._ended, BaseException):
            self.finish()

    def __enter__(self) -> Episode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
