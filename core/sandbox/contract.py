"""The sandbox contract: what the core asks of a sandbox, which runs commands of agent code (and of scorers) in a
task's workspace, and the rules every sandbox keeps; the core names none itself. Subclass
mlab.core.sandbox.process.ProcessSandbox when commands are processes of this machine (it spawns, limits, kills,
freezes and reaps their trees; override `popen` alone), Sandbox when they live elsewhere. Register the class with
`register_sandboxes`; `mlab check-sandbox NAME` (mlab.core.sandbox.self_check) holds it to these rules."""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import ClassVar

from mlab.core.sandbox.command import Command
from mlab.core.sandbox.spec import ExecResult, ExecSpec


class Sandbox(ABC):
    """A way of confining commands. One instance serves one run (or one scorer), from several threads; the class
    is looked at (`available`, `auto_rank`) before any instance is made."""

    name: str = ""  # what `--sandbox` selects it by; unique among installed sandboxes
    description: str = ""  # one line on how it confines commands, for listings
    auto_rank: ClassVar[int | None] = None
    """Its place in `--sandbox auto`: the available sandbox with the lowest rank is chosen; None: only by name.
    A ranked sandbox must be `confined` wherever it is available. mlab's: bwrap 10, local 20."""

    @property
    def confined(self) -> bool:
        """True when a command can neither see `spec.hidden_paths` nor change `spec.read_only_paths` (namespaces, a
        container); only then does the harness hard-link read-only files into the workspace, and the report marks
        runs of an unconfined one. A property or a class attribute."""
        return False

    @property
    def signal_exit_codes(self) -> bool:
        """True when the command runs under an init that exits 128+N when it dies of signal N; `run` reports -N."""
        return False

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """(True, "") when usable on this machine, else (False, one line: why not and what to do). Cache a probe."""
        return True, ""

    def limitations(self) -> list[str]:
        """One sentence per limit it cannot enforce here (e.g. no bound on processes); the run warns of each."""
        return []

    @abstractmethod
    def popen(self, argv: list[str], spec: ExecSpec) -> Command:
        """Start argv (a bare name looked up in spec.env's PATH) confined per spec and return at once a Command
        (mlab.core.sandbox.command), which every other method's `command` is. It runs in spec.cwd with exactly
        spec.env; stdout and stderr merged into one pipe; stdin a pipe when spec.stdin_pipe, else empty;
        spec.limits bound its whole tree (rlimits; processes and memory where the sandbox can). A confined sandbox
        hides spec.hidden_paths, mounts each spec.read_only_paths and shown_paths entry read-only (a folder as one
        mount), leaves writable only cwd, spec.writable_paths and a private /tmp; no network unless spec.network.
        Nothing it starts may outlive the harness. Raises FileNotFoundError or PermissionError, as Popen does, when
        argv[0] cannot be executed."""

    def check(self, command: Command, spec: ExecSpec) -> str | None:
        """A limit the command broke (one of mlab.core.sandbox.spec.LIMIT_NAMES), or None; the caller then kills
        it. Called every 0.1 s while it runs and once after it ended (a kernel's OOM kill is known only then)."""
        return None

    @abstractmethod
    def kill(self, command: Command) -> None:
        """SIGKILL the command and all it started, daemonized children included. Safe on an ended command and
        twice; never raises for a process already gone."""

    @abstractmethod
    def freeze(self, command: Command) -> None:
        """Stop every process of a lasting command (the REPL between actions); return once all have stopped."""

    @abstractmethod
    def thaw(self, command: Command) -> None:
        """Let a frozen command run again."""

    def release(self, command: Command) -> None:
        """Free what the dead command held (its cgroup, its container). Called exactly once, after `kill`."""
        return None

    @abstractmethod
    def run(self, argv: list[str], spec: ExecSpec, on_output: Callable[[bytes], None] | None = None) -> ExecResult:
        """Run argv to its end, showing on_output each chunk of output as it comes, and return the exit code (-N
        for a death by signal N; None when unknown), the output and the limit hit. Raises as `popen`. The time
        limit counts from `popen`'s return, output past spec.limits.output_bytes is cut in the middle, and a broken
        limit kills the tree, as returning does (snapshots trust change events): supervise.run_to_end(self, ...)."""

    def close(self) -> None:
        """Let go of what is kept between commands (zygotes, containers); the run's owner calls it when the run
        ends. A later command starts afresh."""
        return None
