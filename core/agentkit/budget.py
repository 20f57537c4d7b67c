"""What an agent is told of the model budgets it runs under (--token-limit, --max-calls, --cost-limit)."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlab.core.llm.client import LLMClient


def budget_line(llm: LLMClient | None) -> str:
    """One sentence of what is left of each budget the run has, e.g. "Model budget left: 3,689 of 15,000 tokens
    (prompts and responses count) and 7 of 10 model calls; the run ends when one runs out." Empty without one."""
    if llm is None:
        return ""
    usage, left = llm.usage, []
    if llm.max_tokens is not None:
        left.append(f"{max(0, llm.max_tokens - usage.total_tokens):,} of {llm.max_tokens:,} tokens "
                    "(prompts and responses count)")
    if llm.max_calls is not None:
        left.append(f"{max(0, llm.max_calls - usage.calls):,} of {llm.max_calls:,} model calls")
    if llm.max_cost is not None:
        rest = f"${max(0.0, llm.max_cost - usage.cost_usd):.4g}" if usage.cost_known else "an unknown part"
        left.append(f"{rest} of ${llm.max_cost:g}")
    if not left:
        return ""
    listed = left[0] if len(left) == 1 else f"{', '.join(left[:-1])} and {left[-1]}"
    return f"Model budget left: {listed}; the run ends when one runs out."
