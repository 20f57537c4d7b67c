"""remove_tree removes what shutil.rmtree would (files unlinked by several threads in a large folder), never
following a link out of the tree; Removals removes in the background and is done when waited for."""
from __future__ import annotations

import os

from mlab.core.fs.bulk_remove import PARALLEL_MIN, removals, remove_tree


def make_tree(root, files: int) -> None:
    (root / "many").mkdir(parents=True)
    for number in range(files):
        (root / "many" / f"{number:05d}.png").write_bytes(b"x" * (number % 7))
    deep = root / "a" / "b" / "c"
    deep.mkdir(parents=True)
    (deep / "leaf.txt").write_text("leaf")
    (root / "a" / "empty").mkdir()
    os.mkfifo(root / "a" / "fifo")


def test_a_large_tree_with_links_out_goes_and_what_they_name_stays(tmp_path):
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "dir" / "keep.txt").write_text("keep")
    (outside / "file.txt").write_text("keep")
    tree = tmp_path / "tree"
    make_tree(tree, PARALLEL_MIN + 500)
    os.symlink(outside / "dir", tree / "many" / "to_dir")  # among the many: unlinked by the workers
    os.symlink(outside / "file.txt", tree / "a" / "to_file")
    os.symlink(outside, tree / "a" / "b" / "to_outside")
    os.link(outside / "file.txt", tree / "a" / "hard")
    remove_tree(tree)
    assert not os.path.lexists(tree)
    assert (outside / "dir" / "keep.txt").read_text() == "keep" and (outside / "file.txt").read_text() == "keep"


def test_a_link_given_as_the_tree_is_removed_as_a_link(tmp_path):
    target = tmp_path / "target"
    make_tree(target, 3)
    os.symlink(target, tmp_path / "link")
    remove_tree(tmp_path / "link")
    assert not os.path.lexists(tmp_path / "link") and (target / "a" / "b" / "c" / "leaf.txt").is_file()
    remove_tree(tmp_path / "missing")  # nothing there: nothing to do


def test_removals_are_done_when_the_block_ends(tmp_path):
    trees = [tmp_path / f"t{i}" for i in range(3)]
    with removals() as later:
        for tree in trees:
            make_tree(tree, 50)
            later.remove(tree)
    assert not any(os.path.lexists(tree) for tree in trees)


def test_check_tasks_scratch_homes_are_out_of_sight_while_they_go(tmp_path):
    """The reproducibility check's scratch homes (answers among them) are below the task data, which no sandbox
    sees, as soon as the check returns; they are gone once the removals are waited for."""
    from mlab.core.fs.bulk_remove import Removals
    from mlab.core.run.checktask import check_reproducible_prepare
    from mlab.core.run.harness import Harness
    from mlab.core.run.taskdata import TaskHome
    from tests.test_reproducible_prepare import SeededTask, registry

    task, home = SeededTask(), TaskHome(tmp_path / "home")
    later = Removals()
    assert check_reproducible_prepare(Harness(registry(), home), task, None, prepared_now=False, later=later) == "ok"
    assert sorted(os.listdir(home.root)) == ["tasks"]
    later.wait()
    assert sorted(os.listdir(home.data_root)) == []
