"""MLAgentBench pack, true to the original: its six fixed baselines, measured ones everywhere else, babylm's
perplexity computed through the original's text pipeline, and prepares that write the same files every time."""
from __future__ import annotations

import importlib.util
import json
import math
import random
from pathlib import Path

import pytest

from mlab.core.plugins.registry import load_registry
from mlab.core.run.checktask import prepared_sums
from mlab.core.run.taskdata import TaskHome
from tests.fixtures.mlagentbench import cifar, graph, images, kaggle, tabular, text

QUIET = {"log": lambda _m: None}

# The original's plot.py overrides six measured baselines with these numbers.
FIXED = {"imdb": 0.5, "spaceship-titanic": 0.5, "fathomnet": 1e-10, "house-price": 1e10, "ogbn-arxiv": 0.3134,
         "vectorization": 6.1742}
# imdb-cpu keeps imdb's chance accuracy: same data, and a starter that submits nothing, so nothing to measure.
INHERITED = {"imdb-cpu": 0.5}
# Scores that are ratios to the starter timed beside the submission at scoring: 1 is the starter, by definition.
RATIO_TO_STARTER = {"llama-inference"}


def pack_tasks() -> dict:
    tasks = load_registry().items["tasks"]
    return {name.split("/", 1)[1]: task for name, task in tasks.items() if name.startswith("mlagentbench/")}


@pytest.mark.parametrize("short", sorted(FIXED))
def test_the_originals_fixed_baselines(short):
    task = pack_tasks()[short]
    assert task.fixed_baseline == FIXED[short]
    assert "plot.py" in task.fixed_baseline_source and task.fixed_baseline_source.strip()


def test_every_other_task_measures_its_baseline():
    tasks = pack_tasks()
    assert set(FIXED) | set(INHERITED) <= set(tasks)
    for short, task in tasks.items():
        if short in FIXED:
            continue
        if short in INHERITED:
            assert (task.fixed_baseline, task.fixed_baseline_source) == (INHERITED[short], tasks["imdb"]
                                                                          .fixed_baseline_source)
            continue
        if short in RATIO_TO_STARTER:
            assert task.fixed_baseline == 1.0 and "ratio" in task.fixed_baseline_source, short
            continue
        # mlab's own CPU variants and the rest: the mean of starter runs with a valid score
        assert task.fixed_baseline is None and task.fixed_baseline_source == "", short
    assert {"fathomnet-cpu", "babylm-cpu", "identify-contrails-cpu", "bibtex-generation",
            "literature-review-tool"} <= {s for s, t in tasks.items() if t.fixed_baseline is None}


# ---- babylm: the original's perplexity pipeline ----------------------------------------------------
needs_transformers = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                        reason="needs transformers (the pack's text extra)")
BLOCK = 32


def write_test_split(folder: Path) -> None:
    """1,400 lines over two files, so batches of 1,000 lines cross a file; blank and whitespace-only lines."""
    rng = random.Random(5)
    folder.mkdir(parents=True)
    for name in ("aochildes.test", "bnc_spoken.test"):
        lines = []
        for n in range(700):
            if n % 6 == 5:
                lines.append("   " if n % 12 == 11 else "")
            else:
                lines.append(f"{rng.choice(text.SUBJECTS)} {rng.choice(text.VERBS)} {rng.choice(text.OBJECTS)}.")
        (folder / name).write_text("\n".join(lines) + "\n")


