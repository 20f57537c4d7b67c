"""An Inspect sandbox environment backed by mlab's sandbox contract: each sample is an mlab run folder whose
workspace the tools' commands run in, confined as `mlab run --sandbox` confines agent code (the task's hidden
files out of sight, its read-only files read-only), each command a step of the run's trace."""
from __future__ import annotations

import json
import os
import shlex
import time
import uuid
from pathlib import Path
from typing import Any, Literal, overload

from inspect_ai.util import ExecResult, SandboxEnvironment, SandboxEnvironmentConfigType, sandboxenv

from mlab.core.llm.client import usage_of_log
from mlab.core.models import Action, RunConfig, Step, Trace
from mlab.core.plugins.registry import load_registry
from mlab.core.run.harness import Harness
from mlab.core.run.readonly import is_read_only
from mlab.core.run.snapshot import SnapshotStore
from mlab.core.run.trace import LLM_LOG_FILE, write_config, write_trace

RUNS_DIR_ENV = "MLAB_INSPECT_RUNS"  # where the run folders go (default: runs/inspect)
AGENT = "inspect-basic"
INITIAL = "step_0000"


class MlabRun:
    """One Inspect sample as an mlab run: a workspace, its sandbox, its trace and snapshots."""

    def __init__(self, task_name: str, sandbox: str, model: str):
        self.harness = Harness(load_registry(), sandbox=sandbox)
        self.task = self.harness.task(task_name)
        self.harness.ensure_prepared(self.task)
        root = Path(os.environ.get(RUNS_DIR_ENV) or "runs/inspect")
        self.run_dir = (root / f"{task_name.replace('/', '__')}--inspect--{uuid.uuid4().hex[:8]}").resolve()
        self.run_dir.mkdir(parents=True)
        self.workspace = self.harness.new_workspace(self.task, self.run_dir / "workspace")
        (self.run_dir / "home").mkdir()
        self.store = SnapshotStore(self.run_dir)
        self.store.take(self.workspace, INITIAL)
        self.env = self.harness.environment(self.task, self.workspace, store=self.store,
                                            sandbox_home=self.run_dir / "home", timeout_s=3600)
        config = RunConfig(task=task_name, agent=AGENT, llm=model, sandbox=self.harness.sandbox_name,
                           sandbox_confined=self.harness.sandbox_confined, max_steps=10_000)
        self.trace = Trace(run_id=self.run_dir.name, config=config, started_at=time.time())
        write_config(self.run_dir, config)
        write_trace(self.run_dir, self.trace)

    def step(self, name: str, args: dict[str, Any], observation: str, started: float, is_error: bool) -> None:
        index = len(self.trace.steps) + 1
        snapshot = f"step_{index:04d}"
        self.store.take(self.workspace, snapshot)
        self.trace.steps.append(Step(index=index, action=Action(name=name, args=args), observation=observation,
                                     is_error=is_error, started_at=started, duration_s=time.time() - started,
                                     snapshot=snapshot))
        write_trace(self.run_dir, self.trace)

    def record_calls(self, entries: list[dict[str, Any]]) -> None:
        """Write the sample's model calls (calls.py) as the run's call log, and their usage into the trace: each
        step's the calls up to it, as a run's steps carry."""
        data = "".join(json.dumps(e, ensure_ascii=False, default=str) + "\n" for e in entries)
        (self.run_dir / LLM_LOG_FILE).write_text(data, encoding="utf-8")
        for step in self.trace.steps:
            step.usage = usage_of_log([e for e in entries if e["step"] <= step.index])
        self.trace.usage = usage_of_log(entries)
        if entries and not self.trace.config.llm:  # the model is known once it has answered
            self.trace.config.llm = entries[0]["model"]
            write_config(self.run_dir, self.trace.config)

    def finish(self, reason: str) -> tuple[float | None, str | None]:
        """Snapshot the workspace as the run's final one and score it with the task's own scorer, as a run's end
        does; the trace is written finished."""
        self.store.take(self.workspace, "final")
        score, error = self.harness.score_snapshot(self.task, self.run_dir, "final")
        self.trace.final_snapshot, self.trace.final_score, self.trace.final_score_error = "final", score, error
        self.trace.status, self.trace.end_reason = "finished", reason
        self.trace.total_time_s = time.time() - self.trace.started_at
        write_trace(self.run_dir, self.trace)
        return score, error

    def inside(self, file: str) -> Path:
        path = (self.workspace / file).resolve()
        if not path.is_relative_to(self.workspace.resolve()):
            raise PermissionError(f"{file}: outside the run's workspace")
        return path

    def close(self) -> None:
        self.env.close()
        self.store.close()


