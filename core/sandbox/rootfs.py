"""The file system a confined command sees, built from nothing: which host paths are shown (read-only or
writable) and where something shown must be covered. The local and bwrap sandboxes mount exactly this plan, and
docker mounts the same folders, so "what agent code can see" has one definition.

Shown: the system folders and a few files of /etc (read-only), the Python environment that runs the command,
folders named in MLAB_SANDBOX_RO, the GPU device nodes, the workspace and the other writable folders. Not
shown, whatever their permissions: the run's own folder (trace, snapshots, objects), every task's hidden
answers, other runs, the harness user's home, data folders, the LLM cache, daemon sockets, password hashes,
and the code of installed plugins (a task pack's generator and seed would rebuild its answers).
"""
from __future__ import annotations

import functools
import glob
import importlib.util
import os
import stat
import sys
from contextlib import suppress
from dataclasses import dataclass, field
from importlib.metadata import entry_points

from mlab.core.sandbox.gpus import gpu_index
from mlab.core.sandbox.spec import ExecSpec

# System folders shown read-only (a top-level symlink such as /lib -> usr/lib is recreated as a link).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt/conda")
# Files of /etc that programs need (the dynamic loader, user names, time zone, certificates); the rest of /etc
# may hold secrets (password hashes, host keys) and is left out.
ETC_ENTRIES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group", "nsswitch.conf", "localtime",
               "timezone", "hosts", "ssl", "ca-certificates", "ca-certificates.conf", "alternatives", "mime.types",
               "os-release", "fonts", "matplotlibrc", "gai.conf", "host.conf")
# Only for a task that declares it needs the network: name resolution.
NETWORK_ETC_ENTRIES = ("resolv.conf",)
# Read-only folders beyond those, e.g. a CUDA installation elsewhere: MLAB_SANDBOX_RO=/path1:/path2 (the older
# per-sandbox names still count).
EXTRA_RO_VARS = ("MLAB_SANDBOX_RO", "MLAB_BWRAP_RO", "MLAB_DOCKER_RO")
# GPUs stay usable: NVIDIA's device nodes, AMD's kfd and the DRI render nodes. MLAB_GPU_DEVICES=glob1:glob2
# replaces them (one GPU of several per run: /dev/nvidia0:/dev/nvidiactl:/dev/nvidia-uvm*; empty: none); a
# bench's --gpus-per-run leases the numbered NVIDIA nodes among them to runs (Limits.gpus).
GPU_DEVICE_GLOBS = ("/dev/nvidia*", "/dev/kfd", "/dev/dri")
GPU_DEVICES_VAR = "MLAB_GPU_DEVICES"
# The character devices every program expects.
BASIC_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
# Parts of /proc that uid 0 without capabilities could still write, changing the host kernel (sysctls, the magic
# SysRq key, interrupt affinity, buses): read-only. The rest of /proc stays writable: CUDA's driver does not start
# with a read-only /proc (cuInit: CUDA_ERROR_OPERATING_SYSTEM), and a process's own files are its to change.
PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")
TMP_BYTES = 1 << 30  # the private /tmp: memory-backed, so also within the command's memory limit
PLUGIN_GROUP = "mlab"  # the entry-point group of every plugin (mlab.core.plugins.manager)


def inside(folder: str, path: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def python_dirs(python: str, named_too: bool = False) -> list[str]:
    """The folders an interpreter needs: its environment (a venv), the installation it comes from, and the
    harness's own. Real paths; with named_too also the paths as named (a container must show both)."""
    named = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    if os.path.isabs(python):
        for exe in (python, os.path.realpath(python)):
            home = os.path.dirname(os.path.dirname(exe))  # .../bin/python -> ...
            named.add(home)
            with suppress(OSError):
                with open(os.path.join(home, "pyvenv.cfg"), encoding="utf-8", errors="replace") as f:
                    for line in f:
                        key, _, value = line.partition("=")
                        if key.strip() == "home" and value.strip():
                            named.add(os.path.dirname(value.strip()))
    found = {os.path.realpath(d) for d in named}
    if named_too:
        found |= {os.path.abspath(d) for d in named}
    return sorted(d for d in found if d != "/" and os.path.isdir(d))


def extra_read_only() -> list[str]:
    """The folders the user asked to show read-only (MLAB_SANDBOX_RO and the older names)."""
    paths: list[str] = []
    for var in EXTRA_RO_VARS:
        paths += [p for p in os.environ.get(var, "").split(":") if p.strip() and p not in paths]
    return paths


@functools.lru_cache(maxsize=1)
def plugin_code() -> tuple[str, ...]:
    """Where the installed plugins' code lives (their import packages): covered wherever a shown folder holds
    them, so agent code cannot run a task pack's data generator (the answers follow from its code and seed) or
    read whatever else a pack ships for the harness alone."""
    found: set[str] = set()
    for ep in entry_points(group=PLUGIN_GROUP):
        top = ep.value.split(":", 1)[0].split(".", 1)[0]
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        places = list(spec.submodule_search_locations or []) or ([spec.origin] if spec.origin else [])
        found.update(os.path.realpath(p) for p in places if os.path.exists(p))
    return tuple(sorted(found))


def gpu_devices(gpus: list[int] | None = None) -> list[str]:
    """GPU device nodes (and device folders) of this host that every sandbox passes through; with gpus, of the
    numbered NVIDIA nodes only those of gpus (N of /dev/nvidiaN), the shared ones (nvidiactl, nvidia-uvm) kept."""
    chosen = os.environ.get(GPU_DEVICES_VAR)
    patterns = GPU_DEVICE_GLOBS if chosen is None else [p for p in chosen.split(":") if p]
    found: list[str] = []
    for pattern in patterns:
        found += [path for path in sorted(glob.glob(pattern)) if os.path.isabs(path) and path not in found]
    if gpus is not None:
        found = [path for path in found if gpu_index(path) is None or gpu_index(path) in gpus]
    return found


def machine_gpus() -> dict[int, str]:
    """N -> device node of each NVIDIA GPU the sandboxes would show (MLAB_GPU_DEVICES: stand-ins too)."""
    return {index: path for path in gpu_devices() if (index := gpu_index(path)) is not None}


@dataclass
class RootView:
    """What to mount, in order, on an empty read-only root. Every path is absolute and real, and shown at the
    same path inside."""

    links: list[tuple[str, str]] = field(default_factory=list)  # (path, target): top-level links like /lib
    # (real host path, where it is shown): host files and folders shown read-only
    read_only: list[tuple[str, str]] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)  # GPU device nodes, shown as they are
    late_read_only: list[tuple[str, str]] = field(default_factory=list)  # after the private /tmp (a venv there)
    writable: list[str] = field(default_factory=list)  # the workspace first, then e.g. the sandbox home
    protected: list[str] = field(default_factory=list)  # inside the workspace: read-only over the writable bind
    masked_dirs: list[str] = field(default_factory=list)  # hidden folders inside something shown: covered
    masked_files: list[str] = field(default_factory=list)
    network: bool = False  # the host's network (else a loopback of its own)
    tmp_bytes: int = TMP_BYTES
    proc_read_only: list[str] = field(default_factory=lambda: list(PROC_READ_ONLY))  # names below /proc

    def shown(self) -> list[str]:
        return [target for _, target in (*self.read_only, *self.late_read_only)] + self.writable