def tiny_model(folder: Path):
    """A small GPT-2 with the tests' byte-level tokenizer, trained a few steps on newline-ended lines so that
    whether newlines are scored changes its perplexity (with random weights every token is equally unlikely)."""
    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    tokenizer_dir = text.gpt2_tokenizer(folder / "tok")
    (tokenizer_dir / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "GPT2Tokenizer", "model_max_length": 1024, "bos_token": "<|endoftext|>",
         "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}))
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=BLOCK, n_embd=32, n_layer=2,
                                       n_head=2, bos_token_id=tokenizer.eos_token_id,
                                       eos_token_id=tokenizer.eos_token_id))
    rng = random.Random(1)
    lines = "".join(f"{rng.choice(text.SUBJECTS)} {rng.choice(text.VERBS)} {rng.choice(text.OBJECTS)}.\n"
                    for _ in range(400))
    ids = torch.tensor(tokenizer(lines)["input_ids"])
    batches = ids[: len(ids) // BLOCK * BLOCK].view(-1, BLOCK)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(100):
        batch = batches[(step * 8) % len(batches):][:8]
        model(input_ids=batch, labels=batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.save_pretrained(folder / "output")
    tokenizer.save_pretrained(folder / "output")


def perplexity(model, blocks: list[list[int]]) -> float:
    """exp of the mean over blocks of each block's mean next-token cross-entropy."""
    import torch
    import torch.nn.functional as F

    x = torch.tensor(blocks)
    with torch.no_grad():
        logits = model(input_ids=x).logits
    losses = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="none")
    return math.exp(losses.view(len(blocks), -1).mean(dim=1).mean().item())


def cut(ids: list[int]) -> list[list[int]]:
    return [ids[at:at + BLOCK] for at in range(0, len(ids) // BLOCK * BLOCK, BLOCK)]


@needs_transformers
@pytest.mark.slow
def test_babylm_perplexity_follows_the_originals_pipeline(tmp_path, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mlab_tasks_mlagentbench import lm_eval

    hidden, workspace = tmp_path / "hidden", tmp_path / "ws"
    write_test_split(hidden / "babylm_test")
    tiny_model(workspace)
    tokenizer = AutoTokenizer.from_pretrained(str(workspace / "output"))
    model = AutoModelForCausalLM.from_pretrained(str(workspace / "output")).eval()
    files = sorted((hidden / "babylm_test").iterdir())

    # The original: one example per line, newline kept, blank lines as ""; tokens grouped per 1,000 lines.
    rows = ["" if not line.strip() else line for path in files for line in path.read_text().splitlines(True)]
    assert len(rows) == 1400 and rows.count("") == 2 * 116 and rows[0].endswith(".\n")
    original_blocks = []
    for start in range(0, len(rows), 1000):
        batch_ids = [token for row in rows[start:start + 1000] for token in tokenizer(row)["input_ids"]]
        original_blocks += cut(batch_ids)
    expected = perplexity(model, original_blocks)

    score = pack_tasks()["babylm"].evaluate(workspace, hidden)
    assert score == pytest.approx(expected, rel=1e-4)

    # Dropping newlines and blank lines and cutting the whole stream gives another number.
    stream = [token for path in files for line in path.read_text().splitlines() if line.strip()
              for token in tokenizer(line)["input_ids"]]
    dropped = perplexity(model, cut(stream))
    assert abs(dropped - expected) / expected > 0.1, (dropped, expected)

    # A token budget (babylm-cpu's) scores the first whole blocks of that pipeline.
    assert lm_eval.main([str(workspace / "output"), str(hidden / "babylm_test"), "--max-tokens", "100"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["blocks"] == 3 and result["perplexity"] == pytest.approx(perplexity(model, original_blocks[:3]),
                                                                           rel=1e-4)


# ---- reproducible prepares -------------------------------------------------------------------------
SOURCES = {
    "house-price": lambda folder: tabular.house_prices(folder, rows=40),
    "spaceship-titanic": lambda folder: tabular.spaceship(folder, rows=40, with_descriptor=False),
    "feedback": lambda folder: kaggle.feedback(folder, essays=100),
    "parkinsons": lambda folder: kaggle.parkinsons(folder, patients=10),
    # unpacked copies: a stand-in archive is refused for not matching the real one's published checksum
    "cifar10": lambda folder: cifar.cifar(folder, per_batch=10, n_test=20),
    "imdb-cpu": lambda folder: text.acl_imdb(folder, per_class=10),
    "ogbn-arxiv": lambda folder: graph.arxiv(folder, n=100, zipped=False),
    "fathomnet-cpu": lambda folder: images.fathomnet(folder, n_images=60),
    "identify-contrails-cpu": lambda folder: images.contrails(folder, n_train=2, n_valid=2, times=2),
    "babylm-cpu": lambda folder: text.babylm(folder, lines_per_file=10),
    "clrs": None, "vectorization": None, "bibtex-generation": None, "literature-review-tool": None,
}


@pytest.mark.parametrize("short", sorted(SOURCES))
def test_prepare_writes_the_same_files_every_time(short, tmp_path, monkeypatch):
    monkeypatch.setenv("MLAB_TOOL_LLM", "openai:some-model")  # the tool tasks refuse to prepare without one
    task = pack_tasks()[short]
    source = SOURCES[short](tmp_path / "src") if SOURCES[short] else None
    digests = []
    for home in ("first", "second"):
        task_home = TaskHome(tmp_path / home)
        assert task_home.prepare(task, source, **QUIET)
        digests.append(prepared_sums(task_home, task))
    assert any(path.startswith("hidden/") for path in digests[0]) or short in (
        "vectorization", "bibtex-generation", "literature-review-tool")
    assert digests[0] == digests[1]
