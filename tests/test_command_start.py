"""Starting and waiting for a command costs what a bare child costs: the end of a command wakes its waiter at
once (a pidfd, or the zygote's socket), and spawn starts it without a Python preexec_fn while its cgroup, its
rlimits and its death with the harness still come before its first instruction (mlab.core.sandbox.spawn)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from mlab.core.sandbox import spawn, supervise
from mlab.core.sandbox.cgroups import cgroup_parents
from mlab.core.sandbox.contract import Sandbox
from mlab.core.sandbox.limits import Limits
from mlab.core.sandbox.local import LocalSandbox
from mlab.core.sandbox.spec import ExecSpec
from mlab.core.sandbox.wait import EndWatch
from mlab.core.sandbox.zygote import ConfinedCommand
from tests.test_sandbox import HARNESS, kill_harness_when, make_sandbox, wait_gone

fast_path = pytest.mark.skipif(spawn.wrapper() is None, reason="no setpriv with --pdeathsig or no shell here")
SANDBOXES = ["unconfined", "local", "local-fresh", "bwrap"]


def sandbox_called(name: str) -> Sandbox:
    if name == "unconfined":
        return LocalSandbox(namespaces=False)
    return make_sandbox(name)  # skips when unusable here


@pytest.fixture
def box(request):
    made = sandbox_called(request.param)
    yield made
    made.close()


def spec_for(folder: Path, **limits) -> ExecSpec:
    return ExecSpec(cwd=folder, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                    limits=Limits(timeout_s=60, **limits))


class Watches(list):
    """Every EndWatch run_to_end makes, kept for the test to read."""

    def install(self, monkeypatch) -> Watches:
        kept = self

        class Kept(EndWatch):
            def __init__(self, proc):
                super().__init__(proc)
                kept.append(self)
        monkeypatch.setattr(supervise, "EndWatch", Kept)
        return self


# ---- waiting ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("box", SANDBOXES, indirect=True)
def test_the_end_wakes_the_waiter_once(tmp_path, monkeypatch, box):
    """With no periodic check due for days, a command that ends after 0.3 s is seen by a single wake-up (not by
    polling): a waiter that missed the end would sleep into the test's timeout."""
    monkeypatch.setattr(supervise, "POLL_S", 10.0 ** 6)
    watches = Watches().install(monkeypatch)
    result = box.run([sys.executable, "-c", "import time; time.sleep(0.3); print('done')"], spec_for(tmp_path))
    assert result.exit_code == 0 and "done" in result.output and result.limit_hit is None, result
    assert len(watches) == 1 and watches[0].wakeups == 1


def test_a_popen_child_is_not_polled(tmp_path, monkeypatch):
    """The harness asks the kernel for the child's status once, after its end, instead of every few ms. (Counted
    in CPython 3.11's Popen: _internal_poll and _try_wait are where it calls waitpid.)"""
    asked: Counter[int] = Counter()
    real_poll, real_try = subprocess.Popen._internal_poll, subprocess.Popen._try_wait

    def internal_poll(self, *args, **kwargs):
        if self.returncode is None:
            asked[self.pid] += 1
        return real_poll(self, *args, **kwargs)

    def try_wait(self, flags):
        asked[self.pid] += 1
        return real_try(self, flags)
    monkeypatch.setattr(subprocess.Popen, "_internal_poll", internal_poll)
    monkeypatch.setattr(subprocess.Popen, "_try_wait", try_wait)
    result = LocalSandbox(namespaces=False).run([sys.executable, "-c", "import time; time.sleep(0.5)"],
                                                spec_for(tmp_path))
    assert result.exit_code == 0
    # Popen.wait(timeout) would have asked about 15 times in 0.5 s
    assert asked and max(asked.values()) <= 2, asked


def test_seen_soon_after_its_exit(tmp_path, monkeypatch):
    """The moment the waiter sees the end is close to the moment the command exited (a generous margin: a
    loaded machine may be slow to schedule the harness)."""
    stamp = tmp_path / "ended"
    code = f"import os, time; time.sleep(0.3); open({str(stamp)!r}, 'w').write(repr(time.monotonic())); os._exit(0)"
    seen: list[float] = []

    class Timed(EndWatch):
        def wait(self, timeout):
            ended = super().wait(timeout)
            if ended:
                seen.append(time.monotonic())
            return ended
    monkeypatch.setattr(supervise, "POLL_S", 60.0)
    monkeypatch.setattr(supervise, "EndWatch", Timed)
    result = LocalSandbox(namespaces=False).run([sys.executable, "-c", code], spec_for(tmp_path))
    assert result.exit_code == 0, result
    assert seen and seen[0] - float(stamp.read_text()) < 0.5


