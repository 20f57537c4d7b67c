"""The research agent's wording. The system prompt is fixed for a whole run so providers can cache it."""
from __future__ import annotations

import json

from mlab.core import ActionSpec
from mlab.core.agentkit import tool_name

ENTRY_GUIDE = {
    "Reflection": "What the last observation means. If it shows an error, what caused it and how you will "
                  "fix or debug it.",
    "Research Plan and Status": "The whole high-level plan, one numbered step per line, each with its status "
                                "(to do, in progress, done) and the results confirmed so far. Write it out in "
                                "full every time and mark what this response changes with \"(updated)\".",
    "Fact Check": "Every statement added or changed in Research Plan and Status, each labelled \"confirmed by "
                  "observation\" (say which step showed it) or \"guessed\". A guessed number is not a result.",
    "Thought": "What you will do now and why.",
    "Action": "The name of one action from the list above, exactly as written there.",
    "Action Input": "One JSON object with exactly that action's arguments. Inside strings write line breaks "
                    "as \\n.",
}

# Native tools: the entries are arguments of every tool; the schema says this much, the system prompt the rest.
FIELD_HINTS = {
    "Reflection": "What the last observation means (see the system prompt).",
    "Research Plan and Status": "The whole plan with each step's status, in full (see the system prompt).",
    "Fact Check": "Each statement added to the plan: confirmed by observation, or guessed (see the system prompt).",
    "Thought": "What you will do now and why.",
}

GUIDANCE = """How to work:
1. First understand the problem and the files you were given. Some tasks give a script that runs and prints a \
score; others give one that is unfinished on purpose and must be completed first. Establish a baseline before \
changing the approach: the score of the given script if it runs, otherwise of the first complete version you \
write. Every change is measured against that baseline.
2. Keep one straightforward high-level plan and follow it. Change one thing at a time, run it, and compare the \
result with the baseline.
3. A number counts as a result only after you have seen it in the output of code you ran. Never state a score \
you have not seen.
4. Use only the packages already installed; do not try to install new ones.
5. After an edit, read the diff you get back and make sure it does what you meant before running the script.
6. When your best version is in place, its score has been confirmed by running it, and the files the problem \
asks for are written, give Final Answer once. It ends the run, and the workspace is scored as it stands."""


def action_list(actions: dict[str, ActionSpec]) -> str:
    lines = []
    for spec in actions.values():
        example = json.dumps({arg: f"<{hint}>" for arg, hint in spec.args.items()}, ensure_ascii=False)
        lines.append(f"- {spec.name}: {spec.description}\n  Action Input: {example}")
    return "\n".join(lines)


def system_prompt(research_problem: str, actions: dict[str, ActionSpec], entries: list[str]) -> str:
    format_lines = "\n".join(f"{name}: {ENTRY_GUIDE[name]}" for name in entries)
    return (
        "You are a careful machine-learning researcher working alone on the research problem below. You act only "
        "through the actions listed here, one per response; each works inside a workspace folder holding the "
        "task's files.\n\n"
        f"Research problem:\n{research_problem.strip()}\n\n"
        f"Actions:\n{action_list(actions)}\n\n"
        f"{GUIDANCE}\n\n"
        f"Response format. Every response has exactly these entries, in this order, each starting its own line "
        f"with its name and a colon, and nothing after Action Input:\n{format_lines}"
    )


def native_system_prompt(research_problem: str, fields: list[str]) -> str:
    """The system prompt of native mode: the actions are the tools, so only the entries' guide is left."""
    guide = "\n".join(f"{tool_name(name)}: {ENTRY_GUIDE[name]}" for name in fields).replace(
        "Research Plan and Status", "research_plan_and_status")
    calls = (f"Every tool call carries these fields, filled in, before the tool's own arguments:\n{guide}" if fields
             else "Call exactly one tool in each response.")
    return (
        "You are a careful machine-learning researcher working alone on the research problem below. You act only "
        "through the tools you are given, one call per response; each works inside a workspace folder holding the "
        "task's files.\n\n"
        f"Research problem:\n{research_problem.strip()}\n\n"
        f"{GUIDANCE}\n\n"
        f"{calls}"
    )


def tool_correction(problem: str, fields: list[str]) -> str:
    names = ", ".join(tool_name(n) for n in fields)
    return (f"That call could not be used: {problem}.\nCall exactly one of the tools"
            + (f", with {names} filled in and" if names else " with") + " exactly that tool's own arguments.")


def correction(problem: str, entries: list[str], actions: dict[str, ActionSpec]) -> str:
    return (
        f"That response could not be used: {problem}.\n"
        f"Answer again with exactly these entries, in this order, each starting its own line: {', '.join(entries)}. "
        f"Action must be one of: {', '.join(actions)}. Action Input must be a single JSON object with exactly "
        "that action's arguments."
    )


def summarize_step_prompt(step_text: str) -> str:
    return (
        f"Here is one step of an agent's machine-learning research:\n{step_text}\n\n"
        "Write a research-log entry for it in at most five short lines: what was done, what came out (every "
        "number, file name and error verbatim) and what it implies. No advice, no guesses."
    )


def recall_prompt(log: str, plan: str) -> str:
    return (
        f"Research log of the earlier steps:\n{log}\n\nCurrent plan and status:\n{plan or '(none yet)'}\n\n"
        "List, concisely, everything in the log that matters for carrying on with this plan: measured results "
        "(baseline included), what failed and why, files created and the settings they use. Facts only."
    )
