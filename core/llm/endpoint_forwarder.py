"""Runs inside the sandbox, with the standard library only: listens on 127.0.0.1 (the sandbox's own loopback),
passes each connection's bytes to and from the harness's unix socket, and runs the program with the URL in its
environment; it exits with the program's exit status.

    python endpoint_forwarder.py SOCKET -- PROGRAM ARGS...

`{base_url}` in an argument or in the value of a variable is replaced by http://127.0.0.1:PORT/v1, and `{origin}`
by http://127.0.0.1:PORT (Anthropic's clients add /v1 themselves).
"""
import os
import signal
import socket
import subprocess
import sys
import threading
from contextlib import suppress


def _connect(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if len(path.encode()) > 100:  # sun_path is short: go through the folder's descriptor
        folder = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
        try:
            sock.connect(f"/proc/self/fd/{folder}/{os.path.basename(path)}")
        finally:
            os.close(folder)
    else:
        sock.connect(path)
    return sock


def _pipe(source: socket.socket, target: socket.socket) -> None:
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            target.sendall(data)
    except OSError:
        pass
    finally:
        with suppress(OSError):
            target.shutdown(socket.SHUT_WR)


def _serve(listener: socket.socket, path: str) -> None:
    while True:
        client, _ = listener.accept()
        try:
            upstream = _connect(path)
        except OSError:
            client.close()
            continue
        threading.Thread(target=_pipe, args=(client, upstream), daemon=True).start()
        threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()


def main() -> None:
    path, sep, program = sys.argv[1], sys.argv[2], sys.argv[3:]
    if sep != "--" or not program:
        sys.exit("usage: endpoint_forwarder.py SOCKET -- PROGRAM ARGS...")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    base_url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    threading.Thread(target=_serve, args=(listener, path), daemon=True).start()
    origin = base_url[:-len("/v1")]

    def fill(text: str) -> str:
        return text.replace("{base_url}", base_url).replace("{origin}", origin)

    env = {key: fill(value) for key, value in os.environ.items()}
    child = subprocess.Popen([fill(arg) for arg in program], env=env)
    signal.signal(signal.SIGTERM, lambda *_: child.terminate())
    code = child.wait()
    sys.exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