@pytest.mark.parametrize("box", ["unconfined", "local"], indirect=True)
def test_without_a_descriptor_it_waits_as_before(tmp_path, monkeypatch, box):
    """An old kernel (no pidfd) or a command object with no end_fd: the waiter falls back to Popen.wait."""
    monkeypatch.delattr(os, "pidfd_open")
    monkeypatch.delattr(ConfinedCommand, "end_fd")
    watches = Watches().install(monkeypatch)
    result = box.run([sys.executable, "-c", "print('ok')"], spec_for(tmp_path))
    assert result.exit_code == 0 and "ok" in result.output
    assert len(watches) == 1 and watches[0].wakeups == 0  # Popen.wait did the waiting


def test_a_timeout_still_kills(tmp_path):
    result = LocalSandbox(namespaces=False).run([sys.executable, "-c", "import time; time.sleep(10 ** 6)"],
                                                spec_for(tmp_path).model_copy(update={"limits": Limits(timeout_s=0.5)}))
    assert result.limit_hit == "timeout"


# ---- starting -----------------------------------------------------------------------------------------------

@fast_path
@pytest.mark.parametrize("box", SANDBOXES, indirect=True)
def test_spawn_passes_no_preexec_fn(tmp_path, monkeypatch, box):
    """No Python runs in the child between fork and exec (CPython then uses vfork)."""
    seen: list[dict] = []
    real = subprocess.Popen

    class Recording(real):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs):
            seen.append(kwargs)
            super().__init__(*args, **kwargs)
    box.run([sys.executable, "-c", "print(1)"], spec_for(tmp_path))  # a zygote is made before recording
    monkeypatch.setattr(subprocess, "Popen", Recording)
    result = box.run([sys.executable, "-c", "print('hi')"], spec_for(tmp_path))
    assert result.exit_code == 0 and "hi" in result.output, result
    assert all(kwargs.get("preexec_fn") is None for kwargs in seen), seen
    if not (isinstance(box, LocalSandbox) and box.confined and box.use_zygotes):  # a zygote forks it itself
        assert seen


@pytest.mark.parametrize("path", ["fast", "slow"])
def test_rlimits_apply(tmp_path, monkeypatch, path):
    """The command runs under every rlimit from its first instruction, and RLIMIT_FSIZE stops a script that
    writes past file_size_bytes."""
    if path == "slow":
        monkeypatch.setattr(spawn, "wrapper", lambda: None)
    elif spawn.wrapper() is None:
        pytest.skip("no setpriv with --pdeathsig here")
    limits = {"memory_bytes": 3 * 2**30, "cpu_seconds": 50, "file_size_bytes": 100_000}
    box = LocalSandbox(namespaces=False)
    code = ("import resource as r\n"
            "limits = (r.RLIMIT_DATA, r.RLIMIT_CPU, r.RLIMIT_FSIZE, r.RLIMIT_CORE)\n"
            "print([r.getrlimit(k) for k in limits], flush=True)\n"
            "with open('big.bin', 'wb') as f:\n    f.write(bytes(300_000))\n")
    result = box.run([sys.executable, "-c", code], spec_for(tmp_path, **limits))
    wanted = [(3 * 2**30,) * 2, (50, 51), (100_000,) * 2, (0, 0)]
    assert str(wanted) in result.output, result.output
    assert result.limit_hit == "file_size", result
    assert (tmp_path / "big.bin").stat().st_size <= 100_000


@fast_path
def test_placed_in_its_cgroup_before_its_first_instruction(tmp_path):
    """The command's first look at /proc/self/cgroup already shows its own cgroup: nothing it forks escapes."""
    if not cgroup_parents():
        pytest.skip("no cgroup can be made here")
    result = LocalSandbox(namespaces=False).run(
        [sys.executable, "-S", "-c", "print(open('/proc/self/cgroup').read())"], spec_for(tmp_path))
    assert "/mlab-" in result.output, result.output


@fast_path
def test_fork_bomb_counted_from_its_first_fork(tmp_path):
    """A command that forks at once, as fast as it can, is bounded by its cgroup's process count."""
    if "pids" not in cgroup_parents():
        pytest.skip("no cgroup for process counts here")
    code = ("import os, sys, time\nn = 0\n"
            "while n < 200:\n"
            "    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
            "    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\n    n += 1\n"
            "print('forked', n, flush=True)\n")
    result = LocalSandbox(namespaces=False).run([sys.executable, "-S", "-c", code],
                                                spec_for(tmp_path, max_processes=12))
    forked = [int(line.split()[1]) for line in result.output.splitlines() if line.startswith("forked")]
    assert forked and forked[0] < 12, result.output


