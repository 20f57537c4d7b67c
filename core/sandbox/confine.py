"""The local sandbox's confinement (standard library only: it runs before anything of mlab is importable, by
path, with the harness's interpreter). Two ways to run it:

    python -I -S -B confine.py PLAN -- COMMAND...    one command
    python -I -S -B confine.py --serve FD IDLE PLAN  a zygote serving a run's commands over socket FD, ending
                                                     when idle for IDLE seconds with no command running

PLAN is a RootView in marshal (marshal, unlike json, imports nothing): `fd:N`, an inherited descriptor holding
it, so that its size is not bounded by the command line's, or its bytes as hex.

Either way it makes new user (unless root), mount, PID, IPC, UTS and network namespaces with direct system
calls, builds the file system from an empty tmpfs as PLAN says, and runs commands with no capabilities and no
way to gain any. One process does every mount: no `mount` or `ip` child.

One command: this process waits for the namespace's init and exits as it does; the init (PID 1 inside) builds
the root, starts the command, reaps orphans, and exits 128+N when the command dies of signal N. When the init
ends, the kernel kills everything left in the namespace.

Zygote: the root is built once per run (what costs: the interpreter, ctypes, some fifty mounts) by the
zygote, PID 1 of the run's namespaces. For each request it forks a child that unshares a mount, PID and IPC
namespace of the command's own, whose init mounts the command's own /proc, /tmp and /dev/shm and the read-only
binds inside the workspace, then runs the command as above. So commands cannot see or signal one another, and a
command gets a fresh /tmp as before. The zygote exits when the harness closes its socket (or dies); being PID 1,
it takes every command with it.
"""
from __future__ import annotations

import ctypes
import marshal
import os
import signal
import stat
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported only by the zygote, at run time
    import socket

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 1, 24, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217, "i686": 217}
# statvfs flags a remount must keep: in a user namespace the kernel refuses to clear locked ones
KEPT_FLAGS = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
              (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME), (os.ST_RELATIME, MS_RELATIME))
SYSTEM_FAILURE = 120  # the sandbox could not be built: the harness reports the message, not the command's

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]


class ConfineError(Exception):
    pass


def _call(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise ConfineError(f"{what}: {os.strerror(err)}")


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else os.fsencode(text)


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _call(libc.mount(_bytes(source), _bytes(target), _bytes(fstype), flags, _bytes(data)), f"mount {target}")


def remount_read_only(target: str, extra: int = 0) -> None:
    kept = 0
    try:
        got = os.statvfs(target).f_flag
        kept = sum(ms for st, ms in KEPT_FLAGS if got & st)
    except OSError:
        pass
    mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | kept | extra)


def protect_proc(proc: str, names: list[str]) -> None:
    """The plan's parts of /proc read-only (the rest stays writable: see rootfs.PROC_READ_ONLY)."""
    for name in names:
        path = f"{proc}/{name}"
        if os.path.exists(path):
            mount(path, path, None, MS_BIND | MS_REC)
            remount_read_only(path, MS_NOSUID | MS_NODEV | MS_NOEXEC)


def pivot_root(new: str, old: str) -> None:
    machine = os.uname().machine
    number = PIVOT_ROOT.get(machine)
    if number is None:
        raise ConfineError(f"pivot_root: unknown system call number on {machine}")
    _call(libc.syscall(number, os.fsencode(new), os.fsencode(old)), "pivot_root")


def write_file(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def make_point(target: str, like: str) -> None:
    """Create an empty file or folder at target to mount `like` (a host path, seen from the old root) on."""
    if os.path.isdir(like):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.lexists(target):
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT, 0o644))


def bind(source: str, shown_at: str, new_root: str, read_only: bool) -> None:
    """Show source (a real host path, seen at /oldroot, or a descriptor's /proc link) at shown_at in new_root."""
    origin = source if source.startswith("/oldroot/") else "/oldroot" + source
    target = new_root + shown_at
    make_point(target, origin)
    mount(origin, target, None, MS_BIND | MS_REC)
    if read_only:
        remount_read_only(target, MS_NOSUID | MS_NODEV)


