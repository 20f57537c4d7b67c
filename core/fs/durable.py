"""Making many unsynced writes durable at once, and the file system's own clock.

Objects are written without fsync; one `syncfs` of their file system before a step is committed makes all of
them durable at the price of one call (fsync per file costs about as much as writing a small file). The threads
of one process share it: a call made while a flush of the same file system runs waits for that flush, which may
have begun before the call's writes, and then one flush serves every call that waited (a bench host's runs end
their steps together, and each syncfs of a busy file system waits on everyone's writes and on the others' syncfs).
Processes forked after `share_flushes` share them too (a bench's hosts, forked from its zygote): the flushes of a
file system the zygote named are counted in shared memory and taken in turn under a lock each process holds on its
own open file description, which the kernel drops when the process dies. A bench of 1,024 runs on 2 cores (21,500
steps, starts and ends to commit) made 1,767 syncfs calls with hosts of 32 runs sharing theirs by process, each
spinning on the file system's lock while others flushed; 664 shared by every host (perf stat, one bench each).
Still, each step's commit waited 0.3 s for a flush of everyone's pages, and 1,024 runs took 1.9x one run's time: a
step's flush now runs in the background (flush_later) while the run asks its next model call, and the run waits for
it only before its next line (4,512 calls, none waited for by a step that had anything else to do; 1.3x). A host
of several runs also lets its flushing thread wait a few milliseconds after a call (gather_flushes), so that its
other runs' steps, ending just after, share that flush instead of each starting the next.
"""
from __future__ import annotations

import ctypes
import fcntl
import functools
import mmap
import os
import queue
import struct
import threading
import time
from collections.abc import Callable

from mlab.core.fs.dirfd import opened

# A file whose change time is this close to a reading of a clock other than its own file system's may still
# change within the same timestamp tick (the coarsest common granularity is 2 s, FAT's).
FOREIGN_CLOCK_MARGIN_NS = 2 * 10**9


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    return libc if hasattr(libc, "syncfs") else None


def sync_filesystem(where: str | os.PathLike[str] | int) -> None:
    """Flush every dirty page and pending metadata change of the file system holding `where` (a folder, or an
    open descriptor of any file on it) to its disk: returns once a flush begun after this call has ended."""
    libc = _libc()
    if libc is None:
        os.sync()  # no syncfs here: flush everything
        return
    if isinstance(where, int):
        _flush(libc, where, where)
        return
    with opened(os.open(where, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)) as fd:
        _flush(libc, fd, os.fspath(where))


class Flushing:
    """A flush begun in the background by flush_later(): wait() returns once it has ended, raising its error."""

    def __init__(self, fd: int) -> None:
        self.fd = fd  # a descriptor of its own, closed once flushed
        self._ended = threading.Event()
        self._error: BaseException | None = None

    def wait(self) -> None:
        self._ended.wait()
        if isinstance(self._error, OSError):
            raise OSError(*self._error.args) from self._error  # its own: one error may reach several threads
        if self._error is not None:
            raise RuntimeError(f"the flush failed: {self._error!r}") from self._error

    def _end(self, error: BaseException | None) -> None:
        os.close(self.fd)
        self._error = error
        self._ended.set()


def flush_later(fd: int) -> Flushing:
    """sync_filesystem(fd) in this process's flushing thread, which does one flush for every call made while the
    one before ran (the threads of a bench host, and the steps they go on with meanwhile: a run's next model call
    takes longer than the flush of its last step, so nothing waits for it)."""
    flushing = Flushing(os.dup(fd))
    _background().put(flushing)
    return flushing


_queue: queue.SimpleQueue[Flushing] | None = None  # the flushing thread's, made with it
_gather_s = 0.0  # how long the flushing thread waits after a call for others to share its flush (gather_flushes)


def gather_flushes(seconds: float) -> None:
    """From now on, the flushing thread waits `seconds` after a call before it flushes, so that the calls this
    process's other threads make meanwhile share that flush. For a process whose threads end their steps within
    milliseconds of each other (a bench host of several runs, which its interpreter lock takes in turn): a step is
    then durable that much later, and a step that follows within that time waits for it."""
    global _gather_s
    _gather_s = seconds


