"""What a sandbox's `popen` returns: a started command, as the core watches, waits for and kills it."""
from __future__ import annotations

from typing import IO, Protocol


class Command(Protocol):
    """A started command (a subprocess.Popen is one); its pid leads the process group of all it starts. It may also
    have `end_fd() -> int | None`, a descriptor that tells its end, which the core's waiter then sleeps on."""

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
