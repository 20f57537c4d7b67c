"""MLAgentBench pack where researchers run it: air-gapped preparation from files laid out as `mlab data` says,
local copies held to published checksums (or checked for structure), and the bugs found by trying it as a user."""
from __future__ import annotations

import hashlib
import http.server
import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

from mlab.core import Metric, MlabError, Task
from mlab.core.plugins.registry import load_registry
from mlab.core.run import taskdata
from mlab.core.run.checktask import prepared_sums
from mlab_tasks_mlagentbench import acquire
from tests.fixtures.cli import mlab
from tests.fixtures.mlagentbench import cifar, graph, kaggle, tabular, text
from tests.fixtures.sandboxes import CONFINING

QUIET = {"log": lambda _m: None}
REPO = Path(__file__).resolve().parents[1]


def get_task(short: str):
    return load_registry().get("tasks", f"mlagentbench/{short}")


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("mlab: error:")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


# ---- bugs ----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_feedback_finds_its_files_in_a_folder_of_several_datasets(tmp_path):
    root = tmp_path / "datasets"
    tabular.house_prices(root / "house-prices")  # another task's train.csv, found first breadth-first
    tabular.spaceship(root / "a-spaceship")
    kaggle.feedback(root / "zz-essays", essays=100)
    mlab_home = {"MLAB_HOME": str(tmp_path / "home")}
    proc = mlab("prepare", "feedback", "--data-dir", str(root), env=mlab_home)
    assert proc.returncode == 0, proc.stderr
    public = tmp_path / "home" / "tasks" / "mlagentbench__feedback" / "public"
    assert "full_text" in (public / "train.csv").read_text().splitlines()[0]
    # only other tasks' files: a one-line error naming what is missing, never a traceback
    (root / "zz-essays" / "train.csv").unlink()
    proc = mlab("prepare", "feedback", "--data-dir", str(root), "--force", env=mlab_home)
    assert "no train.csv with this competition's columns found" in one_line_error(proc)


def test_feedback_copy_without_its_columns_is_refused(tmp_path):
    task = get_task("feedback")
    tabular.house_prices(tmp_path / "src" / "feedback")  # the right folder name, the wrong file
    with pytest.raises(MlabError, match="columns"):
        taskdata.prepare(task, tmp_path / "src", **QUIET)
    assert not taskdata.task_dir(task).exists()


