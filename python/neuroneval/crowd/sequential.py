"""Sequential rating: ask raters about an input one at a time, until BRAgg's posterior is sure.

A fixed number of raters per input spends most votes where the first two and the concept
model's prior already decide. Here, after each vote, BRAgg's posterior (`bragg_posterior`)
says how sure the votes so far are; an input is finished once the posterior reaches
`confidence` either way, or after `raters_per_input` votes (the plan's raters per input, here
the cap), and never before its first vote.

The stopping time depends on the votes, so the fixed-count debiasing (which divides by the
expected label of a binomial count) no longer applies. `sequential_labels` debiases for the
rule itself: the posterior at the stop, c, is mapped to (c - E[c | absent]) / (E[c | present] -
E[c | absent]), with the expectations taken over every vote sequence the rule can produce (a
sequence that ends at k votes, s of them "present", has probability theta^s (1 - theta)^(k - s)
times the number of such sequences that do not stop earlier; theta = 1 - eta when the concept
is present, eta when it is absent). The label is then unbiased for the 0/1 truth whatever the
stopping rule, so `estimate(..., estimator="debiased")` stays consistent.

Examples
--------
>>> from neuroneval.crowd import sequential_finished, sequential_labels, votes_to_ask
>>> sequential_finished([0, 1, 5], [1, 1, 5], prior=0.05).tolist()   # one "absent"; one "present"; five
[True, False, True]
>>> votes_to_ask([0, 1, 2], [0, 1, 2], prior=0.05, raters_per_input=9).tolist()   # two "absent" could end the third
[1, 1, 2]
>>> sequential_labels([0, 5, 5], [1, 5, 9], prior=0.05, raters_per_input=9).round(3).tolist()   # the last at the cap
[-0.021, 1.91, 0.255]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._coerce import as_counts
from ..errors import ParameterError
from ..options import Options
from .posterior import _log_odds, _posterior, _vote_counts
from .sampling import CONFIDENCE, RATERS, Array

__all__ = ["SEQUENTIAL_OPTIONS", "posterior_path", "sequential_finished", "sequential_labels", "votes_to_ask"]

#: The stopping rule of sequential rating: a plan's confidence and raters per input (the cap).
SEQUENTIAL_OPTIONS = Options(CONFIDENCE, RATERS)


def posterior_path(votes: Any, eta: float | None = None, prior: float | None = None) -> Array:
    """BRAgg's posterior after each of `votes` (a sequence of 0/1, in the order given).

    Examples
    --------
    >>> posterior_path([1, 1, 0], prior=0.05).round(4).tolist()
    [0.1498, 0.371, 0.1498]
    """
    v = as_counts(votes, "votes")
    if v.ndim != 1 or np.any(v > 1):
        raise ParameterError("votes must be a sequence of 0 (absent) and 1 (present)")
    return _posterior(*_vote_counts(np.cumsum(v).astype(np.int64), np.arange(1, v.size + 1), eta, prior))


def sequential_finished(positive: Any, votes: Any, eta: Any = None, prior: Any = None, **rule: Any) -> np.ndarray:
    """Whether inputs with `positive` "present" votes of `votes` need no more (bool; arrays
    broadcast): at least one vote, and BRAgg's posterior at least `confidence` either way or
    `raters_per_input` votes (`SEQUENTIAL_OPTIONS`)."""
    pos, m, e, p = _counts(positive, votes, eta, prior)
    confidence, cap = _rule(rule)
    return _finished(pos, m, e, p, confidence, cap)


def votes_to_ask(positive: Any, votes: Any, eta: Any = None, prior: Any = None, **rule: Any) -> np.ndarray:
    """How many more votes each input can be asked at once without one being wasted: the fewest
    that could finish it (0 for a finished input). One round of a study asks each input this many."""
    pos, m, e, p = _counts(positive, votes, eta, prior)
    confidence, cap = _rule(rule)
    shape = np.broadcast_shapes(pos.shape, m.shape, e.shape, p.shape)
    pos, m, e, p = (np.broadcast_to(x, shape) for x in (pos, m, e, p))
    out = np.zeros(shape, dtype=np.int64)
    waiting = ~_finished(pos, m, e, p, confidence, cap)
    # the first j at which j more votes, all "present" or all "absent", finish the input (the cap does)
    for j in range(1, max(cap - int(m.min(initial=cap)), 1) + 1):
        ends = _finished(pos + j, m + j, e, p, confidence, cap) | _finished(pos, m + j, e, p, confidence, cap)
        out[waiting & ends & (out == 0)] = j
    return out


def sequential_labels(positive: Any, votes: Any, eta: Any = None, prior: Any = None, **rule: Any) -> Array:
    """Each finished input's label, unbiased for its 0/1 truth under the stopping rule: BRAgg's
    posterior at the stop, mapped to (c - E[c | absent]) / (E[c | present] - E[c | absent]).

    Raises
    ------
    ParameterError
        An input the rule would not have stopped at (needs more votes, or went past a stop).
    """
    pos, m, e, p = _counts(positive, votes, eta, prior)
    confidence, cap = _rule(rule)
    shape = np.broadcast_shapes(pos.shape, m.shape, e.shape, p.shape)
    pos, m, e, p = (np.broadcast_to(x, shape).ravel() for x in (pos, m, e, p))
    done = _finished(pos, m, e, p, confidence, cap)
    if not done.all():
        i = int(np.flatnonzero(~done)[0])
        raise ParameterError(
            f"input {i} ({pos[i]:.0f} present of {m[i]:.0f} votes) is not finished: the rule asks for more votes"
        )
    out, reached = _debiased(pos, m, e, p, confidence, cap)
    if not reached.all():
        i = int(np.flatnonzero(~reached)[0])
        raise ParameterError(
            f"input {i} ({pos[i]:.0f} present of {m[i]:.0f} votes) went past a stop: the rule stops it earlier"
        )
    return out.reshape(shape)


# --------------------------------------------------------------------------------------------


def _rule(rule: dict[str, Any]) -> tuple[float, int]:
    values = SEQUENTIAL_OPTIONS.resolve(**rule)
    return float(values["confidence"]), int(values["raters_per_input"])


def _counts(positive: Any, votes: Any, eta: Any, prior: Any) -> tuple[Array, Array, Array, Array]:
    pos, m, e, p = _vote_counts(positive, votes, eta, prior)
    return pos.astype(np.float64), m.astype(np.float64), e, p


def _finished(pos: Array, m: Array, e: Any, p: Any, confidence: float, cap: int) -> np.ndarray:
    """The one home of the stopping rule, on the posterior's log-odds (`_posterior`'s), where a
    posterior exactly at the confidence, as the default prior and confidence meet after as many
    "present" as "absent" votes, counts as sure whatever the rounding."""
    sure = np.abs(_log_odds(pos, m, e, p)) >= math.log(confidence / (1 - confidence)) - _TIE
    out: np.ndarray = (m >= 1) & (sure | (m >= cap))
    return out


#: Log-odds this close to the confidence's count as reaching it.
_TIE = 1e-9


def _debiased(pos: Array, m: Array, e: Array, p: Array, confidence: float, cap: int) -> tuple[Array, np.ndarray]:
    """The one home of the debiased label: of checked, finished inputs (1-D arrays), and
    whether each (m, pos) is a stop the rule reaches (`_walk`; the label means nothing where
    it is not)."""
    absent, present, reached = _walk(pos, m, e, p, confidence, cap)
    out: Array = (_posterior(pos, m, e, p) - absent) / (present - absent)
    return out, reached


def _expected_votes(
    pos: Array, m: Array, e: Array, p: Array, confidence: float, cap: int, belief: Array | None = None
) -> Array:
    """Each input's expected votes at its stop, from its votes so far (1-D arrays): the votes
    of a finished input; else a walk over the votes still to come, each "present" with
    probability 1 - eta or eta as the truth is present or absent, weighted by the posterior
    from the votes so far and `belief`, the probability that the concept is present before any
    vote (default: BRAgg's prior p, which the rule uses)."""
    out = m.copy()
    live = np.flatnonzero(~_finished(pos, m, e, p, confidence, cap))
    if live.size == 0:
        return out
    pos, m, e, p = pos[live], m[live], e[live], p[live]
    weight = {1: _posterior(pos, m, e, p if belief is None else belief[live])}
    weight[0] = 1 - weight[1]
    alive = {t: weight[t][:, None] for t in (0, 1)}  # alive[t][:, s]: s "present" among the new votes
    expected = np.zeros(live.size)
    for j in range(1, cap - int(m.min()) + 1):
        s = np.arange(j + 1, dtype=np.float64)[None, :]
        stop = _finished(pos[:, None] + s, m[:, None] + j, e[:, None], p[:, None], confidence, cap)
        for t, theta in ((0, e), (1, 1 - e)):
            grown = np.zeros((live.size, j + 1))
            grown[:, 1:] += alive[t] * theta[:, None]
            grown[:, :-1] += alive[t] * (1 - theta[:, None])
            expected += (grown * stop).sum(axis=1) * (m + j)
            alive[t] = grown * ~stop
    out[live] = expected
    return out


def _walk(pos: Array, m: Array, e: Array, p: Array, confidence: float, cap: int) -> tuple[Array, Array, np.ndarray]:
    """One walk over every vote sequence the rule can produce, per input (1-D arrays):
    E[posterior at the stop | absent] and E[... | present] (each stopping point's posterior
    weighted by the number of sequences reaching it without stopping earlier times
    theta^s (1 - theta)^(k - s)), and whether (m, pos) is such a point's count, reached without
    an earlier stop (a positive weight). The walk depends on (eta, prior) alone, so it runs
    once per distinct pair (a simulation draws the same inputs over and over)."""
    # one 1-D sort finds the distinct pairs: complex numbers sort by real part, then imaginary
    key = np.empty(e.size, dtype=np.complex128)
    key.real, key.imag = e, p
    distinct, of = np.unique(key, return_inverse=True)
    e, p = distinct.real.copy(), distinct.imag.copy()
    n = e.size
    absent, present = np.zeros(n), np.zeros(n)
    reached = np.zeros(of.size, dtype=bool)
    # alive[:, s]: weight of unfinished sequences with s "present" votes so far, per truth
    alive = {0: np.ones((n, 1)), 1: np.ones((n, 1))}
    theta = {0: e, 1: 1 - e}
    for k in range(1, cap + 1):
        s = np.arange(k + 1, dtype=np.float64)[None, :]
        posterior = _posterior(s, float(k), e[:, None], p[:, None])
        stop = _finished(s, np.full((1, k + 1), float(k)), e[:, None], p[:, None], confidence, cap)
        for truth, into in ((0, absent), (1, present)):
            t = theta[truth][:, None]
            grown = np.zeros((n, k + 1))
            grown[:, 1:] += alive[truth] * t
            grown[:, :-1] += alive[truth] * (1 - t)
            into += (grown * posterior * stop).sum(axis=1)
            alive[truth] = grown * ~stop
        here = np.flatnonzero(m == k)
        reached[here] = grown[of[here], pos[here].astype(np.int64)] > 0
    return absent[of], present[of], reached
