"""The speed tasks' pair timer (mlab_tasks_mlagentbench/time_pair.py) under every scoring sandbox, and against
submissions that hand their work to helper processes.

The timer relies on /proc (the CPU time of the worker's whole process tree) and on being the subreaper of the
processes a worker leaves (a double-forked helper comes back to it): both must hold in a PID namespace of bwrap's
or a container's. Each case times one starter/submission pair of vectorization (a scoring times 4 or more; one
pair shows what the timer counts and checks at a quarter of the cost).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mlab.core import InvalidSubmission
from mlab.core.run.taskdata import TaskHome
from mlab.core.sandbox.limits import Limits
from mlab.core.task_context import ScoringContext
from mlab_tasks_mlagentbench.base import FILES_DIR, REFERENCE_DIR
from mlab_tasks_mlagentbench.timing import WHO, _timed_pair, stage_timer
from tests.fixtures.sandboxes import CONFINING, make_sandbox

STARTER = FILES_DIR / "vectorization" / "train.py"
MAIN = '\nif __name__ == "__main__":'

# The attack on the old timer (fixed seed 0 after import): the output for that batch, computed while imported.
PRECOMPUTING = '''
_slow_forward = Conv2DLayer.forward
np.random.seed(0)
_known = _slow_forward(Conv2DLayer(3, 8, 3, 2, 2, "relu"), np.random.randn(32, 64, 64, 3))
Conv2DLayer.forward = lambda self, features_batch: _known
'''

REGISTER = '''
# The timer loads train.py from its path, as no module of sys.modules: pickling its functions and classes by name
# (to a helper process) needs it there.
import sys as _sys
import types as _types

_sys.modules[__name__] = _types.ModuleType(__name__)
_sys.modules[__name__].__dict__.update(globals())
'''

# The same slow forward pass, image by image in a pool of processes started while imported (untimed).
POOL = '''
import multiprocessing as _mp

_slow_forward = Conv2DLayer.forward


def _one_image(job):
    layer, image = job
    return _slow_forward(layer, image[None])[0]


_REGISTER
_pool = _mp.get_context("fork").Pool(1)
Conv2DLayer.forward = lambda self, batch: np.stack(_pool.map(_one_image, [(self, image) for image in batch]))
'''

# The same slow forward pass in a daemon double-forked while imported (so it is nobody's child but the nearest
# subreaper's), which a forward pass sends its batch to over a socket and gets the output from.
DAEMON = '''
import os as _os
import pickle as _pickle
import socket as _socket

_slow_forward = Conv2DLayer.forward
_REGISTER
_mine, _theirs = _socket.socketpair()
_middle = _os.fork()
if _middle == 0:
    _os.setsid()
    if _os.fork() == 0:
        _mine.close()
        _stream = _theirs.makefile("rwb")
        while True:
            try:
                _layer, _batch = _pickle.load(_stream)
            except EOFError:
                _os._exit(0)
            _pickle.dump(_slow_forward(_layer, _batch), _stream)
            _stream.flush()
    _os._exit(0)
_os.waitpid(_middle, 0)
_theirs.close()
_stream = _mine.makefile("rwb")


def _by_daemon(self, batch):
    _pickle.dump((self, batch), _stream)
    _stream.flush()
    return _pickle.load(_stream)


Conv2DLayer.forward = _by_daemon
'''

# A helper process started while imported precomputes the old fixed-seed output and leaves it in a file.
HELPER_PRECOMPUTES = '''
import subprocess as _subprocess
import sys as _sys

_subprocess.run([_sys.executable, "-c", "import sys; sys.argv = ['train.py']; import numpy as np; "
                 "exec(open('train.py').read().split('# HELPER')[0]); np.random.seed(0); "
                 "np.save('known.npy', Conv2DLayer.forward(Conv2DLayer(3, 8, 3, 2, 2, 'relu'), "
                 "np.random.randn(32, 64, 64, 3)))"], check=True)
_known = np.load("known.npy")
Conv2DLayer.forward = lambda self, features_batch: _known
'''


def submission(tmp_path: Path, code: str = "", reference: bool = False) -> Path:
    folder = tmp_path / "submitted"
    folder.mkdir(parents=True)
    if reference:
        shutil.copyfile(REFERENCE_DIR / "vectorization" / "train.py", folder / "train.py")
    else:
        marker = "\n# HELPER" if code else ""
        folder.joinpath("train.py").write_text(STARTER.read_text().replace(MAIN, marker + code + MAIN, 1))
    return folder


def one_pair(sandbox: str, submitted: Path, tmp_path: Path) -> dict:
    """The timer's reports of one pair (starter first), run in `sandbox` as the scorer runs it."""
    make_sandbox(sandbox)  # a skip (a failure for docker under CI) where it cannot be used
    stage, scratch = tmp_path / "stage", tmp_path / "scratch"
    scratch.mkdir(parents=True)
    shutil.copytree(FILES_DIR / "vectorization", stage / "starter")
    shutil.copytree(submitted, stage / "submission")
    stage_timer(stage, "time_forward.py")
    ctx = ScoringContext(new_sandbox=lambda: make_sandbox(sandbox), limits=Limits(timeout_s=900),
                         hidden_paths=[TaskHome.from_env().data_root])
    return _timed_pair(ctx, stage, scratch, "forward", WHO, "forward pass", [])


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", CONFINING)
def test_the_pair_timer_times_the_reference_and_refuses_a_precomputing_submission_in_each_sandbox(tmp_path,
                                                                                                 sandbox):
    reports = one_pair(sandbox, submission(tmp_path / "ref", reference=True), tmp_path / "ref")
    starter, vectorised = reports["starter"]["seconds"], reports["submission"]["seconds"]
    assert 0 < vectorised < 0.5 * starter, reports  # the CPU of the forward pass, not nothing, not everything
    with pytest.raises(InvalidSubmission, match="another result than the starter's on the same inputs"):
        one_pair(sandbox, submission(tmp_path / "pre", PRECOMPUTING), tmp_path / "pre")


