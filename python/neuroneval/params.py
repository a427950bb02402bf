"""The scoring parameters and their defaults: the one typed door to the core.

`ScoreParams` (alpha, lam, k, top_alpha, seed) is validated in exactly one place, the core's
`Params::validate`; everything that scores (`compute`, `score`, `evaluate`, `distributed`,
`sanity`, `crowd`, the CLI) builds one and hands it over unchanged.

>>> p = ScoreParams(alpha=0.01)
>>> p
ScoreParams(alpha=0.01, lam=1.0, k=25, top_alpha=0.002, seed=0)
>>> p.replace(seed=3).to_dict()
{'alpha': 0.01, 'lam': 1.0, 'k': 25, 'top_alpha': 0.002, 'seed': 3}
>>> ScoreParams(k=0)
Traceback (most recent call last):
...
neuroneval.errors.ParameterError: invalid parameter k = 0: k must be an integer in [1, 2^64)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ._core import ScoreParams
from ._registry import METRICS
from .errors import EmptyInputError, UnknownMetricError

__all__ = ["DEFAULT_ALPHA", "DEFAULT_TOP_RANDOM_ALPHA", "ScoreParams", "metric_list"]

_DEFAULTS = ScoreParams()
DEFAULT_ALPHA: float = _DEFAULTS.alpha
DEFAULT_TOP_RANDOM_ALPHA: float = _DEFAULTS.top_alpha


def metric_list(metrics: str | Sequence[str] | None) -> list[str]:
    """The requested metric names, checked: all of `neuroneval.METRICS` when `metrics` is None.

    Examples
    --------
    >>> metric_list("auprc")
    ['auprc']
    >>> len(metric_list(None)) == len(METRICS)
    True
    """
    if metrics is None:
        return list(METRICS)
    if isinstance(metrics, str):
        names = [metrics]
    elif isinstance(metrics, bytes) or not isinstance(metrics, Iterable):
        raise UnknownMetricError(f"metrics must be a metric name or a sequence of names; got {metrics!r}")
    else:
        try:
            names = list(metrics)
        except TypeError:  # a 0-d array claims to be iterable
            raise UnknownMetricError(f"metrics must be a metric name or a sequence of names; got {metrics!r}") from None
    if not names:
        raise EmptyInputError("no metric was requested")
    for n in names:
        if not isinstance(n, str) or n not in METRICS:
            raise UnknownMetricError(f"unknown metric {n!r}; known metrics: {', '.join(METRICS)}")
    return names
