"""The solution graph a search agent keeps in its state (`state_dict()["graph"]`), as the report and the viewer read
it. The convention (CONTRIBUTING, "Agents that search"): `{"direction": "higher"|"lower", "nodes": [{"id",
"parents", "operator", "status", "fitness", "plan", ...}]}`; extra node fields are ignored."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from mlab.core.models import Trace

MAX_PLAN_CHARS = 300  # a node's plan as shown: the model's words, clipped (traces are read as untrusted)


class GraphNode(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: int
    parents: list[int] = []
    operator: str
    status: str
    fitness: float | None = None
    plan: str = ""
    error: str = ""


class SolutionGraph(BaseModel):
    model_config = ConfigDict(extra="ignore")

    direction: Literal["higher", "lower"]
    nodes: list[GraphNode]

    def best(self) -> GraphNode | None:
        """The ok node with the best fitness; ties go to the earlier node (as the search agent picks it)."""
        scored = [n for n in self.nodes if n.status == "ok" and n.fitness is not None]
        if not scored:
            return None
        sign = 1.0 if self.direction == "higher" else -1.0
        return min(scored, key=lambda n: (-sign * float(n.fitness or 0.0), n.id))

    def payload(self) -> dict[str, Any]:
        return {"direction": self.direction, "nodes": self.rows()}

    def rows(self) -> list[dict[str, Any]]:
        """One dict per node, the best marked: what the report's table and the viewer's panel show."""
        best = self.best()
        return [{"node": n.id, "parents": ",".join(map(str, n.parents)) or "-", "operator": n.operator,
                 "status": n.status, "fitness": n.fitness, "best": best is not None and n.id == best.id,
                 "plan": (n.plan if n.status not in ("buggy", "timeout") or not n.error
                          else f"{n.plan} [{n.error}]")[:MAX_PLAN_CHARS]} for n in self.nodes]


def graph_in(agent_state: Any) -> SolutionGraph | None:
    """The graph an agent state holds, None when it holds none (or one not in the convention's shape)."""
    if not isinstance(agent_state, dict) or not isinstance(agent_state.get("graph"), dict):
        return None
    try:
        return SolutionGraph.model_validate(agent_state["graph"])
    except ValidationError:
        return None


def final_graph(trace: Trace) -> SolutionGraph | None:
    """The graph as the run left it: from the last step whose agent state holds one."""
    for step in reversed(trace.steps):
        graph = graph_in(step.agent_state)
        if graph is not None:
            return graph
    return None


def graph_payload(trace: Trace) -> dict[str, Any] | None:
    """The final graph as the report's JSON and the viewer's page get it: direction and one row per node."""
    graph = final_graph(trace)
    return None if graph is None else graph.payload()
