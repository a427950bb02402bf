"""Meta-evaluation 2 (SPEC section 5): how well a metric finds known correct concepts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _core
from .errors import LabelError, ShapeError

__all__ = ["MetaAuprc", "meta_auprc", "truth_matrix"]


@dataclass(frozen=True)
class MetaAuprc:
    """Pooled meta-AUPRC, with the number of NaN scores met (ranked below every number)."""

    value: float
    nan_scores: int
    pairs: int

    def __float__(self) -> float:
        return self.value


def truth_matrix(truth: Any, shape: tuple[int, int]) -> np.ndarray:
    """A (K, T) boolean matrix from either itself or one correct concept index per unit."""
    t = np.asarray(truth)
    if t.shape == shape:
        if t.dtype != bool and not np.isin(t, (0, 1)).all():
            raise LabelError("a truth matrix must hold 0/1 or bool values")
        return t.astype(bool)
    if t.ndim == 1 and t.shape[0] == shape[0]:
        if t.dtype.kind not in "iu" or t.min(initial=0) < 0 or t.max(initial=0) >= shape[1]:
            raise LabelError(f"truth must hold concept indices in [0, {shape[1]})")
        y = np.zeros(shape, dtype=bool)
        y[np.arange(shape[0]), t] = True
        return y
    raise ShapeError(f"truth must have shape {shape} or ({shape[0]},); got {t.shape}")


def meta_auprc(scores: Any, truth: Any) -> MetaAuprc:
    """Average precision of all (unit, concept) scores against "t is unit k's concept".

    Pooled over all pairs (not averaged per unit); NaN scores rank below every number.

    Parameters
    ----------
    scores : array_like, shape (K, T)
    truth : array_like, shape (K, T) of bool, or (K,) of concept indices

    Examples
    --------
    >>> import numpy as np
    >>> from neuroneval import meta_auprc
    >>> s = np.array([[0.9, 0.2], [np.nan, 0.7]])
    >>> meta_auprc(s, np.array([0, 1]))
    MetaAuprc(value=1.0, nan_scores=1, pairs=4)
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2:
        raise ShapeError(f"scores must be 2-D (units, concepts); got shape {s.shape}")
    y = truth_matrix(truth, s.shape)
    nan = np.isnan(s)
    # AP depends only on the order of the scores: rank them (ties kept), NaN below every rank.
    _, order = np.unique(np.where(nan, -np.inf, s).reshape(-1), return_inverse=True)
    ranks = order.astype(np.float64).reshape(-1, 1)
    value = float(_core.rank_statistic_columns("average_precision", y.reshape(-1, 1).astype(np.float64), ranks)[0])
    return MetaAuprc(value=value, nan_scores=int(nan.sum()), pairs=int(s.size))
