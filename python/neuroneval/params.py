"""The scoring parameters and their defaults: the one typed door to the core.

`ScoreParams` (alpha, lam, k, top_alpha, seed) is declared (default, domain, help) and
validated in exactly one place, the core's `Params::RULES`; everything that scores (`compute`,
`score`, `evaluate`, `distributed`, `sanity`, `crowd`, the CLI) builds one and hands it over
unchanged, and `neuroneval.options.SCORE_OPTIONS` turns the declaration into the CLI's flags.

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

from ._core import ScoreParams, check_arguments
from ._registry import METRICS
from .errors import UnknownMetricError

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
    wrong = [n for n in names if not isinstance(n, str)]
    if wrong:
        raise UnknownMetricError(f"unknown metric {wrong[0]!r}: metric names are str")
    check_arguments(names)  # the core's rules: at least one name, each known
    return names
