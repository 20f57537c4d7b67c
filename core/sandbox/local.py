"""The embedded default sandbox: a child process group with resource limits (and a cgroup of its own where
one can be made, bounding the processes and memory of the whole tree).

Where the kernel allows it (root, or unprivileged user namespaces) the command runs in its own user, mount,
PID, IPC, UTS and network namespaces, on a file system built from nothing as bwrap builds it
(mlab.core.sandbox.rootfs): the workspace and the sandbox home writable, the system folders and the Python
environment read-only, a private /tmp, /dev and /proc, and nothing else. It has a loopback of its own and no
capabilities, even as root. confine.py, run by path with the harness's interpreter, does all that with direct
system calls. A run's commands are forked by a zygote (mlab.core.sandbox.zygote) that has built the namespaces
and the root once: each gets mount, PID and IPC namespaces of its own with its own /proc, /tmp and /dev/shm.
Where a zygote cannot be had, each command runs confine.py afresh.

Without namespaces (fallback) the command is only a process group with rlimits; daemonized children are
found by a token in their environment and killed.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.resources
import marshal
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import ClassVar

from mlab.core.sandbox.disk import disk_usage
from mlab.core.sandbox.process import ProcessCommand, ProcessSandbox
from mlab.core.sandbox.rootfs import (
    BASIC_DEVICES,
    EXTRA_RO_VARS,
    RootView,
    path_identity,
    protected_paths,
    root_view,
)
from mlab.core.sandbox.spec import ExecSpec
from mlab.core.sandbox.zygote import (
    IDLE_S,
    NotForZygote,
    RootNotBuilt,
    Zygote,
    ZygoteGone,
    identity,
    plan_descriptor,
    plan_sources,
)

_VIEWS_KEPT = 8  # file system plans remembered per sandbox (a run needs one or two: its commands, its scorer)


@functools.lru_cache(maxsize=1)
def confine_program() -> str:
    """The path of confine.py (next to this module), which the harness's interpreter runs by path."""
    return str(importlib.resources.files(__package__).joinpath("confine.py"))


def plan_dict(view: RootView) -> dict:
    return {
        "links": view.links, "read_only": view.read_only, "late_read_only": view.late_read_only,
        "devices": view.devices, "basic_devices": list(BASIC_DEVICES), "writable": view.writable,
        "protected": view.protected, "masked_dirs": view.masked_dirs, "masked_files": view.masked_files,
        "network": view.network, "tmp_bytes": view.tmp_bytes, "proc_read_only": view.proc_read_only}


def plan_of(view: RootView) -> str:
    """The RootView as confine.py reads it."""
    return plan_of_dict(plan_dict(view))


def plan_of_dict(plan: dict) -> str:
    return marshal.dumps(plan).hex()


@functools.lru_cache(maxsize=1)
def namespace_prefix() -> tuple[str, ...] | None:
    """The command line that starts confine.py, when it works here; None when namespaces are unavailable."""
    prefix = (sys.executable, "-I", "-S", "-B", confine_program())
    with tempfile.TemporaryDirectory(prefix="mlab-probe-") as folder:
        spec = ExecSpec(cwd=Path(folder))
        try:
            probe = subprocess.run([*prefix, plan_of(root_view(["true"], spec)), "--", "true"],
                                   capture_output=True, timeout=20, cwd=folder)
        except (OSError, subprocess.TimeoutExpired):
            return None
    return prefix if probe.returncode == 0 else None


