"""BRAgg's posterior (SPEC section 6): the probability that a concept is present given an
input's votes, under raters wrong with rate eta and a prior; the one home of its formula, which
aggregation and sequential rating share."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._coerce import as_counts, as_reals
from ..errors import ParameterError, ShapeError
from .sampling import ETA, PRIOR_PROBABILITY, Array, _check_each

__all__ = ["bragg_posterior"]


def bragg_posterior(positive: Any, votes: Any, eta: Any = None, prior: Any = None) -> Array:
    """BRAgg's posterior that the concept is present, from `positive` "present" votes of `votes`.

    logit(c) = logit(prior) + (2 positive - votes) log((1 - eta) / eta) (SPEC section 6).
    Arrays broadcast.

    Parameters
    ----------
    positive, votes : int or array_like of int
        Vote counts: integers (not bools, not floats, however whole) with
        0 <= positive <= votes. No vote at all (votes = 0) leaves the prior.
    eta : float or array_like
        Raters' error rate, each in `ETA`'s domain (None: its default).
    prior : float or array_like
        The prior that the concept is present, each in `PRIOR_PROBABILITY`'s domain (None: its default).

    Examples
    --------
    >>> bragg_posterior([0, 1, 2, 3], 3).round(6).tolist()
    [0.001401, 0.015478, 0.149805, 0.663849]
    >>> bragg_posterior(4, 3)
    Traceback (most recent call last):
    ...
    neuroneval.errors.ParameterError: positive must not exceed votes; found positive 4 of votes 3
    """
    return _posterior(*_vote_counts(positive, votes, eta, prior))


def _vote_counts(positive: Any, votes: Any, eta: Any, prior: Any) -> tuple[Array, Array, Array, Array]:
    """Vote counts with their raters' error rates and priors, each checked (None: the declared
    default), broadcasting together, and no more "present" votes than votes."""
    pos = as_counts(positive, "positive")
    m = as_counts(votes, "votes")
    e = as_reals(ETA.default if eta is None else eta, "eta")
    p = as_reals(PRIOR_PROBABILITY.default if prior is None else prior, "prior")
    try:
        np.broadcast_shapes(pos.shape, m.shape, e.shape, p.shape)
    except ValueError as err:
        raise ShapeError(
            f"positive, votes, eta and prior must broadcast together; got shapes {pos.shape}, {m.shape}, "
            f"{e.shape} and {p.shape}"
        ) from err
    pos_b, m_b = np.broadcast_arrays(pos, m)
    over = np.flatnonzero((pos_b > m_b).ravel())
    if over.size:
        i = over[0]
        raise ParameterError(
            f"positive must not exceed votes; found positive {pos_b.ravel()[i]:.0f} of votes {m_b.ravel()[i]:.0f}"
        )
    _check_each(ETA, e, eta)
    _check_each(PRIOR_PROBABILITY, p, prior)
    return pos, m, e, p


def _posterior(positive: Any, votes: Any, eta: Any, prior: Any) -> Array:
    """BRAgg's posterior, unchecked (the callers validated their arguments)."""
    out: Array = 1.0 / (1.0 + np.exp(-_log_odds(positive, votes, eta, prior)))
    return out


def _log_odds(positive: Any, votes: Any, eta: Any, prior: Any) -> Array:
    """logit of BRAgg's posterior: logit(prior) + (2 positive - votes) log((1 - eta) / eta)."""
    out: Array = np.log(prior / (1 - prior)) + (2 * np.asarray(positive) - votes) * np.log((1 - eta) / eta)
    return out
