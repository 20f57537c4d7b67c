"""A command's output: read from its pipe as it comes, and kept within a byte budget (head and tail)."""
from __future__ import annotations

import io
from collections.abc import Callable


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


def pump(stream: io.BufferedIOBase, output: CappedOutput, on_output: Callable[[bytes], None] | None) -> None:
    """Read stream to its end into output, showing each chunk to on_output as it arrives (for a thread)."""
    try:
        while True:
            chunk = stream.read1(65536)
            if not chunk:
                return
            output.feed(chunk)
            if on_output is not None:
                try:
                    on_output(chunk)
                except Exception:  # an observer's bug must not stop the command's output
                    on_output = None
    except (OSError, ValueError):
        return