def _action(cmd: list[str], input: str | bytes | None) -> tuple[str, dict[str, Any]]:
    """The step's action as the tool that sent it: Inspect's python tool sends its code on stdin, its bash tool
    runs `bash --login -c COMMAND`; anything else (Inspect's own probes) is shown as the command line."""
    if input is not None:
        return "python", {"code": input if isinstance(input, str) else input.decode("utf-8", "replace")}
    if cmd[:3] == ["bash", "--login", "-c"] and len(cmd) == 4:
        return "bash", {"command": cmd[3]}
    return "exec", {"cmd": shlex.join(cmd)}


@sandboxenv(name="mlab")
class MlabSandboxEnvironment(SandboxEnvironment):
    """Inspect's view of an mlab run's sandbox."""

    def __init__(self, run: MlabRun):
        self.run = run

    @classmethod
    async def sample_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None,
                          metadata: dict[str, str]) -> dict[str, SandboxEnvironment]:
        import asyncio

        run = await asyncio.to_thread(MlabRun, metadata["mlab_task"], metadata.get("mlab_sandbox", "auto"),
                                      metadata.get("model", ""))
        return {"default": cls(run)}

    @classmethod
    async def sample_cleanup(cls, task_name: str, config: SandboxEnvironmentConfigType | None,
                             environments: dict[str, SandboxEnvironment], interrupted: bool) -> None:
        for env in environments.values():
            if isinstance(env, MlabSandboxEnvironment):
                env.run.close()

    async def exec(self, cmd: list[str], input: str | bytes | None = None, cwd: str | None = None,
                   env: dict[str, str] | None = None, user: str | None = None, timeout: int | None = None,
                   timeout_retry: bool = True, concurrency: bool = True) -> ExecResult[str]:
        import asyncio

        return await asyncio.to_thread(self._exec, cmd, input, cwd, env, timeout)

    def _exec(self, cmd: list[str], input: str | bytes | None, cwd: str | None, env: dict[str, str] | None,
              timeout: int | None) -> ExecResult[str]:
        run, started = self.run, time.time()
        spec = run.env.exec_spec(timeout_s=float(timeout) if timeout else None)
        # `python` is the run's interpreter, the one Execute Script uses (with the task's packages)
        bin_dir = str(Path(run.env.s.python).parent)
        spec.env["PATH"] = bin_dir + os.pathsep + spec.env.get("PATH", os.defpath)
        if cwd:
            spec = spec.model_copy(update={"cwd": run.inside(cwd)})
        if env:
            spec = spec.model_copy(update={"env": {**spec.env, **env}})
        argv = list(cmd)
        if argv[:2] == ["bash", "--login"]:  # a login profile would put back the system PATH, without the run's Python
            argv = ["bash", *argv[2:]]
        if input is not None:  # the contract's commands take no stdin data: it goes through a file in the home
            stdin = run.run_dir / "home" / f".stdin-{uuid.uuid4().hex[:8]}"
            stdin.write_bytes(input.encode() if isinstance(input, str) else input)
            argv = ["sh", "-c", 'exec "$@" < "$0"', str(stdin), *argv]
        result = run.env.s.sandbox.run(argv, spec)
        failed = result.exit_code != 0
        name, args = _action(cmd, input)
        note = f"\n[{result.limit_hit} limit hit]" if result.limit_hit else ""
        run.step(name, args, result.output + note, started, failed)
        if result.limit_hit == "timeout":
            raise TimeoutError(f"command timed out after {timeout} s")
        return ExecResult(success=not failed, returncode=result.exit_code if result.exit_code is not None else -1,
                          stdout=result.output, stderr="")

    async def write_file(self, file: str, contents: str | bytes) -> None:
        path = self.run.inside(file)
        rel = path.relative_to(self.run.workspace.resolve()).as_posix()
        if is_read_only(rel, list(self.run.task.read_only_files)):
            raise PermissionError(f"{file}: read-only in this task")
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(contents, str):
            path.write_text(contents, encoding="utf-8")
        else:
            path.write_bytes(contents)

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        path = self.run.inside(file)
        return path.read_text(encoding="utf-8") if text else path.read_bytes()
