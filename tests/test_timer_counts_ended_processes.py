"""The speed tasks' pair timer counts the CPU time of every process a timed script started, ended ones too
(issue 40, case 6: "a scorer bought again").

A parent that ignores SIGCHLD (or sets SA_NOCLDWAIT) has its ended children reaped by the kernel, which adds
their CPU time to no process. The timer summed the processes still in the worker's tree, so such a child's time
vanished: a helper that banked CPU time while the script loaded (counted in the timer's start reading) and ended
inside the timed pass took its time off the pass (the unchanged starter scored +30.3%, another setting a negative
time), and work a pass handed to such a child was never counted.

Each submission here is the vectorised reference plus WORK seconds of CPU time that each pass provably spends
inside the timed window, so a timer that counts ended processes reads at least WORK for it, or refuses the script.
Two sandboxes: "local" confines (no cgroup file system there: the timer's /proc count) and "fallback" does not (a
cgroup per worker where this user may make one)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlab.core import InvalidSubmission
from mlab.core.run.taskdata import TaskHome
from mlab.core.sandbox.limits import Limits
from mlab.core.task_context import ScoringContext
from mlab_tasks_mlagentbench.base import REFERENCE_DIR
from mlab_tasks_mlagentbench.timing import WHO, _timed_pair, stage_timer
from tests.fixtures.sandboxes import make_sandbox

REFERENCE = REFERENCE_DIR / "vectorization" / "train.py"
MAIN = '\nif __name__ == "__main__":'
WORK, BANKED = 0.3, 0.25  # CPU seconds: far above the timer's 10 ms resolution

COMMON = f'''
import ctypes as _ctypes
import os as _os
import signal as _signal
import time as _time


def _burn(seconds):
    until = _time.process_time() + seconds
    while _time.process_time() < until:
        pass


def _ignore_sigchld():
    _signal.signal(_signal.SIGCHLD, _signal.SIG_IGN)


def _no_child_wait():  # SA_NOCLDWAIT, which /proc does not show: glibc's struct sigaction, flags at byte 136
    action = _ctypes.create_string_buffer(152)
    _ctypes.c_int.from_buffer(action, 136).value = 2
    libc = _ctypes.CDLL(None, use_errno=True)
    if libc.sigaction(_signal.SIGCHLD, action, None) != 0:
        raise OSError(_ctypes.get_errno(), _os.strerror(_ctypes.get_errno()))


_fast_forward = Conv2DLayer.forward
_WORK, _BANKED = {WORK}, {BANKED}
'''

# A helper banks CPU time while the script loads and ends when the first pass starts; each pass then does its work.
# _DETACH: how the helper is started (a child of the worker, or an orphan: the timer's, its subreaper's).
BANKED_HELPER = '''
_go_r, _go_w = _os.pipe()
_done_r, _done_w = _os.pipe()
_middle = _os.fork()
if _middle == 0:
    _DETACH
    _os.close(_go_w)
    _os.close(_done_r)
    _burn(_BANKED)
    _os.write(_done_w, b"x")
    _os.read(_go_r, 1)
    _os._exit(0)
_os.close(_go_r)
_os.close(_done_w)
assert _os.read(_done_r, 1) == b"x"


def _forward(self, batch):
    global _go_w
    if _go_w is not None:
        _os.close(_go_w)
        _go_w = None
        assert _os.read(_done_r, 1) == b""  # the helper has ended, its time with it
    _burn(_WORK)
    return _fast_forward(self, batch)


Conv2DLayer.forward = _forward
'''
CHILD = "pass"
ORPHAN = "if _os.fork() != 0:\n        _os._exit(0)"

# Each pass hands its work to a child and waits for it to end (_REAP: and then reaps it, or not).
WORK_IN_A_CHILD = '''
def _forward(self, batch):
    ended_r, ended_w = _os.pipe()
    child = _os.fork()
    if child == 0:
        _os.close(ended_r)
        _burn(_WORK)
        _os._exit(0)
    _os.close(ended_w)
    assert _os.read(ended_r, 1) == b""
    _os.close(ended_r)
    _REAP
    return _fast_forward(self, batch)


Conv2DLayer.forward = _forward
'''

# Each makes the kernel reap the helpers, which adds their time to no process.
ATTACKS = {
    "a helper banking CPU time, its parent ignoring SIGCHLD":
        "_ignore_sigchld()\n" + BANKED_HELPER.replace("_DETACH", CHILD),
    "the pass's work in a child, its parent with SA_NOCLDWAIT":
        "_no_child_wait()\n" + WORK_IN_A_CHILD.replace("_REAP", "pass"),
}
# The same helpers ended as processes usually end: a zombie of the worker's, of the timer's, or reaped.
ENDED = {
    "a helper banking CPU time, ended unreaped": BANKED_HELPER.replace("_DETACH", CHILD),
    "a helper banking CPU time, an orphan": BANKED_HELPER.replace("_DETACH", ORPHAN) + "_os.waitpid(_middle, 0)\n",
    "the pass's work in a child, reaped": WORK_IN_A_CHILD.replace("_REAP", "_os.waitpid(child, 0)"),
}
# The starter: some work in the pass, or a pass of the reference alone (~0.02 s) could read 0 ticks, refused.
STARTER = "Conv2DLayer.forward = lambda self, batch: (_burn(0.05), _fast_forward(self, batch))[1]\n"
TICK = 0.01  # /proc's CPU time comes in clock ticks


def timed_or_refused(sandbox: str, code: str, tmp_path: Path, filtered: bool = True) -> float | str:
    """The submission's timed seconds (the fastest of its passes) against the reference, or why it was refused.
    filtered=False: a timer whose workers may change how SIGCHLD is handled."""
    make_sandbox(sandbox)  # a skip where it cannot be used
    stage, scratch = tmp_path / "stage", tmp_path / "scratch"
    scratch.mkdir(parents=True)
    for who, extra in (("starter", STARTER), ("submission", code)):
        (stage / who).mkdir(parents=True)
        (stage / who / "train.py").write_text(REFERENCE.read_text().replace(MAIN, COMMON + extra + MAIN, 1))
    stage_timer(stage, "time_forward.py")
    if not filtered:
        timer = stage / "time_pair.py"
        text = timer.read_text()
        unfiltered = text.replace("allow, deny = 0x7FFF0000, 0x00050000 | errno.EPERM", "allow = deny = 0x7FFF0000")
        assert unfiltered != text
        timer.write_text(unfiltered)
    ctx = ScoringContext(new_sandbox=lambda: make_sandbox(sandbox), limits=Limits(timeout_s=300),
                         hidden_paths=[TaskHome.from_env().data_root])
    try:
        reports = _timed_pair(ctx, stage, scratch, "forward", WHO, "forward pass", [])
    except InvalidSubmission as exc:
        return str(exc)
    return float(reports["submission"]["seconds"])


@pytest.mark.parametrize("sandbox", ["local", "fallback", pytest.param("bwrap", marks=pytest.mark.slow),
                                     pytest.param("docker", marks=pytest.mark.slow)])
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_cpu_time_of_children_the_kernel_reaps_is_counted_or_the_script_refused(tmp_path, sandbox, attack):
    outcome = timed_or_refused(sandbox, ATTACKS[attack], tmp_path)
    if isinstance(outcome, str):  # the script may not make its children's ends uncountable
        assert "Operation not permitted" in outcome, outcome
    else:
        assert outcome > WORK - TICK, f"{attack}: timed {outcome:.3f} s, its passes spent at least {WORK} s each"


@pytest.mark.slow
@pytest.mark.parametrize("helper", list(ENDED))
def test_cpu_time_of_processes_ended_in_the_pass_is_counted(tmp_path, helper):
    outcome = timed_or_refused("local", ENDED[helper], tmp_path)
    assert isinstance(outcome, float) and outcome > WORK - TICK, (helper, outcome)


@pytest.mark.slow
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_cgroup_of_the_workers_own_counts_them_where_one_can_be_made(tmp_path, attack):
    from mlab_tasks_mlagentbench.time_pair import _new_cgroup

    made = _new_cgroup(f"mlab-test-{tmp_path.name}")
    if made is None:
        pytest.skip("no cgroup can be made here: the timer counts /proc alone, and its seccomp filter refuses these")
    os.rmdir(made[0])
    outcome = timed_or_refused("fallback", ATTACKS[attack], tmp_path, filtered=False)  # unconfined: cgroupfs shown
    assert isinstance(outcome, float) and outcome > WORK - TICK, (attack, outcome)
