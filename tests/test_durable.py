"""One syncfs for the steps of several runs at once: the runs of a bench host are threads of one process, and
their steps end together (their models answer alike), so each step's flush of the file system is shared."""
from __future__ import annotations

import fcntl
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from mlab.core.fs import durable
from tests.fixtures.waiting import wait_until


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


def _appended(path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{text} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


def _lines(path) -> list[str]:
    return path.read_text().split()[::2] if path.exists() else []


_children: set[int] = set()  # forked and not yet waited for: killed when their test ends


def _forked(body) -> int:
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            body()
            code = 0
        finally:
            os._exit(code)
    _children.add(pid)
    return pid


def _wait(pid: int) -> int:
    """The exit code of a forked child, waiting at most 60 s (a hang guard)."""
    for _ in range(6000):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            _children.discard(pid)
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    raise AssertionError(f"process {pid} hung")


def _waiting_for_its_turn(pid: int) -> bool:
    """Whether the process is blocked taking a shared flush's lock (fcntl F_OFD_SETLKW)."""
    try:
        fields = (Path("/proc") / str(pid) / "syscall").read_text().split()
    except OSError:
        return False
    return len(fields) > 2 and fields[2] == hex(fcntl.F_OFD_SETLKW)


@pytest.fixture
def shared(tmp_path, monkeypatch):
    """This process shares the flushes of tmp_path's file system with the processes it forks from now on; the
    fake syncfs notes each flush in tmp_path/flushes and, in a process told to, waits for a byte on `hold`."""
    monkeypatch.setattr(durable, "_shared", None)
    durable.share_flushes(tmp_path)
    assert durable._shared is not None
    log = tmp_path / "flushes"
    hold_r, hold_w = os.pipe()
    real = durable._syncfs
    holding = {"yes": False}

    def flush(libc, fd, where):
        _appended(log, "began")
        if holding["yes"]:
            os.read(hold_r, 1)
        real(libc, fd, where)
        _appended(log, "ended")

    monkeypatch.setattr(durable, "_syncfs", flush)
    yield log, holding, hold_w
    for pid in _children:  # a failed test's
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    _children.clear()
    os.close(hold_r)
    os.close(hold_w)


def test_processes_forked_after_share_flushes_share_a_flush_begun_after_each_asked(tmp_path, shared):
    """A bench's hosts are processes forked from its zygote: seven ask while another's flush runs (which may have
    begun before their writes); one more flush, begun after all seven asked, serves them all (before: eight)."""
    log, holding, hold = shared
    holding["yes"] = True
    first = _forked(lambda: durable.sync_filesystem(tmp_path))
    holding["yes"] = False
    wait_until(lambda: _lines(log) == ["began"], "the first flush begins")
    others = [_forked(lambda: durable.sync_filesystem(tmp_path)) for _ in range(7)]
    wait_until(lambda: all(_waiting_for_its_turn(pid) for pid in others), "the seven wait their turn")
    os.write(hold, b"x")
    assert [_wait(pid) for pid in [first, *others]] == [0] * 8
    assert _lines(log) == ["began", "ended", "began", "ended"]


def test_a_process_killed_while_flushing_holds_up_nobody(tmp_path, shared):
    """The lock is the process's own: the kernel drops it when the process dies mid-flush, and the flush that
    never ended served nobody, so the next caller flushes."""
    log, holding, _hold = shared
    holding["yes"] = True
    first = _forked(lambda: durable.sync_filesystem(tmp_path))
    holding["yes"] = False
    wait_until(lambda: _lines(log) == ["began"], "the first flush begins")
    second = _forked(lambda: durable.sync_filesystem(tmp_path))
    wait_until(lambda: _waiting_for_its_turn(second), "the second waits its turn")
    os.kill(first, signal.SIGKILL)
    assert _wait(first) == -signal.SIGKILL and _wait(second) == 0
    assert _lines(log) == ["began", "began", "ended"]


def test_a_file_system_not_shared_is_flushed_by_each_process_alone(tmp_path, shared, monkeypatch):
    log, _holding, _hold = shared
    monkeypatch.setattr(durable._shared, "slot", lambda device: None)  # as a device share_flushes never named
    children = [_forked(lambda: durable.sync_filesystem(tmp_path)) for _ in range(3)]
    assert [_wait(pid) for pid in children] == [0] * 3
    assert sorted(_lines(log)) == ["began"] * 3 + ["ended"] * 3


def test_a_flush_begun_later_serves_every_call_made_while_the_one_before_ran(tmp_path, monkeypatch):
    """flush_later returns at once; calls made while a flush runs wait for one more flush, begun after all of
    them asked, which serves them all; its error reaches each."""
    real = durable._syncfs
    first_began, release = threading.Event(), threading.Event()
    flushes: list[str] = []

    def flush(libc, fd, where):
        flushes.append("began")
        if len(flushes) == 1:
            first_began.set()
            assert release.wait(60)  # a hang guard
        elif len(flushes) == 2:
            raise OSError(5, "syncfs: Input/output error", str(where))
        real(libc, fd, where)

    monkeypatch.setattr(durable, "_syncfs", flush)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        first = durable.flush_later(fd)
        assert first_began.wait(60)
        later = [durable.flush_later(fd) for _ in range(5)]  # while the first runs: it returned, unflushed
        release.set()
        first.wait()
        errors = []
        for flushing in later:
            with pytest.raises(OSError) as raised:
                flushing.wait()
            errors.append(raised.value.errno)
        assert flushes == ["began", "began"] and errors == [5] * 5
        durable.flush_later(fd).wait()  # and the next one flushes again
        assert flushes == ["began"] * 3
    finally:
        os.close(fd)


def test_a_gathering_process_flushes_the_calls_made_within_its_window_at_once(tmp_path, monkeypatch):
    """With gather_flushes (a bench host of several runs), the flushing thread waits after a call: the calls made
    meanwhile share its one flush."""
    real = durable._syncfs
    flushes: list[int] = []
    waiting, release = threading.Event(), threading.Event()

    def gathering(seconds: float) -> None:
        assert seconds == 0.25
        waiting.set()
        assert release.wait(60)  # a hang guard: the window ends when the test says

    monkeypatch.setattr(durable, "_syncfs", lambda libc, fd, where: (flushes.append(fd), real(libc, fd, where)))
    monkeypatch.setattr(durable, "_gathering", gathering)
    monkeypatch.setattr(durable, "_gather_s", 0.0)  # put back after the test
    durable.gather_flushes(0.25)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        first = durable.flush_later(fd)
        assert waiting.wait(60)
        later = [durable.flush_later(fd) for _ in range(5)]  # within the window
        release.set()
        for flushing in (first, *later):
            flushing.wait()
    finally:
        os.close(fd)
    assert len(flushes) == 1
