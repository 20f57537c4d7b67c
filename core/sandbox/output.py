"""A command's output: read from its pipe as it comes, and kept within a byte budget (head and tail)."""
from __future__ import annotations

import array
import fcntl
import os
import select
import termios
import threading
from collections.abc import Callable
from typing import IO


class CappedOutput:
    """Keeps the head and tail of a stream within a byte budget, and counts what it drops."""

    def __init__(self, cap: int):
        self.head_cap = cap * 3 // 4
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def feed(self, chunk: bytes) -> None:
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        if len(chunk) >= self.tail_cap:  # a big chunk replaces the whole tail at once
            self.dropped += len(self.tail) + len(chunk) - self.tail_cap
            self.tail = bytearray(chunk[len(chunk) - self.tail_cap:]) if self.tail_cap else bytearray()
            return
        self.tail += chunk
        if len(self.tail) > self.tail_cap:
            excess = len(self.tail) - self.tail_cap
            self.dropped += excess
            del self.tail[:excess]

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        if not self.dropped:
            return head + self.tail.decode("utf-8", errors="replace")
        marker = f"\n[... {self.dropped} bytes of output left out ...]\n"
        return head + marker + self.tail.decode("utf-8", errors="replace")


class OutputPump:
    """Reads a command's pipe into `output` as the output comes (run() is a thread's), showing each chunk to
    on_output. drain() delivers, in order, what the pipe holds when it is called: a caller that has frozen the
    command, or seen its writers end, then has every byte they wrote, however late the reading thread runs."""

    def __init__(self, stream: IO[bytes] | None, cap: int, on_output: Callable[[bytes], None] | None):
        self.output = CappedOutput(cap)
        self._stream = stream
        self._on_output = on_output
        self._lock = threading.Lock()  # held from a read until its chunk is delivered: chunks keep their order
        self._ended = False
        try:
            self._fd: int | None = stream.fileno()  # type: ignore[union-attr]
            os.set_blocking(self._fd, False)  # a read under the lock must not wait for the command
        except (OSError, ValueError, AttributeError):  # a stream with no descriptor: read by the thread alone
            self._fd = None

    def run(self) -> None:
        """Read the pipe to its end (for a thread)."""
        if self._fd is None:
            self._read_stream()
            return
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        while not self._ended:
            try:
                events = poller.poll()
            except InterruptedError:
                continue
            except (OSError, ValueError):
                return
            if any(flags & select.POLLNVAL for _fd, flags in events):  # closed under us
                return
            self.drain()

    def drain(self) -> None:
        """Deliver what the pipe holds now (at least one read: it may say the end); not what comes meanwhile, so
        a command writing without pause cannot keep the caller here."""
        if self._fd is None:
            return
        with self._lock:
            queued = array.array("i", [0])
            try:
                fcntl.ioctl(self._fd, termios.FIONREAD, queued, True)
            except OSError:
                queued[0] = 0
            read = 0
            while not self._ended:
                try:
                    chunk = os.read(self._fd, 1 << 16)
                except BlockingIOError:
                    return
                except InterruptedError:
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    self._ended = True
                    return
                self._deliver(chunk)
                read += len(chunk)
                if read >= queued[0]:
                    return

    def _read_stream(self) -> None:
        if self._stream is None:
            return
        try:
            while chunk := self._stream.read1(1 << 16):  # type: ignore[attr-defined]
                self._deliver(chunk)
        except (OSError, ValueError):
            pass
        self._ended = True

    def _deliver(self, chunk: bytes) -> None:
        self.output.feed(chunk)
        if self._on_output is not None:
            try:
                self._on_output(chunk)
            except Exception:  # an observer's bug must not stop the command's output
                self._on_output = None
