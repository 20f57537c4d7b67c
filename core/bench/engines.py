"""Where a bench's runs execute: local worker processes here, or Ray tasks (core/bench/ray_engine.py). Both run
`execute_job`.

The local engine starts one helper process (the zygote) that imports mlab and builds the plugin registry once; runs
then go in processes forked from it (hosts), each in its own session, so a run costs no interpreter start-up and no
plugin imports, and a Ctrl-C on the terminal reaches only the driver. A host holds one run, or, when a bench starts
more runs at once than the machine has cores for (HOSTS_PER_CORE), a few: each in a thread of its own, sharing the
pages that a process per run would each copy on first write (its Python objects' reference counts: ~1,900 page
faults a run alone, ~170 in hosts of 32). A crash of such a host ends its runs as harness errors (--retry-errors
reruns them). What every run would otherwise repeat at its start (probing the sandbox, asking the Python for its
packages, naming the file system whose flushes its hosts share) the zygote does once, before forking, and every run
inherits. Hosts go to the zygote as JSON lines on its stdin; a host sends its runs' progress (the latest step of
each, a few times a second: core/bench/progress.py) as JSON lines on the zygote's stdout pipe, which the driver
reads: no file is written per step for progress, and 256 runs do not contend for one folder.
"""
from __future__ import annotations

import ctypes
import gc
import io
import json
import math
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, TypedDict

from mlab.core.bench.evaluate import intermediate_steps, registry_from
from mlab.core.bench.progress import HostProgress, pipe_sender
from mlab.core.bench.results import Row, summarize
from mlab.core.bench.slices import Slices
from mlab.core.errors import MlabError
from mlab.core.fs.durable import gather_flushes, share_flushes
from mlab.core.models import ComputeSlice, RunConfig, Step
from mlab.core.plugins.registry import Registry
from mlab.core.run.harness import Harness
from mlab.core.run.task_lookup import task_of_run


class WorkerSettings(TypedDict):
    """What a worker needs to build the same registry in the same environment as the driver."""

    registry_factory: str | None
    sys_path: list[str]
    env: dict[str, str]


class JobSpec(WorkerSettings):
    """One run handed to a worker, as JSON: what to do and where its files go."""

    key: str
    mode: str  # start | resume | collect
    config: dict[str, Any]  # a RunConfig's fields
    run_dir: str
    result: str
    log: str
    intermediate: bool
    compute: dict[str, Any] | None  # the slice of the machine granted to the run (a ComputeSlice's fields)


# The summary of an ended run (runs-table fields plus plugin_versions and step_scores), or None when it was
# interrupted and can be resumed.
Result = Row | None


# ---- the work of one run -----------------------------------------------------------------------------
def execute_job(job: JobSpec, registry: Registry | None = None,
                report: Callable[[dict[str, Any]], None] | None = None) -> Row:
    """Run (or resume, or just read) one run and summarize it: in a forked host or in a Ray task. After each
    step, `report` (when given) gets the run's progress: the worker's line to the driver."""
    for key, value in job.get("env", {}).items():
        if os.environ.get(key) != value:  # the same in every run of a host: no write for its threads to race
            os.environ[key] = value
    registry = registry or registry_from(job.get("registry_factory"), job.get("sys_path"))
    run_dir = Path(job["run_dir"])
    started = time.time()

    def on_step(step: Step) -> None:
        if report is not None:
            report({"step": step.index, "tokens": step.usage.total_tokens, "cost_usd": step.usage.cost_usd,
                    "calls": step.usage.calls, "unpriced_calls": step.usage.unpriced_calls,
                    "action": step.action.name[:MAX_ACTION_CHARS], "started": started})

    from mlab.core.run.runner import Runner
    from mlab.core.run.trace import append_error, read_trace

    try:
        if job["mode"] == "collect":
            trace = read_trace(run_dir)
        else:
            config = read_trace(run_dir).config if job["mode"] == "resume" else RunConfig(**job["config"])
            granted = job.get("compute")
            if granted is not None:  # this time's grant: a resumed run may get other CPUs and GPUs
                config = config.model_copy(update={"compute": ComputeSlice(**granted)})
            runner = Runner(run_dir, config, registry, on_step=on_step)
            trace = runner.resume() if job["mode"] == "resume" else runner.start()
        task = task_of_run(registry, trace.config)
        result = summarize(trace, task)
        result["plugin_versions"] = trace.plugin_versions
        result["step_scores"] = []
        if job.get("intermediate"):
            harness = Harness(registry)
            result["step_scores"] = [(i, snap, *harness.score_snapshot(task, run_dir, snap))
                                     for i, snap in intermediate_steps(trace)]
        return result
    except Exception as exc:
        text = traceback.format_exc()
        if run_dir.is_dir():
            append_error(run_dir, f"[bench] {text}")
        return {"status": "failed", "failure": "harness_error",
                "end_reason": f"harness error: {type(exc).__name__}: {exc}", "traceback": text}


