"""MLAgentBench pack: downloads verified by checksum (against a local HTTP server serving tiny archives), the
pack's extras and resource metadata, and the `mlab check-task` command."""
from __future__ import annotations

import functools
import hashlib
import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from mlab.core import MlabError
from mlab.core.plugins.registry import load_registry
from mlab.core.run import taskdata
from mlab_tasks_mlagentbench import acquire
from tests.fixtures.mlagentbench import cifar, images

REPO = Path(__file__).resolve().parents[1]
ALL = {"cifar10", "imdb", "ogbn-arxiv", "house-price", "spaceship-titanic", "parkinsons", "fathomnet", "feedback",
       "identify-contrails", "clrs", "babylm", "llama-inference", "vectorization", "bibtex-generation",
       "literature-review-tool"}


@pytest.fixture
def server(tmp_path):
    """A 127.0.0.1 HTTP server over tmp_path/served; yields (folder, base url)."""
    folder = tmp_path / "served"
    folder.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *a, **k: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield folder, f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()


def test_download_verifies_the_checksum_and_caches(server, tmp_path, monkeypatch):
    folder, url = server
    monkeypatch.setenv("MLAB_DOWNLOAD_CACHE", str(tmp_path / "cache"))
    cifar.cifar(folder, per_batch=5, n_test=5, tarball=True)
    data = (folder / "cifar-10-python.tar.gz").read_bytes()
    good = acquire.Source(url + "cifar-10-python.tar.gz", "cifar-10-python.tar.gz", md5=hashlib.md5(data).hexdigest())
    path = acquire.download(good, log=lambda _m: None)
    assert path.read_bytes() == data
    (folder / "cifar-10-python.tar.gz").unlink()  # served no more: the cached, verified copy is used
    assert acquire.download(good, log=lambda _m: None) == path
    bad = acquire.Source(url + "x.tar.gz", "x.tar.gz", sha256="0" * 64)
    (folder / "x.tar.gz").write_bytes(b"not what was promised")
    with pytest.raises(MlabError, match="sha256 checksum mismatch"):
        acquire.download(bad, log=lambda _m: None)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["cifar-10-python.tar.gz"]  # no .part left
    with pytest.raises(MlabError, match="downloading .* failed"):
        acquire.download(acquire.Source(url + "absent.zip", "absent.zip", md5="0" * 32), log=lambda _m: None)


def test_cifar10_prepare_downloads_from_a_mirror_and_rejects_a_wrong_archive(server, monkeypatch, tmp_path):
    """The real download path: the pinned md5 of the real CIFAR-10 archive does not match our tiny one."""
    folder, url = server
    cifar.cifar(folder, per_batch=5, n_test=5, tarball=True)
    monkeypatch.setenv("MLAB_MLAGENTBENCH_MIRROR", url)
    task = load_registry().get("tasks", "mlagentbench/cifar10")
    with pytest.raises(MlabError, match="md5 checksum mismatch"):
        taskdata.prepare(task, log=lambda _m: None)
    assert not taskdata.task_dir(task).exists()


def test_unsafe_archives_are_refused(tmp_path):
    import zipfile

    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("../outside.txt", "x")
    with pytest.raises(MlabError, match="unsafe"):
        acquire.extract(archive, tmp_path / "out")
    assert not (tmp_path / "outside.txt").exists()


def test_fathomnet_downloads_images_from_their_urls(server, tmp_path, monkeypatch):
    folder, url = server
    monkeypatch.setenv("MLAB_ALLOW_NO_GPU", "1")
    source = images.fathomnet(tmp_path / "src", n_images=20, base_url=url, with_images=False)
    for path in (source / "served").iterdir():
        path.rename(folder / path.name)
    task = load_registry().get("tasks", "mlagentbench/fathomnet")
    taskdata.prepare(task, source, log=lambda _m: None)
    assert len(list((taskdata.public_dir(task) / "images").glob("*.png"))) == 20


def test_kaggle_without_the_api_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no kaggle command
    if not acquire.importlib_missing("kaggle"):
        pytest.skip("the kaggle package is installed")
    task = load_registry().get("tasks", "mlagentbench/house-price")
    with pytest.raises(MlabError, match=r"mlab-tasks-mlagentbench\[kaggle\]"):
        taskdata.prepare(task, log=lambda _m: None)


# ---- metadata ------------------------------------------------------------------------------------
def test_every_task_is_registered_with_its_metadata():
    tasks = {n.split("/", 1)[1]: t for n, t in load_registry().items["tasks"].items() if n.startswith("mlagentbench/")}
    assert ALL <= set(tasks)
    for short, task in tasks.items():
        assert task.research_problem.strip() and task.description.strip()
        assert task.resources.gpu in ("none", "optional", "required")
        assert task.resources.baseline_seconds > 0 and task.resources.ram_gb > 0
        if task.resources.gpu == "required" and short != "llama-inference":
            assert task.cpu_variant and task.cpu_variant.split("/")[1] in tasks
    assert not tasks["vectorization"].resources.network_for_prepare
    assert tasks["house-price"].resources.network_for_prepare


def test_a_missing_extra_is_named(monkeypatch):
    task = load_registry().get("tasks", "mlagentbench/cifar10")
    monkeypatch.setattr(type(task), "needs", {"no_such_module_xyz": "vision"})
    with pytest.raises(MlabError, match=r"pip install 'mlab-tasks-mlagentbench\[vision\]'"):
        task.check_extras()


def test_pyproject_extras_cover_the_heavy_dependencies():
    import tomllib

    project = tomllib.loads((REPO / "plugins/tasks/mlagentbench/pyproject.toml").read_text())["project"]
    assert not any(d.startswith(("torch", "transformers", "kaggle", "ogb")) for d in project["dependencies"])
    extras = project["optional-dependencies"]
    assert {"torch", "vision", "graph", "text", "llama", "kaggle", "all"} <= set(extras)
    assert any(d.startswith("torch_geometric") for d in extras["graph"])


# ---- the command ---------------------------------------------------------------------------------
def run_cli(*args, env=None):
    code = ("import sys; from mlab.cli.main import cli, main; from mlab.cli.check_cmds import check_task; "
            "cli.add_command(check_task); main(sys.argv[1:])")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=REPO, timeout=600)


@pytest.mark.slow
def test_check_task_command_refuses_bad_input_and_reports_a_failed_prepare(tmp_path):
    # A passing check through the command: tests/test_lite_tasks.py; vectorization's: test_mlagentbench_light.py.
    bad = run_cli("check-task")
    assert bad.returncode == 2 and bad.stderr.startswith("mlab: error:") and "Traceback" not in bad.stderr
    missing = run_cli("check-task", "house-price", "--data-dir", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    failed = run_cli("check-task", "house-price", "--data-dir", str(empty))
    assert failed.returncode == 1 and "FAILED" in failed.stdout and "prepare failed" in failed.stdout
