"""Learning of a command's end the moment it comes, without polling.

A started command exposes a descriptor that becomes readable when it ends: an object that knows its own (the
zygote's ConfinedCommand: the socket its end arrives on) has a method `end_fd()`; for a child of this process
(a Popen) it is a pidfd (Linux 5.3+). The waiter sleeps in poll() on it with a timeout, so the end wakes it at
once and the timeout is free for the caller's periodic checks. CPython's Popen.wait(timeout) instead sleeps in
growing steps (up to 50 ms) and so sees an end late. Where no descriptor can be had (an older kernel, a Popen
of another process), it falls back to Popen.wait with a timeout.
"""
from __future__ import annotations

import math
import os
import select
import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlab.core.sandbox.command import Command


class EndWatch:
    """Waits for proc's end; close() when done with it."""

    def __init__(self, proc: Command):
        self.proc = proc
        self._own_fd: int | None = None  # a pidfd this opened
        self._poller: select.poll | None = None
        fd = self._end_fd()
        if fd is not None:
            self._poller = select.poll()
            self._poller.register(fd, select.POLLIN)
        self.wakeups = 0  # how often the descriptor woke a wait (once: at the end)

    def _end_fd(self) -> int | None:
        proc = self.proc
        if proc.returncode is not None:
            return None
        own = getattr(proc, "end_fd", None)
        if callable(own):
            fd: int | None = own()
            return fd
        if not getattr(proc, "_child_created", False) or not hasattr(os, "pidfd_open"):
            return None
        try:  # not reaped yet (returncode is None, and only the waiter reaps): the pid is still this child's
            self._own_fd = os.pidfd_open(proc.pid)
        except OSError:
            return None
        return self._own_fd

    def wait(self, timeout: float) -> bool:
        """Whether the command has ended, waiting up to timeout seconds for it."""
        proc = self.proc
        if proc.returncode is not None:
            return True
        if self._poller is None:
            try:
                proc.wait(timeout=timeout)
                return True
            except subprocess.TimeoutExpired:
                return False
        if not self._poller.poll(math.ceil(max(0.0, timeout) * 1000)):
            return False  # not readable: still running, no need to ask
        self.wakeups += 1
        return proc.poll() is not None

    def close(self) -> None:
        if self._own_fd is not None:
            os.close(self._own_fd)
            self._own_fd = None
        self._poller = None
