"""neuroneval: is this explanation of a neuron any good? Exact NeuronEval metrics, fast.

>>> import numpy as np, neuroneval
>>> acts = np.array([[0.9, 0.0], [0.7, 0.1], [0.1, 0.8], [0.0, 0.9]])
>>> dogs = np.array([[1.0], [1.0], [0.0], [0.0]])
>>> table = neuroneval.score(acts, dogs, ["correlation", "auprc"], alpha=0.5, concept_names=["dogs"])
>>> table["correlation"].round(3).to_list()
[0.978, -0.992]
"""

from __future__ import annotations

from . import compare, distributed, errors, interop, meta, metrics, sanity
from ._evaluate import evaluate
from ._registry import METRICS, PASSING_METRICS, MetricInfo
from ._score import compute, score
from .errors import NeuronEvalError
from .meta import meta_auprc
from .params import ScoreParams

__all__ = [
    "METRICS",
    "PASSING_METRICS",
    "MetricInfo",
    "NeuronEvalError",
    "ScoreParams",
    "compare",
    "compute",
    "distributed",
    "errors",
    "evaluate",
    "interop",
    "meta",
    "meta_auprc",
    "metrics",
    "num_threads",
    "sanity",
    "score",
]
__version__ = "0.1.0"


def num_threads() -> int:
    """Threads the next call will use: `NEURONEVAL_NUM_THREADS` (capped at the CPU count,
    with a `RuntimeWarning` when it asks for more), else the CPU count."""
    from . import _core

    return int(_core.num_threads())
