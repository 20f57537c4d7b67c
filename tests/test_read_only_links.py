"""Read-only files reach a workspace as hard links of the task's prepared copy in every confining sandbox,
whatever their size (a workspace costs a link per file, not a copy, and its removal frees no data), and no
link of the prepared copy is ever left where agent code may write: the task's data stays as prepared."""
from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest

from mlab.core.models import Action
from mlab.core.run.environment import Environment, EnvSettings
from mlab.core.run.readonly import is_read_only
from mlab.core.run.snapshot import SnapshotStore
from mlab.core.run.taskdata import stage_workspace
from mlab.core.sandbox.limits import Limits
from tests.fixtures.sandboxes import CONFINING
from tests.test_sandbox import make_sandbox

TRAIN = "id,label\n1,0\n2,1\n"
IMAGES = 40  # more than SEPARATE_MOUNTS_MAX: the folder is mounted (and sealed) as one
PATTERNS = ["data/train.csv", "data/images/*"]


def image(number: int) -> bytes:
    return b"image %d\n" % number


def staged_env(tmp_path: Path, sandbox: str) -> tuple[Environment, Path]:
    """A workspace staged as a run's is (stage_workspace, linking what the sandbox protects), and its environment;
    also the task's prepared public folder."""
    public = tmp_path / "taskdata" / "public"
    (public / "data" / "images").mkdir(parents=True)
    for number in range(IMAGES):
        (public / "data" / "images" / f"{number:05d}.png").write_bytes(image(number))
    (public / "data" / "train.csv").write_text(TRAIN)
    (public / "train.py").write_text("print('starter')\n")
    box = make_sandbox(sandbox)
    workspace = tmp_path / "ws"
    stage_workspace(public, workspace, share=lambda rel: box.confined and is_read_only(rel, PATTERNS))
    env = Environment(EnvSettings(
        workspace=workspace, read_only_patterns=PATTERNS, sandbox=box, store=SnapshotStore(tmp_path / "store"),
        pristine_dir=public, hidden_paths=[tmp_path / "taskdata"], sandbox_home=tmp_path / "home",
        limits=Limits(timeout_s=60), python=sys.executable, extra_env={"MLAB_TEST_MARK": uuid.uuid4().hex}))
    return env, public


def run(env: Environment, code: str) -> str:
    (env.workspace / "probe.py").write_text(code)
    observation, _failed = env.execute(Action(name="Execute Script", args={"script_name": "probe.py"}))
    return observation


def prepared_copy_intact(public: Path) -> bool:
    return (public / "data" / "train.csv").read_text() == TRAIN and all(
        (public / "data" / "images" / f"{n:05d}.png").read_bytes() == image(n) for n in range(IMAGES))


@pytest.mark.parametrize("sandbox", CONFINING)
def test_small_read_only_files_are_links_of_the_prepared_copy(tmp_path, sandbox):
    env, public = staged_env(tmp_path, sandbox)
    try:
        for rel in ("data/train.csv", "data/images/00000.png"):
            assert os.stat(env.workspace / rel).st_ino == os.stat(public / rel).st_ino, rel
        assert os.stat(env.workspace / "train.py").st_ino != os.stat(public / "train.py").st_ino  # writable
        observation = run(env, "for path in ('data/train.csv', 'data/images/00000.png'):\n"
                               "    try:\n        open(path, 'r+').write('hacked')\n        print('WROTE', path)\n"
                               "    except OSError as exc:\n        print('refused', exc.strerror)\n")
        assert "WROTE" not in observation and observation.count("refused") == 2, observation
        assert prepared_copy_intact(public)
    finally:
        env.close()


def test_the_unconfined_sandbox_gets_copies(tmp_path):
    env, public = staged_env(tmp_path, "fallback")
    try:
        for rel in ("data/train.csv", "data/images/00000.png"):
            assert os.stat(env.workspace / rel).st_nlink == 1, rel
    finally:
        env.close()


@pytest.mark.parametrize("sandbox", CONFINING)
def test_a_moved_read_only_folder_leaves_no_link_of_the_prepared_copy(tmp_path, sandbox):
    """The folder above read-only files may be renamed (the mounts move with it): after the command, what
    moved holds copies, so a later command writing there changes the run's files, never the task's."""
    env, public = staged_env(tmp_path, sandbox)
    try:
        observation = run(env, "import os\nos.rename('data', 'moved')\nprint('moved')\n")
        assert "moved" in observation, observation
        assert (env.workspace / "data" / "train.csv").read_text() == TRAIN  # put back by the guard
        moved = env.workspace / "moved"
        assert (moved / "train.csv").read_text() == TRAIN and (moved / "images" / "00007.png").read_bytes() == image(7)
        assert all(os.stat(path).st_nlink == 1 for path in moved.rglob("*") if path.is_file())
        observation = run(env, "open('moved/train.csv', 'r+').write('hacked')\n"
                               "open('moved/images/00000.png', 'r+').write('hacked')\n"
                               "open('moved/images/00001.png', 'a').write('hacked')\nprint('wrote')\n")
        assert "wrote" in observation, observation
        assert (moved / "train.csv").read_text().startswith("hacked")
        assert prepared_copy_intact(public)
    finally:
        env.close()


@pytest.mark.parametrize("sandbox", CONFINING)
def test_a_read_only_file_moved_deeper_leaves_no_link_of_the_prepared_copy(tmp_path, sandbox):
    """A read-only file's folder renamed into a new writable folder: the link found there, wherever it went, is
    replaced by a copy."""
    env, public = staged_env(tmp_path, sandbox)
    try:
        observation = run(env, "import os\nos.makedirs('a/b')\nos.rename('data', 'a/b/c')\nprint('moved')\n")
        assert "moved" in observation, observation
        observation = run(env, "open('a/b/c/train.csv', 'r+').write('hacked')\n"
                               "open('a/b/c/images/00002.png', 'r+').write('hacked')\nprint('wrote')\n")
        assert "wrote" in observation, observation
        assert prepared_copy_intact(public)
    finally:
        env.close()
