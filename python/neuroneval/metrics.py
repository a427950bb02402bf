"""Every NeuronEval metric as a function, plus drop-in ROC AUC and average precision.

Each metric takes activations (N, K) and concepts (N, T) and returns a float64 (K, T)
array, or (M,) when `pairs` lists (unit, concept) indices. Only the parameters a metric
uses are accepted: `alpha` (binarisation), `lam` (wpmi), `k`/`alpha`/`seed` (top-random).

Examples
--------
>>> import numpy as np
>>> from neuroneval import metrics
>>> a = np.array([[0.9, 0.1], [0.8, 0.2], [0.1, 0.9], [0.2, 0.7]])
>>> c = np.array([[1.0], [1.0], [0.0], [0.0]])
>>> metrics.correlation(a, c).round(3)
array([[ 0.99 ],
       [-0.972]])
>>> metrics.iou(a, c, alpha=0.5)
array([[1.],
       [0.]])
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from . import _core
from ._coerce import _as_array, as_matrix, is_torch_tensor
from ._registry import METRICS, MetricInfo
from ._score import compute
from .errors import ShapeError
from .options import SCORE_OPTIONS

Array = npt.NDArray[np.float64]

__all__ = [
    *METRICS,
    "roc_auc_score",
    "average_precision_score",
    "roc_auc_score_columns",
    "average_precision_score_columns",
]


class MetricFunction(Protocol):
    """A metric of `neuroneval.METRICS` as a function: `metrics.<name>(activations, concepts,
    *, <its parameters>, pairs=None)`."""

    __name__: str

    def __call__(self, activations: Any, concepts: Any, *, pairs: Any = None, **params: Any) -> Array: ...


def _declared(name: str, keyword: str) -> tuple[str, Any, str, str]:
    """A metric's parameter `name`, which is `compute`'s `keyword`: (name, default, keyword, doc),
    the default and doc from the core's declaration (`SCORE_OPTIONS`)."""
    option = SCORE_OPTIONS[keyword]
    return name, option.default, keyword, option.help_text() + "."


#: Each parameter a metric may take: (name, default, the `compute` keyword, its doc).
_ALPHA = _declared("alpha", "alpha")
_LAMBDA = _declared("lam", "lam")
# The top-random metrics call their top fraction `alpha`, as the NeuronEval reference does.
_SAMPLING = (_declared("alpha", "top_alpha"), _declared("k", "k"), _declared("seed", "seed"))


def _parameters(info: MetricInfo) -> tuple[tuple[str, Any, str, str], ...]:
    """The parameters a metric takes, from its facts (`MetricInfo`)."""
    if info.uses_sampling:
        return _SAMPLING
    return ((_ALPHA,) if info.uses_alpha else ()) + ((_LAMBDA,) if info.uses_lambda else ())


def _doc(info: MetricInfo, parameters: tuple[tuple[str, Any, str, str], ...]) -> str:
    rng = "data-dependent" if info.value_range is None else f"[{info.value_range[0]:g}, {info.value_range[1]:g}]"
    verdict = "passes" if info.passes_sanity else "fails"
    params = "".join(f"{name} : {type(default).__name__}\n    {doc}\n" for name, default, _, doc in parameters)
    return (
        f"{info.description}.\n\nRange {rng}; the NeuronEval sanity checks: {verdict}.\n\n"
        f"Parameters\n----------\nactivations : array_like, shape (N, K)\n"
        f"concepts : array_like, shape (N, T), values in [0, 1]\n{params}"
        f"pairs : array_like, shape (M, 2), optional\n    Score only these (unit, concept) pairs.\n\n"
        f"Returns\n-------\nndarray of float64, shape (K, T), or (M,) with pairs. NaN where undefined.\n"
    )


def _metric(info: MetricInfo) -> MetricFunction:
    """The function of one metric, taking only the parameters its facts say it uses."""
    name, parameters = info.name, _parameters(info)
    defaults = {p[0]: p[1] for p in parameters}
    keywords = {p[0]: p[2] for p in parameters}

    def metric(activations: Any, concepts: Any, *, pairs: Any = None, **params: Any) -> Array:
        for key in params:
            if key not in keywords:
                raise TypeError(f"{name}() got an unexpected keyword argument {key!r}")
        given = {keywords[key]: params.get(key, default) for key, default in defaults.items()}
        return compute(activations, concepts, [name], pairs=pairs, **given)[name]

    keyword = inspect.Parameter.KEYWORD_ONLY
    positional = inspect.Parameter.POSITIONAL_OR_KEYWORD
    metric.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter("activations", positional, annotation=Any),
            inspect.Parameter("concepts", positional, annotation=Any),
            *(inspect.Parameter(p[0], keyword, default=p[1], annotation=type(p[1])) for p in parameters),
            inspect.Parameter("pairs", keyword, default=None, annotation=Any),
        ],
        return_annotation=Array,
    )
    metric.__name__ = metric.__qualname__ = name
    metric.__module__ = __name__
    metric.__doc__ = _doc(info, parameters)
    return metric


# One function per metric, generated from the core's facts: `metrics.recall`, `metrics.wpmi`, ...
globals().update({info.name: _metric(info) for info in METRICS.values()})

if TYPE_CHECKING:

    def __getattr__(name: str) -> MetricFunction: ...


def _as_column(x: Any) -> Any:
    """A 1-D vector as an (N, 1) column; anything else unchanged."""
    arr = x if is_torch_tensor(x) else _as_array(x, "the vectors")
    return arr[:, None] if arr.ndim == 1 else arr


def _rank_statistic(statistic: str, y_true: Any, y_score: Any) -> Array:
    out: Array = _core.rank_statistic_columns(statistic, as_matrix(y_true, "y_true"), as_matrix(y_score, "y_score"))
    return out


def _single(statistic: str, y_true: Any, y_score: Any) -> float:
    y, s = _as_column(y_true), _as_column(y_score)
    if y.shape[1:] != (1,) or s.shape[1:] != (1,):
        raise ShapeError(f"expected 1-D y_true and y_score; got shapes {tuple(y.shape)} and {tuple(s.shape)}")
    return float(_rank_statistic(statistic, y, s)[0])


def roc_auc_score(y_true: Any, y_score: Any) -> float:
    """ROC AUC of binary labels, equal to `sklearn.metrics.roc_auc_score` (ties count 1/2).

    NaN (where scikit-learn raises) when `y_true` has a single class.

    Examples
    --------
    >>> from neuroneval.metrics import roc_auc_score
    >>> roc_auc_score([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8])
    0.75
    """
    return _single("roc_auc", y_true, y_score)


def average_precision_score(y_true: Any, y_score: Any) -> float:
    """Average precision of binary labels, equal to `sklearn.metrics.average_precision_score`.

    Tied scores form one threshold. NaN when there is no positive label.

    Examples
    --------
    >>> from neuroneval.metrics import average_precision_score
    >>> round(average_precision_score([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]), 6)
    0.833333
    """
    return _single("average_precision", y_true, y_score)


def roc_auc_score_columns(y_true: Any, y_score: Any) -> Array:
    """`roc_auc_score` of each column pair of two (N, M) arrays, in parallel: shape (M,)."""
    return _rank_statistic("roc_auc", y_true, y_score)


def average_precision_score_columns(y_true: Any, y_score: Any) -> Array:
    """`average_precision_score` of each column pair of two (N, M) arrays: shape (M,)."""
    return _rank_statistic("average_precision", y_true, y_score)
