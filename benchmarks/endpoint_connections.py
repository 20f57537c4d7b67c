"""Idle connections against the program agents' model endpoint (issue 40): N sockets that never send a byte,
opened from a child process (the attacker), while this process serves the endpoint. Prints the harness's threads
and resident memory at the peak, and whether a real call still gets its answer once the idle ones are dropped.

    python benchmarks/endpoint_connections.py [N]   (default 20000)
"""
from __future__ import annotations

import json
import resource
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

from mlab.core import Completion
from mlab.core.llm.endpoint import ModelEndpoint

ATTACKER = textwrap.dedent('''
    import resource, socket, sys, time
    path, n = sys.argv[1], int(sys.argv[2])
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    held = []
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX)
        s.setblocking(False)
        try:
            s.connect(path)
        except (BlockingIOError, OSError):
            s.close()
            continue
        held.append(s)
    print(len(held), flush=True)
    time.sleep(float(sys.argv[3]))
''')


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with tempfile.TemporaryDirectory() as folder, ModelEndpoint(
            lambda request: Completion(text="ok", prompt_tokens=1, completion_tokens=1), Path(folder)) as endpoint:
        base_threads, base_rss = threading.active_count(), rss_mb()
        attacker = subprocess.Popen([sys.executable, "-c", ATTACKER, str(endpoint.socket_path), str(n), "5"],
                                    stdout=subprocess.PIPE, text=True)
        assert attacker.stdout is not None
        connected = int(attacker.stdout.readline())
        peak_threads, peak_rss = 0, 0.0
        while attacker.poll() is None:
            peak_threads, peak_rss = max(peak_threads, threading.active_count()), max(peak_rss, rss_mb())
            time.sleep(0.05)
        body = json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode()
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(120)
            sock.connect(str(endpoint.socket_path))
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
                         + body)
            answered = sock.recv(65536).split(b"\r\n", 1)[0].decode()
    print(f"{'idle connections tried':<28}{n:>10}")
    print(f"{'connected (accepted+queued)':<28}{connected:>10}")
    print(f"{'harness threads, peak':<28}{peak_threads:>10}  (before: {base_threads})")
    print(f"{'harness RSS MB, peak':<28}{peak_rss:>10.0f}  (before: {base_rss:.0f})")
    print(f"{'a call afterwards':<28}{answered:>10}")


if __name__ == "__main__":
    main()