def open_below(workspace: str, path: str) -> int | None:
    """An O_PATH descriptor of path, reached from the workspace one component at a time without following a
    link; None when a link (or nothing) is in the way: the harness restores those."""
    parts = [p for p in os.path.relpath(path, workspace).split("/") if p not in ("", ".")]
    fd = os.open(workspace, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW)
    for part in parts:
        try:
            nxt = os.open(part, os.O_PATH | os.O_NOFOLLOW, dir_fd=fd)
        except OSError:
            nxt = -1
        os.close(fd)
        if nxt < 0:
            return None
        fd = nxt
        if stat.S_ISLNK(os.fstat(fd).st_mode):  # O_PATH with O_NOFOLLOW opens a link itself
            os.close(fd)
            return None
    return fd


def loopback_up() -> None:
    """Bring up the new network namespace's loopback (ioctl on a datagram socket, as `ip link set lo up`)."""
    sock = libc.socket(2, 2, 0)  # AF_INET, SOCK_DGRAM
    if sock < 0:
        raise ConfineError(f"socket: {os.strerror(ctypes.get_errno())}")
    try:
        request = ctypes.create_string_buffer(b"lo", 40)  # struct ifreq: the name, then the flags (a short)
        _call(libc.ioctl(sock, SIOCGIFFLAGS, request), "read the loopback's flags")
        flags = ctypes.c_short.from_buffer(request, 16)
        flags.value |= IFF_UP
        _call(libc.ioctl(sock, SIOCSIFFLAGS, request), "bring up the loopback")
    finally:
        os.close(sock)


def build_root(plan: dict) -> None:
    """Turn this mount namespace's root into the plan's file system and enter it."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    # Descriptors of the protected paths first, while the workspace is reached through the host's root.
    workspace = plan["writable"][0]
    protected = [(p, open_below(workspace, p)) for p in plan["protected"]]
    # Stage on a tmpfs over /tmp; pivoting onto it leaves the host's root (its /tmp included) at /oldroot.
    mount("mlab-root", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=1m")
    os.chdir("/tmp")
    os.mkdir("newroot")
    os.mkdir("oldroot")
    pivot_root(".", "oldroot")
    os.chdir("/")
    new = "/newroot"
    mount("mlab-root", new, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=1m,nr_inodes=16384")
    for path, target in plan["links"]:
        os.symlink(target, new + path)
    for source, target in plan["read_only"]:
        bind(source, target, new, read_only=True)
    os.mkdir(new + "/proc")
    mount("proc", new + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    protect_proc(new + "/proc", plan["proc_read_only"])
    os.mkdir(new + "/dev")
    mount("mlab-dev", new + "/dev", "tmpfs", MS_NOSUID, "mode=755,size=64k")
    for name in plan["basic_devices"]:
        if os.path.exists("/oldroot/dev/" + name):
            bind("/dev/" + name, "/dev/" + name, new, read_only=False)
    for device in plan["devices"]:
        if os.path.lexists("/oldroot" + device):  # a device unplugged since the plan was made is left out
            bind(device, device, new, read_only=False)
    os.mkdir(new + "/dev/shm")
    mount("mlab-shm", new + "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=64m")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{new}/dev/{name}")
    remount_read_only(new + "/dev")  # only /dev/shm takes files
    os.makedirs(new + "/tmp", exist_ok=True)
    mount("mlab-tmp", new + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={plan['tmp_bytes']}")
    for source, target in plan["late_read_only"]:
        bind(source, target, new, read_only=True)
    for path in plan["writable"]:
        bind(path, path, new, read_only=False)
    for path, fd in protected:
        if fd is not None:
            bind(f"/oldroot/proc/self/fd/{fd}", path, new, read_only=True)
            os.close(fd)
    for path in plan["masked_dirs"]:
        mount("mlab-hidden", new + path, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "size=4k,mode=000")
    for path in plan["masked_files"]:
        mount("/newroot/dev/null", new + path, None, MS_BIND)
    remount_read_only(new)  # nothing can be stored outside the workspace, the home and /tmp
    _call(libc.umount2(b"/oldroot", MNT_DETACH), "umount /oldroot")
    os.chdir(new)
    pivot_root(".", ".")  # the staging tmpfs ends up on top of the new root: detach it
    _call(libc.umount2(b".", MNT_DETACH), "umount the staging root")
    os.chdir("/")


def drop_privileges() -> None:
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break  # past the last capability this kernel knows
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: all empty
    _call(libc.capset(header, data), "capset")
    _call(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def status_of(wait_status: int) -> int:
    if os.WIFSIGNALED(wait_status):
        return 128 + os.WTERMSIG(wait_status)
    return os.WEXITSTATUS(wait_status)


def fail(message: str) -> None:
    os.write(2, f"mlab sandbox: {message}\n".encode(errors="replace"))
    os._exit(SYSTEM_FAILURE)


def init(plan: dict, command: list[str]) -> None:
    """PID 1 of the new namespace."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the outer process dies: so does the namespace
    try:
        build_root(plan)
        enter_namespaces_rest(plan)
        os.chdir(plan["writable"][0])
    except (ConfineError, OSError) as exc:
        fail(str(exc))
    run_and_reap(command, None)


