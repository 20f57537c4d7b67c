"""Prompt tokens per step of the research agent on a 20-step scripted run, and what takes the room.

The run is real (the core's Runner, the local sandbox, the fixture task of tests/fixtures/agents_fixtures.py);
only the model is scripted, with responses of realistic length. Tokens are estimated as characters / 4 (no
tokenizer download needed; code and CSV tokenize a little denser than prose).

Reports per step: prompt tokens of the main call, split into the stable prefix (system prompt: instructions,
action descriptions, research problem, response format) and the per-step part (the last 3 steps' entries,
their observations, the step note). Also the share of each prompt that repeats the previous prompt's prefix
word for word, which is what providers' prompt caching can reuse, and the same run with the whole history
shown (history_steps=20) for comparison.

Then the same for the search agent (aide: greedy tree search over whole scripts) on the same task and model
budget: its prompts per model call and per step, beside the research agent's.

Usage: python benchmarks/agent_prompt_tokens.py
"""
from __future__ import annotations

import json
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fixtures.agents_fixtures import IMPROVED, edit_reply, llm_calls, research_response  # noqa: E402

STEPS = 20


def tokens(text: str) -> int:
    return (len(text) + 3) // 4


def plan(done: list[str], todo: list[str], updated: int | None = None) -> str:
    lines = [f"{n}. {item} - done" + (" (updated)" if n == updated else "") for n, item in enumerate(done, 1)]
    lines += [f"{n}. {item} - to do" for n, item in enumerate(todo, len(done) + 1)]
    return "\n" + "\n".join(lines)


PLAN = ["Understand the files and the data", "Measure the baseline of train.py unchanged",
        "Replace the majority-class model with a nearest-centroid model", "Try feature scaling",
        "Check the submission file and submit"]

VERBOSE = IMPROVED.replace('print(f"validation accuracy: {valid_acc:.4f}")',
                           'for r in valid_rows:\n    print("validation row", r["id"], "true label", r["label"], '
                           '"predicted", predict(model, r), "features x1 =", r["x1"], "x2 =", r["x2"])\n'
                           'print(f"validation accuracy: {valid_acc:.4f}")')