def _gathering(seconds: float) -> None:
    time.sleep(seconds)


def _background() -> queue.SimpleQueue[Flushing]:
    global _queue
    with _flushers_lock:
        if _queue is None:
            _queue = queue.SimpleQueue()
            threading.Thread(target=_flush_in_background, args=(_queue,), name="mlab-flush", daemon=True).start()
        return _queue


def _flush_in_background(asked: queue.SimpleQueue[Flushing]) -> None:
    while True:
        batch = [asked.get()]
        if _gather_s > 0:
            _gathering(_gather_s)  # the calls made meanwhile go with this one
        while not asked.empty():
            batch.append(asked.get())  # asked after their writes, so one flush begun now serves them all
        by_device: dict[int, list[Flushing]] = {}
        for flushing in batch:
            try:
                by_device.setdefault(os.fstat(flushing.fd).st_dev, []).append(flushing)
            except OSError as exc:
                flushing._end(exc)
        for waiting in by_device.values():
            error: BaseException | None = None
            try:
                sync_filesystem(waiting[0].fd)
            except BaseException as exc:  # each caller raises it (a thread that died would leave them waiting)
                error = exc
            for flushing in waiting:
                flushing._end(error)


def _flush(libc: ctypes.CDLL, fd: int, where: str | int) -> None:
    device = os.fstat(fd).st_dev

    def sync() -> None:
        _syncfs(libc, fd, where)

    shared = _shared
    if shared is not None and (slot := shared.slot(device)) is not None:
        _flusher(device).flush(lambda: shared.flush(slot, sync))
    else:
        _flusher(device).flush(sync)


class _Flusher:
    """The flushes of one file system by this process's threads: one at a time, shared by the calls made while
    the one before it ran (group commit). Only `with` blocks hold state, so a run stopped by an exception anywhere
    (a bench host stops its runs' threads with KeyboardInterrupt) leaves no flush taken for running."""

    def __init__(self) -> None:
        self._counts = threading.Lock()
        self._one_at_a_time = threading.Lock()
        self._asked = 0  # calls numbered in the order they came
        self._done = 0  # every call up to this number is served by a flush that has ended

    def flush(self, sync: Callable[[], None]) -> None:
        with self._counts:
            self._asked += 1
            mine = self._asked
        with self._one_at_a_time:  # a flush running now may have begun before this call's writes
            with self._counts:
                if self._done >= mine:
                    return
                serves = self._asked
            sync()  # raising, it serves nobody: the calls that waited flush again
            with self._counts:
                self._done = max(self._done, serves)


_flushers: dict[int, _Flusher] = {}
_flushers_lock = threading.Lock()


def _forget_flushers() -> None:
    """In a forked child: the parent's flushes (and locks another of its threads held), its flushing thread and
    its turn on the shared flushes are not the child's."""
    global _flushers_lock, _queue
    _flushers.clear()
    _flushers_lock = threading.Lock()
    _queue = None
    if _shared is not None:
        _shared.forget_lock()


os.register_at_fork(after_in_child=_forget_flushers)


def _flusher(device: int) -> _Flusher:
    with _flushers_lock:
        flusher = _flushers.get(device)
        if flusher is None:
            flusher = _flushers[device] = _Flusher()
        return flusher