class LocalSandbox(ProcessSandbox):
    name = "local"
    description = ("namespaces and a file system built from nothing (workspace read-write, system and Python "
                   "read-only, no network), with direct system calls; refuses where the kernel allows none")
    auto_rank: ClassVar[int | None] = 20  # after bwrap: both confine as well, bwrap is the more widely reviewed

    def __init__(self, namespaces: bool = True, zygotes: bool = True, zygote_idle_s: float = IDLE_S):
        self.use_namespaces = namespaces  # False forces the fallback (tests of it, or debugging)
        self.use_zygotes = zygotes  # False runs confine.py afresh for each command (tests, benchmarks)
        self.zygote_idle_s = zygote_idle_s
        # A zygote per file system plan (the agent's commands, a scorer's), all but the protected files
        self._zygotes: dict[bytes, Zygote] = {}
        self._retired: list[Zygote] = []  # replaced, ended once their last command has
        self._owner = os.getpid()  # a forked copy of the harness must not share the parent's zygotes
        self._zygote_lock = threading.Lock()
        self._views: dict[tuple, tuple[RootView, tuple, tuple]] = {}
        self._unbuildable: set[bytes] = set()  # plans whose zygote could not build its root: run afresh

    @classmethod
    def available(cls) -> tuple[bool, str]:
        if namespace_prefix() is None:
            return False, ("no mount, PID and network namespaces can be made here (unshare failed), so agent code "
                           "could read the hidden answers; use --sandbox bwrap or docker, or --sandbox unconfined "
                           "to run it without confinement anyway")
        return True, ""

    @property
    def confined(self) -> bool:
        return self.use_namespaces and namespace_prefix() is not None

    def limitations(self) -> list[str]:
        notes = []
        if not self.confined:
            who = "root" if os.geteuid() == 0 else "the harness's user"
            why = "turned off" if self.use_namespaces is False and namespace_prefix() else "unshare failed"
            notes.append(f"the local sandbox cannot use mount and PID namespaces here ({why}), so agent code runs "
                         f"as {who} without them: it can read the task's hidden answers and other files the "
                         f"harness can read; use --sandbox bwrap (or docker) for a real benchmark")
        return notes + super().limitations()

    def popen(self, argv: list[str], spec: ExecSpec) -> ProcessCommand:
        prefix = namespace_prefix() if self.use_namespaces else None
        if prefix is None:  # daemonized children are found by a token in their environment
            return self.spawn(list(argv), spec, mark=True)
        view, shown_identity = self._view(argv, spec)
        if self.use_zygotes:
            started = self._through_zygote(prefix, argv, spec, view, shown_identity)
            if started is not None:
                return started
        plan_fd = plan_descriptor(plan_dict(dataclasses.replace(view, protected=protected_paths(spec))))
        try:
            return self.spawn([*prefix, f"fd:{plan_fd}", "--", *argv], spec, pass_fds=(plan_fd,))
        finally:
            os.close(plan_fd)

    def _view(self, argv: list[str], spec: ExecSpec) -> tuple[RootView, tuple]:
        """The plan for argv per spec without its protected files, and the identity of every host path it shows.
        Remembered while none of those paths, the workspace and the hidden paths has been replaced (a hidden
        folder made since is seen too): building it costs a few hundred stat calls."""
        key = (argv[0] if argv else "", spec.network, str(spec.cwd), tuple(map(str, spec.writable_paths)),
               tuple(map(str, spec.hidden_paths)), tuple(os.environ.get(var, "") for var in EXTRA_RO_VARS),
               tuple(map(str, spec.shown_paths)), tuple(spec.limits.gpus or ()), spec.limits.gpus is None)
        named = [str(spec.cwd), *key[3], *key[4]]
        named_identity = path_identity(named)
        kept = self._views.get(key)
        if kept is not None and kept[2] == named_identity:
            shown_identity = identity(plan_sources(plan_dict(kept[0])))
            if shown_identity == kept[1]:
                return kept[0], shown_identity
        view = root_view(argv, spec.model_copy(update={"read_only_paths": []}))
        shown_identity = identity(plan_sources(plan_dict(view)))
        if len(self._views) >= _VIEWS_KEPT:
            self._views.clear()
        self._views[key] = (view, shown_identity, named_identity)
        return view, shown_identity

    def _through_zygote(self, prefix: tuple[str, ...], argv: list[str], spec: ExecSpec, view: RootView,
                        shown_identity: tuple) -> ProcessCommand | None:
        """argv started by the zygote of its plan (made, or remade when it died or what it shows was replaced
        on the host); None when no zygote can start it."""
        plan = plan_dict(view)
        key = marshal.dumps(plan)
        for _attempt in range(2):  # a zygote that died since its last command is replaced once
            if key in self._unbuildable:
                return None
            try:
                zygote = self._zygote_for(prefix, plan, key, shown_identity)
                process, cgroup = zygote.start(argv, spec, protected_paths(spec))
                return ProcessCommand(process, cgroup, disk_usage(spec.cwd))
            except NotForZygote:
                return None
            except ZygoteGone:
                self._retire(key)
        return None

    def _zygote_for(self, prefix: tuple[str, ...], plan: dict, key: bytes, shown_identity: tuple) -> Zygote:
        with self._zygote_lock:
            if self._owner != os.getpid():
                self._zygotes, self._retired, self._owner = {}, [], os.getpid()
            for old in [z for z in self._retired if z.live <= 0]:
                self._retired.remove(old)
                old.close()
            zygote = self._zygotes.get(key)
            if zygote is not None and not zygote.current(shown_identity):
                self._zygotes.pop(key)
                self._retired.append(zygote)
                zygote = None
            if zygote is None:
                try:
                    zygote = Zygote(prefix, shown_identity, plan, self.zygote_idle_s)
                except RootNotBuilt:
                    # confine.py run afresh tells why (exit code 120 and its message), command by command
                    self._unbuildable.add(key)
                    raise
                self._zygotes[key] = zygote
            return zygote

    def _retire(self, key: bytes) -> None:
        """Stop using the zygote of key; one still running commands (a frozen REPL) ends after them."""
        with self._zygote_lock:
            zygote = self._zygotes.pop(key, None)
            if zygote is not None and zygote.live > 0 and zygote.proc.poll() is None:
                self._retired.append(zygote)
                zygote = None
        if zygote is not None:
            zygote.close()

    def close(self) -> None:
        """End the zygotes (and any command still running in them)."""
        with self._zygote_lock:
            zygotes = [*self._zygotes.values(), *self._retired] if self._owner == os.getpid() else []
            self._zygotes, self._retired = {}, []
        for zygote in zygotes:
            zygote.close()

    @property
    def signal_exit_codes(self) -> bool:  # the namespace's init shell tells a death by signal N as 128+N
        return self.confined


class UnconfinedSandbox(LocalSandbox):
    """Agent code as a plain process group with rlimits: only when the user asks for it by name."""

    name = "unconfined"
    description = "no confinement (a process group with rlimits): agent code can read the hidden answers"
    auto_rank = None  # not the local sandbox's 20: auto must never pick a sandbox that does not confine

    def __init__(self) -> None:
        super().__init__(namespaces=False)

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return True, ""

    def limitations(self) -> list[str]:
        return ["--sandbox unconfined: agent code runs without confinement and can read the task's hidden answers "
                "and everything the harness's user can; its scores prove nothing"] + ProcessSandbox.limitations(self)