def enter_namespaces_rest(plan: dict) -> None:
    """What the namespaces need besides the file system: the loopback up and a host name of their own."""
    if not plan["network"]:
        loopback_up()
    name = b"mlab-sandbox"
    libc.sethostname(name, len(name))


def run_and_reap(command: list[str], env: dict | None) -> None:
    """As PID 1: start the command, reap orphans until it ends, and exit as it did (128+N for signal N)."""
    child = os.fork()
    if child == 0:
        try:
            for sig in (signal.SIGPIPE, signal.SIGXFSZ):
                signal.signal(sig, signal.SIG_DFL)  # Python ignores these; the command should not
            drop_privileges()
            # A session of its own, and so (sched_autogroup) a scheduling group of its own: sharing the init's,
            # whose load the kernel counts in full while it sleeps, slowed a command 20 ms at load 5 on 2 cores.
            # The harness reaches it through the init: its PID namespace dies with it, and freeze walks the tree.
            os.setsid()
            if env is None:
                os.execvp(command[0], command)
            os.execvpe(command[0], command, env)
        except ConfineError as exc:
            fail(str(exc))
        except OSError as exc:
            os.write(2, f"{command[0]}: {exc.strerror}\n".encode(errors="replace"))
            os._exit(127 if isinstance(exc, FileNotFoundError) else 126)
    while True:  # reap orphans until the command ends
        try:
            pid, wait_status = os.wait()
        except ChildProcessError:
            os._exit(SYSTEM_FAILURE)
        except InterruptedError:
            continue
        if pid == child:
            os._exit(status_of(wait_status))


def unshare_run(plan: dict) -> None:
    """The namespaces of a run (of its zygote, or of a command run afresh): user (unless root), mount, PID, IPC,
    UTS and network (unless the plan keeps the host's)."""
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID
    if not plan["network"]:
        flags |= CLONE_NEWNET
    if uid != 0:
        flags |= CLONE_NEWUSER
    _call(libc.unshare(flags), "unshare")
    if uid != 0:  # the caller becomes root of its user namespace, which owns the others
        write_file("/proc/self/setgroups", "deny")
        write_file("/proc/self/uid_map", f"0 {uid} 1")
        write_file("/proc/self/gid_map", f"0 {gid} 1")


def wait_and_exit(child: int) -> None:
    while True:
        try:
            _pid, wait_status = os.waitpid(child, 0)
        except InterruptedError:
            continue
        os._exit(status_of(wait_status))