def script() -> list[str]:
    """20 main responses (with the edit and summary completions where the run asks for them)."""
    R = research_response
    out: list[str] = []

    def step(n, action, args, reflection, thought, stage, facts):
        out.append(R(action, args, n, reflection=reflection, thought=thought,
                     plan=plan(PLAN[:stage], PLAN[stage:], updated=stage or None), fact_check=facts))

    step(1, "List Files", {"dir_path": "."}, "Nothing has been done yet; I start by looking at the workspace.",
         "List the files to see the starter script and the data.", 0, "None yet: no observation so far.")
    step(2, "Understand File", {"file_name": "train.py", "things_to_look_for": "the model, how it is validated "
         "and how submission.csv is written"}, "The workspace holds train.py and a data folder.",
         "Read train.py to see the model and the output format.", 0, "Files train.py and data/: confirmed by step 1.")
    out.append("train.py loads data/train.csv and data/test.csv with csv.DictReader, keeps the first 80% of the "
               "training rows for fitting and the rest for validation (lines 12-13). fit() returns the most "
               "common label (line 17); predict() returns it for every row (line 21). It prints the validation "
               "accuracy and writes submission.csv with id,label (lines 25-30).")
    step(3, "Inspect Script Lines", {"script_name": "train.py", "start_line_number": 1, "end_line_number": 30},
         "The model is a majority-class predictor: a weak baseline.", "Look at the exact code before editing.", 0,
         "Majority-class model: confirmed by step 2.")
    step(4, "Execute Script", {"script_name": "train.py"}, "The code matches the description; 30 lines.",
         "Run it unchanged to measure the baseline.", 1, "The code structure: confirmed by step 3.")
    step(5, "Inspect Script Lines", {"script_name": "data/train.csv", "start_line_number": 1,
                                     "end_line_number": 100}, "Baseline validation accuracy is 0.6250.",
         "Look at the features before choosing a model.", 2, "Baseline 0.6250: confirmed by step 4.")
    step(6, "Copy File", {"source": "train.py", "destination": "train_baseline.py"},
         "Two numeric features x1, x2 and a 0/1 label; the classes look separated by their means.",
         "Keep a copy of the baseline script before editing.", 2, "Features x1, x2 numeric: confirmed by step 5.")
    step(7, "Edit Script (AI)", {"script_name": "train.py", "save_name": "train.py", "edit_instruction":
         "Replace fit() with a nearest-centroid model: compute the mean of x1 and x2 for each label on the fit "
         "rows; predict() returns the label whose centroid is closest in squared Euclidean distance."},
         "The copy exists.", "Make the model change.", 2, "train_baseline.py exists: confirmed by step 6.")
    out.append(edit_reply(IMPROVED))
    step(8, "Execute Script", {"script_name": "train.py"}, "The diff replaces fit and predict as asked, "
         "nothing else.", "Run the new model.", 2, "The edit is as intended: confirmed by step 7.")
    step(9, "Edit Script (AI)", {"script_name": "train.py", "save_name": "train.py", "edit_instruction":
         "Standardize x1 and x2 with the mean and standard deviation of the fit rows before computing centroids "
         "and distances."}, "Nearest centroid reaches 0.9875 validation accuracy (baseline 0.6250).",
         "Try feature scaling.", 3, "0.9875 with nearest centroid: confirmed by step 8.")
    out.append(edit_reply(IMPROVED.replace("def fit(rows):", "# features are on similar scales already\n"
                                                             "def fit(rows):")))
    step(10, "Execute Script", {"script_name": "train.py"}, "The edit only added a comment: the model saw the "
         "features are on similar scales.", "Run it to confirm nothing changed.", 3, "Only a comment added: "
         "confirmed by step 9.")
    step(11, "Undo Edit Script", {"script_name": "train.py"}, "Same accuracy, 0.9875.", "Go back to the clean "
         "version.", 4, "0.9875 again: confirmed by step 10.")
    step(12, "Execute Script", {"script_name": "train.py"}, "Reverted to the nearest-centroid version.",
         "Run it again to make sure the reverted file works.", 4, "Revert: confirmed by step 11.")
    step(13, "Inspect Script Lines", {"script_name": "train.py", "start_line_number": 1, "end_line_number": 40},
         "0.9875 confirmed for the reverted script.", "Check the final code once more.", 4,
         "0.9875: confirmed by step 12.")
    step(14, "Edit Script (AI)", {"script_name": "train.py", "save_name": "train.py", "edit_instruction":
         "Before the accuracy line, print one line per validation row with its id, true label, prediction and "
         "features, to inspect the errors."}, "The code is clean.", "Look at the misclassified rows.", 4,
         "Code reviewed: confirmed by step 13.")
    out.append(edit_reply(VERBOSE))
    step(15, "Execute Script", {"script_name": "train.py"}, "The diff adds the per-row print.",
         "Run it to see the errors.", 4, "Print added: confirmed by step 14.")
    out.append("The script printed 80 validation rows (id, true label, prediction, x1, x2); only row 390 is "
               "misclassified (true 1, predicted 0, x1 -0.21, x2 0.35), near the boundary between the centroids. "
               "Final line: validation accuracy: 0.9875.")
    step(16, "Undo Edit Script", {"script_name": "train.py"}, "One error out of 80, on a point near the boundary: "
         "nothing systematic to fix.", "Remove the verbose print.", 4, "One error: confirmed by step 15.")
    step(17, "Execute Script", {"script_name": "train.py"}, "The print is gone.", "Write the final submission "
         "with the clean script.", 4, "Revert: confirmed by step 16.")
    step(18, "List Files", {"dir_path": "."}, "0.9875 validation accuracy and submission.csv rewritten.",
         "Check that the submission file is there.", 4, "0.9875: confirmed by step 17.")
    step(19, "Understand File", {"file_name": "submission.csv", "things_to_look_for": "the header, the number "
         "of rows and the label values"}, "submission.csv is present.", "Check its format.", 4,
         "submission.csv exists: confirmed by step 18.")
    out.append("Header id,label; 200 rows with ids 400 to 599; labels are 0 and 1 only.")
    step(20, "Final Answer", {"final_answer": "Replaced the majority-class model (validation accuracy 0.6250) "
         "with a nearest-centroid model (0.9875); submission.csv holds its test predictions."},
         "The submission has the right format.", "Submit.", 5, "Format: confirmed by step 19.")
    return out


