"""A LangChain agent (`--agent langchain`): the environment's actions as LangChain tools, the run's own model
(any backend) as a LangChain chat model, and the JSON-blob tool-use format of LangChain's structured-chat agents.

The core owns the loop, so each step is one pass of LangChain's agent: the scratchpad of earlier tool calls and
observations goes in, one AgentAction (a tool call) or AgentFinish (Final Answer) comes out.
Options: tools (JSON list of action names; default the research agent's eight), observation_chars (5000),
scratchpad_chars (60000), max_attempts (5).
"""
from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError

from mlab.core import Action, Agent, AgentContext, RunState, StopRun
from mlab.core.agentkit import (
    MAX_ATTEMPTS,
    RESEARCH_ACTIONS,
    ActionNames,
    AgentOptions,
    pick_actions,
    research_problem,
    truncate_middle,
)


class LangChainOptions(AgentOptions):
    tools: ActionNames = Field(default_factory=lambda: list(RESEARCH_ACTIONS),
                               description="environment actions offered as tools (Final Answer always is)")
    observation_chars: int = Field(5_000, ge=1, description="characters of one observation shown (head and tail)")
    scratchpad_chars: int = Field(60_000, ge=1, description="characters of earlier replies and observations kept")
    max_attempts: int = Field(MAX_ATTEMPTS, ge=1, description="replies to try before giving up on a step")


class LangChainAgent(Agent):
    name = "langchain"
    description = ("LangChain agent: environment actions as LangChain tools, JSON-blob tool calls, driven by the "
                   "run's model.")
    Options = LangChainOptions

    def __init__(self, ctx: AgentContext):
        super().__init__(ctx)
        opts = self.options
        assert isinstance(opts, LangChainOptions)
        names = pick_actions(opts.tools, "tools", ctx.actions)
        self.actions = {n: ctx.actions[n] for n in [*names, "Final Answer"] if n in ctx.actions}
        self.observation_chars = opts.observation_chars
        self.scratchpad_chars = opts.scratchpad_chars
        self.max_attempts = opts.max_attempts
        self.problem = research_problem(ctx, self.actions)
        from . import chain  # LangChain loads here, when a run uses this agent, never at plugin discovery

        self._chain_module = chain
        self.tools, self.chain = chain.build(ctx.llm, self.actions)
        self.tools_by_name = {t.name: t for t in self.tools}
        self.parser = chain.JsonBlobParser()

    # ---- the step -------------------------------------------------------------------------------
    def step(self, state: RunState) -> Action | StopRun:
        from langchain_core.messages import AIMessage, HumanMessage

        conversation = self._conversation(state)
        failures: list[dict[str, str]] = []
        for _ in range(self.max_attempts):
            asked = list(conversation)
            if failures:
                asked += [AIMessage(content=failures[-1]["response"]),
                          HumanMessage(content=f"That reply could not be used: {failures[-1]['problem']}. Reply "
                                               "again with a Thought and one JSON blob whose \"action\" is "
                                               f"\"Final Answer\" or one of: {', '.join(self.tools_by_name)}.")]
            reply = self.chain.invoke({"input": self.problem, "conversation": asked})
            text = self._chain_module.message_text(reply.content)
            try:
                return self._to_action(text, failures)
            except ValueError as exc:
                failures.append({"response": text, "problem": str(exc)})
                self.ctx.log(f"step {state.step_index}: invalid reply, asked again: {exc}")
        return StopRun(reason=f"{len(failures)} invalid responses in a row; the last: {failures[-1]['problem']}")

    def _to_action(self, text: str, failures: list[dict[str, str]]) -> Action:
        """Parse a reply; ValueError (the parser's InvalidReply and pydantic's ValidationError are ones) if unusable."""
        from langchain_core.agents import AgentFinish

        decision = self.parser.parse(text)
        thought = text.split("Action:", 1)[0].strip()
        if thought.lower().startswith("thought:"):
            thought = thought[len("thought:"):].strip()
        entries: dict[str, Any] = {"thought": thought}
        if isinstance(decision, AgentFinish):
            output = decision.return_values["output"]
            entries.update(action="Final Answer", action_input=output)
            action = Action(name="Final Answer", args={"final_answer": output}, entries=entries, raw_response=text)
        else:
            tool = self.tools_by_name.get(decision.tool.strip().strip("`\"'"))
            if tool is None:
                raise ValueError(f"there is no tool {decision.tool!r}; tools: {', '.join(self.tools_by_name)}")
            if not isinstance(decision.tool_input, dict):
                raise ValueError(f"\"action_input\" of {tool.name} must be an object with its arguments: "
                                 f"{', '.join(tool.args)}")
            try:
                args = tool.args_schema.model_validate(decision.tool_input).model_dump()
            except ValidationError as exc:
                problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'input'}: {e['msg']}" for e in exc.errors())
                raise ValueError(f"wrong arguments for {tool.name} ({problems}); it takes exactly "
                                 f"{', '.join(tool.args)}") from exc
            entries.update(action=tool.name, action_input=decision.tool_input)
            action = Action(name=tool.metadata["mlab_action"], args=args, entries=entries, raw_response=text)
        if failures:
            action.entries["invalid_responses"] = failures
        return action

    def _conversation(self, state: RunState) -> list:
        """Question, then each earlier reply and its observation (LangChain's scratchpad), newest last."""
        from langchain_core.messages import AIMessage, HumanMessage

        turns: list[tuple[str, str]] = []
        total = 0
        for step in reversed(state.history):  # newest first, until the budget is spent
            observation = f"Observation: {truncate_middle(step.observation.rstrip(), self.observation_chars)}"
            reply = step.action.raw_response or f"Action: {step.action.name} {step.action.args}"
            total += len(reply) + len(observation)
            if turns and total > self.scratchpad_chars:
                break
            turns[:0] = [("ai", reply), ("human", observation)]
        dropped = len(state.history) - len(turns) // 2
        question = f"Question: {self.problem}"
        if dropped:
            question += f"\n\n({dropped} earlier steps are left out to save space.)"
        minutes = max(0, int(state.seconds_left // 60))
        reminder = (f"(Step {state.step_index} of at most {state.max_steps}, about {minutes} minutes left. "
                    "Reply with a Thought and one JSON blob.)")
        messages = [HumanMessage(content=question)]
        for role, content in turns:
            messages.append(AIMessage(content=content) if role == "ai" else HumanMessage(content=content))
        messages[-1] = HumanMessage(content=messages[-1].content + "\n\n" + reminder)
        return messages
