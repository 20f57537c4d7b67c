"""llama-inference: speed up LLaMA-7B generation; the score is the time per generation step it records.

The original shipped no evaluation script; ours reads the last time inference.py appended to submission.csv
(its fixed, do-not-edit part writes it). The model is a LLaMA-7B checkpoint in Hugging Face format, given as a
local copy or fetched from the Hub, and copied into the prepared task (model/, read-only): a host path would not
resolve inside a sandbox that hides /tmp or the task home.
"""
from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from mlab.core import DataFile, Metric, MlabError, PrepareContext, Resources

from .. import acquire
from ..base import PACK, MLAgentBenchTask
from ..submission import submission_path
from .vectorization import last_recorded_time

WIKITEXT = acquire.Source(url="https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-v1.zip",
                          filename="wikitext-103-v1.zip", md5="9ddaacaf6af0710eda8c456decff7832",
                          terms="https://blog.salesforceairesearch.com/the-wikitext-long-term-dependency-language-"
                                "modeling-dataset/")
LLAMA_TERMS = "https://huggingface.co/huggyllama/llama-7b (LLaMA license: request access from Meta)"
CHECKPOINT_FOLDER = "llama-7b"  # where the checkpoint goes below the task's data folder
DEFAULT_REPO = "huggyllama/llama-7b"  # the original's decapoda-research/llama-7b-hf is gone from the Hub
REPO_ENV = "MLAB_LLAMA_REPO"
MODEL_FOLDER = "model"  # the checkpoint's copy in the workspace, named relative to it in inference_config.json


def models_dir() -> Path:
    """Downloaded models live beside the task data, not in it: the sandbox hides the task data root."""
    home = os.environ.get("MLAB_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                                      os.path.expanduser("~/.cache"), "mlab")
    return Path(home).expanduser() / "models"


class LlamaInference(MLAgentBenchTask):
    short = "llama-inference"
    name = f"{PACK}/llama-inference"
    description = "Speed up LLaMA-7B token generation with accelerate; seconds per step, lower is better"
    files = "llama-inference"
    reference = "llama-inference"
    starter_script = "inference.py"
    needs = {"torch": "llama", "transformers": "llama", "accelerate": "llama"}
    metric = Metric(name="seconds_per_token", higher_is_better=False)
    downloads = [(WIKITEXT.filename, WIKITEXT)]
    local_check = "the model folder has config.json and tokenizer files (Hugging Face format)"
    read_only_files = ["wikitext-103/*", "inference_config.json", f"{MODEL_FOLDER}/*"]
    resources = Resources(gpu="required", ram_gb=32.0, network_for_prepare=True, baseline_seconds=300.0,
                          extras=["llama (torch, transformers, accelerate, sentencepiece, huggingface_hub)"])
    research_problem = (
        "Given an inference script inference.py, execute it to see the current generation speed per token, "
        "and then try to improve it with the accelerate library. You should not change the functionality of "
        "the script: the parts marked `DO NOT EDIT` must stay as they are, and the final print statement must "
        "stay the same. The script runs on a single GPU. Before you give the final answer, ask yourself "
        "whether there is any other way to improve the speed. The score is the last time inference.py "
        "recorded in submission.csv.")

    def data_files(self) -> list[DataFile]:
        repo = os.environ.get(REPO_ENV, DEFAULT_REPO)
        return super().data_files() + [DataFile(
            path=f"{self.data_folder}/{CHECKPOINT_FOLDER}/", url=f"https://huggingface.co/{repo}", terms=LLAMA_TERMS,
            how="huggingface", check=self.local_check)]

    def fetch_data(self, root: Path, log: Callable[[str], None]) -> None:
        super().fetch_data(root, log)
        target = root / self.data_folder / CHECKPOINT_FOLDER
        if not (target / "config.json").exists():
            shutil.copytree(self._hub_checkpoint(log), target, dirs_exist_ok=True)

    def prepare_data(self, ctx: PrepareContext) -> None:
        model = self._model(ctx)
        acquire.copy_tree(model, ctx.public_dir / MODEL_FOLDER)
        (ctx.public_dir / "inference_config.json").write_text(json.dumps({"model_dir": MODEL_FOLDER}, indent=2))
        target = ctx.public_dir / "wikitext-103"
        target.mkdir()
        local = acquire.find(ctx.source_dir, ["wiki.test.tokens"]) if ctx.source_dir else None
        if local is not None:
            shutil.copyfile(local, target / "wiki.test.tokens")
            return
        with acquire.Scratch(ctx.public_dir.parent) as scratch:
            root = acquire.obtain_archive(ctx.source_dir, WIKITEXT, scratch, ctx.log, "wikitext-103", task=self.name)
            shutil.copyfile(root / "wikitext-103" / "wiki.test.tokens", target / "wiki.test.tokens")

    def _model(self, ctx: PrepareContext) -> Path:
        if ctx.source_dir is not None:
            for config in sorted(ctx.source_dir.rglob("config.json")):
                if (config.parent / "tokenizer_config.json").exists() or (config.parent / "tokenizer.model").exists():
                    return config.parent.resolve()
            raise MlabError(f"no Hugging Face model folder (config.json and tokenizer files) in {ctx.source_dir}; "
                            f"{acquire.fetch_hint(self.name)}")
        return self._hub_checkpoint(ctx.log)

    def _hub_checkpoint(self, log: Callable[[str], None]) -> Path:
        repo = os.environ.get(REPO_ENV, DEFAULT_REPO)
        target = models_dir() / repo.replace("/", "__")
        if (target / "config.json").exists():
            return target
        try:
            from huggingface_hub import snapshot_download
        except ImportError:
            raise MlabError("downloading the LLaMA checkpoint needs huggingface_hub: pip install "
                            f"'mlab-tasks-mlagentbench[llama]'; or {acquire.fetch_hint(self.name)}") from None
        log(f"downloading {repo} from the Hugging Face Hub into {target}")
        partial = target.with_name(target.name + ".partial")
        try:
            snapshot_download(repo_id=repo, local_dir=str(partial),
                              allow_patterns=["*.json", "*.model", "*.safetensors", "*.txt"])
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise MlabError(f"downloading {repo} from the Hugging Face Hub failed ({first}); "
                            f"{acquire.fetch_hint(self.name)}") from None
        os.replace(partial, target)
        return target

    def evaluate(self, workspace: Path, hidden_dir: Path) -> float:
        return last_recorded_time(submission_path(workspace))
