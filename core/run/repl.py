"""Python REPL action: a persistent interpreter in a sandboxed child process, never in the harness."""
from __future__ import annotations

import json
import os
import queue
import secrets
import sys
import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import IO

from mlab.core.errors import EnvError
from mlab.core.sandbox.command import Command
from mlab.core.sandbox.contract import Sandbox
from mlab.core.sandbox.output import CappedOutput
from mlab.core.sandbox.spec import ExecSpec

# The child's program, passed as text so the sandbox needs neither mlab nor a path to this package.
_SERVER = (Path(__file__).parent / "repl_server.py").read_text(encoding="utf-8")

_WRITE_GRACE_S = 5.0
_POLL_S = 0.2  # how often a running command's limits are looked at


class Repl:
    def __init__(self, sandbox: Sandbox, spec: ExecSpec, python: str = sys.executable):
        self.sandbox = sandbox
        self.spec = spec.model_copy(update={"stdin_pipe": True})
        self.python = python
        self.proc: Command | None = None
        self.chunks: queue.Queue[bytes | None] = queue.Queue()
        self.pending = bytearray()  # output after the last end marker (e.g. from a background thread)
        self.marker = b""
        self.reader: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def _start(self) -> Command:
        self.proc = proc = self.sandbox.popen([self.python, "-u", "-c", _SERVER], self.spec)
        self.chunks = queue.Queue()
        self.pending = bytearray()
        self.reader = threading.Thread(target=self._read, args=(proc.stdout, self.chunks), daemon=True)
        self.reader.start()
        return proc

    @staticmethod
    def _read(stream: IO[bytes], chunks: queue.Queue[bytes | None]) -> None:
        with suppress(OSError, ValueError):
            while True:
                # Whatever has arrived, without waiting for a full block (the pipe's buffer is never used).
                chunk = os.read(stream.fileno(), 65536)
                if not chunk:
                    break
                chunks.put(chunk)
        chunks.put(None)

    def _send(self, proc: Command, code: str, deadline: float) -> None:
        nonce = secrets.token_hex(16)  # new for each command: an end marker printed earlier ends nothing
        self.marker = b"\x00MLAB-REPL-END " + nonce.encode()
        data = (json.dumps({"code": code, "nonce": nonce}) + "\n").encode()
        failed: list[BaseException] = []
        requests = proc.stdin
        if requests is None:  # a sandbox that ignored spec.stdin_pipe
            raise EnvError("the REPL process has no pipe for commands")

        def write() -> None:
            try:
                requests.write(data)
                requests.flush()
            except (OSError, ValueError) as exc:
                failed.append(exc)

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        writer.join(timeout=max(_WRITE_GRACE_S, deadline - time.monotonic()))
        if writer.is_alive() or failed:
            self.close()
            raise EnvError("the REPL process stopped taking commands and was restarted; its variables are lost")

    def run(self, code: str, timeout_s: float, output_cap: int, limit_messages: dict[str, str] | None = None) -> str:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            self.close()
            proc = self._start()
        else:
            self.sandbox.thaw(proc)
        try:
            return self._run(proc, code, timeout_s, output_cap, limit_messages)
        finally:
            if self.proc is proc and proc.poll() is None:
                self.sandbox.freeze(proc)  # its threads and children wait for the next command

    def _run(self, proc: Command, code: str, timeout_s: float, output_cap: int,
             limit_messages: dict[str, str] | None) -> str:
        deadline = time.monotonic() + timeout_s
        self._send(proc, code, deadline)
        output = CappedOutput(output_cap)
        buffer, self.pending = self.pending, bytearray()
        keep = len(self.marker) + 1
        while True:
            found = buffer.find(self.marker + b"\n")
            if found >= 0:
                output.feed(bytes(buffer[:found]))
                self.pending = buffer[found + keep:]
                return output.text()
            if len(buffer) > keep:  # all but a possible partial marker is output
                output.feed(bytes(buffer[:-keep]))
                del buffer[:-keep]
            try:
                chunk = self.chunks.get(timeout=max(0.0, min(_POLL_S, deadline - time.monotonic())))
            except queue.Empty:
                if time.monotonic() < deadline:
                    hit = self.sandbox.check(proc, self.spec)
                    if not hit:
                        continue
                    output.feed(bytes(buffer))
                    self.close()
                    told = (limit_messages or {}).get(hit, f"hit the {hit} limit and was killed")
                    raise EnvError(f"the REPL command {told}; its variables are lost. Output before that:\n"
                                   f"{output.text()}") from None
                output.feed(bytes(buffer))
                self.close()
                raise EnvError(f"the REPL command ran past the time limit of {timeout_s:g} s and was killed; "
                               f"its variables are lost. Output before that:\n{output.text()}") from None
            if chunk is None:
                output.feed(bytes(buffer))
                code_ = _exit_code(proc)
                hit = self.sandbox.check(proc, self.spec)  # e.g. killed by the kernel for its memory
                self.close()
                why = f" after it {(limit_messages or {}).get(hit, f'hit the {hit} limit')}" if hit else ""
                raise EnvError(f"the REPL process exited (code {code_}){why} and its variables are lost; "
                               f"the next command starts a fresh one. Output:\n{output.text()}")
            buffer += chunk

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        self.sandbox.kill(proc)
        with suppress(Exception):
            proc.wait(timeout=5)
        self.sandbox.release(proc)
        with suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()
        if self.reader is not None:
            self.reader.join(timeout=1)
            if not self.reader.is_alive() and proc.stdout is not None:  # closing under a blocked read would hang
                proc.stdout.close()


def _exit_code(proc: Command) -> int | None:
    try:
        return proc.wait(timeout=2)
    except Exception:
        return proc.poll()
