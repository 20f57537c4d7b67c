"""Source data for llama-inference without a network, for `make gpu-check`: a randomly initialised 2-layer
Llama model with a word-level tokenizer (Hugging Face layout: config.json, weights, tokenizer files) in
FOLDER/llama, and FOLDER/wikitext-103/wiki.test.tokens with enough long lines for the starter's 100 batches.

    python tiny_llama.py FOLDER [LINES]

Run by the check as a separate process, so the harness itself never imports torch or transformers."""
import random
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIAL = ["<unk>", "<s>", "</s>"]
WORDS = ("the a cat dog child bird house river stone light music story city road garden window morning night "
         "sees finds likes carries follows paints opens remembers quiet green old small bright slow near under "
         "over with and then .").split()
WORDS_PER_LINE = 160  # above the starter's context of 128 tokens: every line makes one sample


def build(folder: Path, lines: int) -> None:
    vocab = {word: i for i, word in enumerate(SPECIAL + WORDS)}
    backend = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>",
                                        eos_token="</s>", pad_token="</s>", model_max_length=512)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512,
                         bos_token_id=vocab["<s>"], eos_token_id=vocab["</s>"], pad_token_id=vocab["</s>"])
    model_dir = folder / "llama"
    LlamaForCausalLM(config).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    rng = random.Random(0)
    text = [" = Generated text = ", ""]
    for _ in range(lines):
        text += [" ".join(rng.choice(WORDS) for _ in range(WORDS_PER_LINE)), ""]
    (folder / "wikitext-103").mkdir(parents=True, exist_ok=True)
    (folder / "wikitext-103" / "wiki.test.tokens").write_text("\n".join(text) + "\n", encoding="utf-8")


if __name__ == "__main__":
    build(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 420)
