"""The probe of benchmarks/bench_run_phases.py, imported by every Python started with this folder on PYTHONPATH
and MLAB_PHASES_OUT set (the bench's driver and zygote; the runs are forked from the zygote, so they carry it).

It wraps the phases of a run (engines._run_one and what it calls) to add up, per thread, the CPU (user, system)
and minor page faults each phase took, inclusive of the phases inside it; each run writes its sums to
MLAB_PHASES_OUT/run-PID-THREAD.json as it ends, each host process (engines._run_host) what it used in all to
host-PID.json, the zygote its own CPU (and what of it it had used when it was ready) and its ended children's to
zygote-PID.json."""
from __future__ import annotations

import functools
import json
import os
import resource
import threading
import time
from collections.abc import Callable
from typing import Any

OUT = os.environ.get("MLAB_PHASES_OUT")
sums: dict[str, list[float]] = {}  # phase -> [user s, system s, minor faults, calls]: this thread's (see _sums)
_threads = threading.local()


def _sums() -> dict[str, list[float]]:
    """The sums of this thread's run (of the module's `sums` outside a host's run threads)."""
    return getattr(_threads, "sums", sums)


def _usage(who: int = resource.RUSAGE_THREAD) -> tuple[float, float, int]:
    """(user, system, minor faults): a thread's CPU in all from its clock (getrusage rounds a thread's small
    deltas to nothing or a tick), the system part as getrusage splits it."""
    r = resource.getrusage(who)
    if who != resource.RUSAGE_THREAD:
        return r.ru_utime, r.ru_stime, r.ru_minflt
    return time.thread_time() - r.ru_stime, r.ru_stime, r.ru_minflt


def _add(phase: str, before: tuple[float, float, int]) -> None:
    after = _usage()
    entry = _sums().setdefault(phase, [0.0, 0.0, 0, 0])
    for i in range(3):
        entry[i] += after[i] - before[i]
    entry[3] += 1


def _timed(phase: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        before = _usage()
        try:
            return function(*args, **kwargs)
        finally:
            _add(phase, before)

    return timed


def _wrap(owner: object, name: str, phase: str) -> None:
    setattr(owner, name, _timed(phase, getattr(owner, name)))


def install() -> None:
    from mlab.core.bench import engines
    from mlab.core.run import harness, runner, trace_log

    R = runner.Runner
    _wrap(engines, "execute_job", "execute_job")
    _wrap(engines, "summarize", "execute_job/summarize")
    _wrap(engines, "_hand_over" if hasattr(engines, "_hand_over") else "write_atomic", "hand the result over")
    _wrap(R, "__init__", "execute_job/Runner()")
    _wrap(R, "start", "execute_job/start")
    _wrap(harness.Harness, "ensure_prepared", "execute_job/start/ensure_prepared")
    _wrap(runner, "write_config", "execute_job/start/write_config")
    _wrap(harness.Harness, "new_workspace", "execute_job/start/new_workspace")
    _wrap(R, "_build", "execute_job/start/_build")
    _wrap(runner, "of_run", "execute_job/start/hardware (of_run)")
    _wrap(runner, "gpu_devices", "execute_job/start/gpu_devices")
    _wrap(trace_log.TraceLog, "begin", "execute_job/start/TraceLog.begin")
    _wrap(R, "_loop", "execute_job/start/loop")
    _wrap(R, "snapshot_step", "execute_job/start/loop/snapshot_step")
    _wrap(trace_log.TraceLog, "append", "execute_job/start/loop/TraceLog.append")
    _wrap(R, "_finish_writing", "execute_job/start/loop/finish")
    _wrap(harness.Harness, "score_snapshot", "execute_job/start/loop/finish/score")
    _wrap(trace_log.TraceLog, "finish", "execute_job/start/loop/finish/TraceLog.finish")
    record = runner.SnapshotStore.record

    def first_record(self: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("changes") is not None:  # a step's (snapshot_step passes the store's changes)
            return record(self, *args, **kwargs)
        before = _usage()
        try:
            return record(self, *args, **kwargs)
        finally:
            _add("execute_job/start/first snapshot", before)

    runner.SnapshotStore.record = first_record  # type: ignore[method-assign]

    run_one, run_host = engines._run_one, engines._run_host

    def one(*args: Any, **kwargs: Any) -> Any:
        _threads.sums = {}
        try:
            return run_one(*args, **kwargs)
        finally:
            _add("run thread", (0.0, 0.0, 0))
            with open(os.path.join(str(OUT), f"run-{os.getpid()}-{threading.get_ident()}.json"), "w") as f:
                json.dump(_threads.sums, f)

    def host(jobs: list, *args: Any, **kwargs: Any) -> Any:
        forked = _usage(resource.RUSAGE_SELF)  # since the fork: COW faults of its first steps are the fork's
        try:
            return run_host(jobs, *args, **kwargs)
        finally:
            with open(os.path.join(str(OUT), f"host-{os.getpid()}.json"), "w") as f:
                json.dump({"runs": len(jobs), "forked": forked, "self": _usage(resource.RUSAGE_SELF)}, f)

    engines._run_one, engines._run_host = one, host
    zygote_main = engines.zygote_main
    start_up = engines._StartUp.__init__
    ready: list[float] = []

    def started(self: Any, *args: Any, **kwargs: Any) -> None:
        # the zygote has imported mlab and built the registry: next it says it is ready
        ready[:] = _usage(resource.RUSAGE_SELF)
        start_up(self, *args, **kwargs)

    engines._StartUp.__init__ = started  # type: ignore[method-assign]

    def zygote() -> None:
        try:
            zygote_main()
        finally:
            own, ended = (resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
            with open(os.path.join(str(OUT), f"zygote-{os.getpid()}.json"), "w") as f:
                json.dump({"self": [own.ru_utime, own.ru_stime, own.ru_minflt], "ready": ready,
                           "children": [ended.ru_utime, ended.ru_stime, ended.ru_minflt]}, f)

    engines.zygote_main = zygote


if OUT:
    install()
