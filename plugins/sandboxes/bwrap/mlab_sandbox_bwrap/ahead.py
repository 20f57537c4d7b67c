"""The next command's container, made ahead: while the agent thinks, not while it waits.

Building a bubblewrap root is cheap in CPU (about 5 ms) but not in time on a loaded machine: bwrap detaches the
old root twice (each an expedited RCU grace period, which waits for a kernel thread to be scheduled), forks its
init and the command, and each of those waits for a CPU. At five busy loops on 2 cores that was about 40 ms of
a command's start, against 3 ms idle. So when a command of the sandbox ends and none is running, the sandbox
starts the next one's container with the same spec, its command dash waiting on its stdin with no environment;
the next command, if its spec is the same and nothing the container shows has changed since, is handed to that
shell as one line (its environment, then its argv) and exec'd in place. Anything else (another spec, a path or
an /etc file changed, a long command line, a container that died) starts afresh as before.

No container is made while a command of the sandbox runs, so no agent code runs while one is built.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from mlab.core import ProcessCommand

# The waiting shell's script. "go" first, as every started command reads it (mlab.core.sandbox.spawn), then the
# command's line. The shell reads a line byte by byte: a longer one starts afresh instead.
WAITER = "mlab_nl='\n'; IFS= read -r mlab_line || exit 125; eval \"$mlab_line\""
LINE_BYTES = 8192  # about 2 ms of reading
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OWN = ("mlab_nl", "mlab_line")  # the waiting shell's variables


def quoted(arg: str) -> str:
    """arg as one shell word on one line: single-quoted, a newline spliced in from $mlab_nl."""
    return "'" + arg.replace("'", "'\"'\"'").replace("\n", "'\"$mlab_nl\"'") + "'"


def command_line(argv: list[str], env: dict[str, str], stdin_pipe: bool) -> bytes | None:
    """The line that makes the waiting shell become argv with env, or None where it cannot (too long, or a name
    the shell cannot export). The shell was started with no environment, so that nothing waiting carries the
    run's; it exports none of its own variables, and PWD is the one bwrap sets for every command."""
    names = [name for name in env if name != "PWD"]
    if any(not _NAME.fullmatch(name) or name in _OWN for name in names) or "\0" in "".join(argv):
        return None
    exports = " ".join(f"{name}={quoted(env[name])}" for name in names)
    line = ((f"export {exports}; " if exports else "") + "exec " + " ".join(map(quoted, argv))
            + ("" if stdin_pipe else " </dev/null") + "\n").encode()
    return line if len(line) <= LINE_BYTES else None


class BwrapCommand(ProcessCommand):
    next_with: tuple | None = None  # (key, argv, spec) of a command given out: what the next container is made for


def file_state(st: os.stat_result) -> tuple[int, ...]:
    return st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns


@dataclass
class Ahead:
    """A container started for the next command of spec key: its waiting shell, the options it was built with
    and the state of each file of /etc it copied."""

    key: tuple
    command: BwrapCommand
    options: list[str]
    copies: dict[str, tuple[int, ...]] = field(default_factory=dict)
    owner: int = field(default_factory=os.getpid)  # a forked child must neither use nor kill its parent's

    def still_current(self, key: tuple, options: list[str]) -> bool:
        """Whether it shows what a container built now would: the same spec and options, /etc's copies
        unchanged, and its shell still waiting."""
        if self.owner != os.getpid() or key != self.key or options is not self.options:
            return False
        if self.command.poll() is not None:
            return False
        for source, state in self.copies.items():
            try:
                if file_state(os.stat(source)) != state:
                    return False
            except OSError:
                return False
        return True
