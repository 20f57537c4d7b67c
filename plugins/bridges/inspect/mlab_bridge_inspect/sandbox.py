"""An Inspect sandbox environment backed by mlab's sandbox contract: each sample is an mlab run folder whose
workspace the tools' commands run in, confined as `mlab run --sandbox` confines agent code (the task's hidden
files out of sight, its read-only files read-only), each command a step of the run's trace."""
from __future__ import annotations

import asyncio
import os
import shlex
import time
import uuid
from pathlib import Path
from typing import Any, Literal, overload

from inspect_ai.util import ExecResult, SandboxEnvironment, SandboxEnvironmentConfigType, sandboxenv

from mlab.core import Action, EnvError
from mlab.core.bridge import BridgedRun

RUNS_DIR_ENV = "MLAB_INSPECT_RUNS"  # where the run folders go (default: runs/inspect)
AGENT = "inspect-basic"


def new_run(task: str, sandbox: str, model: str) -> BridgedRun:
    """One Inspect sample's run, in a new folder of the runs folder."""
    root = Path(os.environ.get(RUNS_DIR_ENV) or "runs/inspect")
    run_dir = root / f"{task.replace('/', '__')}--inspect--{uuid.uuid4().hex[:8]}"
    return BridgedRun(task, run_dir, agent=AGENT, llm=model, sandbox=sandbox)


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

    def __init__(self, run: BridgedRun):
        self.run = run

    @classmethod
    async def sample_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None,
                          metadata: dict[str, str]) -> dict[str, SandboxEnvironment]:
        run = await asyncio.to_thread(new_run, metadata["mlab_task"], metadata.get("mlab_sandbox", "auto"),
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
        return await asyncio.to_thread(self._exec, cmd, input, cwd, env, timeout)

    def _exec(self, cmd: list[str], input: str | bytes | None, cwd: str | None, env: dict[str, str] | None,
              timeout: int | None) -> ExecResult[str]:
        started = time.time()
        argv = list(cmd)
        if argv[:2] == ["bash", "--login"]:  # a login profile would put back the system PATH, without the run's Python
            argv = ["bash", *argv[2:]]
        stdin = input.encode() if isinstance(input, str) else input
        try:
            result = self.run.exec(argv, timeout_s=float(timeout) if timeout else None, cwd=cwd, env=env, stdin=stdin)
        except EnvError as exc:  # a cwd outside the workspace
            raise PermissionError(str(exc)) from None
        failed = result.exit_code != 0
        name, args = _action(cmd, input)
        note = f"\n[{result.limit_hit} limit hit]" if result.limit_hit else ""
        self.run.step(Action(name=name, args=args), result.output + note, started=started, is_error=failed)
        if result.limit_hit == "timeout":
            raise TimeoutError(f"command timed out after {timeout} s")
        return ExecResult(success=not failed, returncode=result.exit_code if result.exit_code is not None else -1,
                          stdout=result.output, stderr="")

    async def write_file(self, file: str, contents: str | bytes) -> None:
        data = contents.encode("utf-8") if isinstance(contents, str) else contents
        try:
            await asyncio.to_thread(self.run.write_file, file, data)
        except EnvError as exc:  # read-only in this task, outside the workspace, or a folder
            raise PermissionError(str(exc)) from None

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        try:
            data = await asyncio.to_thread(self.run.read_file, file)
        except EnvError as exc:
            raise PermissionError(str(exc)) from None
        return data.decode("utf-8") if text else data
