"""`--engine ray`: each run is a Ray task that needs no file system shared with the head (the driver's machine).

A run's trip:
- The head ships what the worker needs through Ray's object store: the task's prepared folder (public files,
  hidden answers; packed once per bench and kept in the bench folder while the task's files are unchanged), and
  for a resumed run its run folder. The object store rather than a prepare on each node: every task arrives,
  including those prepared from a local copy of data (`--data-dir`) or over a network the nodes lack, and every
  run is scored on the very files the head's baseline was measured on. A node keeps a task in its own MLAB_HOME
  (else ~/.cache/mlab), tagged with the archive's sha256, so each node receives each version of a task once.
- The worker runs the run in a folder of its node's temp space, then streams the run folder back as a tar in
  chunks (a streaming generator task, so the head's memory holds one chunk at a time). Large read-only data
  files a workspace hard-links to the task's copy travel neither way: the receiver links its own copy.
- The head treats the archive as hostile: it caps the bytes it accepts, extracts with tarfile's `data` filter
  (no absolute names, no `..`, no links leading out, no devices) into a fresh folder beside the run's, skips
  what the filter refuses (noted in the run's errors.log) and only then swaps it in as the run's folder.
- Progress goes to a small actor on the head's node, which the driver drains into BENCH/.progress; Ctrl-C
  raises a flag there: each worker stops its run (SIGINT, as the local engine does) and ships it back
  resumable. Where each run ran is appended to BENCH/logs/ray_runs.jsonl.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import shutil
import signal
import socket
import stat
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import IO, Any

from mlab.core.bench.engines import JobSpec, Result, execute_job
from mlab.core.bench.evaluate import registry_from
from mlab.core.bench.progress import HostProgress
from mlab.core.errors import MlabError
from mlab.core.fs.atomic import replace_folder, write_atomic
from mlab.core.fs.dirfd import MAX_ENTRIES
from mlab.core.fs.tree_sums import file_sha256
from mlab.core.run.readonly import SHARE_MIN_BYTES, read_only_rule
from mlab.core.run.taskdata import TaskHome

CHUNK_BYTES = 8 << 20  # one object in the store: small enough to hold, big enough to amortize a round trip
# The most a run folder may weigh on its way back; a run over it fails instead of filling the head's disk.
MAX_RUN_BYTES = int(os.environ.get("MLAB_RAY_MAX_RUN_BYTES", str(64 << 30)))
RUN_MEMBER = "run"  # the run folder's name inside a shipped archive
LOG_MEMBER = "worker.log"  # the worker's output while the run went
SHARED_MEMBER = "shared.json"  # workspace files left out because the head has them (its task's public copy)
SHIPPED_FILE = "shipped.json"  # in a task's folder: the sha256 of the archive it came from (or was packed into)
RUNS_LOG = "ray_runs.jsonl"  # below BENCH/logs: one line per run that came back, with the node it ran on
STOP_POLL_S = 1.0


# ---- archives -------------------------------------------------------------------------------------------
def pack(members: dict[str, Path], archive: Path, leave_out: Callable[[str, os.stat_result], bool] | None = None
         ) -> str:
    """Tar each path (file or folder, links kept as links) under its name; `leave_out(name, lstat)` drops
    regular files. Returns the archive's sha256."""
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, path in members.items():
            if not os.path.lexists(path):
                continue
            tar.add(path, arcname=name, recursive=True,
                    filter=(lambda info: _keep(info, members, leave_out)) if leave_out else None)
    return file_sha256(archive)


def _keep(info: tarfile.TarInfo, members: dict[str, Path],
          leave_out: Callable[[str, os.stat_result], bool]) -> tarfile.TarInfo | None:
    if not info.isfile():
        return info
    top, _, rest = info.name.partition("/")
    path = members[top] / rest if rest else members[top]
    return None if leave_out(info.name, os.lstat(path)) else info


def chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while block := f.read(CHUNK_BYTES):
            yield block