def protected_paths(spec: ExecSpec) -> list[str]:
    """The read-only files of spec inside its workspace, each bound read-only over the writable workspace."""
    workspace = os.path.realpath(spec.cwd)
    found: list[str] = []
    for protected in spec.read_only_paths:
        # A symlink would make the bind follow it, possibly out of the workspace; the harness restores those.
        if os.path.lexists(protected) and not os.path.islink(protected):
            real = os.path.realpath(protected)
            if inside(workspace, real):
                found.append(real)
    return found


def path_identity(paths: list[str]) -> tuple[tuple[int, int, int, int] | None, ...]:
    """(device, inode, type, change time) of each path, not followed; None where there is none. A view or option
    list built for these paths holds while this is unchanged (one was replaced, swapped for a link, made or
    removed). A file's change time is there because a file made in place of a removed one can get its inode
    number; a folder's is not (it changes with every entry made in it)."""
    found: list[tuple[int, int, int, int] | None] = []
    for path in paths:
        try:
            st = os.lstat(path)
            found.append((st.st_dev, st.st_ino, st.st_mode, 0 if stat.S_ISDIR(st.st_mode) else st.st_ctime_ns))
        except OSError:
            found.append(None)
    return tuple(found)


def root_view(argv: list[str], spec: ExecSpec, named_too: bool = False) -> RootView:
    """The plan of the file system that runs argv per spec; named_too also shows the Python environment at
    the paths it is named by (a container has none of the host's links)."""
    view = RootView(network=spec.network)
    for path in SYSTEM_DIRS:
        if os.path.islink(path) and os.path.dirname(path) == "/":
            view.links.append((path, os.readlink(path)))
        elif os.path.isdir(path):
            view.read_only.append((os.path.realpath(path), path))
    for name in ETC_ENTRIES + (NETWORK_ETC_ENTRIES if spec.network else ()):
        path = os.path.join("/etc", name)
        if os.path.exists(path):
            # a link (/etc/localtime, a resolv.conf kept under /run) is shown as what it points to, at its name
            view.read_only.append((os.path.realpath(path), path))
    if os.path.isdir("/sys/devices/system/cpu"):
        # CPU counts and caches, read by numpy and torch
        view.read_only.append((os.path.realpath("/sys/devices/system/cpu"), "/sys/devices/system/cpu"))
    view.devices = gpu_devices(spec.limits.gpus)
    for path in [*(python_dirs(argv[0], named_too) if argv else []), *extra_read_only(), *map(str, spec.shown_paths)]:
        real = os.path.realpath(path)
        shown_at = os.path.abspath(path) if named_too else real
        if os.path.exists(real) and not any(inside(s, shown_at) for s in view.shown()):
            view.late_read_only.append((real, shown_at))
    workspace = os.path.realpath(spec.cwd)
    view.writable = [workspace] + [os.path.realpath(p) for p in spec.writable_paths
                                   if os.path.isdir(p) and not os.path.islink(p)]
    view.protected = protected_paths(spec)
    hidden_paths: list[str] = [*map(str, spec.hidden_paths), *plugin_code()]
    for hidden in hidden_paths:  # only where it lies inside something shown
        real = os.path.realpath(hidden)
        if any(inside(s, real) for s in view.shown()):
            if os.path.isdir(real):
                view.masked_dirs.append(real)
            elif os.path.exists(real):
                view.masked_files.append(real)
    return view
