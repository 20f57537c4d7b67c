"""The research agent and its two ablations, as step policies over the core's loop."""
from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field

from mlab.core import Action, Agent, AgentContext, Message, RunState, Step, StopRun, ToolCall
from mlab.core.agentkit import (
    ACTION,
    ACTION_INPUT,
    MAX_ATTEMPTS,
    OBSERVATION_STOP,
    RESEARCH_ACTIONS,
    SUMMARY_THRESHOLD,
    TOOL_CALL_ID,
    ActionNames,
    AgentOptions,
    Attempts,
    action_text,
    action_tools,
    ask_until_called,
    ask_until_valid,
    budget_line,
    needs_summary,
    parse_named_entries,
    parse_tool_call,
    pick_actions,
    require_tools,
    research_problem,
    summarize_observation,
    tool_name,
)

from . import prompts

RESEARCH_ENTRIES = ["Reflection", "Research Plan and Status", "Fact Check", "Thought", "Action", "Action Input"]
# Each response restates these in full, so older copies in the history are redundant: only the latest is shown.
RESTATED = ("Research Plan and Status", "Fact Check")
RETRIES_KEY = "invalid_responses"  # where an Action's entries record the responses that had to be retried
FIRST_STEP = "Nothing has been done yet: this is your first step."


class ResearchOptions(AgentOptions):
    actions: ActionNames = Field(default_factory=lambda: list(RESEARCH_ACTIONS),
                                 description="action names the prompt shows (a JSON list or comma-separated)")
    retrieval: bool = Field(False, description="keep a research log of every step and recall from it once the "
                                               "history is long")
    history_steps: int = Field(3, ge=1, description="how many recent steps the prompt shows in full")
    summarize_over: int = Field(SUMMARY_THRESHOLD, ge=100, description="observations longer than this many "
                                "characters are summarized by the fast model first (edit diffs never are)")
    max_attempts: int = Field(MAX_ATTEMPTS, ge=1, description="responses to try before giving up on a step")
    tools: Literal["text", "native"] = Field("text", description="text: the original's ReAct format; native: each "
                                             "action is a tool the model calls (models that take tools)")


