"""MLAgentBench pack where researchers run it: air-gapped preparation from files laid out as `mlab data` says,
local copies held to published checksums (or checked for structure), and the bugs found by trying it as a user."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlab.core import MlabError
from mlab.core.plugins.registry import load_registry
from mlab.core.run import taskdata
from tests.fixtures.mlagentbench import cifar, kaggle, tabular, text

QUIET = {"log": lambda _m: None}
REPO = Path(__file__).resolve().parents[1]


def get_task(short: str):
    return load_registry().get("tasks", f"mlagentbench/{short}")


def mlab(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlab.cli.main", *args], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, **(env or {})}, timeout=timeout)


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("mlab: error:")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


# ---- bugs ----------------------------------------------------------------------------------------
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
    before = taskdata.TaskHome.from_env().prepared_digest(task)
    with pytest.raises(MlabError):
        taskdata.prepare(task, tmp_path / "empty-does-not-exist", force=True, **QUIET)
    (tmp_path / "empty").mkdir()
    with pytest.raises(MlabError):
        taskdata.prepare(task, tmp_path / "empty", force=True, **QUIET)
    assert taskdata.TaskHome.from_env().prepared_digest(task) == before
    assert not [p for p in taskdata.data_root().iterdir() if p.name.startswith(".")]  # no staging left


def test_check_task_exits_3_when_skipped():
    proc = mlab("check-task", "imdb", "--json", env={"MLAB_ALLOW_NO_GPU": ""})
    if json.loads(proc.stdout)[0]["status"] != "skipped":
        pytest.skip("this machine has a GPU: imdb is not skipped")
    assert proc.returncode == 3


def test_baseline_without_a_gpu_names_the_cpu_variant_not_prepare(tmp_path):
    from mlab_tasks_mlagentbench.base import gpu_available

    if gpu_available():
        pytest.skip("this machine has a GPU")
    error = one_line_error(mlab("baseline", "imdb", env={"MLAB_ALLOW_NO_GPU": ""}))
    assert "needs a GPU" in error and "mlagentbench/imdb-cpu" in error and "mlab prepare" not in error


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
