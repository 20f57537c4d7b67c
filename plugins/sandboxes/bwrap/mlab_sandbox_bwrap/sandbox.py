"""`--sandbox bwrap`: agent code in a bubblewrap container (Debian package `bubblewrap`).

The command sees a file system built from nothing: the workspace and the sandbox home read-write, the Python
environment that runs it and the system libraries read-only, a private /tmp, /dev and /proc. Everything else
(the task's hidden answers above all, the run's trace and snapshots, the user's home) is simply not there. It
has no network, its own PID, IPC and UTS namespaces, no capabilities even as root, and everything it starts
dies with it. Processes and memory of the whole tree are bounded by the core's per-command cgroup. When a command
ends and none runs, the next one's container is built ahead (ahead.py).
"""
from __future__ import annotations

import contextlib
import functools
import os
import shutil
import stat
import subprocess
import threading
import time
import weakref

from mlab.core import Command, ExecSpec, ProcessCommand, ProcessSandbox, path_identity, root_view
from mlab_sandbox_bwrap.ahead import WAITER, Ahead, BwrapCommand, command_line, file_state


@functools.lru_cache(maxsize=1)
def _probe() -> tuple[bool, str]:
    exe = shutil.which("bwrap")
    if exe is None:
        return False, "bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    command = [exe, *_namespace_options(), "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--", "true"]
    why = ""
    for attempt in range(_PROBE_TRIES):
        if attempt:
            time.sleep(0.2)
        try:
            probe = subprocess.run(command, capture_output=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired) as exc:
            why = f"bwrap does not run: {exc}"
            continue
        if probe.returncode == 0:
            return True, ""
        detail = probe.stderr.decode(errors="replace").strip().splitlines()
        why = f"bwrap cannot create namespaces here: {detail[-1] if detail else probe.returncode}"
    return False, why


# The probe binds the whole host root: a mount coming or going meanwhile (another program's container) once made
# it fail with EINVAL in a full test run, and every run of that bench with it. A kernel that cannot fails every try.
_PROBE_TRIES = 3


def _namespace_options(network: bool = False) -> list[str]:
    options = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent",
               "--new-session"]
    if not network:  # a task that declares it needs the network at run time keeps the host's
        options.append("--unshare-net")
    if os.geteuid() == 0:  # unprivileged bwrap drops every capability by itself
        options += ["--cap-drop", "ALL"]
    return options


def command_for(argv: list[str], spec: ExecSpec, exe: str | None = None) -> list[str]:
    """The bwrap command line that runs argv confined per spec: the core's RootView, as bwrap options."""
    return [exe or shutil.which("bwrap") or "bwrap", *options_for(spec, argv), "--", *argv]


def options_for(spec: ExecSpec, argv: list[str], copies: bool = False) -> list[str]:
    """bwrap's options for the core's RootView of argv per spec (everything before `--`). With copies, each file
    of /etc is an option pair naming its source (COPY_FD, COPY_PERMS), which with_copies() turns into a copy."""
    view = root_view(argv, spec)
    cmd = [*_namespace_options(spec.network), "--hostname", "mlab-sandbox"]
    for path, target in view.links:
        cmd += ["--symlink", target, path]
    for source, target in view.read_only:
        if copies and target.startswith("/etc/") and os.path.isfile(source):
            # bwrap reads the whole mount table after each bind (half of its CPU a command, 16 of them here):
            # a copy in the root mounts nothing, and `--remount-ro /` below makes it read-only
            cmd += ["--perms", COPY_PERMS + source, "--file", COPY_FD + source, target]
            continue
        cmd += ["--ro-bind", source, target]
    # The command may run as uid 0 (without capabilities), which still owns /proc/sys and /proc/sysrq-trigger of
    # the host kernel: those are read-only; the rest of /proc is not (CUDA's driver does not start without it).
    cmd += ["--dev", "/dev", "--proc", "/proc"]
    for name in view.proc_read_only:
        cmd += ["--ro-bind-try", f"/proc/{name}", f"/proc/{name}"]
    cmd += ["--size", str(view.tmp_bytes), "--tmpfs", "/tmp"]
    for source, target in view.late_read_only:  # after the private /tmp: a Python environment below /tmp
        cmd += ["--ro-bind", source, target]
    for device in view.devices:
        cmd += ["--dev-bind-try", device, device]
    for path in view.writable:
        cmd += ["--bind", path, path]
    for path in view.protected:
        cmd += ["--ro-bind", path, path]
    for path in view.masked_dirs:
        cmd += ["--tmpfs", path, "--remount-ro", path]
    for path in view.masked_files:
        cmd += ["--ro-bind", "/dev/null", path]
    # The root bwrap builds the rest on is a tmpfs: read-only, so nothing can be stored (or stashed) outside
    # the workspace, the home and /tmp.
    cmd += ["--remount-ro", "/", "--chdir", view.writable[0]]
    return cmd


COPY_FD = "mlab-copy-fd:"  # before a source path: the descriptor bwrap copies it from (a path starts with /)
COPY_PERMS = "mlab-copy-perms:"
_COPY_BYTES = 4 << 20  # /etc's files are small; anything larger is bound


