"""Every task of the pack, as instances; importing this stays light (no pandas, numpy or torch)."""
from __future__ import annotations

from ..base import MLAgentBenchTask
from .babylm import Babylm, BabylmCpu
from .cifar10 import Cifar10
from .clrs import Clrs
from .contrails import IdentifyContrails, IdentifyContrailsCpu
from .fathomnet import Fathomnet, FathomnetCpu
from .feedback import Feedback
from .imdb import Imdb, ImdbCpu
from .llama import LlamaInference
from .ogbn_arxiv import OgbnArxiv
from .parkinsons import Parkinsons
from .tabular import HousePrice, SpaceshipTitanic
from .tools import BibtexGeneration, LiteratureReviewTool
from .vectorization import Vectorization

TASK_CLASSES: list[type[MLAgentBenchTask]] = [
    Babylm, BabylmCpu, BibtexGeneration, Cifar10, Clrs, Fathomnet, FathomnetCpu, Feedback, HousePrice,
    IdentifyContrails, IdentifyContrailsCpu, Imdb, ImdbCpu, LiteratureReviewTool, LlamaInference, OgbnArxiv,
    Parkinsons, SpaceshipTitanic, Vectorization,
]


def all_tasks() -> list[MLAgentBenchTask]:
    return [cls() for cls in TASK_CLASSES]