class ResearchAgent(Agent):
    name = "research"
    description = "ReAct research agent: Reflection, Research Plan and Status, Fact Check, Thought, Action."
    Options = ResearchOptions
    entry_names: list[str] = RESEARCH_ENTRIES

    def __init__(self, ctx: AgentContext):
        super().__init__(ctx)
        opts = self.options
        assert isinstance(opts, ResearchOptions)
        self.actions = {n: ctx.actions[n] for n in pick_actions(opts.actions, "actions", ctx.actions)}
        self.retrieval = opts.retrieval
        self.history_steps = opts.history_steps
        self.summarize_over = opts.summarize_over
        self.max_attempts = opts.max_attempts
        self.native = opts.tools == "native"
        # the entries besides the action: in native mode, arguments every tool takes before its own
        self.fields = [n for n in self.entry_names if n not in (ACTION, ACTION_INPUT)]
        if self.native:
            require_tools(self.llm, self.name, "--agent-option tools=native")
            self.tools = action_tools(self.actions, {n: prompts.FIELD_HINTS[n] for n in self.fields})
            self.system = prompts.native_system_prompt(research_problem(ctx, self.actions), self.fields)
        else:
            self.system = prompts.system_prompt(research_problem(ctx, self.actions), self.actions,
                                                 self.entry_names)
        # Memory (saved with every step): summaries of long observations, the research log, what was recalled.
        self.seen = 0
        self.summaries: dict[str, str] = {}
        self.research_log: list[dict[str, Any]] = []
        self.recalled = ""
        self.invalid_total = 0

    # ---- the step -------------------------------------------------------------------------------
    def step(self, state: RunState) -> Action | StopRun:
        self._absorb(state.history)
        if self.retrieval and len(state.history) > self.history_steps:
            self.recalled = self._recall(state.history)
        result = self._ask_native(state) if self.native else self._ask_text(state)
        self.invalid_total += len(result.failures)
        for failure in result.failures:
            self.ctx.log(f"step {state.step_index}: invalid response, asked again: {failure['problem']}")
        if not result.ok:
            return StopRun(reason=f"{len(result.failures)} invalid responses in a row; the last: "
                                  f"{result.failures[-1]['problem']}")
        action: Action = result.value
        if result.failures:
            action.entries[RETRIES_KEY] = result.failures
        return action

    def _ask_text(self, state: RunState) -> Attempts:
        messages = [Message(role="system", content=self.system),
                    Message(role="user", content=self.user_prompt(state))]
        return ask_until_valid(
            self.llm, messages, lambda text: parse_named_entries(text, self.entry_names, self.actions),
            lambda problem: prompts.correction(problem, self.entry_names, self.actions), self.max_attempts,
            stop=OBSERVATION_STOP)

    def _ask_native(self, state: RunState) -> Attempts:
        # "required": every reply is one action, as in the text format (the user's -M tool_choice wins)
        return ask_until_called(
            self.llm, self.native_messages(state), self.tools,
            lambda call: parse_tool_call(call, self.actions, self.fields),
            lambda problem: prompts.tool_correction(problem, self.fields), self.max_attempts,
            tool_choice="required")

    # ---- memory ---------------------------------------------------------------------------------
    def _absorb(self, history: list[Step]) -> None:
        """Take in the steps not seen yet: summarize long observations, add research-log entries."""
        for step in history:
            if step.index <= self.seen:
                continue
            if needs_summary(step, self.summarize_over):
                self.summaries[str(step.index)] = summarize_observation(
                    self.llm, step.observation, action_text(step.action))
            if self.retrieval:
                text = self.llm.complete(prompts.summarize_step_prompt(self.render_step(step, full=True)),
                                             role="fast").text.strip()
                self.research_log.append({"step": step.index, "text": text})
            self.seen = step.index

    def _recall(self, history: list[Step]) -> str:
        log = "\n\n".join(f"[Step {e['step']}]\n{e['text']}" for e in self.research_log
                          if e["step"] <= history[-1].index - self.history_steps)
        if not log:
            return ""
        plan = history[-1].action.entries.get("Research Plan and Status") or history[-1].action.entries.get(
            "Thought", "")
        return self.llm.complete(prompts.recall_prompt(log, str(plan)), role="fast").text.strip()

    def observation(self, step: Step) -> str:
        summary = self.summaries.get(str(step.index))
        if summary is None:
            return step.observation
        return f"(summary of {len(step.observation)} characters of output)\n{summary}"

    # ---- the prompt -----------------------------------------------------------------------------
    def render_step(self, step: Step, full: bool) -> str:
        lines = [f"[Step {step.index}]"]
        entries = step.action.entries
        for name in self.entry_names:
            if name in ("Action", "Action Input"):
                continue
            if name in entries and (full or name not in RESTATED):
                lines.append(f"{name}: {entries[name]}")
        lines.append(f"Action: {step.action.name}")
        lines.append(f"Action Input: {json.dumps(step.action.args, ensure_ascii=False)}")
        lines.append(f"Observation:\n{self.observation(step).rstrip()}")
        return "\n".join(lines)

    def user_prompt(self, state: RunState) -> str:
        parts = []
        window = state.history[-self.history_steps :]
        earlier = len(state.history) - len(window)
        if self.recalled and earlier:
            parts.append(self._recalled_note(earlier))
        if window:
            shown = [self.render_step(s, full=(s is window[-1])) for s in window]
            parts.append(self._window_note(len(window), earlier, ":") + "\n\n" + "\n\n".join(shown))
        else:
            parts.append(FIRST_STEP)
        parts.append(self._step_line(state) + f"Respond now with {', '.join(self.entry_names)}.")
        return "\n\n".join(parts)

    def native_messages(self, state: RunState) -> list[Message]:
        """The prompt in native mode: the window's steps as the tool calls they were, each followed by its
        observation as the call's result."""
        window = state.history[-self.history_steps :]
        earlier = len(state.history) - len(window)
        fields = ", ".join(tool_name(n) for n in self.fields)
        ask = f"Call one tool now{f', with {fields} filled in' if fields else ''}."
        messages = [Message(role="system", content=self.system)]
        if not window:
            return [*messages, Message(role="user", content=f"{FIRST_STEP}\n\n{self._step_line(state)}{ask}")]
        intro = [self._recalled_note(earlier)] if self.recalled and earlier else []
        intro.append(self._window_note(len(window), earlier, ", as tool calls and their results."))
        messages.append(Message(role="user", content="\n\n".join(intro)))
        for step in window:
            entries = step.action.entries
            call_id = str(entries.get(TOOL_CALL_ID) or f"step_{step.index}")
            shown = {tool_name(n): entries[n] for n in self.fields
                     if n in entries and (step is window[-1] or n not in RESTATED)}
            call = ToolCall(id=call_id, name=tool_name(step.action.name),
                            arguments=json.dumps({**shown, **step.action.args}, ensure_ascii=False))
            messages.append(Message(role="assistant", tool_calls=[call]))
            messages.append(Message(role="tool", tool_call_id=call_id, content=self.observation(step)))
        messages.append(Message(role="user", content=self._step_line(state) + ask))
        return messages

    def _recalled_note(self, earlier: int) -> str:
        return f"Notes recalled from your research log of {_span(earlier)}:\n{self.recalled}"

    def _window_note(self, shown: int, earlier: int, end: str) -> str:
        plan = "Research Plan and Status" if not self.native else "research_plan_and_status"
        memory = (f"your {plan} carries what they found"
                  if "Research Plan and Status" in self.entry_names else "keep in mind what they found")
        verb = "is" if earlier == 1 else "are"
        if not earlier:
            return f"Your steps so far{end}"
        return f"Your last {shown} steps ({_span(earlier)} {verb} not shown; {memory}){end}"

    def _step_line(self, state: RunState) -> str:
        minutes = max(0, int(state.seconds_left // 60))
        # without it a model overran --token-limit and ended with no Final Answer (issue 41)
        budget = budget_line(self.ctx.llm)
        return (f"This is step {state.step_index} of at most {state.max_steps} (about {minutes} minutes left). "
                + (f"{budget} " if budget else "")
                + ("Give your Final Answer before then. " if budget and "Final Answer" in self.actions else ""))

    # ---- state ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"seen": self.seen, "summaries": dict(self.summaries), "research_log": list(self.research_log),
                "recalled": self.recalled, "invalid_responses": self.invalid_total}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seen = int(state.get("seen", 0))
        self.summaries = dict(state.get("summaries", {}))
        self.research_log = list(state.get("research_log", []))
        self.recalled = state.get("recalled", "")
        self.invalid_total = int(state.get("invalid_responses", 0))


class ReactAgent(ResearchAgent):
    name = "react"
    description = "Ablation of research: Thought, Action and Action Input only."
    entry_names = ["Thought", "Action", "Action Input"]


class SimpleAgent(ResearchAgent):
    name = "simple"
    description = "Ablation of research: Action and Action Input only."
    entry_names = ["Action", "Action Input"]


def _span(count: int) -> str:
    return "step 1" if count == 1 else f"steps 1 to {count}"

