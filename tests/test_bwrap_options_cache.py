"""bwrap's options for a command are built once and kept while nothing they depend on changed (issue 42 item 4:
building them is a few hundred stat calls of the harness's CPU a command, which a loaded harness pays several
times over): a second command of the same spec does not build them again, and a hidden folder made since, a
read-only path swapped, or another environment does."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from mlab.core import ExecSpec
from tests.fixtures.sandboxes import make_sandbox


@pytest.fixture
def built(monkeypatch):
    """The sandbox, and how many times it built a command's view."""
    sandbox = make_sandbox("bwrap")
    from mlab_sandbox_bwrap import sandbox as module

    calls: list[int] = []
    real = module.root_view

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "root_view", counted)
    return sandbox, calls


def spec_for(tmp_path: Path) -> ExecSpec:
    ws = tmp_path / "ws"
    (ws / "data").mkdir(parents=True, exist_ok=True)
    (ws / "data" / "train.csv").write_text("id\n1\n")
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return ExecSpec(cwd=ws, writable_paths=[home], hidden_paths=[home / "secret"],
                    read_only_paths=[ws / "data" / "train.csv"])


def run(sandbox, spec: ExecSpec, code: str) -> str:
    result = sandbox.run([sys.executable, "-c", code], spec)
    assert result.exit_code == 0, result.output
    return result.output


def test_the_same_spec_builds_its_options_once(tmp_path, built):
    sandbox, calls = built
    spec = spec_for(tmp_path)
    for _ in range(3):
        assert run(sandbox, spec, "print(open('data/train.csv').read().split()[1])").strip() == "1"
    assert len(calls) == 1


def test_a_hidden_folder_made_since_is_hidden(tmp_path, built):
    """The home is shown writable; its `secret` folder is hidden only once it exists: made after the first
    command, the next command's options are built again and mask it."""
    sandbox, calls = built
    spec = spec_for(tmp_path)
    probe = f"import os\nprint(sorted(os.listdir({str(tmp_path / 'home')!r})))\n" \
            f"print(os.listdir({str(tmp_path / 'home' / 'secret')!r}) if os.path.isdir(" \
            f"{str(tmp_path / 'home' / 'secret')!r}) else 'none')\n"
    assert "none" in run(sandbox, spec, probe)
    (tmp_path / "home" / "secret").mkdir()
    (tmp_path / "home" / "secret" / "answers.csv").write_text("42\n")
    output = run(sandbox, spec, probe)
    assert "answers.csv" not in output, output
    assert len(calls) == 2


def test_a_read_only_path_swapped_or_a_changed_environment_builds_them_again(tmp_path, built, monkeypatch):
    sandbox, calls = built
    spec = spec_for(tmp_path)
    write = "try:\n    open('data/train.csv', 'a').write('x')\n    print('WROTE')\nexcept OSError as e:\n" \
            "    print('refused', e.strerror)\n"
    assert "refused" in run(sandbox, spec, write)
    ws = tmp_path / "ws"
    os.rename(ws, tmp_path / "was")  # the same folders and file, reached another way: the same options
    os.rename(tmp_path / "was", ws)
    assert "refused" in run(sandbox, spec, write)
    assert len(calls) == 1
    os.rename(ws / "data", ws / "old")
    (ws / "data").mkdir()
    # The same file linked anew: its change time moved, so built again (a file made in place of a removed one
    # can get its inode number, and only the change time tells them apart).
    os.link(ws / "old" / "train.csv", ws / "data" / "train.csv")
    assert "refused" in run(sandbox, spec, write)
    assert len(calls) == 2
    os.unlink(ws / "data" / "train.csv")  # a link is never bound (it could lead out): built again without it
    os.symlink(ws / "old" / "train.csv", ws / "data" / "train.csv")
    assert "WROTE" in run(sandbox, spec, write)
    assert len(calls) == 3
    monkeypatch.setenv("MLAB_BWRAP_RO", str(tmp_path))
    run(sandbox, spec, "pass")
    assert len(calls) == 4