def with_copies(options: list[str], opened: list[int], seen: dict[str, os.stat_result] | None = None) -> list[str]:
    """options with each copied file's source opened (its descriptor appended to opened, for the caller to pass
    and close) and its permissions read, afresh for each command: an edit in place is seen. Each source's stat is
    put in seen, when given. OSError when one cannot be read or is no longer a small file."""
    done = list(options)
    stats: dict[str, os.stat_result] = {}
    for index, option in enumerate(done):
        if option.startswith(COPY_FD):
            source = option[len(COPY_FD):]
            fd = os.open(source, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
            opened.append(fd)
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > _COPY_BYTES:
                raise OSError(f"{source}: not a small file")
            stats[source] = st
            done[index] = str(fd)
    if seen is not None:
        seen.update(stats)
    for index, option in enumerate(done):
        if option.startswith(COPY_PERMS):
            done[index] = f"{stats[option[len(COPY_PERMS):]].st_mode & 0o777:04o}"
    return done


def options_descriptor(options: list[str]) -> int:
    """A descriptor holding options as `bwrap --args FD` reads them (each ended by NUL): the command line is
    bounded, a plan is not."""
    fd = os.memfd_create("mlab-bwrap-args", os.MFD_CLOEXEC)
    try:
        data = memoryview(b"".join(os.fsencode(option) + b"\0" for option in options))
        while data:
            data = data[os.write(fd, data):]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


@functools.lru_cache(maxsize=1)
def _copies_supported() -> bool:
    """Whether this bwrap sets a copy's permissions (`--perms`, bubblewrap 0.5 and later)."""
    try:
        shown = subprocess.run([shutil.which("bwrap") or "bwrap", "--help"], capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return b"--perms" in shown.stdout + shown.stderr


@functools.lru_cache(maxsize=1)
def _own_session() -> list[str]:
    """util-linux's setsid, run before the command inside the container (under /usr, which every view shows),
    where there is one. bwrap's --new-session puts its init and the command in one session, and so (with the
    kernel's sched_autogroup) in one scheduling group, whose weight on the command's CPU the kernel lowers by the
    init's load, counted in full for a fresh process while it sleeps on the other CPU: at load 5 on 2 cores the
    command started 26-34 ms later. In the command's own session it has a group of its own. The command is not
    its process group's leader (init is), so setsid calls setsid() and execs: no fork, the same exit status."""
    found = shutil.which("setsid", path="/usr/bin:/usr/sbin")
    return [found] if found and os.path.realpath(found).startswith("/usr/") else []


_KEPT = 8  # option lists remembered per sandbox (a run needs one or two: its commands, its scorer)


def _identity(options: list[str], spec: ExecSpec) -> tuple:
    """What options_for's answer depends on besides its key: every host path it names (device, inode, type), the
    paths the spec names (a hidden folder made since is seen), where the read-only paths resolve, and /dev (a GPU
    node added)."""
    named = [option for option in options if option.startswith("/")]
    named += [str(spec.cwd), *map(str, spec.writable_paths), *map(str, spec.hidden_paths),
              *map(str, spec.shown_paths)]
    try:
        devices = os.stat("/dev").st_mtime_ns
    except OSError:
        devices = None
    return path_identity(named), tuple(os.path.realpath(path) for path in spec.read_only_paths), devices


class BwrapSandbox(ProcessSandbox):
    name = "bwrap"
    description = ("bubblewrap: only the workspace (read-write), the Python environment and system libraries "
                   "(read-only); no network; own PID namespace")
    auto_rank = 10  # first in `--sandbox auto`
    confined = True  # the command sees only what is bound into its container
    signal_exit_codes = True  # bwrap's init exits with 128+N when the command dies of signal N

    def __init__(self) -> None:
        self._options: dict[tuple, tuple[list[str], tuple]] = {}
        self._lock = threading.Lock()
        self._building = threading.Lock()  # held while a container is made ahead
        self._ahead: list[Ahead] = []  # at most one: the next command's container (ahead.py)
        self._running = 0  # commands started and not yet released
        self._closed = False
        weakref.finalize(self, _discard_all, self._ahead)  # a sandbox dropped unclosed leaves no container

    @classmethod
    def available(cls) -> tuple[bool, str]:
        ok, why = _probe()
        if ok:
            _copies_supported()  # asked where a bench's zygote probes, once: the hosts it forks inherit the answer
        return ok, why

    def _options_for(self, spec: ExecSpec, argv: list[str]) -> list[str]:
        """options_for(spec, argv), remembered while what it depends on is as it was: building it costs a few
        hundred stat calls (2-5 ms of the harness's CPU a command), checking it one per path it names."""
        key = (argv[0] if argv else "", spec.network, str(spec.cwd), tuple(map(str, spec.writable_paths)),
               tuple(map(str, spec.hidden_paths)), tuple(map(str, spec.shown_paths)),
               tuple(map(str, spec.read_only_paths)), tuple(spec.limits.gpus or ()), spec.limits.gpus is None,
               tuple(sorted(os.environ.items())))
        kept = self._options.get(key)
        if kept is not None and kept[1] == _identity(kept[0], spec):
            return kept[0]
        options = options_for(spec, argv, copies=_copies_supported())
        if len(self._options) >= _KEPT:
            self._options.clear()
        self._options[key] = (options, _identity(options, spec))
        return options

    def popen(self, argv: list[str], spec: ExecSpec) -> ProcessCommand:
        key = _ahead_key(argv, spec)
        with self._building, self._lock:  # a container being made ahead is waited for, then taken
            self._closed = False
            ahead = self._ahead.pop() if self._ahead else None
            self._running += 1
        command: BwrapCommand | None = None
        try:
            if ahead is not None and self._took(ahead, key, argv, spec):
                command, ahead = ahead.command, None
            else:
                command = self._start(argv, spec, argv)
        finally:
            if command is None:
                with self._lock:
                    self._running -= 1
            if ahead is not None:  # stale: let go once this command has started
                _discard(ahead)
        command.next_with = (key, argv, spec)
        return command

    def release(self, command: Command) -> None:
        super().release(command)
        if not isinstance(command, BwrapCommand) or command.next_with is None:
            return  # a container made ahead and let go, or a command released twice
        key, argv, spec = command.next_with
        command.next_with = None
        with self._lock:
            self._running -= 1
        with self._building:  # no command starts meanwhile, so none of the agent's code runs while it is made
            with self._lock:
                if self._running or self._closed or self._ahead:
                    return
            made = self._make_ahead(key, argv, spec)
            with self._lock:
                if made is not None and not (self._running or self._closed or self._ahead):
                    self._ahead.append(made)
                    made = None
        if made is not None:
            _discard(made)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            kept, self._ahead[:] = list(self._ahead), []
        for ahead in kept:
            _discard(ahead)

    def _took(self, ahead: Ahead, key: tuple, argv: list[str], spec: ExecSpec) -> bool:
        """Whether ahead's container now runs argv: it still shows what spec's would, and took the line."""
        line = command_line(argv, spec.env, spec.stdin_pipe)
        command = ahead.command
        if line is None or not ahead.still_current(key, self._options_for(spec, argv)):
            return False
        stdin = command.process.stdin
        assert stdin is not None
        try:
            stdin.write(line)
            stdin.flush()
        except OSError:  # its shell died since: start afresh
            return False
        if not spec.stdin_pipe:
            stdin.close()
            command.process.stdin = None
        command.begin(spec.cwd)
        return True

    def _make_ahead(self, key: tuple, argv: list[str], spec: ExecSpec) -> Ahead | None:
        """A container for argv's spec whose command waits for its line, or None where one cannot be made."""
        shell = _waiting_shell()
        if shell is None or command_line(argv, spec.env, True) is None:
            return None  # (a command whose line is too long would start afresh anyway)
        seen: dict[str, os.stat_result] = {}
        try:
            options = self._options_for(spec, argv)
            command = self._start(argv, spec.model_copy(update={"stdin_pipe": True}),
                                  [shell, "-c", WAITER, "mlab-sandbox"], options, seen, env={})
        except Exception:  # only a head start is lost: the next command starts afresh
            return None
        return Ahead(key, command, options, {source: file_state(st) for source, st in seen.items()})

    def _start(self, argv: list[str], spec: ExecSpec, run: list[str], options: list[str] | None = None,
               seen: dict[str, os.stat_result] | None = None, env: dict[str, str] | None = None) -> BwrapCommand:
        """bwrap running `run` (argv, or a shell waiting for it) in the container of argv per spec, with spec's
        environment unless env is given."""
        opened: list[int] = []
        try:
            try:
                options = with_copies(options or self._options_for(spec, argv), opened, seen)
            except OSError:  # a file of /etc gone or changed since: bound, as before
                for fd in opened:
                    os.close(fd)
                opened = []
                options = options_for(spec, argv)
            opened.append(options_descriptor(options))
            return self.spawn([shutil.which("bwrap") or "bwrap", "--args", str(opened[-1]), "--",
                               *_own_session(), *run], spec, env, pass_fds=tuple(opened), kind=BwrapCommand)
        finally:
            for fd in opened:
                os.close(fd)


def _ahead_key(argv: list[str], spec: ExecSpec) -> tuple:
    return argv[0] if argv else "", spec.model_dump_json(exclude={"stdin_pipe"}), tuple(sorted(os.environ.items()))


@functools.lru_cache(maxsize=1)
def _waiting_shell() -> str | None:
    """dash under /usr, which every container shows (another shell adds variables of its own: SHLVL, _)."""
    found = shutil.which("dash", path="/usr/bin:/bin")
    return found if found and os.path.realpath(found).startswith("/usr/") else None


def _discard(ahead: Ahead) -> None:
    """Kill a container made ahead and let its cgroup go; a forked child leaves its parent's alone."""
    if ahead.owner != os.getpid():
        return
    command = ahead.command
    command.kill_tree()  # bwrap, and with it (--die-with-parent) its init and shell
    command.wait()
    for stream in (command.process.stdin, command.process.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    command.let_go()


def _discard_all(kept: list[Ahead]) -> None:
    while kept:
        _discard(kept.pop())
