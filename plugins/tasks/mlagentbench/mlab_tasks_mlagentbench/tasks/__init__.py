"""Every task of the pack, as instances; importing this stays light (no pandas, numpy or torch)."""
from __future__ import annotations

from .tabular import HousePrice, SpaceshipTitanic

TASK_CLASSES = [HousePrice, SpaceshipTitanic]


def all_tasks():
    return [cls() for cls in TASK_CLASSES]