@fast_path
def test_environment_and_stdin_are_the_commands(tmp_path):
    """The wrapper adds nothing to the environment, and the command's stdin carries only what the harness
    writes (the "go" line is the wrapper's)."""
    spec = spec_for(tmp_path).model_copy(update={"env": {"PATH": "/usr/bin:/bin", "ONLY": "this"},
                                                 "stdin_pipe": True})
    box = LocalSandbox(namespaces=False)
    proc = box.popen(["/bin/sh", "-c", "cat /proc/$$/environ | tr '\\0' '\\n' | sort; cat"], spec)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"request\n")
        proc.stdin.close()
        out = proc.stdout.read().decode()
        assert proc.wait(timeout=30) == 0
    finally:
        box.kill(proc)
        box.release(proc)
    environ = [line for line in out.splitlines() if "=" in line]
    given = {**spec.env, "MLAB_SANDBOX_TOKEN": proc.token}  # the unconfined sandbox's own mark
    assert environ == sorted(f"{k}={v}" for k, v in given.items()), out
    assert out.splitlines()[-1] == "request" and "go" not in out.splitlines(), out


@fast_path
def test_a_program_that_cannot_run_raises_as_popen_does(tmp_path):
    box = LocalSandbox(namespaces=False)
    with pytest.raises(FileNotFoundError):
        box.popen(["no-such-program-mlab"], spec_for(tmp_path))
    with pytest.raises(FileNotFoundError):
        box.popen([str(tmp_path / "missing")], spec_for(tmp_path))
    (tmp_path / "plain").write_text("not executable")
    with pytest.raises(PermissionError):
        box.popen([str(tmp_path / "plain")], spec_for(tmp_path))


@fast_path
@pytest.mark.parametrize("why", ["wrong parent", "no go"])
def test_the_wrapper_refuses_without_its_harness(tmp_path, why):
    """A child whose parent is not the harness that started it (the harness died before the death signal was
    set), or that never gets "go" (the harness died or failed), exits 125 without running the command."""
    setpriv, shell = spawn.wrapper() or ("", "")
    marker = tmp_path / "ran"
    parent = "1" if why == "wrong parent" else str(os.getpid())
    proc = subprocess.Popen([setpriv, "--pdeathsig", "KILL", "--", shell, "-c", spawn.SCRIPTS[False], "mlab-start",
                             parent, "", "--", "touch", str(marker)], stdin=subprocess.PIPE)
    assert proc.stdin is not None
    try:
        proc.stdin.write(b"go\n" if why == "wrong parent" else b"")
        proc.stdin.close()
    except BrokenPipeError:  # it refused before reading
        pass
    assert proc.wait(timeout=30) == spawn.REFUSED
    assert not marker.exists()


@fast_path
def test_a_failed_start_leaves_no_child(tmp_path, monkeypatch):
    """Should the harness fail between starting the child and "go", the child is gone and never ran."""
    marker = tmp_path / "ran"

    def broken(*_args):
        raise RuntimeError("prlimit failed")
    monkeypatch.setattr(spawn, "set_rlimits_of", broken)
    started: list[subprocess.Popen] = []
    real = subprocess.Popen

    class Recording(real):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            started.append(self)
    monkeypatch.setattr(subprocess, "Popen", Recording)
    with pytest.raises(RuntimeError):
        LocalSandbox(namespaces=False).popen(["touch", str(marker)], spec_for(tmp_path))
    assert started and started[0].returncode is not None  # reaped
    assert not marker.exists()


@fast_path
def test_death_signal_is_set(tmp_path):
    """The command itself carries SIGKILL as its parent-death signal (setpriv's, kept across exec)."""
    code = ("import ctypes\nsig = ctypes.c_int()\n"
            "ctypes.CDLL(None).prctl(2, ctypes.byref(sig), 0, 0, 0)\nprint('pdeathsig', sig.value)\n")
    result = LocalSandbox(namespaces=False).run([sys.executable, "-c", code], spec_for(tmp_path))
    assert "pdeathsig 9" in result.output, result.output


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize("sandbox", ["fallback", "local-fresh"])
def test_a_started_command_dies_with_a_killed_harness(tmp_path, sandbox):
    """Commands spawn starts (the unconfined fallback, confine.py run afresh) die with a SIGKILLed harness."""
    make_sandbox(sandbox)  # skips when unusable here
    mark = kill_harness_when(HARNESS, tmp_path, sandbox, "started.txt", within_s=30)
    assert wait_gone(mark) == []
    assert not (tmp_path / "ws" / "after.txt").exists()


def test_slow_path_still_confines(tmp_path, monkeypatch):
    """Without the wrapper (no setpriv), the preexec_fn path sets the death signal and the rlimits."""
    monkeypatch.setattr(spawn, "wrapper", lambda: None)
    code = ("import ctypes, resource\nsig = ctypes.c_int()\n"
            "ctypes.CDLL(None).prctl(2, ctypes.byref(sig), 0, 0, 0)\n"
            "print('pdeathsig', sig.value, resource.getrlimit(resource.RLIMIT_FSIZE))\n")
    result = LocalSandbox(namespaces=False).run([sys.executable, "-c", code],
                                                spec_for(tmp_path, file_size_bytes=12345))
    assert "pdeathsig 9 (12345, 12345)" in result.output, result.output
