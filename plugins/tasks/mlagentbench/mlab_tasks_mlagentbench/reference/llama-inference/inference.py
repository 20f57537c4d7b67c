"""Reference solution (ours, for `mlab check-task`).
Time how fast a LLaMA-7B model generates: one new token after 128 tokens of context, 100 batches."""
# ruff: noqa: B905 (the DO NOT EDIT blocks are the starter's code, which the scorer requires unchanged)
import csv
import json
import time

import torch
from torch.utils.data import DataLoader
from transformers import AutoModelForCausalLM, AutoTokenizer, default_data_collator

#### DO NOT EDIT ######

generation_length = 1
context_length = 128

MODEL_DIR = json.load(open("inference_config.json"))["model_dir"]
device = "cuda" if torch.cuda.is_available() else "cpu"
tokenizer = AutoTokenizer.from_pretrained(MODEL_DIR)
model = AutoModelForCausalLM.from_pretrained(MODEL_DIR).to(device)
with open("wikitext-103/wiki.test.tokens", encoding="utf-8") as f:
    eval_texts = [line for line in f.read().splitlines() if line.strip()]


def tokenize_and_filter(texts):
    """Keep only the texts at least context_length tokens long, cut to exactly context_length."""
    tokenized = tokenizer(texts, truncation=True, max_length=context_length)
    return [{"input_ids": ids, "attention_mask": mask}
            for ids, mask in zip(tokenized["input_ids"], tokenized["attention_mask"]) if len(ids) == context_length]


eval_dataset = tokenize_and_filter(eval_texts)

#################

batch_size = 4

eval_dataloader = DataLoader(eval_dataset, collate_fn=default_data_collator, batch_size=batch_size)

# Reference: half precision on a GPU, and for a single greedy token one forward pass instead of generate().
if device == "cuda":
    model = model.half()

with torch.inference_mode():
    model.eval()
    total_time = 0
    generated_tokens = []  # each batch's new tokens: the scorer checks them against the starter's
    for idx, batch in enumerate(eval_dataloader):
        if idx == 100:
            break
        input_ids = batch["input_ids"].to(device)
        start_time = time.time()
        logits = model(input_ids=input_ids, use_cache=False).logits[:, -1, :]
        outputs = torch.cat([input_ids, logits.argmax(dim=-1, keepdim=True)], dim=1)
        if device == "cuda":
            torch.cuda.synchronize()
        total_time += time.time() - start_time
        generated_tokens.append(outputs[:, context_length:].tolist())
    print("Average per token generation time: ", total_time / 100)

#### DO NOT EDIT ######
# The score: each run appends its time; the last line is the one that counts.
with open("submission.csv", "a+", newline="") as file:
    csv.writer(file, delimiter=";").writerow([total_time / 100])
#################
