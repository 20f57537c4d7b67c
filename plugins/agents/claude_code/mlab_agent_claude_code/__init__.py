"""Anthropic's Claude Code (`--agent claude-code`), a program agent: mlab runs it in the sandbox.

This module only registers it, by name; agent.py is imported when the agent is used.
"""
from __future__ import annotations

from mlab.core import Lazy, hookimpl

AGENT = Lazy("claude-code", "mlab_agent_claude_code.agent:ClaudeCodeAgent")


@hookimpl
def register_agents(register):
    register(AGENT)