def read_result(job: JobSpec, code: int | None, interrupted: bool = False) -> Result:
    """The worker's result; None when it was interrupted; a harness error when it died without one."""
    path = Path(job["result"])
    if path.is_file():
        try:
            result: Row = json.loads(path.read_text())
            return result
        except ValueError:
            pass
    if interrupted or code == 130:
        return None
    why = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
    return {"status": "failed", "failure": "harness_error",
            "end_reason": f"harness error: worker process died ({why}); see {job['log']}"}


def _die_with_parent(sig: int) -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, sig, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def run_name(job: JobSpec) -> str:
    """The run's folder name: what its progress is known by."""
    return Path(job["run_dir"]).name


# ---- the zygote: forks the hosts of runs ---------------------------------------------------------------
MAX_ACTION_CHARS = 200  # of the action name in a progress line: a line must fit in one atomic pipe write


def _progress_pipe(fd: int) -> int:
    """A non-blocking descriptor of the pipe `fd` writes to, its own (not shared with the zygote): a driver that
    stops reading (suspended, busy) costs the run a progress line, never a blocked step."""
    try:
        return os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:  # no /proc: the shared descriptor, blocking
        return os.dup(fd)


def _run_host(jobs: list[JobSpec], registry: Registry, batch: _Batch) -> int:
    """In a forked host: its runs, the first in this thread and each other in a thread of its own, each reporting
    its end on the driver's pipe. SIGINT (from the driver, or when the zygote dies) stops every run at once,
    leaving it resumable: this thread's at once, the others' at their next Python instruction."""
    os.setsid()
    others: list[threading.Thread] = []
    stopping = threading.Event()

    def stop(_signum: int, _frame: object) -> None:
        stopping.set()
        for thread in others:
            if thread.ident is not None:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                                           ctypes.py_object(KeyboardInterrupt))
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, stop)
    _die_with_parent(signal.SIGINT)
    try:
        batch.wait()
    except KeyboardInterrupt:
        return 130  # stopped before it began
    if len(jobs) > 1:
        gather_flushes(HOST_FLUSH_GATHER_S)
    ends = os.dup(1)  # blocking, unlike progress: the driver must learn of every run's end
    progress = HostProgress(pipe_sender(_progress_pipe(1)))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    if len(jobs) == 1:
        log = os.open(jobs[0]["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
    else:
        os.dup2(2, 1)  # the host's own output (not a run's thread's) goes where the zygote's does
        sys.stdout = sys.stderr = _RunOutput(sys.__stderr__ or io.StringIO())

    def one(job: JobSpec) -> int:
        return _run_one(job, registry, progress, ends, stopping, len(jobs) > 1)

    code = 130
    try:
        for job in jobs[1:]:
            others.append(threading.Thread(target=one, args=(job,), name=run_name(job)))
            others[-1].start()
        code = one(jobs[0])
    except KeyboardInterrupt:
        pass  # stop() has told every started run
    for thread in others:
        while thread.is_alive():
            try:
                thread.join()
            except KeyboardInterrupt:
                pass
    return code if len(jobs) == 1 else 0


def _run_one(job: JobSpec, registry: Registry, progress: HostProgress, ends: int, stopping: threading.Event,
             own_log: bool) -> int:
    """One run of a host; its end (0, or 130 when stopped) told on `ends`. With `own_log`, what its thread
    prints goes to its log."""
    code = 130
    log = open(job["log"], "a", buffering=1, errors="backslashreplace") if own_log else None
    try:
        if log is not None:
            _RunOutput.local.log = log
        if not stopping.is_set():
            result = execute_job(job, registry, report=progress.reporter(run_name(job)))
            _hand_over(Path(job["result"]), json.dumps(result).encode())
            code = 0
    except KeyboardInterrupt:
        code = 130  # the trace still says "running"
    finally:
        progress.forget(run_name(job))
        if log is not None:
            _RunOutput.local.log = None
            log.close()
    os.write(ends, (json.dumps({"ended": job["key"], "code": code}) + "\n").encode())
    return code


class _RunOutput:
    """sys.stdout and sys.stderr of a host of several runs: a run's thread writes to its own log, any other
    thread (the host's, or a thread a run started) to the host's stderr; the rest of a stream's surface (encoding,
    buffer, isatty...) is the chosen stream's."""

    local = threading.local()

    def __init__(self, other: IO[str]):
        self.other = other

    def _stream(self) -> IO[str]:
        return getattr(self.local, "log", None) or self.other

    def write(self, text: str) -> int:
        return self._stream().write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream(), name)


def _hand_over(path: Path, data: bytes) -> None:
    """The result for the driver, whole or not at all (renamed into place) and never synced: the run's trace is
    already durable, and a driver that finds no result after a crash reads the trace instead (plan's collect)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class _StartUp:
    """What every run would find the same at its start, found once in the zygote before it forks."""

    def __init__(self, registry: Registry):
        self.registry = registry
        self.sandboxes: set[str] = set()
        self.models: set[str] = set()
        self.tasks: set[str] = set()
        self.runs_folders: set[str] = set()  # whose file systems' flushes the hosts share
        self.machine_known = False

    def warm(self, job: JobSpec) -> None:
        from mlab.core.run.packages import package_versions
        from mlab.core.run.scripts import interpreter_prefixes
        from mlab.core.sandbox.resolve import resolve_sandbox

        runs_folder = str(Path(job["run_dir"]).parent)
        if runs_folder not in self.runs_folders:
            self.runs_folders.add(runs_folder)
            share_flushes(runs_folder)  # the runs' step commits, one syncfs for many
        choice = str(job["config"].get("sandbox", "auto"))
        if choice not in self.sandboxes:
            self.sandboxes.add(choice)
            try:
                resolve_sandbox(self.registry, choice)  # sandboxes cache their probe
            except Exception:
                pass  # the run says what is wrong, in its own log and result
        self._preload_models(job)
        package_versions()
        interpreter_prefixes()
        if self._machine() | self._task(job):
            gc.freeze()  # what was found is shared with the runs, untouched by their collectors

    def _machine(self) -> bool:
        """The machine as every run reads it at its start: where cgroups can be made (mountinfo), the CPU model
        and the GPUs (nvidia-smi: up to seconds), and the patterns the hardware line and the GPU devices are
        found with."""
        if self.machine_known:
            return False
        self.machine_known = True
        from mlab.core.hardware import measure
        from mlab.core.sandbox.cgroups import cgroup_parents
        from mlab.core.sandbox.rootfs import gpu_devices

        try:
            cgroup_parents()
            measure().summary()
            gpu_devices()
        except Exception:
            pass  # each run measures again and records what it finds
        return True

    def _task(self, job: JobSpec) -> bool:
        """The run's task as its runs look it up (task_lookup caches it per process), its read-only rule compiled
        and its read-only files listed (the scorer's), once per task and parameters."""
        config = job["config"]
        key = json.dumps([config.get(k) for k in ("task", "task_folder", "task_params")], sort_keys=True)
        if key in self.tasks:
            return False
        self.tasks.add(key)
        from mlab.core.run.readonly import is_read_only
        from mlab.core.run.scoring import read_only_files
        from mlab.core.run.taskdata import TaskHome

        try:
            task = task_of_run(self.registry, RunConfig(**config))
            is_read_only("", list(task.read_only_files))
            read_only_files(TaskHome.from_env(), task)
        except Exception:
            pass  # the run looks its task up itself and says what is wrong
        return True

    def _preload_models(self, job: JobSpec) -> None:
        """The client libraries of the run's model backends (litellm: seconds to import), imported once here
        rather than in every run; nothing for backends that need none."""
        from mlab.core.llm.roles import backend_class

        specs = {job["config"].get(role) for role in ("llm", "fast_llm", "edit_llm")}
        new = {spec for spec in specs if isinstance(spec, str) and spec} - self.models
        for spec in new:
            self.models.add(spec)
            try:
                backend_class(self.registry, spec)[0].preload()
            except Exception:
                pass  # the run says what is wrong, in its own log and result
        if new:
            gc.freeze()  # as at start-up: the runs share what was loaded, untouched by their collectors


def zygote_main() -> None:
    """`python -c '...zygote_main()' SETTINGS`: reads hosts on stdin, one JSON line each (a list of jobs), a blank
    line ending a batch; writes JSON lines {"ready"}, {"started" (a job's key), "pid" (its host's)}, {"exited",
    "pid", "code"} on stdout, and its hosts write {"progress" (the run's name), "step", ...} there as their runs
    take steps and {"ended" (the job's key), "code"} at each run's end."""
    settings = json.loads(sys.argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver decides what stops
    _die_with_parent(signal.SIGTERM)
    for key, value in settings.get("env", {}).items():
        os.environ[key] = value
    registry = registry_from(settings.get("registry_factory"), settings.get("sys_path"))
    from mlab.core.run import runner  # noqa: F401 (imported once here, not in every worker)

    start_up = _StartUp(registry)
    # What is loaded by now is never collected: a worker's collector does not write to (and so copy) the pages
    # it shares with the zygote.
    gc.freeze()
    out = sys.stdout

    def say(**message: object) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    say(ready=True)
    children: set[int] = set()
    stdin_open, pending = True, b""
    batch: _Batch | None = None
    while stdin_open or children:
        # the raw descriptor, not sys.stdin: a buffered reader could hold a job line that select() cannot see
        if stdin_open and select.select([0], [], [], 0.02)[0]:
            data = os.read(0, 65536)
            stdin_open = bool(data)
            pending += data
        elif not stdin_open:
            time.sleep(0.02)
        *lines, pending = pending.split(b"\n")
        for text in (raw.decode().strip() for raw in lines):
            if not text:  # the batch is complete: its runs go
                _Batch.release(batch)
                batch = None
                continue
            jobs: list[JobSpec] = json.loads(text)  # a host's
            for job in jobs:
                start_up.warm(job)
            batch = batch or _Batch()
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    batch.join()
                    code = _run_host(jobs, registry, batch)
                except BaseException:
                    traceback.print_exc()
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
            children.add(pid)
            for job in jobs:
                say(started=job["key"], pid=pid)
        if not stdin_open:  # the driver is gone: nothing more will come
            _Batch.release(batch)
            batch = None
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                children.clear()
                break
            if pid == 0:
                break
            children.discard(pid)
            say(exited=pid, code=os.waitstatus_to_exitcode(status))


# Runs the zygote forks before it lets them go: while it forks, a batch's runs wait, so they do not take the CPU
# from the zygote (which every later run waits for); the runs of one batch start while it forks the next, so a
# thousand runs do not leave all but one core idle until the last fork (1,024 runs on 2 cores: ~5 s of forks).
BATCH_RUNS = 32
# Hosts per core that runs started together are spread over: more processes than this buy no CPU, only copies.
HOSTS_PER_CORE = 4
# Runs a host holds at most: its threads wake together (runs started together wait alike on their models) and then
# queue for one interpreter lock, but each process more copies the pages its runs touch. At 1,024 runs on 2 cores
# (bench_parallel.py, side by side) hosts of 4, 8, 16 and 32 took 29-30, 24-25, 21-23 and 18-19 ms of CPU a run
# (643, 376, 240 and 168 page faults), and 1,024 runs 2.1-2.2x, 2.0x, 1.9-2.0x and 1.8x one run's time (a step
# then waited for its flush; 1.3x since it does not); at 256 runs hosts of 4 took 26-28 ms, of 16 22-23. A crash
# ends no more than 32 runs (--retry-errors reruns them).
RUNS_PER_HOST = 32
# How long a host of several runs lets its flushing thread wait after a step's call for its other runs' steps to share
# the flush (their steps end within milliseconds of each other, taken in turn by the interpreter lock). At 256 runs
# on 2 cores (bench_parallel.py's bench) 10 ms made 1,413 syncfs calls instead of 3,479 and 80,000 context switches
# instead of 109,000; side by side, 20.8-23.1 ms of CPU a run against 22.4-23.7 (four rounds each), and at 1,024
# runs 21.8-23.2 against 22.3-26.0 (three rounds).
HOST_FLUSH_GATHER_S = 0.01


def hosts(jobs: list[JobSpec], cores: int) -> list[list[JobSpec]]:
    """Runs started together, by host: one each while there are at most HOSTS_PER_CORE per core, else shared
    evenly, RUNS_PER_HOST a host at most."""
    size = min(RUNS_PER_HOST, max(1, math.ceil(len(jobs) / (HOSTS_PER_CORE * max(1, cores)))))
    return [jobs[i:i + size] for i in range(0, len(jobs), size)]


class _Batch:
    """The runs of one batch (BATCH_RUNS submitted together at most): each waits, forked, until the zygote has
    forked them all."""

    def __init__(self) -> None:
        self.go, self.hold = os.pipe()  # read end: EOF once the zygote closes the write end

    def join(self) -> None:
        """In the forked run: keep only the read end."""
        os.close(self.hold)

    def wait(self) -> None:
        os.read(self.go, 1)  # returns at EOF: released, or the zygote died
        os.close(self.go)

    @staticmethod
    def release(batch: _Batch | None) -> None:
        if batch is not None:
            os.close(batch.hold)
            os.close(batch.go)


class LocalEngine:
    """Runs as processes forked from one zygote, at most `workers` at a time."""

    name = "local"

    def __init__(self, workers: int, settings: WorkerSettings, log_path: Path, slices: Slices | None = None):
        self.workers = workers
        self.slices = slices  # each run's CPUs and GPUs, leased at its start and given back when it ends
        self.running: dict[str, JobSpec] = {}  # job key -> job
        self.pids: dict[str, int] = {}  # job key -> its host's pid
        self.by_pid: dict[int, set[str]] = {}
        self.progress: dict[str, dict[str, Any]] = {}  # run name -> its last step's progress
        self.messages: queue.Queue[dict[str, Any] | None] = queue.Queue()  # None: the zygote is gone
        code = "from mlab.core.bench.engines import zygote_main; zygote_main()"
        with open(log_path, "ab") as log:
            self.zygote = subprocess.Popen(
                [sys.executable, "-c", code, json.dumps(settings)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=log, text=True, bufsize=1, start_new_session=True, preexec_fn=_reset_sigint)
        assert self.zygote.stdin is not None and self.zygote.stdout is not None  # both are pipes
        self.to_zygote: IO[str] = self.zygote.stdin
        self.from_zygote: IO[str] = self.zygote.stdout
        threading.Thread(target=self._read, daemon=True).start()
        ready = self._next(timeout=120)
        if not ready or not ready.get("ready"):
            self.zygote.kill()
            raise MlabError(f"the local worker pool did not start; see {log_path}")

    def _read(self) -> None:
        for line in self.from_zygote:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict) and "progress" in message:
                self.progress[str(message.pop("progress"))] = message  # only the latest matters
            else:
                self.messages.put(message)
        self.messages.put(None)  # the zygote is gone

    def _next(self, timeout: float) -> dict[str, Any] | None:
        try:
            return self.messages.get(timeout=timeout)
        except queue.Empty:
            return {}

    def capacity(self) -> int:
        free = self.workers - len(self.running)
        room = self.slices.room() if self.slices is not None else None
        return free if room is None else min(free, room)  # a run that needs GPUs waits for them

    def submit(self, jobs: list[JobSpec]) -> None:
        """Start the runs, in hosts (hosts()), BATCH_RUNS at a time: the zygote forks a batch's hosts, then lets
        their runs go together (a blank line ends the batch) and forks the next while they start."""
        for job in jobs:
            self.running[job["key"]] = job
            if self.slices is not None:
                job["compute"] = self.slices.lease(job["key"]).model_dump()
        grouped, batches, runs = hosts(jobs, len(os.sched_getaffinity(0))), [""], 0
        for host in grouped:
            if runs + len(host) > BATCH_RUNS:
                batches.append("")
                runs = 0
            batches[-1] += json.dumps(host) + "\n"
            runs += len(host)
        try:
            self.to_zygote.write("".join(batch + "\n" for batch in batches if batch))
            self.to_zygote.flush()
        except (BrokenPipeError, OSError):
            pass  # noticed in poll(): the zygote has died

    def _handle(self, message: dict[str, Any] | None, done: list[tuple[JobSpec, Result]],
                interrupted: bool = False) -> None:
        if message is None:
            for name in list(self.running):  # the pool died: its runs are resumable, not failed
                done.append((self.running.pop(name), None))
                self._release(name)
            raise MlabError("the local worker pool died; finished runs are kept, rerun to resume the others")
        if "started" in message:
            self.pids[message["started"]] = message["pid"]
            self.by_pid.setdefault(message["pid"], set()).add(message["started"])
        elif "ended" in message:
            self._ended(message["ended"], message["code"], done, interrupted)
        elif "exited" in message:  # its runs that told no end died with it
            for key in self.by_pid.pop(message["exited"], set()):
                if self.pids.get(key) == message["exited"]:  # not a retry of it started since
                    self._ended(key, message["code"], done, interrupted)

    def _ended(self, key: str, code: int, done: list[tuple[JobSpec, Result]], interrupted: bool) -> None:
        if key in self.running:
            self.pids.pop(key, None)
            job = self.running.pop(key)
            self._release(key)
            self.progress.pop(run_name(job), None)
            done.append((job, read_result(job, code, interrupted)))

    def poll(self) -> list[tuple[JobSpec, Result]]:
        done: list[tuple[JobSpec, Result]] = []
        while True:
            try:
                message = self.messages.get_nowait()
            except queue.Empty:
                return done
            self._handle(message, done)

    def interrupt(self, grace_s: float = 20.0) -> list[tuple[JobSpec, Result]]:
        """Ask every worker to stop (SIGINT: the run ends at once, resumable), then kill stragglers."""
        done: list[tuple[JobSpec, Result]] = []
        deadline = time.monotonic() + grace_s
        signalled: set[int] = set()
        try:
            while self.running and time.monotonic() < deadline:
                for pid in set(self.pids.values()) - signalled:
                    _kill(pid, signal.SIGINT)
                    signalled.add(pid)
                message = self._next(timeout=0.1)
                if message != {}:
                    self._handle(message, done, interrupted=True)
        except KeyboardInterrupt:  # a second Ctrl-C: stop waiting
            pass
        for pid in self.pids.values():
            _kill(pid, signal.SIGKILL)
        done.extend((job, None) for job in self.running.values())
        for key in self.running:
            self._release(key)
        self.running.clear()
        return done

    def _release(self, key: str) -> None:
        if self.slices is not None:
            self.slices.release(key)

    def close(self) -> None:
        try:
            self.to_zygote.close()
        except OSError:
            pass
        try:
            self.zygote.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.zygote.kill()


def _reset_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    _die_with_parent(signal.SIGTERM)


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
