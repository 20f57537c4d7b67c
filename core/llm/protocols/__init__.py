"""The protocols the model endpoint speaks, each translated to the run's model whatever its provider: OpenAI Chat
Completions, OpenAI Responses and Anthropic Messages."""
from __future__ import annotations

from mlab.core.llm.protocols.anthropic import ANTHROPIC, count_tokens
from mlab.core.llm.protocols.base import ChatRequest, EndpointError, Protocol
from mlab.core.llm.protocols.chat import CHAT
from mlab.core.llm.protocols.responses import RESPONSES

PROTOCOLS = (CHAT, RESPONSES, ANTHROPIC)


def protocol_for(path: str) -> Protocol | None:
    """The protocol answering POST `path` (a query such as Anthropic's ?beta=true is ignored)."""
    bare = path.split("?", 1)[0].rstrip("/")
    return next((p for p in PROTOCOLS if bare in p.paths), None)


__all__ = ["ANTHROPIC", "CHAT", "PROTOCOLS", "RESPONSES", "ChatRequest", "EndpointError", "Protocol", "count_tokens",
           "protocol_for"]