# ---- the zygote ---------------------------------------------------------------------------------------------
REQUEST_BYTES = 1 << 16  # one command's request in the message itself: argv, environment, paths
# The message of a bigger request: its bytes are in the last descriptor sent with it (a memfd).
REQUEST_IN_FD = b"request in fd"
MAX_FDS = 64


def commands_running() -> bool:
    """Whether the zygote (PID 1 here, its /proc that of the run's namespace) has a command's watcher left."""
    try:
        with open("/proc/1/task/1/children") as f:
            return bool(f.read().split())
    except OSError:
        return True


def below_tmp(plan: dict) -> list[str]:
    """The outermost shown paths below /tmp: a command's own /tmp must show them again."""
    shown = {target for _, target in plan["read_only"] + plan["late_read_only"]} | set(plan["writable"])
    below = sorted(p for p in shown if p.startswith("/tmp/"))
    return [p for p in below if not any(p.startswith(q + "/") for q in below)]


def command_mounts(plan: dict, protected: list[str]) -> None:
    """In a command's init, in its own mount namespace (a copy of the run's): a /proc of its own PID namespace,
    an empty /tmp and /dev/shm, and the read-only binds over protected files of the workspace."""
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    protect_proc("/proc", plan["proc_read_only"])
    mount("mlab-shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=64m")
    # What the run shows below /tmp (a workspace, a venv) is taken along by descriptor onto the fresh /tmp.
    kept = [(path, os.open(path, os.O_PATH | os.O_NOFOLLOW)) for path in below_tmp(plan)]
    mount("mlab-tmp", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={plan['tmp_bytes']}")
    for path, fd in kept:
        make_point(path, f"/proc/self/fd/{fd}")
        mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)  # a bind keeps the read-only flag
        os.close(fd)
    workspace = plan["writable"][0]
    for path in protected:
        found = open_below(workspace, path)
        if found is not None:
            mount(f"/proc/self/fd/{found}", path, None, MS_BIND)
            remount_read_only(path, MS_NOSUID | MS_NODEV)
            os.close(found)


def command_init(plan: dict, request: dict, channel: socket.socket, fds: list[int]) -> None:
    """PID 1 of one command's PID namespace: joins its cgroup, tells the harness it started (the harness reads
    this process's pid from the message's credentials), builds its mounts and runs the command."""
    import resource  # imported by the zygote already: no search of the path per command

    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the watcher (and so the zygote) dies: so does this
    os.setsid()  # the harness signals this group's leader: killed, the command's PID namespace dies with it
    output, given_stdin, cgroups = fds[1], fds[2] if request["stdin"] else None, fds[2 + request["stdin"]:]
    for fd in cgroups:  # first: every later fork is counted
        try:
            os.write(fd, b"0")
        except OSError:
            pass
        os.close(fd)
    os.dup2(output, 1)
    os.dup2(output, 2)
    os.close(output)
    try:
        channel.send(b"started")
    except OSError:
        os._exit(SYSTEM_FAILURE)
    channel.close()
    for which, soft, hard in request["rlimits"]:
        try:
            resource.setrlimit(which, (soft, hard))
        except (ValueError, OSError):
            pass
    if request.get("cpu_set"):
        try:
            os.sched_setaffinity(0, request["cpu_set"])
        except OSError:  # a CPU outside the zygote's cpuset: its cgroup's set still holds
            pass
    try:
        command_mounts(plan, request["protected"])
        stdin = given_stdin if given_stdin is not None else os.open("/dev/null", os.O_RDONLY)
        os.dup2(stdin, 0)
        os.close(stdin)
        os.chdir(request["cwd"])
    except (ConfineError, OSError) as exc:
        fail(str(exc))
    run_and_reap(request["argv"], request["env"])


