"""Python REPL action: a persistent interpreter in a sandboxed child process, never in the harness."""
from __future__ import annotations

import json
import queue
import sys
import threading
from pathlib import Path

from .errors import EnvError
from .sandbox import ExecSpec, Sandbox

_END = "\x00MLAB-REPL-END "

# The child's loop: one JSON request a line on stdin, the captured output and an end marker on stdout.
_SERVER = r"""
import ast, contextlib, io, json, sys, traceback
namespace = {"__name__": "__main__"}
out = sys.stdout
for line in sys.stdin:
    code = json.loads(line)["code"]
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
        try:
            tree = ast.parse(code, mode="exec")
            last = tree.body[-1] if tree.body else None
            if isinstance(last, ast.Expr):
                tree.body.pop()
                exec(compile(tree, "<repl>", "exec"), namespace)
                value = eval(compile(ast.Expression(last.value), "<repl>", "eval"), namespace)
                if value is not None:
                    print(repr(value))
            else:
                exec(compile(tree, "<repl>", "exec"), namespace)
        except BaseException:
            traceback.print_exc()
    out.write(buffer.getvalue())
    out.write(__END__ + "\n")
    out.flush()
""".replace("__END__", repr(_END))


class Repl:
    def __init__(self, sandbox: Sandbox, spec: ExecSpec, python: str = sys.executable):
        self.sandbox = sandbox
        self.spec = spec.model_copy(update={"stdin_pipe": True})
        self.python = python
        self.proc = None
        self.lines: queue.Queue = queue.Queue()

    def _start(self) -> None:
        self.proc = self.sandbox.popen([self.python, "-u", "-c", _SERVER], self.spec)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc, self.lines), daemon=True).start()

    @staticmethod
    def _read(proc, lines: queue.Queue) -> None:
        for raw in iter(proc.stdout.readline, b""):
            lines.put(raw.decode("utf-8", errors="replace"))
        lines.put(None)

    def run(self, code: str, timeout_s: float, output_cap: int) -> str:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        try:
            self.proc.stdin.write((json.dumps({"code": code}) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self.close()
            raise EnvError("the REPL process is gone; the next command starts a fresh one")
        collected: list[str] = []
        size = 0
        import time
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.close()
                raise EnvError(f"the REPL command ran past the time limit of {timeout_s:g} s and was killed; "
                               "its variables are lost")
            if line is None:
                code_ = self.proc.wait()
                self.proc = None
                text = "".join(collected)
                raise EnvError(f"the REPL process exited (code {code_}) and its variables are lost; "
                               f"the next command starts a fresh one. Output:\n{text}")
            if line.startswith(_END):
                return "".join(collected)
            if size < output_cap:
                collected.append(line[: output_cap - size])
                size += len(line)

    def close(self) -> None:
        if self.proc is not None:
            self.sandbox.kill(self.proc)
            try:
                self.proc.wait(timeout=5)
            except Exception:
                pass
            self.proc = None
