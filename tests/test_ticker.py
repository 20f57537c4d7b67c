"""A process's one ticking thread: the live steps of a bench host's runs and its progress share it, instead of a
thread each waking for its own deadline."""
from __future__ import annotations

import os
import threading
import time

import pytest

from mlab.core import ticker as ticker_module
from mlab.core.bench.progress import HostProgress
from mlab.core.models import Action
from mlab.core.run.live import LiveStep
from mlab.core.ticker import Ticker, ticker
from tests.fixtures.waiting import wait_until


class Counting:
    """Wants `wanted` ticks, then none."""

    def __init__(self, wanted: int, again: bool = False):
        self.ticks, self.wanted, self.again = 0, wanted, again
        self.owner: Ticker | None = None

    def tick(self, now: float) -> bool:
        self.ticks += 1
        if self.again and self.ticks == 1:
            assert self.owner is not None
            self.owner.want(self)  # wanted again during its own tick: the False below must not drop it
            return False
        return self.ticks < self.wanted


@pytest.fixture
def fast_ticks(monkeypatch):
    monkeypatch.setattr(ticker_module, "TICK_S", 0.01)


def _ticker_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "mlab-ticker" or t.name.startswith(("live-step",
                                                                                               "bench-progress"))]


def test_the_live_steps_of_many_runs_and_their_hosts_progress_share_one_thread(tmp_path):
    before = len(_ticker_threads())
    steps = [LiveStep(tmp_path / f"run-{n}") for n in range(64)]
    progress = HostProgress(lambda batch: None)
    try:
        for n, live in enumerate(steps):
            (tmp_path / f"run-{n}").mkdir()
            live.begin(1)
            live.acting(Action(name="Append File", args={"file_name": "log.txt"}))
            progress.reporter(f"run-{n}")({"step": 1})
        assert len(_ticker_threads()) <= max(before, 1)  # one for the process, not one per run
        assert all(ticker().wanted(live) for live in steps)
    finally:
        for live in steps:
            live.end()
        progress.close()
    assert not any(ticker().wanted(live) for live in steps) and not ticker().wanted(progress)


def test_an_object_is_ticked_until_it_says_it_is_done_and_others_tick_on(fast_ticks):
    clock = Ticker()
    once, five = Counting(1), Counting(5)
    clock.want(once)
    clock.want(five)
    wait_until(lambda: five.ticks == 5 and not clock.wanted(five), "five ticks")
    assert once.ticks == 1 and not clock.wanted(once)
    clock.want(once)  # wanted again: ticked again, by the same thread
    wait_until(lambda: once.ticks == 2, "the tick wanted again")


def test_a_want_made_during_an_objects_own_tick_is_not_lost(fast_ticks):
    clock = Ticker()
    again = Counting(3, again=True)
    again.owner = clock
    clock.want(again)
    wait_until(lambda: again.ticks == 3, "the ticks after the want made during the first")


def test_an_object_whose_tick_raises_is_dropped_and_the_others_go_on(fast_ticks):
    class Broken:
        def tick(self, now: float) -> bool:
            raise OSError("no space left on device")

    clock = Ticker()
    broken, counting = Broken(), Counting(4)
    clock.want(broken)
    clock.want(counting)
    wait_until(lambda: counting.ticks == 4, "the other object's ticks")
    assert not clock.wanted(broken)


def test_a_forked_child_ticks_with_a_thread_of_its_own(fast_ticks):
    ticker().want(Counting(2))  # the parent's thread runs
    pid = os.fork()
    if pid == 0:  # the child: the parent's thread is not here, so it needs one of its own
        code = 1
        try:
            counting = Counting(3)
            ticker().want(counting)
            wait_until(lambda: counting.ticks == 3, "the child's ticks")
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_live_step_is_written_by_a_tick_once_it_is_due_and_not_before(tmp_path, fast_ticks, monkeypatch):
    from mlab.core.run import live as live_module

    monkeypatch.setattr(live_module, "SHOW_AFTER_S", 0.2)
    live = LiveStep(tmp_path)
    began = time.monotonic()
    live.begin(2)
    wait_until(lambda: (tmp_path / "live.json").exists(), "the step on disk")
    assert time.monotonic() - began >= 0.2
    wait_until(lambda: not ticker().wanted(live), "the ticks to end once written")
    live.output(b"epoch 1\n")  # a change: ticked again, and written
    wait_until(lambda: b"epoch 1" in (tmp_path / "live.json").read_bytes(), "the output on disk")
    live.end()
    assert not (tmp_path / "live.json").exists() and not ticker().wanted(live)
