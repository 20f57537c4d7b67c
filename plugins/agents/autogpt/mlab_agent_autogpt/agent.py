"""An AutoGPT-style agent (`--agent autogpt`): each reply is a JSON object of thoughts and one command.

Commands are the environment's actions under AutoGPT-like names (task_complete submits). Recent commands and
results stay in the prompt word for word; older ones are folded by the fast model into a running memory.
Options: commands (JSON list of environment action names offered), recent_chars (15000), result_chars (5000),
max_attempts (5).
"""
from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import Field

from mlab.core import Action, Agent, AgentContext, Message, RunState, Step, StopRun
from mlab.core.agentkit import (
    MAX_ATTEMPTS,
    ActionNames,
    AgentOptions,
    InvalidResponse,
    ask_until_valid,
    check_args,
    loads_lenient,
    match_name,
    pick_actions,
    research_problem,
    truncate_middle,
)

# AutoGPT-like command names for the environment's actions; the rest get a snake_case form of their name.
COMMAND_NAMES = {
    "List Files": "list_files", "Read File": "read_file", "Write File": "write_to_file",
    "Append File": "append_to_file", "Copy File": "copy_file", "Undo Edit Script": "undo_last_edit",
    "Execute Script": "execute_python_file", "Python REPL": "execute_python_code", "Final Answer": "task_complete",
    "Understand File": "analyze_file", "Inspect Script Lines": "read_file_lines", "Edit Script (AI)": "improve_code",
    "Request Help": "ask_user",
}
ARG_NAMES = {"Final Answer": {"final_answer": "reason"}}  # env argument -> command argument, where they differ
DEFAULT_COMMANDS = ["List Files", "Read File", "Write File", "Append File", "Copy File", "Execute Script",
                    "Undo Edit Script", "Final Answer"]
FOLD_RESULT_CHARS = 2_000  # how much of each result the memory-folding call reads

SYSTEM = """You are ResearchGPT, an autonomous AI that carries out machine-learning research on its own. \
Nobody will answer questions or approve steps: decide for yourself and keep going until the goal is met.

GOAL:
{goal}

CONSTRAINTS:
1. Your short-term memory is small: older commands and results are condensed into a running memory, so write \
findings you will need again into files.
2. Use only the commands listed below, exactly one per reply, with exactly the arguments shown.
3. Only the Python packages already installed are available; installing new ones is not possible.
4. Everything you do happens inside the workspace folder.

COMMANDS:
{commands}

PERFORMANCE EVALUATION:
1. Measure the starting solution before changing it, so you know what an improvement is.
2. Review your past commands and results; do not repeat what already failed.
3. Criticise your own approach honestly and change course when it is not working.
4. Every command costs time: reach the goal in as few steps as you can, and call task_complete only once the \
result has been measured and the required output files exist.

RESPONSE FORMAT:
Reply with one JSON object and nothing else, shaped like this:
{{
    "thoughts": {{
        "text": "what you think now",
        "reasoning": "why",
        "plan": "- a short bulleted\\n- list of next steps",
        "criticism": "constructive self-criticism",
        "speak": "a one-line summary for the log"
    }},
    "command": {{
        "name": "command name",
        "args": {{"argument name": "value"}}
    }}
}}
It must parse with Python's json.loads."""


def command_name(action: str) -> str:
    return COMMAND_NAMES.get(action) or re.sub(r"[^a-z0-9]+", "_", action.lower()).strip("_")


class AutoGPTOptions(AgentOptions):
    commands: ActionNames = Field(default_factory=lambda: list(DEFAULT_COMMANDS),
                                  description="environment actions offered as commands (Final Answer always is)")
    recent_chars: int = Field(15_000, ge=1, description="characters of recent commands and results kept word for "
                                                        "word; older ones are folded into the running memory")
    result_chars: int = Field(5_000, ge=1, description="characters of one result shown (head and tail)")
    max_attempts: int = Field(MAX_ATTEMPTS, ge=1, description="replies to try before giving up on a step")