class _SharedFlushes:
    """Group commit across processes: per file system (a slot, named before any fork) the number of flushes
    begun and ended, in memory shared with the processes forked after it was made. A process's first thread to
    ask reads `begun`, then waits its turn: a flush that began after that reading, and has ended, served it;
    else it flushes. Turns are OFD locks on the slot's byte of the shared file, opened anew in each process
    (threads of one process take turns in _Flusher first)."""

    SLOTS = 16
    _WORDS = 3  # device, begun, ended

    def __init__(self) -> None:
        self._fd = os.memfd_create("mlab-flushes", os.MFD_CLOEXEC)
        os.ftruncate(self._fd, mmap.PAGESIZE)
        self._memory = mmap.mmap(self._fd, mmap.PAGESIZE)  # shared with forked children
        self._words = (ctypes.c_uint64 * (self.SLOTS * self._WORDS)).from_buffer(self._memory)
        self._locks = -1  # this process's own open file description of the shared file, opened at its first turn

    def add(self, device: int) -> None:
        """Share the flushes of `device` (only before forking: the processes read the slots unlocked)."""
        for slot in range(self.SLOTS):
            if self._words[slot * self._WORDS] == device + 1:
                return
            if self._words[slot * self._WORDS] == 0:
                self._words[slot * self._WORDS] = device + 1  # 0 marks a free slot
                return

    def slot(self, device: int) -> int | None:
        for slot in range(self.SLOTS):
            if self._words[slot * self._WORDS] == device + 1:
                return slot
        return None

    def flush(self, slot: int, sync: Callable[[], None]) -> None:
        begun, ended = slot * self._WORDS + 1, slot * self._WORDS + 2
        asked_at = self._words[begun]
        try:
            fd = self._lock_fd()
            self._lock(fd, slot, fcntl.F_WRLCK)
        except OSError:  # no /proc, or a kernel without OFD locks: this process flushes alone
            sync()
            return
        try:  # a stop landing before this line leaves the lock to the process's exit
            if self._words[ended] > asked_at:
                return
            number = self._words[begun] + 1
            self._words[begun] = number
            sync()  # raising, it serves nobody: the next flush is numbered after it
            self._words[ended] = number
        finally:
            self._lock(fd, slot, fcntl.F_UNLCK)

    def _lock_fd(self) -> int:
        with _flushers_lock:  # the threads flushing two file systems at once
            if self._locks < 0:
                self._locks = os.open(f"/proc/self/fd/{self._fd}", os.O_RDWR | os.O_CLOEXEC)
            return self._locks

    def forget_lock(self) -> None:
        """In a forked child: the parent's description, kept, would make the parent's turns the child's too."""
        if self._locks >= 0:
            os.close(self._locks)
            self._locks = -1

    @staticmethod
    def _lock(fd: int, slot: int, kind: int) -> None:
        # struct flock: type, whence, start, length, pid (0 for an OFD lock)
        fcntl.fcntl(fd, fcntl.F_OFD_SETLKW, struct.pack("hhqqi4x", kind, os.SEEK_SET, slot, 1, 0))


_shared: _SharedFlushes | None = None


def share_flushes(where: str | os.PathLike[str]) -> None:
    """Share the flushes of the file system holding `where` with the processes this one forks from now on (the
    bench zygote, for its hosts). Where the kernel lacks what it takes, each process flushes alone."""
    global _shared
    try:
        device = os.stat(where).st_dev
        if _shared is None:
            if not hasattr(fcntl, "F_OFD_SETLKW") or not hasattr(os, "memfd_create"):
                return
            _shared = _SharedFlushes()
        _shared.add(device)
    except OSError:
        return


def _syncfs(libc: ctypes.CDLL, fd: int, where: str | int) -> None:
    if libc.syncfs(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"syncfs: {os.strerror(err)}", str(where))


def fs_now_ns(marker: str | os.PathLike[str]) -> tuple[int, int]:
    """(device, change time) of `marker` just touched: the file system's own reading of "now", in its own
    granularity. A file whose change time is earlier than this gets a different one from any later change."""
    with opened(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)) as fd:
        os.utime(fd)
        st = os.fstat(fd)
    return st.st_dev, st.st_ctime_ns


def trust_horizon_ns(marker: str | os.PathLike[str], device: int) -> int:
    """Files on `device` changed before the returned time can be recognised by their stat alone."""
    try:
        marker_device, now = fs_now_ns(marker)
    except OSError:
        return time.time_ns() - FOREIGN_CLOCK_MARGIN_NS
    if marker_device != device:
        return time.time_ns() - FOREIGN_CLOCK_MARGIN_NS
    return now
