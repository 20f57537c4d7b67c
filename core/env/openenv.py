"""A task as an OpenEnv-shaped environment: `reset` starts a new episode (a new run folder under runs_dir) and
observes the task's prompt and tools, `step(ToolAction)` calls one tool, `state` says where the episode is. The
types mirror OpenEnv's (an observation with done, reward and metadata; a state with episode_id and step_count)
without depending on it. Episodes one after another; for many at once, one TaskEnv each."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from mlab.core.env.episode import Episode, EpisodeOver
from mlab.core.env.folders import new_episode_dir
from mlab.core.env.prepare import prepare_task
from mlab.core.errors import MlabError
from mlab.core.run.taskdata import TaskHome


class ToolAction(BaseModel):
    """One tool call: the tool's name (execute_script) and its arguments."""

    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)


class TaskObservation(BaseModel):
    """The task's prompt and tools (reset), or a tool's output (step); the reward when the episode is done (and
    at each step with intermediate_rewards)."""

    text: str
    tools: list[dict[str, Any]] = Field(default_factory=list)  # at reset: OpenAI function tools
    is_error: bool = False
    done: bool = False
    reward: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class EpisodeState(BaseModel):
    episode_id: str | None = None  # the run folder's name
    step_count: int = 0
    task: str
    run_dir: str | None = None
    done: bool = False


_ready: set[tuple[str, ...]] = set()  # (task home, task, its parameters, reward kind) prepared in this process
_ready_lock = threading.Lock()


class TaskEnv:
    """Episodes of `task`, each a run in a new folder under `runs_dir`. `options` are Episode's (settings of the
    run, tools, reward, invalid_reward). The task is prepared, and its baseline measured where the reward needs
    it, at the first reset (prepare=False: it must be already)."""

    def __init__(self, task: str, runs_dir: str | Path = "runs/train", *, intermediate_rewards: bool = False,
                 prepare: bool = True, **options: Any):
        self.task = task
        self.runs_dir = Path(runs_dir)
        self.intermediate_rewards = intermediate_rewards
        self.prepare = prepare
        self.options = options
        self.episode: Episode | None = None

    def _prepare(self, task: str) -> None:
        key = (str(TaskHome.from_env().root), task, repr(sorted((self.options.get("task_params") or {}).items())),
               str(self.options.get("reward", "improvement")))
        with _ready_lock:  # once per task: episodes starting at once would race to prepare it
            if key in _ready:
                return
            prepare_task(task, baseline=key[-1] == "improvement", sandbox=self.options.get("sandbox", "auto"),
                         task_params=self.options.get("task_params"), registry=self.options.get("registry"))
            _ready.add(key)

    def reset(self, seed: int | None = None, episode_id: str | None = None, task: str | None = None,
              **_ignored: Any) -> TaskObservation:
        """A new episode (the one going on, if any, is ended and scored first). Other keywords (a trainer's dataset
        columns) are ignored."""
        self.close()
        task = task or self.task
        if self.prepare:
            self._prepare(task)
        options = dict(self.options)
        if seed is not None:
            options["seed"] = seed
        run_dir = new_episode_dir(self.runs_dir, task, options.get("seed", 0), episode_id)
        self.episode = Episode(task, run_dir, **options)
        try:
            prompt = self.episode.start()
        except BaseException:
            if not any(run_dir.iterdir()):
                run_dir.rmdir()
            raise
        return TaskObservation(text=prompt, tools=self.episode.tools, metadata={"run_dir": str(run_dir)})

    def step(self, action: ToolAction | dict[str, Any], timeout_s: float | None = None,
             **_ignored: Any) -> TaskObservation:
        """Call one tool. The action's time limit is the run's (action_timeout_s), not timeout_s."""
        episode = self._episode()
        action = ToolAction.model_validate(action)
        try:
            turn = episode.call(action.tool, **action.arguments)
        except EpisodeOver as exc:
            return TaskObservation(text=f"EnvError: {exc}", is_error=True, done=True,
                                   reward=episode.finish().reward)
        reward = None
        if turn.done:
            reward = episode.finish().reward
        elif self.intermediate_rewards:
            reward = episode.score_now().reward
        return TaskObservation(text=turn.observation, is_error=turn.is_error, done=turn.done, reward=reward,
                               metadata={"step": turn.step})

    @property
    def state(self) -> EpisodeState:
        episode = self.episode
        if episode is None:
            return EpisodeState(task=self.task)
        return EpisodeState(episode_id=episode.run_dir.name, step_count=len(episode.steps), task=episode.config.task,
                            run_dir=str(episode.run_dir), done=episode.done)

    def finish(self) -> float:
        """End the episode (if it goes on) and give its reward: the task's verdict on its submission."""
        return self._episode().finish().reward

    def _episode(self) -> Episode:
        if self.episode is None:
            raise MlabError("no episode yet: call reset() first")
        return self.episode

    def close(self) -> None:
        """End the episode going on, if any (its run is scored, as any run that ends)."""
        if self.episode is not None:
            self.episode.close()
