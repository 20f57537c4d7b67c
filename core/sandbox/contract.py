"""The sandbox contract: what the core asks of a sandbox, and the rules every sandbox keeps.

A sandbox runs commands of agent code (and of scorers) in a task's workspace. The core starts a command with
`popen` (a lasting one, the REPL) or `run` (to its end), looks at it with `check`, stops it with `kill`, pauses
it between actions with `freeze` and `thaw`, and lets go of it with `release`. It reads four declarations:
`name`, `confined`, `auto_rank` and `available()`, and names no sandbox itself.

Writing one: subclass mlab.core.sandbox.process.ProcessSandbox when commands are processes of this machine
(it spawns them in a session of their own with rlimits and a cgroup, and kills, freezes and reaps their
trees), and override `popen` alone; subclass Sandbox when they live elsewhere. Register the class with the
`register_sandboxes` hook, then run `mlab check-sandbox NAME`: the conformance suite
(mlab.core.sandbox.self_check) holds it to these rules.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import IO, ClassVar, Protocol

from mlab.core.sandbox.spec import LIMIT_NAMES, ExecResult, ExecSpec
from mlab.core.sandbox.supervise import run_to_end

__all__ = ["LIMIT_NAMES", "Command", "ExecResult", "ExecSpec", "Sandbox"]


class Command(Protocol):
    """A started command as `Sandbox.popen` returns it; a subprocess.Popen is one. Its pid leads the process
    group of everything it starts. A command that can tell its end on a descriptor (without waitpid) may
    also have `end_fd() -> int | None`, which the core's waiter sleeps on."""

    @property
    def pid(self) -> int: ...

    @property
    def stdin(self) -> IO[bytes] | None: ...

    @property
    def stdout(self) -> IO[bytes] | None: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


class Sandbox(ABC):
    """A way of confining commands. One instance serves one run (or one scorer), from several threads; the
    class is looked at (`available`, `auto_rank`) before any instance is made."""

    name: str = ""
    """The name `--sandbox` selects it by, unique among installed sandboxes."""

    description: str = ""
    """One line on how it confines commands, for listings."""

    auto_rank: ClassVar[int | None] = None
    """Its place in `--sandbox auto` (the default): of the sandboxes available here, the one with the lowest
    rank is chosen. None: never chosen by auto, only by name. A sandbox with a rank must confine (`confined`)
    wherever `available()` says yes. mlab's own: bwrap 10, local 20; docker and unconfined have none."""

    @property
    def confined(self) -> bool:
        """True when a command cannot see `spec.hidden_paths` nor change `spec.read_only_paths` (namespaces, a
        container); False when only the harness's restoring afterwards protects them. The harness shares
        read-only files with the workspace by hard links only in a confined sandbox, and the report marks runs
        of an unconfined one. Override with a property or a class attribute."""
        return False

    @property
    def signal_exit_codes(self) -> bool:
        """True when the command runs under an init of its own that exits with 128+N when the command dies of
        signal N: `run` then reports such codes as -N, the way Popen does."""
        return False

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """Whether this sandbox works on this machine; cheap after the first call (cache a probe).

        Returns:
            (True, "") when usable; (False, one line saying why not and what to do) otherwise.
        """
        return True, ""

    def limitations(self) -> list[str]:
        """What this sandbox cannot enforce here; the runner shows and records each as a warning.

        Returns:
            One sentence per gap (e.g. no bound on processes), empty when it enforces everything.
        """
        return []

    @abstractmethod
    def popen(self, argv: list[str], spec: ExecSpec) -> Command:
        """Start argv confined per spec and return at once.

        Rules: the command runs in spec.cwd with exactly spec.env; stdout and stderr merged into one pipe
        (`stdout`); stdin a pipe (`stdin`) when spec.stdin_pipe, else empty; spec.limits applied to the whole
        tree it starts (rlimits, and processes and memory where the sandbox can bound them); a confined sandbox
        hides spec.hidden_paths, keeps spec.read_only_paths read-only, leaves writable only cwd,
        spec.writable_paths and a private /tmp, and gives no network unless spec.network. Nothing it starts may
        outlive the harness.

        Args:
            argv: the program and its arguments; a bare name is looked up in spec.env's PATH.
            spec: where, with what and under which limits.

        Returns:
            The running command. The caller ends it with `kill` and `release`.

        Raises:
            FileNotFoundError, PermissionError: argv[0] cannot be executed (as Popen raises them).
        """

    def check(self, command: Command, spec: ExecSpec) -> str | None:
        """A limit the command has broken; the caller then kills it. Called every 0.1 s while it runs, and once
        after it ended (a kernel's OOM kill is known only then).

        Args:
            command: what `popen` returned.
            spec: what it was started with.

        Returns:
            One of LIMIT_NAMES, or None.
        """
        return None

    @abstractmethod
    def kill(self, command: Command) -> None:
        """Kill the command and everything it started, daemonized children included, at once (SIGKILL). Safe
        on a command that has ended and to call twice; never raises for a process already gone.

        Args:
            command: what `popen` returned.
        """

    @abstractmethod
    def freeze(self, command: Command) -> None:
        """Stop every process of a lasting command (the REPL between two actions), so that nothing of the agent
        runs while the harness works; return only once they have all stopped.

        Args:
            command: a running command of `popen`.
        """

    @abstractmethod
    def thaw(self, command: Command) -> None:
        """Let a frozen command run again.

        Args:
            command: a command `freeze` stopped.
        """

    def release(self, command: Command) -> None:
        """Free what the command held once it is dead (its cgroup, its container). Called exactly once per
        command, after `kill`.

        Args:
            command: what `popen` returned.
        """
        return None

    def run(self, argv: list[str], spec: ExecSpec,
            on_output: Callable[[bytes], None] | None = None) -> ExecResult:
        """Run argv to its end under spec's limits. The default starts it with `popen` and watches it with
        `check` (mlab.core.sandbox.supervise): the time limit counts from when `popen` returned; output past
        spec.limits.output_bytes is cut in the middle; on a broken limit the tree is killed.

        Args:
            argv: as for `popen`.
            spec: as for `popen`.
            on_output: shown each chunk of output as it comes.

        Returns:
            The exit code (-N for a death by signal N; None when unknown), the output, and the limit hit.

        Raises:
            FileNotFoundError, PermissionError: as `popen`.
        """
        return run_to_end(self, argv, spec, on_output)

    def close(self) -> None:
        """Let go of what the sandbox keeps between commands (the local sandbox's zygotes, docker's kept
        containers); the owner of a run's sandbox calls it when the run ends. A later command starts afresh."""
        return None
