"""Perplexity of a saved causal language model on held-out text; run as a subprocess by the babylm task.

python -m mlab_tasks_mlagentbench.lm_eval MODEL_DIR TEXT_DIR [--max-tokens N]
Prints one JSON line: {"perplexity": ...} or {"error": ...} (exit code 3 when the model is unusable).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("text_dir")
    parser.add_argument("--max-tokens", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(args.model_dir, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(args.model_dir, local_files_only=True)
    except Exception as exc:
        print(json.dumps({"error": f"output/ holds no loadable model and tokenizer: {type(exc).__name__}: {exc}"}))
        return 3
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model.to(device).eval()
    # The original used the tokenizer's max length (at most 1024); the model's own limit must hold too.
    limits = [1024, getattr(tokenizer, "model_max_length", 1024) or 1024]
    for key in ("n_positions", "max_position_embeddings"):
        if getattr(model.config, key, None):
            limits.append(int(getattr(model.config, key)))
    block = max(2, min(limits))
    ids: list[int] = []
    for path in sorted(Path(args.text_dir).glob("*")):
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        for start in range(0, len(lines), 1000):
            for encoded in tokenizer(lines[start:start + 1000])["input_ids"]:
                ids.extend(encoded)
        if args.max_tokens and len(ids) >= args.max_tokens:
            break
    if args.max_tokens:
        ids = ids[: args.max_tokens]
    n = len(ids) // block
    if n == 0:
        print(json.dumps({"error": "the held-out text is shorter than one block"}))
        return 4
    if max(ids) >= model.get_input_embeddings().num_embeddings:
        print(json.dumps({"error": "the tokenizer in output/ produces ids the model has no embedding for"}))
        return 3
    blocks = torch.tensor(ids[: n * block]).view(n, block)
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in blocks.split(args.batch_size):
            batch = batch.to(device)
            loss = model(input_ids=batch, labels=batch).loss
            total += loss.item() * len(batch)
            count += len(batch)
    mean = total / count
    perplexity = math.exp(mean) if mean < 700 else float("inf")
    print(json.dumps({"perplexity": perplexity, "blocks": n, "block_size": block}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
