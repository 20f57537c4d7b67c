"""babylm: train a language model from scratch on the BabyLM 10M-word corpus; perplexity on held-out text.

As the original, the data is babylm_data.zip (10M-word training split and the dev split; the 100M split is not
used); unlike the original, the test split is held out of the agent's workspace. The GPT-2 tokenizer files are
fetched at prepare so runs need no network. Evaluation loads output/ (Hugging Face format) in the run's sandbox.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from mlab.core import InvalidSubmission, Metric, MlabError, PrepareContext, Resources, scoring_context

from .. import acquire
from ..base import PACK, MLAgentBenchTask, run_evaluator

BABYLM = acquire.Source(url="https://github.com/babylm/babylm.github.io/raw/main/babylm_data.zip",
                        filename="babylm_data.zip", terms="https://babylm.github.io/")  # no published checksum
GPT2_FILES = [acquire.Source(url=f"https://huggingface.co/openai-community/gpt2/resolve/main/{name}",
                             filename=f"gpt2-{name}", terms="https://huggingface.co/openai-community/gpt2")
              for name in ("vocab.json", "merges.txt")]
GPT2_VOCAB, GPT2_MERGES = 50_257, 50_000  # the published tokenizer's sizes; a stand-in differs with a note


def check_tokenizer(folder: Path, log=print) -> None:
    """The GPT-2 tokenizer files have no published checksum: vocab.json must map tokens to ids and merges.txt
    hold pairs, or they are not a byte-level BPE tokenizer."""
    try:
        vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
        lines = (folder / "merges.txt").read_text(encoding="utf-8").splitlines()
    except (OSError, ValueError) as exc:
        raise MlabError(f"{folder}: unreadable GPT-2 tokenizer files ({exc})") from None
    merges = [line for line in lines if line and not line.startswith("#version")]
    if not isinstance(vocab, dict) or not all(isinstance(v, int) for v in vocab.values()) \
            or any(len(line.split(" ")) != 2 for line in merges):
        raise MlabError(f"{folder}: vocab.json must map tokens to ids and merges.txt hold one pair a line")
    if (len(vocab), len(merges)) != (GPT2_VOCAB, GPT2_MERGES):
        log(f"note: {folder} has {len(vocab):,} tokens and {len(merges):,} merges; GPT-2's has {GPT2_VOCAB:,} "
            f"and {GPT2_MERGES:,}")


class Babylm(MLAgentBenchTask):
    short = "babylm"
    name = f"{PACK}/babylm"
    description = "Train a language model from scratch on BabyLM 10M words; test perplexity, lower is better"
    files = "babylm"
    reference = "babylm"
    needs = {"torch": "text", "transformers": "text"}
    downloads = [(BABYLM.filename, BABYLM)] + [(f"gpt2/{s.filename.removeprefix('gpt2-')}", s) for s in GPT2_FILES]
    local_check = ("babylm_data/ holds babylm_10M, babylm_dev and babylm_test; gpt2/vocab.json maps tokens to ids "
                   "and gpt2/merges.txt holds pairs")
    cpu_variant: str | None = f"{PACK}/babylm-cpu"
    max_eval_tokens: int = 0  # 0: the whole test split
    scoring_timeout_s: float = 4 * 3600.0
    metric = Metric(name="perplexity", higher_is_better=False)
    read_only_files = ["babylm_data/*", "gpt2/*"]
    resources = Resources(gpu="required", ram_gb=16.0, network_for_prepare=True, baseline_seconds=3 * 3600.0,
                          extras=["text (torch, transformers)"])
    research_problem = (
        "Improve the baseline model performance on the babyLM Benchmark.\n\n"
        "Summary: this shared task challenges community members to train a language model **from scratch** on "
        "the same amount of linguistic data available to a child. Submissions should be implemented in Hugging "
        "Face's Transformers library.\n\n"
        "To run the baseline model, execute train.py. It trains a standard gpt2 model on the babyLM data and "
        "saves the final model to the output/ folder.\n\n"
        "When you submit your final answer, you will be evaluated on the checkpoint saved in output/ (a model "
        "and tokenizer loadable with AutoModelForCausalLM and AutoTokenizer): its perplexity on a held-out "
        "test set.")

    def prepare_data(self, ctx: PrepareContext) -> None:
        with acquire.Scratch(ctx.public_dir.parent) as scratch:
            root = acquire.obtain_archive(ctx.source_dir, BABYLM, scratch, ctx.log, "babylm_data", task=self.name)
            data = root / "babylm_data"
            for split in ("babylm_10M", "babylm_dev", "babylm_test"):
                if not (data / split).is_dir():
                    raise MlabError(f"{data} has no {split} folder")
            shutil.copytree(data / "babylm_10M", ctx.public_dir / "babylm_data" / "babylm_10M")
            shutil.copytree(data / "babylm_dev", ctx.public_dir / "babylm_data" / "babylm_dev")
            shutil.copytree(data / "babylm_test", ctx.hidden_dir / "babylm_test")
        self._tokenizer(ctx)

    def _tokenizer(self, ctx: PrepareContext) -> None:
        target = ctx.public_dir / "gpt2"
        target.mkdir()
        local = acquire.find_folder_with(ctx.source_dir, ["vocab.json", "merges.txt"], ["gpt2"]) \
            if ctx.source_dir else None
        for source in GPT2_FILES:
            name = source.filename.removeprefix("gpt2-")
            path = local / name if local else acquire.download(source, ctx.log, task=self.name)
            shutil.copyfile(path, target / name)
        check_tokenizer(target, ctx.log)
        (target / "tokenizer_config.json").write_text(json.dumps(
            {"tokenizer_class": "GPT2Tokenizer", "model_max_length": 1024, "bos_token": "<|endoftext|>",
             "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>", "add_prefix_space": False}))

    def evaluate(self, workspace: Path, hidden_dir: Path) -> float:
        model = Path(workspace) / "output"
        if not model.is_dir() or not any(model.iterdir()):
            raise InvalidSubmission("no model in output/ (train.py saves it there)")
        self.check_extras()
        ctx = scoring_context()
        with ctx.scratch() as scratch:
            # The model is loaded in the run's sandbox under its memory limit: its config chooses the sizes.
            # The command sees a copy of the test text (the score is exp of its loss on it), not the hidden dir.
            shutil.copytree(Path(hidden_dir) / "babylm_test", scratch / "babylm_test")
            args = ["output", str(scratch / "babylm_test")]
            if self.max_eval_tokens:
                args += ["--max-tokens", str(self.max_eval_tokens)]
            result, message = run_evaluator(
                ctx, scratch, "lm_eval.py", args, Path(workspace),
                env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(scratch)})
        if result.limit_hit == "timeout":
            raise MlabError(f"evaluating output/ took longer than {ctx.limits.timeout_s:g} s")
        if result.limit_hit:
            raise InvalidSubmission(f"loading and scoring the model in output/ broke the scoring {result.limit_hit} "
                                    f"limit")
        if "perplexity" in message:
            return float(message["perplexity"])
        if "error" in message and result.exit_code == 3:
            raise InvalidSubmission(str(message["error"])[:2000])
        raise MlabError(f"perplexity evaluation failed: {message.get('error') or result.output.strip()[-500:]}")


class BabylmCpu(Babylm):
    name = f"{PACK}/babylm-cpu"
    description = "babylm scaled for a CPU: a small gpt2 on 2M tokens, perplexity on 100k test tokens"
    starter_edits = {"train.py": [
        ("MODEL = dict(n_layer=12, n_head=12, n_embd=768)  # the standard gpt2 size",
         "MODEL = dict(n_layer=4, n_head=4, n_embd=256)  # CPU-scaled: a small gpt2"),
        ("BLOCK_SIZE = 1024", "BLOCK_SIZE = 128"),
        ("MAX_TRAIN_TOKENS = None  # use the whole corpus",
         "MAX_TRAIN_TOKENS = 2_000_000  # CPU-scaled: the first 2M tokens"),
    ]}
    cpu_variant = None
    max_eval_tokens = 100_000
    resources = Resources(gpu="optional", ram_gb=8.0, network_for_prepare=True, baseline_seconds=1800.0,
                          extras=["text (torch, transformers)"])
    research_problem = Babylm.research_problem.replace(
        "It trains a standard gpt2 model", "It trains a small gpt2 model (scaled for a CPU: 4 layers, 2M tokens)") \
        + "\nThis machine has no GPU: keep each training run under about an hour. The test perplexity is " \
          "measured on the first 100,000 tokens of the test split."