def extract(archive: Path, dest: Path, max_bytes: int = MAX_RUN_BYTES) -> list[str]:
    """Extract an archive from elsewhere into the new folder `dest`, never writing outside it: tarfile's `data`
    filter decides member by member; what it refuses is skipped and returned as one line each. An archive whose
    members add up to more than max_bytes, or more than the walk's entry limit, raises MlabError."""
    dest.mkdir(parents=True)
    root = os.path.realpath(dest)
    refused: list[str] = []
    totals = {"bytes": 0, "members": 0}

    def checked(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
        totals["members"] += 1
        totals["bytes"] += member.size
        if totals["bytes"] > max_bytes or totals["members"] > MAX_ENTRIES:
            raise MlabError(f"archive over the limit ({max_bytes} bytes, {MAX_ENTRIES} entries)")
        try:
            return tarfile.data_filter(member, path)
        except tarfile.FilterError as exc:
            refused.append(f"{member.name!r}: {exc}")
            return None

    try:
        with tarfile.open(archive, "r:") as tar:
            tar.extractall(root, filter=checked)
    except (tarfile.TarError, OSError) as exc:
        raise MlabError(f"unreadable archive: {exc}") from exc
    return refused


# ---- a task's prepared folder on a node -----------------------------------------------------------------
def _listing(folder: Path) -> str:
    """A cheap fingerprint of a folder: every entry's path, type, size and mtime."""
    sha = hashlib.sha256()
    for top, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(top, name)
            if name == SHIPPED_FILE and top == str(folder):
                continue
            st = os.lstat(path)
            sha.update(f"{os.path.relpath(path, folder)}\0{st.st_mode}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return sha.hexdigest()


def pack_task(home: TaskHome, task: str, cache: Path) -> tuple[str, Path]:
    """The task's prepared folder as an archive (packed again only when its files changed): (sha256, path).
    The folder is tagged with the sha256, so a worker sharing this home takes it as it is."""
    folder = home.task_dir(SimpleNamespace(name=task))
    name = folder.name
    archive, record = cache / f"{name}.tar", cache / f"{name}.json"
    fingerprint = _listing(folder)
    try:
        known = json.loads(record.read_text())
    except (OSError, ValueError):
        known = {}
    if known.get("listing") != fingerprint or not archive.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        partial = cache / f".{name}.tar.partial"
        digest = pack({name: folder}, partial,
                      leave_out=lambda member, _st: member == f"{name}/{SHIPPED_FILE}")
        os.replace(partial, archive)
        known = {"listing": fingerprint, "sha256": digest}
        write_atomic(record, json.dumps(known).encode())
    write_atomic(folder / SHIPPED_FILE, json.dumps({"sha256": known["sha256"]}).encode())
    return known["sha256"], archive


def install_task(home: TaskHome, shipment: dict[str, Any], fetch: Callable[[Any], bytes]) -> None:
    """On a worker: make this node's copy of a task the shipped one, once per node (a lock per task)."""
    root = home.data_root
    root.mkdir(parents=True, exist_ok=True)
    final = root / shipment["dir"]
    with open(root / f".{shipment['dir']}.ray-lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _shipped_sha(final) == shipment["sha256"]:
            return
        archive = root / f".{shipment['dir']}.ray-{os.getpid()}.tar"
        staging = root / f".staging-{shipment['dir']}-ray-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            with open(archive, "wb") as out:
                out.writelines(fetch(ref) for ref in shipment["refs"])
            if file_sha256(archive) != shipment["sha256"]:
                raise MlabError(f"task {shipment['task']!r} arrived damaged (sha256 differs)")
            refused = extract(archive, staging, max_bytes=1 << 62)
            if refused:
                raise MlabError(f"task {shipment['task']!r}: refused archive members: {'; '.join(refused[:3])}")
            shipped = staging / shipment["dir"]
            write_atomic(shipped / SHIPPED_FILE, json.dumps({"sha256": shipment["sha256"]}).encode())
            replace_folder(shipped, final)  # an older version's files stay with the runs that hard-linked them
        finally:
            archive.unlink(missing_ok=True)
            shutil.rmtree(staging, ignore_errors=True)


def _shipped_sha(folder: Path) -> str | None:
    try:
        sha = json.loads((folder / SHIPPED_FILE).read_text()).get("sha256")
    except (OSError, ValueError, AttributeError):
        return None
    return sha if isinstance(sha, str) else None


# ---- on the worker --------------------------------------------------------------------------------------
def _node() -> dict[str, Any]:
    import ray

    return {"node_id": ray.get_runtime_context().get_node_id(), "node_ip": ray.util.get_node_ip_address(),
            "host": socket.gethostname(), "pid": os.getpid(), "temp": tempfile.gettempdir()}


@contextlib.contextmanager
def _output_to(log: Path) -> Iterator[None]:
    """The run's stdout and stderr into its own log while it goes (they go to Ray's worker log otherwise)."""
    saved = [os.dup(1), os.dup(2)]
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for std in (1, 2):
            os.dup2(fd, std)
        yield
    finally:
        for std, old in zip((1, 2), saved, strict=True):
            os.dup2(old, std)
            os.close(old)
        os.close(fd)


@contextlib.contextmanager
def _stops_on(board: Any) -> Iterator[None]:
    """While the run goes: when the driver raises the stop flag, SIGINT this thread, which ends the run at
    once and resumable (KeyboardInterrupt in the runner), exactly as the local engine's workers stop."""
    import ray

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])  # Ray's workers block it
    main = threading.get_ident()
    done, lock = threading.Event(), threading.Lock()

    def watch() -> None:
        while not done.wait(STOP_POLL_S):
            try:
                stop = ray.get(board.stopping.remote(), timeout=30)
            except Exception:  # the driver is gone: its Ctrl-C cannot come any more, so the run goes on
                continue
            if stop:
                with lock:  # never once the run is over: the signal would land in whatever runs next
                    if not done.is_set():
                        signal.pthread_kill(main, signal.SIGINT)
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        try:
            with lock:
                done.set()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            signal.signal(signal.SIGINT, previous)


def _linked_to_task(public: Path, read_only: list[str]) -> Callable[[str, os.stat_result], bool]:
    """Files of the workspace that are hard links to the sender's copy of the task at the same path, of those
    the task declares read-only: the receiver has the same file (the same shipped archive) and links its own,
    so they are not sent."""
    rule = read_only_rule(tuple(read_only))

    def leave_out(name: str, st: os.stat_result) -> bool:
        prefix = f"{RUN_MEMBER}/workspace/"
        if not name.startswith(prefix) or st.st_nlink < 2 or not rule.covers(name[len(prefix):]):
            return False
        try:
            twin = os.lstat(public / name[len(prefix):])
        except OSError:
            return False
        return (twin.st_dev, twin.st_ino) == (st.st_dev, st.st_ino)

    return leave_out


def run_on_node(job: JobSpec, task: dict[str, Any], run_refs: list[Any], board: Any) -> Iterator[Any]:
    """The Ray task (a streaming generator): run the run in this node's temp space, then yield a header
    {result, node, bytes} and the archive of the run folder in chunks."""
    import ray

    node = _node()
    with tempfile.TemporaryDirectory(prefix="mlab-ray-run-") as space_name:
        space = Path(space_name)
        run_dir, log, archive = space / RUN_MEMBER, space / LOG_MEMBER, space / "run.tar"
        local: JobSpec = {**job, "run_dir": str(run_dir), "result": str(space / "result.json"), "log": str(log)}
        given = ray.get_gpu_ids()  # the node's GPUs Ray gave this task alone (num_gpus)
        if given and local.get("compute") is not None:
            local["compute"] = {**(local["compute"] or {}), "gpus": sorted(int(n) for n in given)}
        result: Result = None
        ran = False
        home: TaskHome | None = None
        try:
            for key, value in job.get("env", {}).items():
                os.environ[key] = value  # before TaskHome.from_env(): MLAB_HOME is the node's own (not sent)
            home = TaskHome.from_env()
            install_task(home, task, ray.get)
            if run_refs:
                incoming = space / "incoming.tar"
                with open(incoming, "wb") as out:
                    out.writelines(ray.get(ref) for ref in run_refs)
                extract(incoming, space / "incoming")
                link_shared(space / "incoming", home.public_dir(SimpleNamespace(name=task["task"])),
                            task.get("read_only", []))
                os.replace(space / "incoming" / RUN_MEMBER, run_dir)
            name = Path(job["run_dir"]).name
            progress = HostProgress(board.report.remote)  # a call a few times a second, not one a step

            ran = True
            with _output_to(log):
                try:
                    with _stops_on(board):
                        result = execute_job(local, report=progress.reporter(name))
                except KeyboardInterrupt:
                    pass  # stopped part-way, the trace still says "running": the next bench resumes it
                finally:
                    progress.close()
        except Exception as exc:
            result = {"status": "failed", "failure": "harness_error",
                      "end_reason": f"harness error on Ray node {node['node_ip']}: {type(exc).__name__}: {exc}"}
        public = home.public_dir(SimpleNamespace(name=task["task"])) if home is not None else None
        # not run: the head's copy stays as it is
        pack_run(archive, run_dir if ran else None, public, log, task.get("read_only", []))
        size = archive.stat().st_size
        yield {"result": result, "node": node, "bytes": size}
        if size > MAX_RUN_BYTES:
            return  # the head refuses it anyway; the header says why
        yield from chunks(archive)


def _left_out(run_dir: Path, leave_out: Callable[[str, os.stat_result], bool]) -> Iterator[str]:
    workspace = run_dir / "workspace"
    for top, _dirs, files in os.walk(workspace):
        for name in files:
            path = os.path.join(top, name)
            member = f"{RUN_MEMBER}/{os.path.relpath(path, run_dir)}"
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and leave_out(member, st):
                yield member


def pack_run(archive: Path, run_dir: Path | None, public: Path | None, log: Path | None = None,
             read_only: list[str] | None = None) -> None:
    """A run folder's archive, either way: less the workspace files that are hard links to `public` (the
    sender's copy of the task's public files) and read-only, whose names go in SHARED_MEMBER instead (for the
    record: the receiver links by its own list); plus the worker's log."""
    members = {LOG_MEMBER: log} if log is not None else {}
    leave_out = None
    if run_dir is not None:
        shared_list = archive.with_name(f"{archive.name}.shared.json")
        leave_out = _linked_to_task(public, read_only or []) if public is not None else None
        shared = [] if leave_out is None else sorted(
            name[len(f"{RUN_MEMBER}/workspace/"):] for name in _left_out(run_dir, leave_out))
        write_atomic(shared_list, json.dumps(shared).encode())
        members.update({SHARED_MEMBER: shared_list, RUN_MEMBER: run_dir})
    try:
        pack(members, archive, leave_out=leave_out)
    finally:
        if run_dir is not None:
            shared_list.unlink(missing_ok=True)


def link_shared(staging: Path, public: Path, read_only: list[str]) -> None:
    """On the receiver: put back the workspace files a sender leaves out, the task's large read-only files, as
    hard links to the receiver's own copy (as a local run has them; the sandbox mounts them read-only). Which
    files is the receiver's own list (read_only patterns over its copy), never the sender's: an archive naming
    a writable file (the starter) would have it linked, and agent code appending to it after a resume would
    change the task's copy for every later run."""
    rule = read_only_rule(tuple(read_only))
    workspace_path = staging / RUN_MEMBER / "workspace"
    if not rule or workspace_path.is_symlink() or not workspace_path.is_dir():
        return
    workspace = os.path.realpath(workspace_path)
    public_root = os.path.realpath(public)
    for top, dirs, files in os.walk(public_root):  # the receiver's copy, not the archive
        below = os.path.relpath(top, public_root)
        prefix = "" if below == "." else f"{below}/"
        dirs[:] = [d for d in dirs if rule.covers(prefix + d) or rule.may_hold(prefix + d)]
        for name in files:
            rel = prefix + name
            source = os.path.join(top, name)
            st = os.lstat(source)
            if not stat.S_ISREG(st.st_mode) or st.st_size < SHARE_MIN_BYTES or not rule.covers(rel):
                continue
            target = os.path.join(workspace, rel)
            parent = os.path.dirname(target)
            # the arrived folders come from the sender: each must be a folder where it is named, no link
            if not os.path.isdir(parent) or os.path.realpath(parent) != parent or os.path.lexists(target):
                continue
            try:
                os.link(source, target, follow_symlinks=False)
            except OSError:
                shutil.copy2(source, target)


# ---- the progress board (an actor on the head's node) ---------------------------------------------------
class ProgressBoard:
    """Workers' progress (the latest of each run, sent together a few times a second) and the driver's stop flag."""

    def __init__(self) -> None:
        self.latest: dict[str, dict[str, Any]] = {}
        self.stop = False

    def report(self, batch: dict[str, dict[str, Any]]) -> None:
        self.latest.update(batch)  # run name -> its latest progress

    def drain(self) -> dict[str, dict[str, Any]]:
        latest, self.latest = self.latest, {}
        return latest

    def raise_stop(self) -> None:
        self.stop = True

    def stopping(self) -> bool:
        return self.stop


# ---- on the head ----------------------------------------------------------------------------------------
@dataclass
class _Trip:
    """One run under way: its stream of chunks and where they are written."""

    job: JobSpec
    stream: Any  # ray.ObjectRefGenerator
    archive: Path
    out: IO[bytes]
    run_refs: list[Any] = field(default_factory=list)  # the resumed run's folder, kept alive until it ends
    header: dict[str, Any] | None = None
    received: int = 0


class RayEngine:
    """Each run a Ray task on a cluster (--ray-address) or on a local Ray this command starts and stops."""

    name = "ray"

    def __init__(self, workers: int, address: str | None = None, cpus_per_run: float | None = None,
                 bench_dir: Path | None = None, gpus_per_run: int | None = None, memory_per_run: int | None = None):
        try:
            import ray
        except ImportError as exc:
            raise MlabError("--engine ray needs Ray: pip install 'mlab[ray]'") from exc
        self.ray = ray
        self.started_here = False
        if not ray.is_initialized():
            options = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
            try:
                ray.init(address=address, **options) if address else ray.init(**options)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                why = f"cannot connect to Ray at {address!r}: {exc}" if address else f"cannot start Ray: {exc}"
                raise MlabError(why) from exc
            self.started_here = not address
        cpus = ray.cluster_resources().get("CPU", 1.0)
        self.workers = workers
        # Runs waiting on a model need little CPU: by default share the cluster's CPUs among the workers.
        self.cpus_per_run = cpus_per_run if cpus_per_run is not None else min(1.0, cpus / workers)
        gpus = ray.cluster_resources().get("GPU", 0.0)
        if gpus_per_run and gpus_per_run > gpus:  # Ray would keep the runs pending for ever
            raise MlabError(f"--gpus-per-run {gpus_per_run}: the Ray cluster has {gpus:g} GPUs")
        # What each run's commands are held to (the node's GPUs Ray gives the task are added there); a default
        # share below one CPU is one CPU: a quota of a fraction would slow every script.
        cpus_each = cpus_per_run if cpus_per_run is not None else max(1.0, math.floor(self.cpus_per_run))
        self.compute: dict[str, Any] = {"cpus": cpus_each, "memory_bytes": memory_per_run,
                                        "gpus": [] if gpus_per_run == 0 else None}
        resources = {"num_gpus": gpus_per_run or 0, **({"memory": memory_per_run} if memory_per_run else {})}
        self.remote = ray.remote(num_cpus=self.cpus_per_run, max_retries=0, num_returns="streaming",
                                 **resources)(run_on_node)
        self.dir = Path(bench_dir) if bench_dir else Path(tempfile.mkdtemp(prefix="mlab-ray-bench-"))
        self.shipping = self.dir / ".ray"
        (self.shipping / "incoming").mkdir(parents=True, exist_ok=True)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
        self.board = ray.remote(num_cpus=0, scheduling_strategy=here)(ProgressBoard).remote()
        self.tasks: dict[str, dict[str, Any]] = {}  # task name -> shipment (its archive's chunks in the store)
        self.trips: dict[str, _Trip] = {}  # job key -> the run under way
        self.progress: dict[str, dict[str, Any]] = {}  # run name -> its last step's progress

    def capacity(self) -> int:
        return self.workers - len(self.trips)

    def _task(self, name: str, job: JobSpec) -> dict[str, Any]:
        """The task's shipment: its prepared folder in the store, and its read-only patterns (the head's own
        list: what either side links rather than sends)."""
        if name not in self.tasks:
            home = TaskHome.from_env()
            sha, archive = pack_task(home, name, self.shipping / "tasks")
            task = registry_from(job.get("registry_factory"), job.get("sys_path")).get("tasks", name)
            self.tasks[name] = {"task": name, "dir": home.task_dir(SimpleNamespace(name=name)).name, "sha256": sha,
                                "refs": [self.ray.put(block) for block in chunks(archive)],
                                "read_only": list(task.read_only_files)}
        return self.tasks[name]

    def submit(self, jobs: list[JobSpec]) -> None:
        for job in jobs:
            self._submit(job)

    def _submit(self, job: JobSpec) -> None:
        # paths of the head mean nothing on a node: a node uses its own MLAB_HOME and temp space
        sent: JobSpec = {**job, "env": {k: v for k, v in job.get("env", {}).items()
                                        if k not in ("MLAB_HOME", "MLAB_DATA_DIR")}, "compute": dict(self.compute)}
        run_refs: list[Any] = []
        run_dir = Path(job["run_dir"])
        task = self._task(job["config"]["task"], job)
        if job["mode"] != "start" and run_dir.is_dir():
            outgoing = self.shipping / f"{run_dir.name}.out.tar"
            pack_run(outgoing, run_dir, TaskHome.from_env().public_dir(SimpleNamespace(name=job["config"]["task"])),
                     read_only=task["read_only"])
            run_refs = [self.ray.put(block) for block in chunks(outgoing)]
            outgoing.unlink()
        archive = self.shipping / "incoming" / f"{run_dir.name}.tar"
        stream = self.remote.remote(sent, task, run_refs, self.board)
        self.trips[job["key"]] = _Trip(job, stream, archive, open(archive, "wb"), run_refs)

    def poll(self) -> list[tuple[JobSpec, Result]]:
        if not self.trips:
            return []
        self._progress()
        done: list[tuple[JobSpec, Result]] = []
        for key, trip in list(self.trips.items()):
            ended, result = self._receive(trip)
            if ended:
                del self.trips[key]
                self.progress.pop(Path(trip.job["run_dir"]).name, None)
                done.append((trip.job, result))
        return done

    def _progress(self) -> None:
        try:
            latest = self.ray.get(self.board.drain.remote(), timeout=30)
        except self.ray.exceptions.RayError:
            return
        self.progress.update(latest)
        for name, progress in latest.items():  # for whoever looks from outside (the runs are on other nodes)
            write_atomic(self.dir / ".progress" / f"{name}.json", json.dumps(progress).encode())

    def _receive(self, trip: _Trip) -> tuple[bool, Result]:
        """Write what has arrived: (False, None) while the run goes on, else (True, its result)."""
        ray = self.ray
        while True:
            ready, _ = ray.wait([trip.stream], timeout=0)
            if not ready:
                return False, None
            try:
                item = ray.get(next(trip.stream))
            except StopIteration:
                return True, self._arrived(trip)
            except ray.exceptions.TaskCancelledError:
                return True, self._abandon(trip, None)
            except ray.exceptions.RayError as exc:
                return True, self._abandon(trip, _failure(f"Ray task failed: {str(exc).splitlines()[0]}"))
            if isinstance(item, dict):
                trip.header = item
                continue
            trip.received += len(item)
            if trip.received > MAX_RUN_BYTES:
                with contextlib.suppress(Exception):
                    ray.cancel(trip.stream, force=True)
                return True, self._abandon(trip, _failure(f"its run folder came back over {MAX_RUN_BYTES} bytes"))
            trip.out.write(item)

    def _abandon(self, trip: _Trip, result: Result) -> Result:
        trip.out.close()
        trip.archive.unlink(missing_ok=True)
        return result

    def _arrived(self, trip: _Trip) -> Result:
        """The archive is whole: put the run folder in place, then hand the result on."""
        trip.out.close()
        header = trip.header or {}
        result: Result = header.get("result")
        size = header.get("bytes", 0)
        if not header or size > MAX_RUN_BYTES or trip.received != size:
            why = (f"its run folder is {size} bytes, over the limit of {MAX_RUN_BYTES}" if size > MAX_RUN_BYTES
                   else "its run folder did not arrive whole")
            return self._abandon(trip, _failure(why))
        if result is not None and not (isinstance(result, dict) and result.get("status") in ("finished", "failed")):
            return self._abandon(trip, _failure("its node sent no usable result"))
        run_dir = Path(trip.job["run_dir"])
        staging = run_dir.with_name(f".{run_dir.name}.incoming")
        shutil.rmtree(staging, ignore_errors=True)
        try:
            refused = extract(trip.archive, staging)
            self._take_log(staging, trip.job)
            if (staging / RUN_MEMBER).is_dir():
                name = trip.job["config"]["task"]
                link_shared(staging, TaskHome.from_env().public_dir(SimpleNamespace(name=name)),
                            self._task(name, trip.job)["read_only"])
                if refused:
                    _note(staging / RUN_MEMBER, "[bench] left out of the run folder shipped from its Ray node "
                          "(unsafe): " + "; ".join(refused))
                replace_folder(staging / RUN_MEMBER, run_dir)
        except MlabError as exc:
            result = _failure(f"its run folder was refused: {exc}")
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            trip.archive.unlink(missing_ok=True)
        node = header.get("node") or {}
        line = {"key": trip.job["key"], "run_dir": str(run_dir), "mode": trip.job["mode"], **node, "bytes": size,
                "status": result["status"] if result else "interrupted", "ended": time.time()}
        with open(self.dir / "logs" / RUNS_LOG, "a") as out:
            out.write(json.dumps(line) + "\n")
        return result

    def _take_log(self, staging: Path, job: JobSpec) -> None:
        log = staging / LOG_MEMBER
        if log.is_file() and not log.is_symlink():
            with open(job["log"], "ab") as out, open(log, "rb") as part:
                shutil.copyfileobj(part, out)

    def interrupt(self, grace_s: float = 60.0) -> list[tuple[JobSpec, Result]]:
        """Raise the stop flag: each worker stops its run and ships it back (resumable); after grace_s, cancel."""
        done: list[tuple[JobSpec, Result]] = []
        deadline = time.monotonic() + grace_s
        try:
            self.ray.get(self.board.raise_stop.remote(), timeout=30)
            while self.trips and time.monotonic() < deadline:
                done.extend(self.poll())
                time.sleep(0.05)
        except (KeyboardInterrupt, self.ray.exceptions.RayError):  # a second Ctrl-C: stop waiting
            pass
        for trip in self.trips.values():
            with contextlib.suppress(Exception):
                self.ray.cancel(trip.stream, force=True)
            done.append((trip.job, self._abandon(trip, None)))
        self.trips.clear()
        return done

    def close(self) -> None:
        for trip in self.trips.values():
            trip.out.close()
        self.tasks.clear()
        if self.started_here:
            self.ray.shutdown()


def _failure(why: str) -> Result:
    return {"status": "failed", "failure": "harness_error", "end_reason": f"harness error: {why}"}


def _note(run_dir: Path, text: str) -> None:
    from mlab.core.run.trace import append_error

    append_error(run_dir, text)
