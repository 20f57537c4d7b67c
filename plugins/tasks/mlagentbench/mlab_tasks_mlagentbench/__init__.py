"""mlab task pack: the MLAgentBench tasks (13 ML research tasks and 2 tool-building tasks).

The tasks are registered by name: `mlab list-plugins` imports this module, and a task's module (under tasks/) is
imported when the task is used.
"""
from __future__ import annotations

from mlab.core import Lazy, hookimpl

TASKS = (
    Lazy("mlagentbench/babylm", "mlab_tasks_mlagentbench.tasks.babylm:Babylm",
         "Train a language model from scratch on BabyLM 10M words; test perplexity, lower is better"),
    Lazy("mlagentbench/babylm-cpu", "mlab_tasks_mlagentbench.tasks.babylm:BabylmCpu",
         "babylm scaled for a CPU: a small gpt2 on 2M tokens, perplexity on 100k test tokens"),
    Lazy("mlagentbench/bibtex-generation", "mlab_tasks_mlagentbench.tasks.tools:BibtexGeneration",
         "Build an LLM tool that adds citations and BibTeX to a paragraph; the scorer runs it on hidden paragraphs, "
         "higher is better; needs an LLM endpoint at run time"),
    Lazy("mlagentbench/cifar10", "mlab_tasks_mlagentbench.tasks.cifar10:Cifar10",
         "Improve a small CNN on CIFAR-10 (official split); accuracy, higher is better"),
    Lazy("mlagentbench/clrs", "mlab_tasks_mlagentbench.tasks.clrs:Clrs",
         "Improve a triplet-GMPNN on CLRS floyd_warshall (PyTorch); test pointer accuracy, higher is better"),
    Lazy("mlagentbench/fathomnet", "mlab_tasks_mlagentbench.tasks.fathomnet:Fathomnet",
         "Label the animals in FathomNet sea-floor images (290 categories); MAP@20, higher is better"),
    Lazy("mlagentbench/fathomnet-cpu", "mlab_tasks_mlagentbench.tasks.fathomnet:FathomnetCpu",
         "fathomnet scaled for a CPU: 96-pixel images in the starter; MAP@20, higher is better"),
    Lazy("mlagentbench/feedback", "mlab_tasks_mlagentbench.tasks.feedback:Feedback",
         "Score learners' essays on six measures (Kaggle ELLIPSE); MCRMSE, lower is better"),
    Lazy("mlagentbench/house-price", "mlab_tasks_mlagentbench.tasks.tabular:HousePrice",
         "Predict Ames house sale prices (Kaggle home-data-for-ml-course); MAE, lower is better"),
    Lazy("mlagentbench/identify-contrails", "mlab_tasks_mlagentbench.tasks.contrails:IdentifyContrails",
         "Segment aviation contrails in GOES-16 infrared images; mean Dice, higher is better"),
    Lazy("mlagentbench/identify-contrails-cpu", "mlab_tasks_mlagentbench.tasks.contrails:IdentifyContrailsCpu",
         "identify-contrails scaled for a CPU: 2,000 training and 200 test records; mean Dice"),
    Lazy("mlagentbench/imdb", "mlab_tasks_mlagentbench.tasks.imdb:Imdb",
         "Fine-tune DistilBERT on IMDb review sentiment; accuracy, higher is better"),
    Lazy("mlagentbench/imdb-cpu", "mlab_tasks_mlagentbench.tasks.imdb:ImdbCpu",
         "imdb scaled for a CPU: a small fine-tuning budget; accuracy, higher is better"),
    Lazy("mlagentbench/literature-review-tool", "mlab_tasks_mlagentbench.tasks.tools:LiteratureReviewTool",
         "Build an LLM tool that writes a literature review; the scorer runs it on hidden queries, higher is better; "
         "needs an LLM endpoint at run time"),
    Lazy("mlagentbench/llama-inference", "mlab_tasks_mlagentbench.tasks.llama:LlamaInference",
         "Speed up LLaMA-7B token generation with accelerate; generation time relative to the starter's, lower is "
         "better"),
    Lazy("mlagentbench/ogbn-arxiv", "mlab_tasks_mlagentbench.tasks.ogbn_arxiv:OgbnArxiv",
         "Improve a weak MLP on OGB ogbn-arxiv node classification; test accuracy, higher is better"),
    Lazy("mlagentbench/parkinsons", "mlab_tasks_mlagentbench.tasks.parkinsons:Parkinsons",
         "Forecast Parkinson's UPDRS scores (Kaggle AMP-PD); SMAPE+1, lower is better"),
    Lazy("mlagentbench/spaceship-titanic", "mlab_tasks_mlagentbench.tasks.tabular:SpaceshipTitanic",
         "Predict which passengers were Transported (Kaggle spaceship-titanic); accuracy"),
    Lazy("mlagentbench/vectorization", "mlab_tasks_mlagentbench.tasks.vectorization:Vectorization",
         "Vectorise a numpy Conv2D forward pass; run time in seconds, lower is better"),
)


@hookimpl
def register_tasks(register):
    for task in TASKS:
        register(task)
