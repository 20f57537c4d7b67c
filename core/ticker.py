"""One thread per process that gives every object wanting it a tick every TICK_S: the run's live step (its file
written when due) and a bench host's progress (sent to the driver when due) share it.

Before, each of them had a thread of its own waiting for its own deadline: a bench host of 32 runs taking a step
every 0.5 s woke 33 threads about 68 times a second, mostly to find nothing due yet. One thread ticking all of
them wakes 4 times a second, and none while nobody wants a tick. A tick may come up to TICK_S after the moment
an object became due: its live view and progress are shown that much later.
"""
from __future__ import annotations

import itertools
import os
import threading
import time
from typing import Protocol

TICK_S = 0.25  # the driver's view ticks every 0.2 s and `mlab view` polls every second


class Ticking(Protocol):
    def tick(self, now: float) -> bool:
        """Do what is due at `now` (time.monotonic()); False when no further tick is wanted until want() again."""


class Ticker:
    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._wanted: dict[Ticking, int] = {}  # -> the number of its last want(): a want() made during its tick counts
        self._wants = itertools.count(1)
        self._thread: threading.Thread | None = None
        self._idle = False  # the thread waits with no deadline: a want() must wake it
        self._last_tick = float("-inf")

    def want(self, ticking: Ticking) -> None:
        """Tick `ticking` from the next tick on, until its tick() returns False."""
        with self._lock:
            self._wanted[ticking] = next(self._wants)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="mlab-ticker", daemon=True)
                self._thread.start()
            elif self._idle:
                self._lock.notify()

    def drop(self, ticking: Ticking) -> None:
        """No more ticks for `ticking` (one already begun may still be running)."""
        with self._lock:
            self._wanted.pop(ticking, None)

    def wanted(self, ticking: Ticking) -> bool:
        with self._lock:
            return ticking in self._wanted

    def _run(self) -> None:
        with self._lock:
            while True:
                if not self._wanted:
                    self._idle = True
                    self._lock.wait()
                    self._idle = False
                    continue
                wait = self._last_tick + TICK_S - time.monotonic()
                if wait > 0:
                    self._lock.wait(wait)
                    continue
                now = self._last_tick = time.monotonic()
                ticking = dict(self._wanted)
                self._lock.release()  # an object's tick takes its own lock, under which it may call want()
                try:
                    done = [one for one in ticking if not _tick(one, now)]
                finally:
                    self._lock.acquire()
                for one in done:
                    if self._wanted.get(one) == ticking[one]:  # not wanted again since its tick began
                        del self._wanted[one]



def _tick(ticking: Ticking, now: float) -> bool:
    try:
        return ticking.tick(now)
    except Exception:  # one object's failure must not end every other's ticks
        return False


_ticker: Ticker | None = None
_ticker_lock = threading.Lock()


def ticker() -> Ticker:
    """This process's ticker."""
    global _ticker
    with _ticker_lock:
        if _ticker is None:
            _ticker = Ticker()
        return _ticker


def _forget_ticker() -> None:
    """In a forked child: the parent's thread is not there, nor are the objects it ticked."""
    global _ticker, _ticker_lock
    _ticker = None
    _ticker_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_ticker)