def serve_command(plan: dict, request: dict, fds: list[int]) -> None:
    """A forked zygote child: makes the command's mount, PID and IPC namespaces, starts its init there, waits
    for it and sends the harness its wait status."""
    import socket

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the zygote ignores it; waiting needs it back
    channel = socket.socket(fileno=fds[0])
    try:
        _call(libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC), "unshare")
        init_pid = os.fork()
    except (ConfineError, OSError) as exc:
        os.write(fds[1], f"mlab sandbox: {exc}\n".encode(errors="replace"))
        try:
            channel.send(b"started")
            channel.send(b"exit %d" % (SYSTEM_FAILURE << 8))
        finally:
            os._exit(0)
    if init_pid == 0:
        command_init(plan, request, channel, fds)
    for fd in fds[1:]:
        os.close(fd)
    while True:
        try:
            _pid, wait_status = os.waitpid(init_pid, 0)
            break
        except InterruptedError:
            continue
    try:
        channel.send(b"exit %d" % wait_status)
    finally:
        os._exit(0)


def serve(control_fd: int, idle_s: float, plan: dict) -> None:
    """The zygote (PID 1 of the run's namespaces): builds the root once, then forks a child per request until
    the harness closes the socket."""
    import array
    import resource  # noqa: F401  (for the commands: imported once here, not after each fork)
    import select
    import socket

    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the outer process dies: so does the namespace
    control = socket.socket(fileno=control_fd)
    try:
        build_root({**plan, "protected": []})
        enter_namespaces_rest(plan)
        os.chdir("/")
        control.send(b"ready")
    except (ConfineError, OSError) as exc:
        fail(str(exc))
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the watchers
    fd_bytes = array.array("i").itemsize
    waiting = select.poll()
    waiting.register(control.fileno(), select.POLLIN)
    while True:
        if not waiting.poll(int(idle_s * 1000)):
            if commands_running():
                continue
            os._exit(0)
        try:
            data, ancillary, _flags, _addr = control.recvmsg(
                REQUEST_BYTES, socket.CMSG_SPACE(MAX_FDS * fd_bytes), socket.MSG_CMSG_CLOEXEC)
        except InterruptedError:
            continue
        except OSError:
            os._exit(0)
        if not data:  # the harness closed the socket or died: being PID 1, this ends every command
            os._exit(0)
        fds = array.array("i")
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[:len(payload) - len(payload) % fd_bytes])
        try:
            if data == REQUEST_IN_FD and fds:
                held = fds.pop()
                try:
                    data = read_descriptor(held)
                finally:
                    os.close(held)
            request = marshal.loads(data)
            child = os.fork() if len(fds) >= 2 else -1
        except (ValueError, EOFError, TypeError, OSError):
            child = -1
        if child == 0:
            control.close()
            serve_command(plan, request, list(fds))
        for fd in fds:
            os.close(fd)


def read_plan(given: str) -> dict:
    """PLAN as given: `fd:N`, a descriptor holding its marshal bytes (a plan of any size: a command line is
    bounded), or the bytes as hex."""
    if not given.startswith("fd:"):
        plan: dict = marshal.loads(bytes.fromhex(given))
        return plan
    fd = int(given[3:])
    try:
        plan = marshal.loads(read_descriptor(fd))
    finally:
        os.close(fd)  # the command must not inherit it
    return plan


def read_descriptor(fd: int) -> bytes:
    """Every byte of a file (a memfd) from its start."""
    chunks, offset = [], 0
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def main(argv: list[str]) -> None:
    serving = argv[1] == "--serve"
    try:
        plan = read_plan(argv[4] if serving else argv[1])
    except (OSError, ValueError, EOFError, TypeError) as exc:
        fail(f"unreadable plan: {exc}")
    try:
        unshare_run(plan)
    except (ConfineError, OSError) as exc:
        fail(str(exc))
    child = os.fork()
    if child == 0:
        if serving:
            serve(int(argv[2]), float(argv[3]), plan)
        init(plan, argv[argv.index("--") + 1:])
    if serving:
        os.close(int(argv[2]))  # the zygote alone holds the harness's socket: its closing ends the zygote
    wait_and_exit(child)


if __name__ == "__main__":
    main(sys.argv)
