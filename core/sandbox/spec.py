"""What a command is started with and what its run comes to: the data every sandbox reads and returns."""
from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, model_validator

from mlab.core.sandbox.limits import Limits, slice_env


class ExecSpec(BaseModel):
    """Everything a sandbox needs to start one command."""

    cwd: Path
    env: dict[str, str] = Field(default_factory=dict)
    limits: Limits = Field(default_factory=Limits)
    hidden_paths: list[Path] = Field(default_factory=list)  # must not be visible to the command
    read_only_paths: list[Path] = Field(default_factory=list)  # visible but not writable
    writable_paths: list[Path] = Field(default_factory=list)  # besides cwd, e.g. the sandbox home
    shown_paths: list[Path] = Field(default_factory=list)  # host folders shown read-only at the same path
    stdin_pipe: bool = False
    network: bool = False  # share the host's network (the task declares it needs one); else loopback of its own

    @model_validator(mode="after")
    def _slice_env(self) -> ExecSpec:
        # Here, not in each caller: agent scripts, the REPL, program agents and scorers all see their slice.
        extra = slice_env(self.limits)
        if extra:
            self.env = {**self.env, **extra}
        return self


LIMIT_NAMES = ("timeout", "memory", "output", "cpu", "file_size", "processes", "disk")


class ExecResult(BaseModel):
    exit_code: int | None
    output: str
    output_truncated: bool = False
    limit_hit: str | None = None  # one of LIMIT_NAMES
    duration_s: float
