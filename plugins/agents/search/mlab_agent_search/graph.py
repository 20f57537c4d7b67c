"""The solution graph: every node is one whole solution script, how it was made, and how its run went."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Operator = Literal["draft", "improve", "debug", "crossover"]
Status = Literal["pending", "ok", "buggy", "timeout"]
Direction = Literal["higher", "lower"]
FAILED: tuple[Status, ...] = ("buggy", "timeout")


@dataclass
class Node:
    id: int
    operator: Operator
    parents: list[int]
    file: str  # the node's script in the workspace
    write_step: int  # the step that wrote the script (the trace keeps it, the state does not)
    plan: str = ""  # what the model said it would do (up to prompts.PLAN_CHARS)
    status: Status = "pending"
    fitness: float | None = None  # the harness's validation score, else the metric the script printed (ok nodes)
    error: str = ""  # why a failed node failed, in one line
    run_step: int | None = None  # the step that executed the script
    validate_step: int | None = None  # the step that had the harness score its validation predictions
    debug_depth: int = 0  # how many debug operators in a row produced this node

    @property
    def evaluated(self) -> bool:
        return self.status != "pending"


@dataclass
class SolutionGraph:
    direction: Direction
    nodes: list[Node] = field(default_factory=list)

    def add(self, operator: Operator, parents: list[int], file: str, write_step: int, plan: str) -> Node:
        depth = self.node(parents[0]).debug_depth + 1 if operator == "debug" else 0
        node = Node(id=len(self.nodes) + 1, operator=operator, parents=list(parents), file=file,
                    write_step=write_step, plan=plan, debug_depth=depth)
        self.nodes.append(node)
        return node

    def node(self, node_id: int) -> Node:
        return self.nodes[node_id - 1]

    def children(self, node_id: int) -> list[Node]:
        return [n for n in self.nodes if node_id in n.parents]

    def drafts(self) -> list[Node]:
        return [n for n in self.nodes if not n.parents]

    def ok(self) -> list[Node]:
        return [n for n in self.nodes if n.status == "ok"]

    def key(self, node: Node) -> float:
        """A number that is larger for a better node, whichever way the metric points."""
        assert node.fitness is not None
        return node.fitness if self.direction == "higher" else -node.fitness

    def ranked(self) -> list[Node]:
        """The ok nodes, best first; ties go to the earlier node."""
        return sorted(self.ok(), key=lambda n: (-self.key(n), n.id))

    def best(self) -> Node | None:
        ranked = self.ranked()
        return ranked[0] if ranked else None

    def debuggable(self, max_debug_depth: int) -> list[Node]:
        """Failed leaves whose chain of debugging may go on, newest first."""
        return [n for n in reversed(self.nodes) if n.status in FAILED and not self.children(n.id)
                and n.debug_depth < max_debug_depth]

    def reward(self, node: Node) -> float:
        """The node's fitness scaled to [0, 1] among the ok nodes so far (0 for a failed node)."""
        if node.status != "ok":
            return 0.0
        keys = [self.key(n) for n in self.ok()]
        low, high = min(keys), max(keys)
        return 1.0 if high == low else (self.key(node) - low) / (high - low)

    # ---- for people and the trace ---------------------------------------------------------------------
    def table(self) -> str:
        """One line per node: id, parents, operator, status, fitness and plan."""
        best = self.best()
        lines = [f"{'node':>4}  {'parents':<8} {'operator':<9} {'status':<7} {'fitness':>10}  plan"]
        for n in self.nodes:
            fitness = f"{n.fitness:.6g}" if n.fitness is not None else "-"
            mark = " *" if best is not None and n.id == best.id else ""
            head = " ".join(n.plan.split())  # one line per node
            note = head if n.status != "buggy" and n.status != "timeout" else f"{head} [{n.error}]"
            lines.append(f"{n.id:>4}  {','.join(map(str, n.parents)) or '-':<8} {n.operator:<9} {n.status:<7} "
                         f"{fitness:>10}{mark}  {note[:120]}")
        lines.append(f"metric: {self.direction} is better; * marks the best node")
        return "\n".join(lines)

    def state(self) -> dict[str, Any]:
        """The graph as the agent's state keeps it; `best` is read by `mlab report` and `mlab view`."""
        best = self.best()
        return {"direction": self.direction, "best": best.id if best else None,
                "nodes": [asdict(n) for n in self.nodes]}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> SolutionGraph:
        return cls(direction=state["direction"], nodes=[Node(**n) for n in state.get("nodes", [])])
