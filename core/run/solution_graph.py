"""The solution graph a search agent keeps in its state (`state_dict()["graph"]`), as the report and the viewer read
it. The convention (CONTRIBUTING, "Agents that search"): `{"direction": "higher"|"lower", "nodes": [{"id",
"parents", "operator", "status", "fitness", "plan", ...}], "best": id | null}`; extra node fields are ignored.
Which node is best is the agent's call (its own ranking, ties and all), recorded in `best`: the report shows that
pick and never ranks nodes itself."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

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
    best_id: int | None = Field(default=None, alias="best")

    def best(self) -> GraphNode | None:
        """The node the agent named best, None when it named none (or a node the graph does not hold)."""
        return next((n for n in self.nodes if n.id == self.best_id), None)

    def payload(self) -> dict[str, Any]:
        best = self.best()
        return {"direction": self.direction, "best": best.id if best else None, "nodes": self.rows()}

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
