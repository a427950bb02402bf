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

from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from . import _core
from ._coerce import as_matrix, is_torch_tensor
from ._registry import METRICS
from ._score import DEFAULT_ALPHA, DEFAULT_TOP_RANDOM_ALPHA, compute
from .errors import ShapeError

Array = npt.NDArray[np.float64]

__all__ = [
    *METRICS,
    "roc_auc_score",
    "average_precision_score",
    "roc_auc_score_columns",
    "average_precision_score_columns",
]


class PlainMetric(Protocol):
    def __call__(self, activations: Any, concepts: Any, *, pairs: Any = None) -> Array: ...


class AlphaMetric(Protocol):
    def __call__(
        self, activations: Any, concepts: Any, *, alpha: float = DEFAULT_ALPHA, pairs: Any = None
    ) -> Array: ...


class WpmiMetric(Protocol):
    def __call__(
        self,
        activations: Any,
        concepts: Any,
        *,
        alpha: float = DEFAULT_ALPHA,
        lam: float = 1.0,
        pairs: Any = None,
    ) -> Array: ...


class SampledMetric(Protocol):
    def __call__(
        self,
        activations: Any,
        concepts: Any,
        *,
        alpha: float = DEFAULT_TOP_RANDOM_ALPHA,
        k: int = 25,
        seed: int = 0,
        pairs: Any = None,
    ) -> Array: ...


def _doc(name: str, params: str) -> str:
    info = METRICS[name]
    rng = "data-dependent" if info.value_range is None else f"[{info.value_range[0]:g}, {info.value_range[1]:g}]"
    verdict = "passes" if info.passes_sanity else "fails"
    return (
        f"{info.description}.\n\nRange {rng}; the NeuronEval sanity checks: {verdict}.\n\n"
        f"Parameters\n----------\nactivations : array_like, shape (N, K)\n"
        f"concepts : array_like, shape (N, T), values in [0, 1]\n{params}"
        f"pairs : array_like, shape (M, 2), optional\n    Score only these (unit, concept) pairs.\n\n"
        f"Returns\n-------\nndarray of float64, shape (K, T), or (M,) with pairs. NaN where undefined.\n"
    )


def _plain(name: str) -> PlainMetric:
    def metric(activations: Any, concepts: Any, *, pairs: Any = None) -> Array:
        return compute(activations, concepts, [name], pairs=pairs)[name]

    metric.__name__ = metric.__qualname__ = name
    metric.__doc__ = _doc(name, "")
    return metric


def _alpha(name: str) -> AlphaMetric:
    def metric(activations: Any, concepts: Any, *, alpha: float = DEFAULT_ALPHA, pairs: Any = None) -> Array:
        return compute(activations, concepts, [name], alpha=alpha, pairs=pairs)[name]

    metric.__name__ = metric.__qualname__ = name
    metric.__doc__ = _doc(name, "alpha : float\n    Top-alpha fraction that binarises each unit, 0 < alpha <= 1.\n")
    return metric


def _wpmi() -> WpmiMetric:
    def wpmi(
        activations: Any, concepts: Any, *, alpha: float = DEFAULT_ALPHA, lam: float = 1.0, pairs: Any = None
    ) -> Array:
        return compute(activations, concepts, ["wpmi"], alpha=alpha, lam=lam, pairs=pairs)["wpmi"]

    wpmi.__doc__ = _doc(
        "wpmi",
        "alpha : float\n    Top-alpha fraction, 0 < alpha <= 1.\nlam : float\n    Weight of the concept's log mean, >= 0.\n",
    )
    return wpmi


def _sampled(name: str) -> SampledMetric:
    def metric(
        activations: Any,
        concepts: Any,
        *,
        alpha: float = DEFAULT_TOP_RANDOM_ALPHA,
        k: int = 25,
        seed: int = 0,
        pairs: Any = None,
    ) -> Array:
        return compute(activations, concepts, [name], top_alpha=alpha, k=k, seed=seed, pairs=pairs)[name]

    metric.__name__ = metric.__qualname__ = name
    metric.__doc__ = _doc(
        name,
        "alpha : float\n    The top fraction the k top inputs are drawn from.\nk : int\n"
        "    Inputs drawn from the top and from all inputs, each.\nseed : int\n    Seed of the draw (each unit draws its own subset).\n",
    )
    return metric


recall = _alpha("recall")
precision = _alpha("precision")
f1 = _alpha("f1")
iou = _alpha("iou")
accuracy = _alpha("accuracy")
balanced_accuracy = _alpha("balanced_accuracy")
inverse_balanced_accuracy = _alpha("inverse_balanced_accuracy")
auc = _alpha("auc")
inverse_auc = _plain("inverse_auc")
auprc = _alpha("auprc")
inverse_auprc = _plain("inverse_auprc")
correlation = _plain("correlation")
spearman = _plain("spearman")
cosine = _plain("cosine")
wpmi = _wpmi()
mad = _plain("mad")
correlation_top_random = _sampled("correlation_top_random")
spearman_top_random = _sampled("spearman_top_random")
combined_auc = _alpha("combined_auc")
combined_balanced_accuracy = _alpha("combined_balanced_accuracy")
recall_auc = _alpha("recall_auc")
recall_inverse_auc = _alpha("recall_inverse_auc")
precision_balanced_accuracy = _alpha("precision_balanced_accuracy")
precision_inverse_balanced_accuracy = _alpha("precision_inverse_balanced_accuracy")


def _as_column(x: Any) -> Any:
    """A 1-D vector as an (N, 1) column; anything else unchanged."""
    arr = x if is_torch_tensor(x) else np.asarray(x)
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
