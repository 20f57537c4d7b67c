"""One syncfs for the steps of several runs at once: the runs of a bench host are threads of one process, and
their steps end together (their models answer alike), so each step's flush of the file system is shared."""
from __future__ import annotations

import threading

from mlab.core.fs import durable


def test_threads_flushing_together_share_a_flush_that_began_after_each_asked(tmp_path, monkeypatch):
    """Each call returns only once a flush that began after the call did has ended (what it wrote before the call
    is on disk); calls that come while a flush runs wait for it and share the next one."""
    lock = threading.Lock()
    clock = 0  # orders calls and flushes
    flushes: list[tuple[int, int]] = []  # (began, ended) of each flush
    real = durable._syncfs

    def flush(libc, fd, where):
        nonlocal clock
        with lock:
            clock += 1
            began = clock
        real(libc, fd, where)
        threading.Event().wait(0.005)  # a flush takes a while: calls pile up meanwhile
        with lock:
            clock += 1
            flushes.append((began, clock))

    monkeypatch.setattr(durable, "_syncfs", flush)
    calls: list[tuple[int, int]] = []  # (asked, returned)

    def step() -> None:
        nonlocal clock
        for _ in range(25):
            with lock:
                clock += 1
                asked = clock
            durable.sync_filesystem(tmp_path)
            with lock:
                clock += 1
                calls.append((asked, clock))

    threads = [threading.Thread(target=step) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 200
    assert all(any(asked < began and ended < returned for began, ended in flushes) for asked, returned in calls)
    assert len(flushes) < len(calls) / 2, len(flushes)  # before: one flush a call


def test_a_failed_flush_serves_nobody(tmp_path, monkeypatch):
    """The flush that fails raises in the call that ran it; the calls that waited for it flush again."""
    real = durable._syncfs
    started, release = threading.Event(), threading.Event()
    flushes: list[str] = []

    def flush(libc, fd, where):
        if not flushes:
            flushes.append("failed")
            started.set()
            release.wait()
            raise OSError(5, "syncfs: Input/output error", str(where))
        flushes.append("ok")
        real(libc, fd, where)

    monkeypatch.setattr(durable, "_syncfs", flush)
    outcomes: list[str] = []

    def call() -> None:
        try:
            durable.sync_filesystem(tmp_path)
            outcomes.append("synced")
        except OSError:
            outcomes.append("raised")

    first = threading.Thread(target=call)
    first.start()
    started.wait()
    waiting = [threading.Thread(target=call) for _ in range(3)]
    for thread in waiting:
        thread.start()
    threading.Event().wait(0.05)  # let them queue behind the failing flush (their order does not matter)
    release.set()
    for thread in [first, *waiting]:
        thread.join()
    assert sorted(outcomes) == ["raised", "synced", "synced", "synced"] and flushes[0] == "failed" and "ok" in flushes
