"""One syncfs for the steps of several runs at once: the runs of a bench host are threads of one process, and
their steps end together (their models answer alike), so each step's flush of the file system is shared."""
from __future__ import annotations

import threading

from mlab.core.fs import durable


def test_threads_flushing_together_share_a_flush_that_began_after_each_asked(tmp_path, monkeypatch):
    """Eight threads ask while a first flush runs: that flush may have begun before their writes, so it serves
    only the thread that ran it; one more flush, begun after all seven asked, serves them all (before: eight)."""
    lock = threading.Lock()
    clock = 0  # orders calls and flushes
    flushes: list[tuple[int, int]] = []  # (began, ended) of each flush
    real = durable._syncfs
    device = tmp_path.stat().st_dev

    def tick() -> int:
        nonlocal clock
        with lock:
            clock += 1
            return clock

    def flush(libc, fd, where):
        began = tick()
        if not flushes:  # the first: hold it until every thread has asked
            for _ in range(20_000):  # a bound, so a broken flusher fails below rather than hangs
                if flusher._asked >= before + 8:  # the process's earlier calls (other tests) counted too
                    break
                threading.Event().wait(0.001)
        real(libc, fd, where)
        flushes.append((began, tick()))

    monkeypatch.setattr(durable, "_syncfs", flush)
    flusher = durable._flusher(device)
    before = flusher._asked
    calls: list[tuple[int, int]] = []  # (asked, returned)

    def step() -> None:
        asked = tick()
        durable.sync_filesystem(tmp_path)
        calls.append((asked, tick()))

    threads = [threading.Thread(target=step) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 8 and len(flushes) == 2, flushes
    assert all(any(asked < began and ended < returned for began, ended in flushes) for asked, returned in calls)


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
