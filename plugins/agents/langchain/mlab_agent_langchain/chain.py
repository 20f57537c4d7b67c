"""The LangChain side: the run's model as a LangChain chat model, the environment's actions as LangChain tools,
and a prompt | model chain whose JSON-blob replies are parsed into AgentAction / AgentFinish.

Imported only when a langchain agent is built, so listing plugins never loads LangChain.
"""
from __future__ import annotations

import json
import re
from typing import Any, Literal

from langchain_core.agents import AgentAction, AgentFinish
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.output_parsers import BaseOutputParser
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.tools import StructuredTool
from pydantic import ConfigDict, Field, create_model

from mlab.core import ActionSpec, Message
from mlab.core.agentkit import OBSERVATION_STOP, loads_lenient

FINAL = "Final Answer"
_ROLES: dict[str, Literal["system", "user", "assistant"]] = {"system": "system", "human": "user", "ai": "assistant"}
_JSON_FENCE = re.compile(r"```(?:json)?\s*\n(.*?)```", re.DOTALL)

SYSTEM = """You are doing machine-learning research on your own, with tools that work inside a workspace \
folder holding the task's files. Answer the question as well and as truthfully as you can.

You have these tools:
{tools}

To use a tool, write a JSON blob with an "action" key (the tool's name) and an "action_input" key (an object \
with the tool's arguments). Valid "action" values: "Final Answer" or {tool_names}.
Put exactly ONE action in a blob, like this:
```json
{{"action": "TOOL_NAME", "action_input": {{"argument": "value"}}}}
```

Always use this format:
Question: the research problem
Thought: what you know so far and what to do next
Action:
```json
JSON_BLOB
```
Observation: what the tool returned
... (Thought, Action and Observation repeat as often as needed)
Thought: the result is measured and the required files are in place
Action:
```json
{{"action": "Final Answer", "action_input": "what you did and the result you measured"}}
```

Measure a baseline first (the given script if it runs; if it is unfinished on purpose, your first complete \
version), trust only numbers you saw in output, use only installed \
packages, and give the Final Answer once: it ends the work. Each reply holds one Thought and one Action and \
then stops; the Observation will come from the tool."""


class MlabChatModel(BaseChatModel):
    """Whatever model the run uses, as a LangChain chat model: every call goes through the run's LLM client,
    so it is logged, counted against the budget and replayable like any other call."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    client: Any = None
    role: str = "main"

    @property
    def _llm_type(self) -> str:
        return "mlab"

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager=None,
                  **kwargs: Any) -> ChatResult:
        converted = [Message(role=_ROLES.get(m.type, "user"), content=message_text(m.content)) for m in messages]
        params = {"stop": list(stop)} if stop else {}
        completion = self.client.complete(converted, role=self.role, **params)
        text = completion.text
        for marker in stop or []:  # a backend that ignores stop sequences (a replay) is cut here too
            text = text.split(marker, 1)[0]
        message = AIMessage(content=text, response_metadata={"model_name": completion.model},
                            usage_metadata={"input_tokens": completion.prompt_tokens,
                                            "output_tokens": completion.completion_tokens,
                                            "total_tokens": completion.prompt_tokens + completion.completion_tokens})
        return ChatResult(generations=[ChatGeneration(message=message)])


def message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)


def tool_name(action: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", action.lower()).strip("_")


def _not_here(**_kwargs: Any) -> str:
    raise RuntimeError("mlab's run loop executes actions; LangChain only chooses them")


def make_tools(actions: dict[str, ActionSpec]) -> list[StructuredTool]:
    """One LangChain tool per environment action, with an arguments schema that rejects unknown arguments."""
    tools = []
    for spec in actions.values():
        if spec.name == FINAL:
            continue  # the Final Answer "action" of the JSON-blob format maps onto it
        fields: dict[str, Any] = {arg: (int if arg.endswith("_line_number") else str, Field(description=hint))
                  for arg, hint in spec.args.items()}
        schema = create_model(tool_name(spec.name) + "_args",
                              __config__=ConfigDict(extra="forbid", coerce_numbers_to_str=True), **fields)
        tools.append(StructuredTool.from_function(func=_not_here, name=tool_name(spec.name),
                                                  description=spec.description, args_schema=schema,
                                                  metadata={"mlab_action": spec.name}))
    return tools


def render_tools(tools: list[StructuredTool]) -> str:
    lines = []
    for tool in tools:
        args = {name: field.get("description", "") for name, field in tool.args.items()}
        lines.append(f"{tool.name}: {tool.description} Arguments: {json.dumps(args, ensure_ascii=False)}")
    return "\n".join(lines)


class InvalidReply(ValueError):
    """A reply without a usable JSON blob; its message goes back to the model, so it is ours, not LangChain's
    (whose parser errors carry a troubleshooting URL meant for developers)."""


class JsonBlobParser(BaseOutputParser[AgentAction | AgentFinish]):
    """Reads the JSON blob of a reply (fenced or not) into an AgentAction, or an AgentFinish for Final Answer."""

    def parse(self, text: str) -> AgentAction | AgentFinish:
        blob, problem = None, "no JSON blob found"
        for candidate in [*_JSON_FENCE.findall(text), text]:
            try:
                blob = loads_lenient(candidate, keys=["action", "action_input"])
                break
            except ValueError as exc:
                problem = str(exc)
        if not isinstance(blob, dict) or not isinstance(blob.get("action"), str):
            raise InvalidReply(f"the reply has no JSON blob with \"action\" and \"action_input\" ({problem})")
        action, action_input = blob["action"].strip(), blob.get("action_input", {})
        if action.lower() == FINAL.lower():
            if isinstance(action_input, dict):
                action_input = action_input.get("final_answer") or json.dumps(action_input)
            return AgentFinish(return_values={"output": str(action_input)}, log=text)
        return AgentAction(tool=action, tool_input=action_input, log=text)

    @property
    def _type(self) -> str:
        return "mlab-json-blob"


def build(client, actions: dict[str, ActionSpec]):
    """The tools, and the chain prompt | model that produces one reply from the conversation so far."""
    tools = make_tools(actions)
    prompt = ChatPromptTemplate.from_messages([
        ("system", SYSTEM),
        MessagesPlaceholder("conversation"),
    ]).partial(tools=render_tools(tools), tool_names=", ".join(t.name for t in tools))
    return tools, prompt | MlabChatModel(client=client).bind(stop=OBSERVATION_STOP)
