"""Every task of the pack, as instances; importing this stays light (no pandas, numpy or torch)."""
from __future__ import annotations

from .cifar10 import Cifar10
from .feedback import Feedback
from .ogbn_arxiv import OgbnArxiv
from .parkinsons import Parkinsons
from .tabular import HousePrice, SpaceshipTitanic
from .vectorization import Vectorization

TASK_CLASSES = [Cifar10, Feedback, HousePrice, OgbnArxiv, Parkinsons, SpaceshipTitanic, Vectorization]


def all_tasks():
    return [cls() for cls in TASK_CLASSES]
