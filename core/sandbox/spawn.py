"""Starting a command's process: in a new session, with its rlimits, in its cgroup where one can be made, and
getting SIGKILL when the harness dies, all before the command's first instruction; without a Python preexec_fn.

Why no preexec_fn: with one, CPython forks the whole harness (copying its page tables) and runs Python in the
child (after-fork hooks, the GIL) before exec: 2 to 10 ms a command here, growing with the harness's memory.
Without one it uses vfork, whose cost does not grow. What preexec_fn did is split so that each part still comes first:

- The death signal: the child execs `setpriv --pdeathsig KILL` (util-linux), which asks for SIGKILL when its
  parent (the harness) dies and execs a small shell script; the script first checks that its parent is still
  the harness (else the harness died before prctl: exit 125). From then on the harness cannot die unnoticed.
- The rlimits and CPU affinity: the harness sets them from outside (prlimit and sched_setaffinity on the
  child's pid) while the script waits for "go" on its stdin; should the harness die or fail before "go", the
  script reads EOF and exits 125.
- The cgroup: after "go" the script, single-threaded, writes "0" into the cgroup's files itself (cgroup v1:
  `tasks`, which spares the kernel's global lock and RCU wait that a pid written from outside costs; see
  CommandCgroup.join_files), then execs the command.

Neither setpriv nor the script forks, so the command's first fork is counted by the cgroup and inherits the
rlimits, as with preexec_fn. Placing the child from outside without a wait would let the command fork before
it is placed (CLONE_INTO_CGROUP would avoid both, but Python 3.11's subprocess cannot ask for it). The cost is
two small execs and a pipe round trip, 1-2 ms whatever the harness's size. The command's argv is exec'd as
given (the shell looks a bare name up in the command's PATH, as Popen does); one that cannot be found raises
FileNotFoundError here, as Popen would. The command's environment is the one given (the shell's PWD is taken
out again), its stdin the pipe asked for or /dev/null.

Where setpriv (2.33+, for --pdeathsig) or a shell is missing, the command starts with a preexec_fn as before.
"""
from __future__ import annotations

import errno
import functools
import os
import shutil
import signal
import subprocess
from collections.abc import Sequence

from mlab.core.sandbox.cgroups import CommandCgroup
from mlab.core.sandbox.deathsig import die_with
from mlab.core.sandbox.limits import Limits, apply_rlimits, set_affinity, set_rlimits_of

# $1: the harness's pid; $2: variables the shell adds that the command's environment lacks (dash adds PWD; a
# shell that adds more, as bash SHLVL, leaves those); then the files that join the cgroup, "--" and the command.
# "go" comes on stdin (the command's own stdin pipe, or a pipe replaced by /dev/null after it). No descriptor
# is named: dash takes none past 9 in a redirection, and one left open would reach the command.
_CHECK = '[ "$PPID" = "$1" ] && read -r mlab_go && [ "$mlab_go" = go ] || exit 125; unset $2; shift 2; '
_JOIN = 'while [ "$1" != -- ]; do { printf 0 >"$1"; } 2>/dev/null; shift; done; shift; '
SCRIPTS = {True: _CHECK + _JOIN + 'exec "$@"', False: _CHECK + _JOIN + 'exec "$@" </dev/null'}
_SHELL_VARS = ("PWD", "OLDPWD")
REFUSED = 125  # the exit status of a command the wrapper did not start (the harness died or failed first)


@functools.lru_cache(maxsize=1)
def wrapper() -> tuple[str, str] | None:
    """(setpriv, shell) that start a command with the death signal and wait for "go", or None where they
    cannot be had here (then the slow path)."""
    setpriv = shutil.which("setpriv")
    shell = shutil.which("dash") or ("/bin/sh" if os.access("/bin/sh", os.X_OK) else None)
    if setpriv is None or shell is None:
        return None
    try:  # an older setpriv has no --pdeathsig
        probe = subprocess.run([setpriv, "--pdeathsig", "KILL", "--", shell, "-c", "exit 0"],
                               stdin=subprocess.DEVNULL, capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (setpriv, shell) if probe.returncode == 0 else None


def start(command: Sequence[str], cwd: os.PathLike | str, env: dict[str, str], stdin_pipe: bool,
          limits: Limits, nproc: int | None, cgroup: CommandCgroup | None,
          pass_fds: tuple[int, ...] = ()) -> subprocess.Popen:
    """Start command in a new session, stdout and stderr into one pipe, stdin a pipe or /dev/null, in cgroup,
    with the rlimits of limits (RLIMIT_NPROC to nproc when given), dying with the harness. The caller keeps the
    cgroup's descriptors open until this returns."""
    tools = wrapper()
    if tools is None:
        return _start_with_preexec(command, cwd, env, stdin_pipe, limits, nproc, cgroup, pass_fds)
    _check_runnable(command[0], cwd, env)
    setpriv, shell = tools
    unset = " ".join(name for name in _SHELL_VARS if name not in env)
    joins = cgroup.join_files() if cgroup is not None else []
    go_read, go_write = (-1, -1) if stdin_pipe else os.pipe()
    try:
        proc = subprocess.Popen(
            [setpriv, "--pdeathsig", "KILL", "--", shell, "-c", SCRIPTS[stdin_pipe], "mlab-start",
             str(os.getpid()), unset, *joins, "--", *command],
            cwd=cwd, env=env, stdin=subprocess.PIPE if stdin_pipe else go_read, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True, pass_fds=pass_fds)
    finally:
        if go_read >= 0:
            os.close(go_read)
    try:
        # The child waits for "go" and has not forked: what it starts will inherit these.
        set_rlimits_of(proc.pid, limits, nproc)
        set_affinity(proc.pid, limits)
        try:
            if stdin_pipe:
                assert proc.stdin is not None
                proc.stdin.write(b"go\n")
                proc.stdin.flush()
            else:
                os.write(go_write, b"go\n")
        except BrokenPipeError:  # it died already: its exit status tells how
            pass
    except BaseException:
        _discard(proc)
        raise
    finally:
        if go_write >= 0:
            os.close(go_write)
    return proc


def _start_with_preexec(command: Sequence[str], cwd: os.PathLike | str, env: dict[str, str], stdin_pipe: bool,
                        limits: Limits, nproc: int | None, cgroup: CommandCgroup | None,
                        pass_fds: tuple[int, ...]) -> subprocess.Popen:
    parent = os.getpid()

    def prepare() -> None:  # in the child, before exec
        if cgroup is not None:
            cgroup.join()  # first: every later fork is counted
        apply_rlimits(limits, nproc)
        set_affinity(0, limits)
        die_with(parent)

    return subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=prepare, pass_fds=pass_fds)


def _check_runnable(program: str, cwd: os.PathLike | str, env: dict[str, str]) -> None:
    """Raise what Popen raises for a program it cannot exec (the shell would only exit 127)."""
    if os.sep in program:
        path = os.path.join(cwd, program)
        if os.access(path, os.X_OK) and not os.path.isdir(path):
            return
        code = errno.EACCES if os.path.exists(path) else errno.ENOENT
    else:
        if shutil.which(program, path=os.pathsep.join(os.get_exec_path(env))) is not None:
            return
        code = errno.ENOENT
    raise (FileNotFoundError if code == errno.ENOENT else PermissionError)(code, os.strerror(code), program)


def _discard(proc: subprocess.Popen) -> None:
    """A child that will not get "go" exits by itself; make sure of it and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
    if proc.stdin is not None:
        proc.stdin.close()
