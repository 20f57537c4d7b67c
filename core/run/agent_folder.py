"""A program agent's folder for one session: made fresh in the sandbox home, under a name the program cannot
know beforehand, and written only through descriptors.

The folder is the program's: while it runs it may replace anything there by a link to a host path, and it may
outlive a harness killed with -9. So each session (a run's start, each resume) gets a new folder, earlier ones are
removed without following what they hold, and every file is opened relative to the folder's descriptor with
O_NOFOLLOW: the harness never writes or reads through anything the program left.
"""
from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from mlab.core.fs.dirfd import list_dir, open_dir_at, open_dirs, open_root, opened, remove_at, write_all

PREFIX = ".mlab-agent"  # in the sandbox home: .mlab-agent-<random>
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class AgentFolder:
    """The session's folder: `path` (the same inside the sandbox) and `fd`, its descriptor, until `close`."""

    def __init__(self, home: Path):
        with opened(open_root(home)) as home_fd:  # the run's own folder: the sandbox cannot replace the home itself
            for name, _st in list_dir(home_fd):
                if name.startswith(PREFIX):
                    remove_at(home_fd, name)
            name = f"{PREFIX}-{secrets.token_hex(6)}"
            os.mkdir(name, 0o755, dir_fd=home_fd)
            self.fd = open_dir_at(home_fd, name)
        self.path = Path(home) / name

    def write(self, name: str, text: str) -> Path:
        """Write text as `name` (folders of it made as needed) in the folder; returns its path."""
        *folders, leaf = name.split("/")
        with opened(open_dirs(self.fd, folders, create=True)) as folder_fd:
            fd = os.open(leaf, _WRITE_FLAGS, 0o644, dir_fd=folder_fd)
        with opened(fd):
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(f"{name!r} in the agent folder is not a file")
            write_all(fd, text.encode("utf-8"))
        return self.path / name

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> AgentFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
