"""Selection policies: given the graph, which operator to apply next and to which nodes.

Each policy is a pure function of the graph, the settings and a random generator seeded from the run's seed and
the graph's size, so a resumed run makes the same choices as one that was never interrupted.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

from .graph import FAILED, Node, Operator, SolutionGraph

TOURNAMENT_SIZE = 2


@dataclass(frozen=True)
class Settings:
    num_drafts: int
    max_debug_depth: int
    exploration_constant: float
    population_size: int


@dataclass(frozen=True)
class Proposal:
    operator: Operator
    parents: tuple[int, ...] = ()


def greedy(graph: SolutionGraph, settings: Settings, rng: random.Random) -> Proposal:
    """AIDE-like: draft first; then fix the newest failed leaf while its debug chain is short enough; otherwise
    improve the best node (draft again while nothing works)."""
    if len(graph.drafts()) < settings.num_drafts:
        return Proposal("draft")
    debuggable = graph.debuggable(settings.max_debug_depth)
    if debuggable:
        return Proposal("debug", (debuggable[0].id,))
    best = graph.best()
    return Proposal("improve", (best.id,)) if best else Proposal("draft")


def mcts(graph: SolutionGraph, settings: Settings, rng: random.Random) -> Proposal:
    """UCT over the tree whose root's children are the drafts. A node's value is the mean reward (fitness scaled
    among the ok nodes) of the evaluated nodes in its subtree and its visit count their number. The root takes
    num_drafts drafts; an ok node is widened progressively (at most ceil(sqrt(visits)) children, each made by
    improve); a failed node gets one debug child while its debug chain is short enough."""
    subtree: dict[int, list[Node]] = {}
    for node in reversed(graph.nodes):  # children come after their parent
        subtree[node.id] = [node] + [d for child in graph.children(node.id) for d in subtree[child.id]]

    def visits(nodes: list[Node]) -> int:
        return sum(n.evaluated for n in nodes)

    def expandable(node: Node) -> bool:
        children = graph.children(node.id)
        if node.status in FAILED:
            return not children and node.debug_depth < settings.max_debug_depth
        return node.status == "ok" and len(children) < math.ceil(math.sqrt(visits(subtree[node.id])))

    def open_below(node: Node) -> bool:
        return any(expandable(n) for n in subtree[node.id])

    def uct(node: Node, parent_visits: int) -> float:
        evaluated = [n for n in subtree[node.id] if n.evaluated]
        if not evaluated:
            return math.inf
        mean = sum(graph.reward(n) for n in evaluated) / len(evaluated)
        return mean + settings.exploration_constant * math.sqrt(math.log(max(parent_visits, 1)) / len(evaluated))

    drafts = graph.drafts()
    if len(drafts) < settings.num_drafts:
        return Proposal("draft")
    parent_visits, choices = visits(graph.nodes), [d for d in drafts if open_below(d)]
    while choices:
        node = max(choices, key=lambda n: (uct(n, parent_visits), -n.id))
        if expandable(node):
            return Proposal("debug" if node.status in FAILED else "improve", (node.id,))
        parent_visits = visits(subtree[node.id])
        choices = [c for c in graph.children(node.id) if open_below(c)]
    return Proposal("draft")  # nothing left to expand: widen the root


def evolutionary(graph: SolutionGraph, settings: Settings, rng: random.Random) -> Proposal:
    """A population of the population_size best ok nodes. The first population_size nodes are drafts; failed
    leaves are debugged while their chain is short enough; then offspring alternate between crossover of two
    tournament-selected parents and improvement of one."""
    if len(graph.drafts()) < settings.population_size:
        return Proposal("draft")
    debuggable = graph.debuggable(settings.max_debug_depth)
    if debuggable:
        return Proposal("debug", (debuggable[0].id,))
    population = graph.ranked()[: settings.population_size]
    if not population:
        return Proposal("draft")
    offspring = sum(n.operator in ("improve", "crossover") for n in graph.nodes)
    first = _tournament(graph, population, rng)
    if offspring % 2 == 0 and len(population) >= 2:
        second = _tournament(graph, [n for n in population if n.id != first.id], rng)
        return Proposal("crossover", (first.id, second.id))
    return Proposal("improve", (first.id,))


def _tournament(graph: SolutionGraph, population: list[Node], rng: random.Random) -> Node:
    """The best of a few members drawn at random."""
    entrants = rng.sample(population, min(TOURNAMENT_SIZE, len(population)))
    return max(entrants, key=lambda n: (graph.key(n), -n.id))


POLICIES = {"greedy": greedy, "mcts": mcts, "evolutionary": evolutionary}