def test_llama_model_under_tmp_is_copied_into_the_task(tmp_path, monkeypatch):
    monkeypatch.setenv("MLAB_ALLOW_NO_GPU", "1")
    source = tmp_path / "src"
    model = source / "llama-7b"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (model / "tokenizer_config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"weights")
    (source / "wikitext-103").mkdir()
    (source / "wikitext-103" / "wiki.test.tokens").write_text(" = A = \n some text .\n")
    task = get_task("llama-inference")
    taskdata.prepare(task, source, **QUIET)
    public = taskdata.public_dir(task)
    config = json.loads((public / "inference_config.json").read_text())
    assert config == {"model_dir": "model"}
    assert (public / "model" / "model.safetensors").read_bytes() == b"weights"
    assert str(tmp_path) not in "".join(p.read_text(errors="replace") for p in public.rglob("*.json"))
    assert any(p == "model/*" for p in task.read_only_files)


@pytest.mark.slow
def test_tool_tasks_need_an_llm_and_the_network_and_prepare_again_with_force(tmp_path):
    env = {"MLAB_HOME": str(tmp_path / "home"), "MLAB_TOOL_LLM": ""}
    error = one_line_error(mlab("prepare", "bibtex-generation", env=env))
    assert "MLAB_TOOL_LLM=provider:model" in error and "network" in error
    assert not (tmp_path / "home" / "tasks" / "mlagentbench__bibtex-generation").exists()
    assert "provider one of openai, anthropic" in one_line_error(
        mlab("prepare", "bibtex-generation", env={**env, "MLAB_TOOL_LLM": "gpt-4o"}))
    assert mlab("prepare", "bibtex-generation", env={**env, "MLAB_TOOL_LLM": "openai:model-a"}).returncode == 0
    config = tmp_path / "home" / "tasks" / "mlagentbench__bibtex-generation" / "public" / "llm_config.json"
    assert json.loads(config.read_text())["model"] == "model-a"
    again = mlab("prepare", "bibtex-generation", env={**env, "MLAB_TOOL_LLM": "openai:model-b"})
    assert "already prepared" in again.stdout
    forced = mlab("prepare", "bibtex-generation", "--force", env={**env, "MLAB_TOOL_LLM": "openai:model-b"})
    assert forced.returncode == 0 and "prepared in" in forced.stdout
    assert json.loads(config.read_text())["model"] == "model-b"
    rows = {r["name"]: r for r in json.loads(mlab("tasks", "--json", env=env).stdout)}
    for name in ("mlagentbench/bibtex-generation", "mlagentbench/literature-review-tool"):
        assert rows[name]["offline_ready"] is False
    assert rows["mlagentbench/vectorization"]["offline_ready"] is True


def test_prepare_force_keeps_the_earlier_preparation_when_it_fails(tmp_path):
    task = get_task("house-price")
    source = tabular.house_prices(tmp_path / "src")
    taskdata.prepare(task, source, **QUIET)
    before = prepared_sums(taskdata.TaskHome.from_env(), task)
    with pytest.raises(MlabError):
        taskdata.prepare(task, tmp_path / "empty-does-not-exist", force=True, **QUIET)
    (tmp_path / "empty").mkdir()
    with pytest.raises(MlabError):
        taskdata.prepare(task, tmp_path / "empty", force=True, **QUIET)
    assert prepared_sums(taskdata.TaskHome.from_env(), task) == before
    assert not [p for p in taskdata.data_root().iterdir() if p.name.startswith(".")]  # no staging left


@pytest.mark.slow
def test_check_task_exits_3_when_skipped():
    proc = mlab("check-task", "imdb", "--json", env={"MLAB_ALLOW_NO_GPU": ""})
    if json.loads(proc.stdout)[0]["status"] != "skipped":
        pytest.skip("this machine has a GPU: imdb is not skipped")
    assert proc.returncode == 3


@pytest.mark.slow
def test_baseline_without_a_gpu_names_the_cpu_variant_not_prepare(tmp_path):
    from mlab_tasks_mlagentbench.base import gpu_available

    if gpu_available():
        pytest.skip("this machine has a GPU")
    error = one_line_error(mlab("baseline", "imdb", env={"MLAB_ALLOW_NO_GPU": ""}))
    assert "needs a GPU" in error and "mlagentbench/imdb-cpu" in error and "mlab prepare" not in error


@pytest.mark.slow
def test_baseline_says_the_starter_gave_no_score_and_which_value_judges_runs(tmp_path):
    env = {"MLAB_HOME": str(tmp_path / "home")}
    source = tabular.house_prices(tmp_path / "src")
    assert mlab("prepare", "house-price", "--data-dir", str(source), env=env).returncode == 0
    error = one_line_error(mlab("baseline", "house-price", "--sandbox", "local", env=env))
    assert "no submission.csv" in error and "nothing was measured or recorded" in error
    assert "fixed baseline mae = 1e+10" in error


def test_fathomnet_instructions_point_to_nothing_the_agent_cannot_see():
    from mlab_tasks_mlagentbench.base import FILES_DIR

    for path in (FILES_DIR / "fathomnet").iterdir():
        assert "README" not in path.read_text(), path


# ---- local copies against published checksums and structure ----------------------------------------
def test_a_made_up_cifar_tarball_is_refused(tmp_path):
    task = get_task("cifar10")
    source = cifar.cifar(tmp_path / "src", per_batch=5, n_test=5, tarball=True)
    with pytest.raises(MlabError, match=r"md5 checksum mismatch .*local copy .* is not the published file"):
        taskdata.prepare(task, source, **QUIET)
    assert not taskdata.task_dir(task).exists()


def test_an_unpacked_cifar_copy_is_checked_for_structure(tmp_path):
    task = get_task("cifar10")
    source = cifar.cifar(tmp_path / "src", per_batch=5, n_test=5)
    notes: list[str] = []
    taskdata.prepare(task, source, log=notes.append)
    assert any("the original has 10,000 each" in n for n in notes)  # a stand-in, said so
    broken = cifar.cifar(tmp_path / "broken", per_batch=5, n_test=5)
    (broken / "cifar-10-batches-py" / "data_batch_3").write_bytes(b"not a pickle")
    with pytest.raises(MlabError, match="data_batch_3: not a CIFAR-10 batch"):
        taskdata.TaskHome(tmp_path / "home2").prepare(task, broken, **QUIET)


def test_babylm_tokenizer_files_are_checked(tmp_path, monkeypatch):
    monkeypatch.setenv("MLAB_ALLOW_NO_GPU", "1")
    source = text.babylm(tmp_path / "src", lines_per_file=5)
    (source / "gpt2" / "vocab.json").write_text('["not", "a", "mapping"]')
    with pytest.raises(MlabError, match="vocab.json must map tokens to ids"):
        taskdata.prepare(get_task("babylm-cpu"), source, **QUIET)


def test_imdb_copies_distilbert_into_the_task(tmp_path, monkeypatch):
    monkeypatch.setenv("MLAB_ALLOW_NO_GPU", "1")
    task = get_task("imdb-cpu")
    source = text.acl_imdb(tmp_path / "src", per_class=3)
    taskdata.prepare(task, source, **QUIET)
    model = taskdata.public_dir(task) / "distilbert-base-uncased"
    assert json.loads((model / "config.json").read_text())["model_type"] == "distilbert"
    assert (model / "model.safetensors").read_bytes() == \
        (source / "distilbert-base-uncased" / "model.safetensors").read_bytes()
    assert "distilbert-base-uncased/*" in task.read_only_files
    (source / "distilbert-base-uncased" / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(MlabError, match="does not describe a DistilBERT"):
        taskdata.TaskHome(tmp_path / "home2").prepare(task, source, **QUIET)


# ---- the data manifest -----------------------------------------------------------------------------
class RangeServer(http.server.SimpleHTTPRequestHandler):
    """Serves a folder with HTTP Range support; the first request for a file in `cut` stops halfway."""

    cut: set[str] = set()
    ranges: list[str] = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        path = Path(self.directory) / self.path.lstrip("/")
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        start = 0
        if self.headers.get("Range"):
            RangeServer.ranges.append(self.headers["Range"])
            start = int(self.headers["Range"].removeprefix("bytes=").rstrip("-"))
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        if path.name in RangeServer.cut:
            RangeServer.cut.discard(path.name)
            self.wfile.write(data[start:len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(data[start:])


@pytest.fixture
def mirror(tmp_path, monkeypatch):
    """A 127.0.0.1 server over tmp_path/served, set as the pack's mirror; yields the served folder."""
    import functools

    folder = tmp_path / "served"
    folder.mkdir()
    RangeServer.cut, RangeServer.ranges = set(), []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(RangeServer, directory=str(folder)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    monkeypatch.setenv(acquire.MIRROR_ENV, f"http://127.0.0.1:{httpd.server_address[1]}/")
    yield folder
    httpd.shutdown()
    httpd.server_close()


def test_manifest_lists_every_file_with_url_checksum_terms_and_place():
    proc = mlab("data", "--all", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    by_path = {r["path"]: r for r in rows}
    cifar_row = by_path["cifar10/cifar-10-python.tar.gz"]
    assert cifar_row["md5"] == "c58f30108f718f92721af3b95e74349a" and cifar_row["size"] == 170_498_071
    assert cifar_row["url"] == "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz" and cifar_row["terms"]
    for path in ("imdb/distilbert-base-uncased/model.safetensors", "babylm/gpt2/vocab.json",
                 "babylm/gpt2/merges.txt", "llama-inference/llama-7b/", "llama-inference/wikitext-103-v1.zip",
                 "house-price/train.csv", "feedback/train.csv", "ogbn-arxiv/arxiv.zip"):
        assert path in by_path, path
    for row in rows:  # no checksum published: the manifest says how a local copy is checked instead
        assert row["md5"] or row["sha256"] or row["check"], row
    assert by_path["house-price/train.csv"]["how"] == "kaggle"
    assert "rules" in by_path["house-price/train.csv"]["terms"]
    assert {r["task"] for r in rows} >= {"mlagentbench/imdb", "mlagentbench/imdb-cpu", "mlagentbench/babylm-cpu"}
    table = mlab("data", "cifar10", env={"COLUMNS": "400"})
    assert table.returncode == 0 and "c58f30108f718f92721af3b95e74349a" in table.stdout
    assert "give a task name, or --all" in one_line_error(mlab("data"))


def test_download_resumes_verifies_and_uses_the_mirror(mirror, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from mlab.cli.data_cmds import data
    from mlab_tasks_mlagentbench.tasks.cifar10 import Cifar10

    cifar.cifar(mirror, per_batch=5, n_test=5, tarball=True)
    served = (mirror / "cifar-10-python.tar.gz").read_bytes()
    stand_in = acquire.Source(url="https://example.invalid/cifar-10-python.tar.gz",
                              filename="cifar-10-python.tar.gz", md5=hashlib.md5(served).hexdigest())
    monkeypatch.setattr(Cifar10, "downloads", [(stand_in.filename, stand_in)])
    listed = json.loads(CliRunner().invoke(data, ["cifar10", "--json"]).output)
    assert listed[0]["url"] == os.environ[acquire.MIRROR_ENV] + "cifar-10-python.tar.gz"  # the mirror's URL
    RangeServer.cut = {"cifar-10-python.tar.gz"}
    target = tmp_path / "fetched"
    first = CliRunner().invoke(data, ["cifar10", "--download", str(target)])
    assert first.exit_code == 1
    for named in ("mlab data mlagentbench/cifar10", "--data-dir", acquire.MIRROR_ENV):
        assert named in first.output, first.output
    part = target / "cifar10" / "cifar-10-python.tar.gz.part"
    assert 0 < part.stat().st_size < len(served)
    second = CliRunner().invoke(data, ["cifar10", "--download", str(target)])
    assert second.exit_code == 0, second.output
    assert RangeServer.ranges == [f"bytes={len(served) // 2}-"]  # resumed, not started again
    assert (target / "cifar10" / "cifar-10-python.tar.gz").read_bytes() == served and not part.exists()
    # a corrupt file on the mirror: refused and not kept
    (target / "cifar10" / "cifar-10-python.tar.gz").unlink()
    (mirror / "cifar-10-python.tar.gz").write_bytes(b"something else")
    third = CliRunner().invoke(data, ["cifar10", "--download", str(target)])
    assert third.exit_code == 1 and "md5 checksum mismatch" in third.output
    assert not any((target / "cifar10").iterdir())


def test_a_failed_download_names_the_manifest_data_dir_and_mirror(tmp_path, monkeypatch):
    monkeypatch.setenv(acquire.MIRROR_ENV, "http://127.0.0.1:9/")  # nothing listens there
    with pytest.raises(MlabError) as caught:
        taskdata.prepare(get_task("cifar10"), **QUIET)
    for named in ("mlab data mlagentbench/cifar10", "--data-dir", acquire.MIRROR_ENV):
        assert named in str(caught.value)


@pytest.mark.slow
def test_prepare_all_from_files_laid_out_as_the_manifest_says(tmp_path):
    """Every task that prepares offline, from stand-ins in the real formats at the manifest's paths; the
    others are named."""
    root = tmp_path / "data"
    tabular.house_prices(root / "house-price")
    tabular.spaceship(root / "spaceship-titanic", with_descriptor=False)
    kaggle.feedback(root / "feedback", essays=100)
    kaggle.parkinsons(root / "parkinsons", patients=10)
    cifar.cifar(root / "cifar10", per_batch=5, n_test=10)  # unpacked: stand-ins cannot match the real md5
    graph.arxiv(root / "ogbn-arxiv", n=100, zipped=False)
    home = tmp_path / "home"
    proc = mlab("prepare", "--all", "--data-dir", str(root),
                env={"MLAB_HOME": str(home), "MLAB_TOOL_LLM": "openai:some-model", "MLAB_ALLOW_NO_GPU": ""},
                timeout=900)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    prepared = {p.name for p in (home / "tasks").iterdir() if (p / "prepared.json").exists()}
    expected = {"house-price", "spaceship-titanic", "feedback", "parkinsons", "cifar10", "ogbn-arxiv", "clrs",
                "vectorization", "bibtex-generation", "literature-review-tool"}
    assert {f"mlagentbench__{t}" for t in expected} <= prepared
    missing = proc.stdout.split("files not found", 1)[1]
    for task in ("imdb", "babylm", "llama-inference", "fathomnet", "identify-contrails"):
        assert f"mlagentbench/{task}: needs " in missing, proc.stdout


# ---- runs share prepared data --------------------------------------------------------------------
class BigDataTask(Task):
    """A task whose large data file is read-only, and whose starter tries to overwrite it."""

    name = "test/big-data"
    description = "a large read-only file"
    research_problem = "none"
    read_only_files = ["data/*"]
    metric = Metric(name="x", higher_is_better=True)

    def prepare(self, ctx):
        (ctx.public_dir / "data").mkdir()
        with open(ctx.public_dir / "data" / "big.bin", "wb") as f:
            f.write(os.urandom(1 << 16) * 96)  # 6 MB
        (ctx.public_dir / "train.py").write_text(
            "import os\n"
            "for how in ('r+b', 'wb', 'ab'):\n"
            "    try:\n"
            "        with open('data/big.bin', how) as f:\n"
            "            f.write(b'overwritten')\n"
            "        print('wrote with', how)\n"
            "    except OSError as exc:\n"
            "        print('refused', how, exc.errno)\n"
            "try:\n"
            "    os.chmod('data/big.bin', 0o666)\n"
            "except OSError as exc:\n"
            "    print('chmod refused', exc.errno)\n"
            "open('submission.txt', 'w').write('1')\n")

    def evaluate(self, workspace, hidden_dir):
        return 1.0


@pytest.mark.parametrize("sandbox", CONFINING)
def test_a_run_links_large_read_only_files_and_cannot_write_through_them(tmp_path, sandbox):
    from mlab.core.sandbox.resolve import resolve_sandbox

    try:
        resolve_sandbox(load_registry(), sandbox)
    except MlabError as exc:
        pytest.skip(f"{sandbox} is not usable here: {exc}")
    from mlab.core.run.harness import Harness
    from mlab.core.run.taskdata import TaskHome

    task = BigDataTask()
    harness = Harness(load_registry(), TaskHome(tmp_path / "home"), sandbox=sandbox)
    harness.prepare(task)
    prepared = harness.home.public_dir(task) / "data" / "big.bin"
    digest = hashlib.sha256(prepared.read_bytes()).hexdigest()
    workspace = harness.new_workspace(task, tmp_path / "ws")
    linked = workspace / "data" / "big.bin"
    assert linked.stat().st_ino == prepared.stat().st_ino  # the run's copy costs no disk
    assert (workspace / "train.py").stat().st_ino != (harness.home.public_dir(task) / "train.py").stat().st_ino
    outcome = harness.run_script_fresh(task, timeout_s=120)
    assert outcome.score == 1.0, outcome
    assert "wrote with" not in outcome.output, outcome.output
    assert hashlib.sha256(prepared.read_bytes()).hexdigest() == digest
    assert oct(prepared.stat().st_mode & 0o777) != oct(0o666)
    unconfined = Harness(load_registry(), TaskHome(tmp_path / "home"), sandbox="unconfined")
    copied = unconfined.new_workspace(task, tmp_path / "ws2") / "data" / "big.bin"
    assert copied.stat().st_ino != prepared.stat().st_ino  # nothing there would stop a write through a link


def test_fathomnet_download_fetches_the_images_so_prepare_needs_no_network(mirror, tmp_path, monkeypatch):
    from tests.fixtures.mlagentbench import images

    monkeypatch.setenv("MLAB_ALLOW_NO_GPU", "1")
    url = os.environ[acquire.MIRROR_ENV]
    root = tmp_path / "data"
    images.fathomnet(root / "fathomnet", n_images=12, base_url=url, with_images=False)  # Kaggle files in place
    for path in (root / "fathomnet" / "served").iterdir():
        path.rename(mirror / path.name)
    (root / "fathomnet" / "served").rmdir()
    task = get_task("fathomnet")
    task.fetch_data(root, log=lambda _m: None)
    assert len(list((root / "fathomnet" / "images").glob("*.png"))) == 12
    for path in list(mirror.iterdir()):  # the server has nothing more to give: prepare must not need it
        path.unlink()
    taskdata.prepare(task, root, **QUIET)
    assert len(list((taskdata.public_dir(task) / "images").glob("*.png"))) == 12