@pytest.mark.slow
@pytest.mark.parametrize("helper", ["pool", "daemon"])
def test_work_handed_to_a_helper_process_is_timed(tmp_path, helper):
    code = (POOL if helper == "pool" else DAEMON).replace("_REGISTER", REGISTER)
    reports = one_pair("local", submission(tmp_path, code), tmp_path)
    # The same slow loops, in another process: about the starter's CPU time; uncounted, it would be the worker's
    # own, next to none. Half is the bound: CPU time itself varies by a third between passes on 2 loaded cores.
    assert reports["submission"]["seconds"] > 0.5 * reports["starter"]["seconds"], reports


@pytest.mark.slow
def test_a_helper_process_precomputing_while_imported_is_no_success(tmp_path):
    with pytest.raises(InvalidSubmission, match="another result than the starter's on the same inputs"):
        one_pair("local", submission(tmp_path, HELPER_PRECOMPUTES), tmp_path)


def test_a_pass_faster_than_the_cpu_clock_tick_counts_as_one_tick_not_as_nothing():
    # Beside stress-ng a vectorised forward pass (13 ms wall) read 0 ticks of CPU time and check-task called the
    # reference invalid ("took 0.0 s"); it took at most a tick, so a tick is its time (never faster than measured).
    from mlab_tasks_mlagentbench.time_pair import CPU_TICK_S, pass_seconds

    assert pass_seconds([5.0, 4.99], [5.0, 4.99], "cpu") == CPU_TICK_S
    assert pass_seconds([5.0, 4.0], [5.5, 4.7], "cpu") == pytest.approx(0.7)
    assert pass_seconds([2.0], [2.004], "wall") == pytest.approx(0.004)  # perf_counter has no tick
