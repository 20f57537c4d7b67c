"""fs.link_tree (taskdata.stage_workspace) stages a workspace as shutil.copytree(symlinks=False) copies one (the same
files, symlinks copied as what they name), but links the files `share` accepts, for the cost of the links
(benchmarks/check_task_scale.py --parts)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from mlab.core.fs.link_tree import link_tree
from mlab.core.fs.tree_sums import tree_sums


def public(root: Path) -> Path:
    folder = root / "public"
    (folder / "images" / "deep").mkdir(parents=True)
    for number in range(30):
        (folder / "images" / f"{number}.png").write_bytes(b"png %d" % number)
    (folder / "images" / "deep" / "x.png").write_bytes(b"deep")
    (folder / "train.py").write_text("print('hi')\n")
    (folder / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(folder / "run.sh", 0o755)
    (folder / "alias.py").symlink_to("train.py")
    (folder / "more").symlink_to("images/deep")
    return folder


def share(rel: str) -> bool:
    return rel.startswith("images/")


def test_link_tree_stages_what_copytree_copies_and_links_what_is_shared(tmp_path):
    source = public(tmp_path)
    old, new = tmp_path / "old", tmp_path / "run" / "new"  # its parent made too, as copytree makes it
    shutil.copytree(source, old, symlinks=False)
    linked = sorted(link_tree(source, new, share))
    assert linked == sorted([f"images/{n}.png" for n in range(30)] + ["images/deep/x.png"])
    assert tree_sums(old) == tree_sums(new)
    for rel in ("images/3.png", "images/deep/x.png"):
        assert os.stat(new / rel).st_ino == os.stat(source / rel).st_ino  # a link
    for rel in ("train.py", "alias.py", "more/x.png"):
        assert os.stat(new / rel).st_ino != os.stat(source / rel).st_ino  # a copy, a link's target copied
        assert not (new / rel).is_symlink()
    assert os.stat(new / "run.sh").st_mode == os.stat(old / "run.sh").st_mode
    assert os.stat(new / "images").st_mtime_ns == os.stat(source / "images").st_mtime_ns
