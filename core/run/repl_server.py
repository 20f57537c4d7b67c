"""The Python REPL's child program: runs commands sent by mlab.core.run.repl in one lasting namespace.

It runs inside the sandbox, possibly under another interpreter, so it needs nothing but the standard library;
repl.py passes its text with `python -c`. Requests (one JSON line each) come on a private copy of stdin and the
end-of-command marker goes to a private copy of stdout, so code that reads stdin, or closes or writes to fd 1
directly, cannot break the protocol; the command's own output goes to stdout/stderr as it is produced, so the
output before a timeout is not lost. Each request carries a fresh nonce that the marker repeats: printing a
marker seen before (or guessed) cannot end a later command early. Between commands the harness freezes this
process and everything it started, so a forged end costs the agent its own output, never harness time.
"""
import ast
import json
import os
import sys
import traceback
from contextlib import suppress


def serve() -> None:
    requests = os.fdopen(os.dup(0), "rb")
    control = os.fdopen(os.dup(1), "wb", buffering=0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdin = open(0, closefd=False)
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    while True:
        line = requests.readline()
        if not line:
            break
        request = json.loads(line)
        end = b"\x00MLAB-REPL-END " + request.pop("nonce").encode() + b"\n"
        mend_stdio(control.fileno())
        run_command(request.pop("code"), namespace)
        for stream in (sys.stdout, sys.stderr):
            with suppress(Exception):
                stream.flush()
        control.write(end)
        del end


def mend_stdio(control_fd: int) -> None:
    """Code that closed fd 1 or 2 must not silence every later command."""
    for fd in (1, 2):
        try:
            os.fstat(fd)
        except OSError:
            os.dup2(control_fd, fd)


def run_command(code: str, namespace: dict) -> None:
    """Run code like the interactive interpreter: the value of a final expression is printed."""
    try:
        tree = ast.parse(code, "<repl>", "exec")
        last = tree.body[-1] if tree.body else None
        if isinstance(last, ast.Expr):
            tree.body.pop()
            exec(compile(tree, "<repl>", "exec"), namespace)
            value = eval(compile(ast.Expression(last.value), "<repl>", "eval"), namespace)
            if value is not None:
                print(repr(value))
        else:
            exec(compile(tree, "<repl>", "exec"), namespace)
    except SystemExit as exc:
        print(f"SystemExit: {exc.code!r} (the REPL keeps running)", file=sys.stderr)
    except BaseException:
        traceback.print_exc()


if __name__ == "__main__":
    serve()