def run(root: Path, name: str, options: dict) -> list[dict]:
    from mlab.core import RunConfig
    from mlab.core.run.runner import Runner
    from tests.fixtures.agents_fixtures import TASK_NAME, fixture_registry, write_script

    replies = write_script(root / f"{name}.jsonl", script())
    config = RunConfig(task=TASK_NAME, agent="research", llm=f"scripted:{replies}", max_steps=STEPS,
                       action_timeout_s=60, agent_options=options)
    trace = Runner(root / name, config, fixture_registry()).start()
    assert trace.end_reason == "final answer" and len(trace.steps) == STEPS, (trace.end_reason, len(trace.steps))
    summarized = sorted(int(k) for k in trace.steps[-1].agent_state["summaries"])
    return [c for c in llm_calls(root / name) if c["role"] == "main"], summarized


def search_replies() -> list[str]:
    """Whole-script replies for aide: two drafts (the starter's majority model, the nearest-centroid model), a
    debug of a draft that crashes, then improvements; each script prints the metric line the agent reads."""
    def reply(plan_text: str, code: str, metric: str) -> str:
        body = code.replace('print(f"validation accuracy: {valid_acc:.4f}")',
                            f'print(f"validation accuracy: {{valid_acc:.4f}}")\nprint("VALIDATION_METRIC: {metric}")')
        return f"{plan_text}\n\n```python\n{body}```\n"

    from tests.fixtures.agents_fixtures import STARTER

    broken = IMPROVED.replace("def fit(rows):", "def fit(rows):\n    raise ValueError('not yet')")
    return [reply("Start from the starter's majority-class model.", STARTER, "0.625"),
            reply("A nearest-centroid model on x1 and x2.", broken, "0.9"),
            reply("Fix the stray raise in fit.", IMPROVED, "0.9875"),
            reply("Standardize the features before the centroids.", IMPROVED, "0.9875"),
            reply("Keep the model; write the submission again.", IMPROVED, "0.9875")] * 2


def run_search(root: Path) -> tuple[list[dict], int]:
    from mlab.core import RunConfig
    from mlab.core.run.runner import Runner
    from tests.fixtures.agents_fixtures import TASK_NAME, fixture_registry, write_script

    replies = write_script(root / "search.jsonl", search_replies())
    config = RunConfig(task=TASK_NAME, agent="aide", llm=f"scripted:{replies}", max_steps=STEPS + 10,
                       action_timeout_s=60, agent_options={"num_drafts": 2, "max_nodes": 5})
    trace = Runner(root / "search", config, fixture_registry()).start()
    assert trace.end_reason == "final answer", trace.end_reason
    return [c for c in llm_calls(root / "search") if c["role"] == "main"], len(trace.steps)


def system_parts(system: str) -> dict[str, int]:
    """The system prompt cut at its section headings."""
    marks = [("role and research problem", 0), ("action descriptions", system.index("\n\nActions:\n")),
             ("how-to-work instructions", system.index("\n\nHow to work:")),
             ("response format", system.index("\n\nResponse format."))]
    ends = [m[1] for m in marks[1:]] + [len(system)]
    return {name: tokens(system[start:end]) for (name, start), end in zip(marks, ends, strict=True)}


