"""llama-inference: speed up LLaMA-7B generation; the score is the submission's generation time relative to the
starter's, both timed by the scorer.

The original shipped no evaluation script and no baseline number; the time inference.py records itself was
measured once, under whatever load the machine had then. Ours times the shipped starter and the submission back
to back, interleaved, in the scoring sandbox (time_pair.py times the part between the fixed setup and the
fixed footer, on random token sequences it sends only when the setup is done, and checks the generated tokens
against the starter's), and the score is their ratio at its pessimistic end over 4 to 8 pairs (timing.py): 1 is the
starter's speed, so the fixed baseline is 1 and improvement is 1 - ratio, the same under any load. The model is a
LLaMA-7B checkpoint in Hugging Face format, given as a local copy or fetched from the Hub, and copied into the prepared
task (model/, read-only): a host path would not resolve inside a sandbox that hides /tmp or the task home; the
scorer gives the timed scripts their own copy (or hard links in a read-only folder) of the prepared files.
"""
from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from mlab.core import DataFile, InvalidSubmission, Metric, MlabError, PrepareContext, Resources, scoring_context

from .. import acquire
from ..base import FILES_DIR, PACK, MLAgentBenchTask
from ..time_generation import instrumented
from ..timing import MOST_PAIRS, interleaved_ratio, stage_task_files

WIKITEXT = acquire.Source(url="https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-v1.zip",
                          filename="wikitext-103-v1.zip", md5="9ddaacaf6af0710eda8c456decff7832",
                          terms="https://blog.salesforceairesearch.com/the-wikitext-long-term-dependency-language-"
                                "modeling-dataset/")
LLAMA_TERMS = "https://huggingface.co/huggyllama/llama-7b (LLaMA license: request access from Meta)"
CHECKPOINT_FOLDER = "llama-7b"  # where the checkpoint goes below the task's data folder
DEFAULT_REPO = "huggyllama/llama-7b"  # the original's decapoda-research/llama-7b-hf is gone from the Hub
REPO_ENV = "MLAB_LLAMA_REPO"
MODEL_FOLDER = "model"  # the checkpoint's copy in the workspace, named relative to it in inference_config.json
DATA_FOLDER = "wikitext-103"
CONFIG_FILE = "inference_config.json"
TASK_FILES = (MODEL_FOLDER, DATA_FOLDER, CONFIG_FILE)  # what every timed script reads from the prepared task
TIMER = "time_generation.py"
STARTER_FOLDER = "llama-inference"  # below files/: the shipped starter, timed beside every submission


def models_dir() -> Path:
    """Downloaded models live beside the task data, not in it: the sandbox hides the task data root."""
    home = os.environ.get("MLAB_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                                      os.path.expanduser("~/.cache"), "mlab")
    return Path(home).expanduser() / "models"


def _task_files(workspace: Path, folder: Path, names: list[str]) -> list[str]:
    """The prepared files' copies (and the recorded times) at the top of a workspace: the timed scripts get the
    prepared ones."""
    return [name for name in names if name in (*TASK_FILES, "submission.csv")] if folder == workspace else []


class LlamaInference(MLAgentBenchTask):
    short = "llama-inference"
    name = f"{PACK}/llama-inference"
    description = ("Speed up LLaMA-7B token generation with accelerate; generation time relative to the starter's, "
                   "lower is better")
    files = STARTER_FOLDER
    reference = "llama-inference"
    starter_script = "inference.py"
    needs = {"torch": "llama", "transformers": "llama", "accelerate": "llama"}
    metric = Metric(name="time_vs_starter", higher_is_better=False)
    fixed_baseline = 1.0
    fixed_baseline_source = "the starter's own time: each score is a ratio to it, timed beside the submission"
    most_pairs = MOST_PAIRS
    downloads = [(WIKITEXT.filename, WIKITEXT)]
    local_check = "the model folder has config.json and tokenizer files (Hugging Face format)"
    read_only_files = [f"{DATA_FOLDER}/*", CONFIG_FILE, f"{MODEL_FOLDER}/*"]
    resources = Resources(gpu="required", ram_gb=32.0, network_for_prepare=True, baseline_seconds=300.0,
                          extras=["llama (torch, transformers, accelerate, sentencepiece, huggingface_hub)"])
    research_problem = (
        "Given an inference script inference.py, execute it to see the current generation speed per token, "
        "and then try to improve it with the accelerate library. You should not change the functionality of "
        "the script: the parts marked `DO NOT EDIT` must stay as they are, and the final print statement must "
        "stay the same. The script runs on a single GPU. Before you give the final answer, ask yourself "
        "whether there is any other way to improve the speed. The score is measured anew: your inference.py "
        "and the original one are run back to back on the same machine, timing everything between the end of "
        "the first DO NOT EDIT part and the start of the last one (CPU time with torch limited to one thread "
        "when there is no GPU), on new random token sequences put into eval_dataset when the first part ends, "
        "and your score is the ratio of the two times over several such pairs, at the slow end of its 95% "
        "confidence interval (below 1 is faster: only a clear speed-up counts). The list generated_tokens must hold "
        "each batch's generated tokens, as in the original: they are checked against the original's.")

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
        (ctx.public_dir / CONFIG_FILE).write_text(json.dumps({"model_dir": MODEL_FOLDER}, indent=2))
        target = ctx.public_dir / DATA_FOLDER
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
        workspace = Path(workspace)
        script = workspace / self.starter_script
        if not script.is_file():
            raise InvalidSubmission(f"no {self.starter_script} in the workspace")
        try:  # before timing anything: a changed DO NOT EDIT part is refused at once
            instrumented(script.read_text(encoding="utf-8", errors="replace"),
                         (FILES_DIR / STARTER_FOLDER / self.starter_script).read_text(encoding="utf-8"))
        except ValueError as exc:
            raise InvalidSubmission(str(exc)) from None
        public = Path(hidden_dir).parent / "public"  # the prepared files, not the submission's copies of them
        if not all((public / name).exists() for name in TASK_FILES):
            raise MlabError(f"{self.name} is not prepared (no {', '.join(TASK_FILES)} in {public})")
        ctx = scoring_context()
        with ctx.scratch() as stage, ctx.scratch() as scratch:
            stage_task_files(public, stage, TASK_FILES, link=ctx.new_sandbox().confined)
            shutil.copytree(FILES_DIR / STARTER_FOLDER, stage / "starter")
            shutil.copytree(workspace, stage / "submission", symlinks=True,
                            ignore=lambda folder, names: _task_files(workspace, Path(folder), names))
            return interleaved_ratio(ctx, stage, scratch, TIMER, what="generation", shared=TASK_FILES,
                                     most=self.most_pairs)