class AutoGPTAgent(Agent):
    name = "autogpt"
    description = ("AutoGPT-style agent: JSON thoughts (text, reasoning, plan, criticism) and one command per step, "
                   "running memory; stops on task_complete.")
    Options = AutoGPTOptions

    def __init__(self, ctx: AgentContext):
        super().__init__(ctx)
        opts = self.options
        assert isinstance(opts, AutoGPTOptions)
        chosen = pick_actions(opts.commands, "commands", ctx.actions)
        if "Final Answer" not in chosen:
            chosen = [*chosen, "Final Answer"]  # the agent must be able to stop
        self.commands = {command_name(n): ctx.actions[n] for n in chosen}
        self.recent_chars = opts.recent_chars
        self.result_chars = opts.result_chars
        self.max_attempts = opts.max_attempts
        goal = research_problem(ctx, [spec.name for spec in self.commands.values()])
        self.system = SYSTEM.format(goal=goal, commands=self._command_list())
        # Running memory: a condensed account of every step up to folded_through.
        self.memory = ""
        self.folded_through = 0

    def _command_list(self) -> str:
        lines = []
        for n, (name, spec) in enumerate(self.commands.items(), start=1):
            renames = ARG_NAMES.get(spec.name, {})
            args = {renames.get(a, a): f"<{hint}>" for a, hint in spec.args.items()}
            lines.append(f'{n}. {name}: {spec.description} args: {json.dumps(args, ensure_ascii=False)}')
        return "\n".join(lines)

    # ---- the step -------------------------------------------------------------------------------
    def step(self, state: RunState) -> Action | StopRun:
        recent = self._recent(state.history)
        messages = self._messages(state, recent)
        result = ask_until_valid(self.llm, messages, self.parse, self._correction, self.max_attempts)
        for failure in result.failures:
            self.ctx.log(f"step {state.step_index}: invalid reply, asked again: {failure['problem']}")
        if not result.ok:
            return StopRun(reason=f"{len(result.failures)} invalid responses in a row; the last: "
                                  f"{result.failures[-1]['problem']}")
        action: Action = result.value
        if result.failures:
            action.entries["invalid_responses"] = result.failures
        return action

    def parse(self, text: str) -> Action:
        try:
            reply = loads_lenient(text)
        except ValueError as exc:
            raise InvalidResponse(f"the reply is not a JSON object ({exc})") from exc
        if not isinstance(reply, dict):
            raise InvalidResponse("the reply must be a JSON object with \"thoughts\" and \"command\"")
        thoughts, command = reply.get("thoughts"), reply.get("command")
        if not isinstance(thoughts, dict):
            raise InvalidResponse("the reply lacks the \"thoughts\" object (text, reasoning, plan, criticism)")
        if not isinstance(command, dict) or "name" not in command:
            raise InvalidResponse("the reply lacks a \"command\" object with \"name\" and \"args\"")
        by_action = {spec.name: name for name, spec in self.commands.items()}
        given = match_name(command["name"], [*self.commands, *by_action])
        name = by_action.get(given, given)
        spec = self.commands[name]
        args = command.get("args", {})
        if not isinstance(args, dict):
            raise InvalidResponse(f"\"args\" of {name} must be a JSON object")
        renames = {v: k for k, v in ARG_NAMES.get(spec.name, {}).items()}
        try:
            env_args = check_args(spec, {renames.get(k, k): v for k, v in args.items()})
        except InvalidResponse as exc:
            shown = {ARG_NAMES.get(spec.name, {}).get(a, a): "..." for a in spec.args}
            raise InvalidResponse(f"wrong args for {name}: it takes exactly {json.dumps(shown)}") from exc
        return Action(name=spec.name, args=env_args, raw_response=text,
                      entries={"thoughts": thoughts, "command": {"name": name, "args": args}})

    def _correction(self, problem: str) -> str:
        return (f"Your reply could not be used: {problem}. Reply again with only the JSON object in the "
                f"RESPONSE FORMAT, with one command from: {', '.join(self.commands)}.")

    # ---- memory ---------------------------------------------------------------------------------
    def _event_text(self, step: Step) -> str:
        name = command_name(step.action.name)
        result = truncate_middle(step.observation.rstrip(), self.result_chars)
        return f"Command {name} returned: {result}"

    def _recent(self, history: list[Step]) -> list[Step]:
        """The steps shown word for word; older ones are folded into the running memory first."""
        unfolded = [s for s in history if s.index > self.folded_through]
        sizes = [len(s.action.raw_response or "") + len(self._event_text(s)) for s in unfolded]
        keep = len(unfolded)
        total = sum(sizes)
        while keep > 1 and total > self.recent_chars:
            keep -= 1
            total -= sizes[len(unfolded) - keep - 1]
        to_fold = unfolded[: len(unfolded) - keep]
        if to_fold:
            self._fold(to_fold)
        return unfolded[len(unfolded) - keep :]

    def _fold(self, steps: list[Step]) -> None:
        events = "\n\n".join(
            f"Step {s.index}: command {command_name(s.action.name)} "
            f"{json.dumps(s.action.args, ensure_ascii=False)[:500]}\n"
            f"Result: {truncate_middle(s.observation.rstrip(), FOLD_RESULT_CHARS)}" for s in steps)
        prompt = (f"You keep the running memory of an autonomous agent doing machine-learning research.\n\n"
                  f"Memory so far:\n{self.memory or '(empty)'}\n\nNew events to add:\n{events}\n\n"
                  "Write the updated memory in the first person, under 300 words: what was done, every measured "
                  "number, files created or changed, and what failed and why. Facts only.")
        self.memory = self.llm.complete(prompt, role="fast").text.strip()
        self.folded_through = steps[-1].index

    def _messages(self, state: RunState, recent: list[Step]) -> list[Message]:
        opening = "Begin working towards the GOAL."  # chat APIs want a user turn before the first reply
        if self.memory:
            opening += f"\n\nRunning memory of your steps 1 to {self.folded_through}:\n{self.memory}"
        turns: list[tuple[Literal["user", "assistant"], str]] = [("user", opening)]
        for step in recent:
            reply = step.action.raw_response or json.dumps(step.action.entries)
            turns.append(("assistant", reply))
            turns.append(("user", self._event_text(step)))
        minutes = max(0, int(state.seconds_left // 60))
        turns.append(("user", f"Step {state.step_index} of at most {state.max_steps} (about {minutes} minutes "
                              "left). Determine which next command to use, and reply using the RESPONSE FORMAT."))
        merged: list[Message] = [Message(role="system", content=self.system)]
        for role, content in turns:  # some providers refuse two user messages in a row
            if merged[-1].role == role:  # turns hold no system message, so the system prompt stays apart
                merged[-1] = Message(role=role, content=merged[-1].content + "\n\n" + content)
            else:
                merged.append(Message(role=role, content=content))
        return merged

    # ---- state ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"memory": self.memory, "folded_through": self.folded_through}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.memory = state.get("memory", "")
        self.folded_through = int(state.get("folded_through", 0))