def parts(call: dict) -> dict[str, int]:
    system, user = call["messages"][0]["content"], call["messages"][1]["content"]
    observations = re.findall(r"\nObservation:\n(.*?)(?=\n\n\[Step \d+\]|\n\nThis is step )", user, re.DOTALL)
    note = user[user.rfind("This is step "):]
    obs = sum(tokens(o) for o in observations)
    return {"system prompt (stable)": tokens(system), "observations": obs,
            "step entries": tokens(user) - obs - tokens(note), "step note": tokens(note)}


def common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):  # the strings may differ in length
        if x != y:
            break
        n += 1
    return n


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="mlab-bench-agent-") as scratch:
        root = Path(scratch)
        os.environ["MLAB_HOME"] = str(root / "home")
        calls, summarized = run(root, "window", {})
        full, _ = run(root, "full", {"history_steps": STEPS})
        search_calls, search_steps = run_search(root)
    serial = [json.dumps(c["messages"]) for c in calls]
    per_step = [sum(parts(c).values()) for c in calls]
    print(f"research agent, {STEPS}-step scripted run on fixture/tiny-clf "
          f"(tokens = characters / 4, main-model prompts only)")
    print(f"{'step':>4} {'prompt':>7} {'system':>7} {'entries':>8} {'observ.':>8} {'cached prefix':>14}")
    for n, call in enumerate(calls):
        p = parts(call)
        cached = common_prefix(serial[n - 1], serial[n]) / len(serial[n]) if n else 0.0
        print(f"{n + 1:>4} {per_step[n]:>7} {p['system prompt (stable)']:>7} {p['step entries']:>8} "
              f"{p['observations']:>8} {cached:>13.0%}")
    totals: dict[str, int] = {}
    for call in calls:
        for key, value in parts(call).items():
            totals[key] = totals.get(key, 0) + value
    total = sum(totals.values())
    print(f"\nprompt tokens per step: mean {statistics.fmean(per_step):.0f}, median {statistics.median(per_step):.0f}, "
          f"max {max(per_step)}; {total} over the run")
    for key, value in sorted(totals.items(), key=lambda kv: -kv[1]):
        print(f"  {key:<24} {value:>7} ({value / total:.0%})")
    largest = max(totals, key=totals.get)
    inside = ", ".join(f"{k} {v}" for k, v in system_parts(calls[0]["messages"][0]["content"]).items())
    print(f"largest part of the prompt: {largest} ({inside} tokens)")
    print(f"observations longer than 5,000 characters summarized by the fast model: steps {summarized}")
    cached = sum(common_prefix(serial[n - 1], serial[n]) for n in range(1, len(serial))) / sum(map(len, serial[1:]))
    print(f"stable prefix (cacheable) share of steps 2-{STEPS}: {cached:.0%} of prompt characters")
    full_per_step = [tokens(c["messages"][0]["content"] + c["messages"][1]["content"]) for c in full]
    print(f"with the whole history shown instead of the last 3 steps: mean {statistics.fmean(full_per_step):.0f}, "
          f"step {STEPS}: {full_per_step[-1]} tokens (vs {per_step[-1]})")
    research_total = sum(tokens(json.dumps(c["messages"])) for c in calls)
    search_prompts = [sum(tokens(m["content"]) for m in c["messages"]) for c in search_calls]
    research_prompts = [sum(tokens(m["content"]) for m in c["messages"]) for c in calls]
    print(f"\nsearch agent (aide, 2 drafts, at most 5 nodes) on the same task: {len(search_calls)} model calls "
          f"in {search_steps} steps; prompt tokens per call: mean {statistics.fmean(search_prompts):.0f}, max "
          f"{max(search_prompts)}; per step: {sum(search_prompts) / search_steps:.0f}")
    print(f"research agent: {len(calls)} main calls in {STEPS} steps; prompt tokens per call: mean "
          f"{statistics.fmean(research_prompts):.0f}, max {max(research_prompts)}; per step: "
          f"{sum(research_prompts) / STEPS:.0f} (serialized {research_total})")


if __name__ == "__main__":
    main()
