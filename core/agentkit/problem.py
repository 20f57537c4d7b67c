"""The research problem as an agent shows it: fitted to the actions the agent offers, with the versions of the
key packages its code runs with."""
from __future__ import annotations

import re
from collections.abc import Iterable

from mlab.core.agent_context import AgentContext

LOG_ACTION = "Append Summary to Research Log"
# Task texts ask for notes in a research log (the original benchmark's wording); without the action that writes
# one, the request sends the agent looking for a file it cannot write through any action it has.
_LOG_CLAUSE = re.compile(r"\s*[,;]\s*(?:and\s+)?keep(?:ing)?\s+notes\b[^.;\n]*?\bin\s+your\s+research\s+logs?\b",
                         re.IGNORECASE)
_LOG_WORDS = re.compile(r"\byour\s+research\s+logs?\b", re.IGNORECASE)
_SHOWN_NAMES = {"python": "Python", "numpy": "numpy", "pandas": "pandas", "scikit-learn": "scikit-learn",
                "torch": "torch"}


def research_problem(ctx: AgentContext, actions: Iterable[str]) -> str:
    """ctx.research_problem without its research-log requests unless `actions` (the names the agent offers)
    include the action that writes the log, followed by the package versions of the run's environment."""
    text = ctx.research_problem.strip()
    if LOG_ACTION not in set(actions):
        text = without_research_log(text)
    versions = packages_line(ctx.packages)
    return f"{text}\n\n{versions}" if versions else text


def without_research_log(text: str) -> str:
    """The text with its research-log requests taken out (a lone mention becomes "your notes")."""
    return _LOG_WORDS.sub("your notes", _LOG_CLAUSE.sub("", text))


def packages_line(packages: dict[str, str]) -> str:
    """One sentence naming the versions, e.g. "Your code runs with Python 3.12.3, numpy 2.2.1 and pandas 3.0.0
    installed; write it for these versions." Empty without versions."""
    if not packages:
        return ""
    named = [f"{_SHOWN_NAMES.get(name, name)} {version}" for name, version in packages.items()]
    listed = named[0] if len(named) == 1 else f"{', '.join(named[:-1])} and {named[-1]}"
    return f"Your code runs with {listed} installed; write it for these versions."
