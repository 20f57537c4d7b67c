"""mlab's public API for bridges: mlab's tasks run by another framework's agent (Inspect's, say).

A bridge imports this module and `mlab.core`, nothing deeper (tests/test_public_api.py enforces it). `BridgedRun`
is one run whose agent lives elsewhere: the core builds its folder, workspace, sandbox, snapshots and trace, and
scores and judges it as `mlab eval` does; the bridge runs the other framework's commands through it, records each
as a step, and hands over the model calls it saw as the run's call log. The folder is a run folder like any other:
`mlab view`, `runs`, `eval`, `report` and the exports read it.
"""
from __future__ import annotations

import errno
import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from mlab.core.bench.verdict import RunJudge
from mlab.core.llm.client import usage_of_log
from mlab.core.models import Action, RunConfig, Step, Trace
from mlab.core.plugins.registry import load_registry
from mlab.core.run.harness import Harness
from mlab.core.run.runner import INITIAL_SNAPSHOT, step_snapshot_name
from mlab.core.run.snapshot import SnapshotStore
from mlab.core.run.trace import LLM_LOG_FILE, WORKSPACE_DIR, write_config, write_trace
from mlab.core.sandbox.spec import ExecResult
from mlab.core.task import Task

__all__ = ["BridgedRun", "load_task", "task_names"]

FINAL_SNAPSHOT = "final"
MAX_FILE_BYTES = 100 * 2**20  # read_file's default limit


def task_names() -> list[str]:
    """Every registered task's name (PACK/NAME), sorted."""
    return sorted(load_registry().items["tasks"])


def load_task(name: str) -> Task:
    """The task `name` (a registered name or a task folder), as `mlab run --task` finds it."""
    return Harness(load_registry()).task(name)


