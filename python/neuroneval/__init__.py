"""neuroneval: is this explanation of a neuron any good? Exact NeuronEval metrics, fast.

>>> import numpy as np, neuroneval
>>> acts = np.array([[0.9, 0.0], [0.7, 0.1], [0.1, 0.8], [0.0, 0.9]])
>>> dogs = np.array([[1.0], [1.0], [0.0], [0.0]])
>>> table = neuroneval.score(acts, dogs, ["correlation", "auprc"], alpha=0.5, concept_names=["dogs"])
>>> table["correlation"].round(3).to_list()
[0.978, -0.992]
"""

from __future__ import annotations

import importlib

# Not typing's: importing typing takes longer than all of this package's start, and the command
# line answers Ctrl-C only once its handler is in place (type checkers read this name as theirs).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

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

# Each public name and where it lives, imported on first use: `import neuroneval` costs nothing,
# so the command line answers Ctrl-C from its first instant (its own imports are inside its handler).
_HOMES: dict[str, tuple[str, str | None]] = {
    **{m: (f".{m}", None) for m in ("compare", "distributed", "errors", "interop", "meta", "metrics", "sanity")},
    "evaluate": ("._evaluate", "evaluate"),
    "METRICS": ("._registry", "METRICS"),
    "PASSING_METRICS": ("._registry", "PASSING_METRICS"),
    "MetricInfo": ("._registry", "MetricInfo"),
    "compute": ("._score", "compute"),
    "score": ("._score", "score"),
    "NeuronEvalError": (".errors", "NeuronEvalError"),
    "meta_auprc": (".meta", "meta_auprc"),
    "ScoreParams": (".params", "ScoreParams"),
}


#: Modules of the library floor that `neuroneval.<name>` reaches without an import (as it did when
#: `import neuroneval` loaded them all); the tools (`cli`, `report`, `torch`) are imported by name.
_LIBRARY = ("_core", "crowd", "files", "indices", "label", "params", "progress", "sources")


def __getattr__(name: str) -> Any:
    if name in _LIBRARY:
        return importlib.import_module(f".{name}", __name__)
    if name not in _HOMES:
        raise AttributeError(f"module 'neuroneval' has no attribute {name!r}")
    module, attribute = _HOMES[name]
    value = importlib.import_module(module, __name__)
    if attribute is not None:
        value = getattr(value, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__version__ = "0.1.0"


def num_threads() -> int:
    """Threads the next call will use: `NEURONEVAL_NUM_THREADS` (capped at the CPU count,
    with a `RuntimeWarning` when it asks for more), else the CPU count."""
    from . import _core

    return int(_core.num_threads())
