"""mlab task pack: the MLAgentBench tasks (13 ML research tasks and 2 tool-building tasks).

The tasks are registered by name: `mlab list-plugins` imports this module, and a task's module (under tasks/) is
imported when the task is used.
"""
from __future__ import annotations

from mlab.core import Lazy, hookimpl

TASKS = (
    Lazy("mlagentbench/babylm", "mlab_tasks_mlagentbench.tasks.babylm:Babylm"),
    Lazy("mlagentbench/babylm-cpu", "mlab_tasks_mlagentbench.tasks.babylm:BabylmCpu"),
    Lazy("mlagentbench/bibtex-generation", "mlab_tasks_mlagentbench.tasks.tools:BibtexGeneration"),
    Lazy("mlagentbench/cifar10", "mlab_tasks_mlagentbench.tasks.cifar10:Cifar10"),
    Lazy("mlagentbench/clrs", "mlab_tasks_mlagentbench.tasks.clrs:Clrs"),
    Lazy("mlagentbench/fathomnet", "mlab_tasks_mlagentbench.tasks.fathomnet:Fathomnet"),
    Lazy("mlagentbench/fathomnet-cpu", "mlab_tasks_mlagentbench.tasks.fathomnet:FathomnetCpu"),
    Lazy("mlagentbench/feedback", "mlab_tasks_mlagentbench.tasks.feedback:Feedback"),
    Lazy("mlagentbench/house-price", "mlab_tasks_mlagentbench.tasks.tabular:HousePrice"),
    Lazy("mlagentbench/identify-contrails", "mlab_tasks_mlagentbench.tasks.contrails:IdentifyContrails"),
    Lazy("mlagentbench/identify-contrails-cpu", "mlab_tasks_mlagentbench.tasks.contrails:IdentifyContrailsCpu"),
    Lazy("mlagentbench/imdb", "mlab_tasks_mlagentbench.tasks.imdb:Imdb"),
    Lazy("mlagentbench/imdb-cpu", "mlab_tasks_mlagentbench.tasks.imdb:ImdbCpu"),
    Lazy("mlagentbench/literature-review-tool", "mlab_tasks_mlagentbench.tasks.tools:LiteratureReviewTool"),
    Lazy("mlagentbench/llama-inference", "mlab_tasks_mlagentbench.tasks.llama:LlamaInference"),
    Lazy("mlagentbench/ogbn-arxiv", "mlab_tasks_mlagentbench.tasks.ogbn_arxiv:OgbnArxiv"),
    Lazy("mlagentbench/parkinsons", "mlab_tasks_mlagentbench.tasks.parkinsons:Parkinsons"),
    Lazy("mlagentbench/spaceship-titanic", "mlab_tasks_mlagentbench.tasks.tabular:SpaceshipTitanic"),
    Lazy("mlagentbench/vectorization", "mlab_tasks_mlagentbench.tasks.vectorization:Vectorization"),
)


@hookimpl
def register_tasks(register):
    for task in TASKS:
        register(task)