class BridgedRun:
    """One run of `task` in `run_dir` (a new folder) whose agent is another framework's. `agent` and `llm` name it
    in the run's config (the llm may be given later by record_calls); `sandbox` is `mlab run --sandbox`'s choice;
    `timeout_s` is a command's time limit where exec gives none. Methods may be called from several threads."""

    def __init__(self, task: str, run_dir: str | Path, *, agent: str, llm: str = "", sandbox: str = "auto",
                 timeout_s: float = 3600.0):
        self._harness = harness = Harness(load_registry(), sandbox=sandbox)
        self.task = harness.task(task)
        harness.ensure_prepared(self.task)
        self.run_dir = Path(run_dir).resolve()
        self.run_dir.mkdir(parents=True)
        self.workspace = harness.new_workspace(self.task, self.run_dir / WORKSPACE_DIR)
        (self.run_dir / "home").mkdir()
        self._store = SnapshotStore(self.run_dir)
        self._store.record(self.workspace, INITIAL_SNAPSHOT)
        self._env = harness.environment(self.task, self.workspace, store=self._store,
                                        sandbox_home=self.run_dir / "home", timeout_s=timeout_s)
        self._space = self._env.files.workspace  # file access that follows no link the agent code planted
        self._lock = threading.Lock()  # one step written at a time
        config = RunConfig(task=self.task.name, agent=agent, llm=llm, sandbox=harness.sandbox_name,
                           sandbox_confined=harness.sandbox_confined, max_steps=10_000)
        self.trace = Trace(run_id=self.run_dir.name, config=config, started_at=time.time())
        write_config(self.run_dir, config)
        write_trace(self.run_dir, self.trace)

    def exec(self, argv: list[str], *, timeout_s: float | None = None, cwd: str | None = None,
             env: dict[str, str] | None = None, stdin: bytes | None = None) -> ExecResult:
        """Run a command in the run's sandbox, confined as agent code is; `python` on its PATH is the run's (with
        the task's packages). `cwd` is a workspace folder (EnvError outside it). Not a step: record it with step()."""
        spec = self._env.exec_spec(timeout_s=timeout_s)
        path = str(Path(self._env.s.python).parent) + os.pathsep + spec.env.get("PATH", os.defpath)
        update: dict[str, Any] = {"env": {**spec.env, "PATH": path, **(env or {})}}
        if cwd:
            update["cwd"] = self._space.path(self._relative(cwd))
        fed = None
        if stdin is not None:  # the sandbox's commands take no stdin data: it goes through a file in the home
            fed = self.run_dir / "home" / f".stdin-{uuid.uuid4().hex[:8]}"
            fed.write_bytes(stdin)
            argv = ["sh", "-c", 'exec "$@" < "$0"', str(fed), *argv]
        try:
            return self._env.s.sandbox.run(list(argv), spec.model_copy(update=update))
        finally:
            if fed is not None:
                fed.unlink(missing_ok=True)

    def step(self, action: Action, observation: str, *, started: float, is_error: bool = False) -> Step:
        """The run's next step: what the agent did (`started` is its time.time()) and saw; the workspace is
        snapshotted after it and the trace written."""
        with self._lock:
            index = len(self.trace.steps) + 1
            snapshot = step_snapshot_name(index)
            self._store.record(self.workspace, snapshot)
            step = Step(index=index, action=action, observation=observation, is_error=is_error, started_at=started,
                        duration_s=time.time() - started, snapshot=snapshot)
            self.trace.steps.append(step)
            write_trace(self.run_dir, self.trace)
            return step

    def read_file(self, name: str, limit: int = MAX_FILE_BYTES) -> bytes:
        """A workspace file's bytes. FileNotFoundError when there is none; EnvError when `name` is outside the
        workspace, not a regular file, or over `limit` bytes. A path is relative to the workspace, or an absolute one
        in it."""
        name = self._relative(name)
        if not os.path.lexists(self._space.path(name)):
            raise FileNotFoundError(errno.ENOENT, "no such file in the run's workspace", name)
        return self._space.read_bytes(name, limit)

    def write_file(self, name: str, data: bytes) -> None:
        """Write a workspace file, its folders made; EnvError when the task makes it read-only, or it is outside
        the workspace or a folder."""
        name = self._relative(name)
        self._space.write_atomic(self._space.writable(name), data, name)

    def _relative(self, name: str) -> str:
        """A workspace path as given, or made relative where it is absolute and names the workspace's folder."""
        folder = str(self.workspace)
        return os.path.relpath(name, folder) if name == folder or name.startswith(folder + os.sep) else name

    def record_calls(self, entries: list[dict[str, Any]]) -> None:
        """The agent's model calls as the run's call log (llm_calls.jsonl, one entry per call in the shape
        mlab's LLM client writes; an entry's `step` is the step the call led to), and their usage in the trace:
        the run's, and each step's up to it. The first entry's model becomes the run's llm if it had none."""
        with self._lock:
            data = "".join(json.dumps(e, ensure_ascii=False, default=str) + "\n" for e in entries)
            (self.run_dir / LLM_LOG_FILE).write_text(data, encoding="utf-8")
            for step in self.trace.steps:
                step.usage = usage_of_log([e for e in entries if e["step"] <= step.index])
            self.trace.usage = usage_of_log(entries)
            if entries and not self.trace.config.llm:
                self.trace.config.llm = entries[0]["model"]
                write_config(self.run_dir, self.trace.config)
            write_trace(self.run_dir, self.trace)

    def finish(self, reason: str) -> dict[str, Any]:
        """End the run: the workspace snapshotted as its final one, scored by the task's scorer, the trace written
        finished. Returns the verdict as `mlab eval --json` gives it: `score`, `error` (why there is none),
        `valid`, `improvement`, `success`, `baseline` and the verdict's other fields."""
        with self._lock:
            self._store.record(self.workspace, FINAL_SNAPSHOT)
            score, error = self._harness.score_snapshot(self.task, self.run_dir, FINAL_SNAPSHOT)
            trace = self.trace
            trace.final_snapshot, trace.final_score, trace.final_score_error = FINAL_SNAPSHOT, score, error
            trace.status, trace.end_reason, trace.total_time_s = "finished", reason, time.time() - trace.started_at
            write_trace(self.run_dir, trace)
        judged = RunJudge(self._harness.home).judge(self.run_dir, self.task, score)
        return {"score": score, "error": error, **judged.fields()}

    def close(self) -> None:
        """Stop what the run's sandbox still runs and let go of the snapshot store."""
        self._env.close()
        self._store.close()
