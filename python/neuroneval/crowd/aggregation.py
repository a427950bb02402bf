"""Rating aggregation (SPEC section 6): BRAgg posteriors, majority and mean votes, and each
rater's own error rate (one-coin Dawid-Skene)."""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
import polars as pl

from .._coerce import as_counts, as_reals, as_table, check_columns
from ..errors import EmptyInputError, LabelError, ParameterError
from ..options import Option, Options
from .posterior import _posterior
from .sampling import (
    _PRIOR_CLIP,
    ETA,
    METHODS,
    PLUG_IN_METHODS,
    PRIOR,
    PRIOR_PROBABILITY,
    RATERS,
    Array,
    Method,
    Plan,
    _check_each,
    _check_plan,
    _or_word,
)
from .sequential import _debiased, _finished

#: `aggregate`'s options (`rater_error_rates` takes prior and max_iter).
AGGREGATE_OPTIONS = Options(
    Option(
        "method",
        "choice",
        "bragg",
        "bragg (BRAgg's posterior), majority, mean, debiased (BRAgg's, unbiased for the 0/1 truth) or composite (both)",
        choices=METHODS,
    ),
    _or_word(
        ETA,
        "estimate",
        "BRAgg: the raters' error rate, or 'estimate' to fit each rater's own (one-coin Dawid-Skene; needs a rater "
        "column)",
    ),
    PRIOR,
    Option("max_iter", "integer", 200, "eta='estimate': the EM iterations at most", low=1, metavar="N"),
    Option("tol", "real", 1e-9, "eta='estimate': EM stops once no posterior moves more than this", low=0.0),
)
#: `label_attenuation`'s aggregation (its other parameters broadcast: arrays of `ETA`'s,
#: `RATERS`' and `PRIOR_PROBABILITY`'s values).
ATTENUATION_OPTIONS = Options(
    Option("method", "choice", "majority", "the aggregation whose labels are measured", choices=PLUG_IN_METHODS)
)

# --------------------------------------------------------------------------------------------
# Aggregation


def _binomial_pmf(m: int, p: float) -> Array:
    """P(K = k) for k = 0..m, K ~ Binomial(m, p), computed in logs (exact for any m)."""
    k = np.arange(m + 1, dtype=np.float64)
    log_comb = np.array([math.lgamma(m + 1) - math.lgamma(i + 1) - math.lgamma(m - i + 1) for i in range(m + 1)])
    out: Array = np.exp(log_comb + k * math.log(p) + (m - k) * math.log1p(-p))
    return out


def _vote_labels(method: str, positive: Any, votes: Any, eta: float, prior: Any) -> Array:
    """Each item's label from its vote counts: the one home of every aggregation's rule.

    "debiased" is BRAgg's posterior c mapped to (c - E[c | absent]) / (E[c | present] - E[c | absent])
    under the rater model (each vote wrong with rate eta, independently): an unbiased estimate of
    the 0/1 truth, given the truth, whatever the prior. Among the unbiased functions of the vote
    count it has the least variance when the prior is the input's probability of the concept
    (the unbiased label g minimising E[g^2] is affine in the likelihood ratio, as the posterior is).
    """
    pos = np.asarray(positive, dtype=np.float64)
    m = np.asarray(votes, dtype=np.float64)
    if method == "mean":
        out: Array = pos / m
        return out
    if method == "majority":
        out = np.where(2 * pos > m, 1.0, np.where(2 * pos == m, 0.5, 0.0))
        return out
    posterior = _posterior(pos, m, eta, prior)
    if method == "bragg":
        return posterior
    absent, present, _, _ = _expected_labels("bragg", m, eta, prior)
    out = (posterior - absent) / (present - absent)
    return out


def _expected_labels(method: str, votes: Any, eta: float, prior: Any) -> tuple[Array, Array, Array, Array]:
    """E[label | absent], E[label | present], E[label^2 | absent], E[label^2 | present] of each item,
    when each of its `votes` raters is wrong with rate `eta` independently (votes >= 1)."""
    m = np.asarray(votes, dtype=np.int64)
    shape = np.broadcast_shapes(m.shape, np.shape(prior))
    m = np.broadcast_to(m, shape).ravel()
    p = np.broadcast_to(np.asarray(prior, dtype=np.float64), shape).ravel()
    moments = np.empty((4, m.size))
    for count in np.unique(m):
        at = np.flatnonzero(m == count)
        k = np.arange(count + 1, dtype=np.float64)
        labels = _vote_labels(method, k[None, :], float(count), eta, p[at, None])
        absent, present = _binomial_pmf(int(count), eta), _binomial_pmf(int(count), 1.0 - eta)
        moments[:, at] = np.stack([labels @ absent, labels @ present, labels**2 @ absent, labels**2 @ present])
    a, b, c, d = (row.reshape(shape) for row in moments)
    return a, b, c, d


def label_attenuation(
    prevalence: Any, eta: Any = None, raters: Any = None, method: str | None = None, prior: Any = None
) -> Array:
    """How much an aggregation's labels shrink the correlation, whatever the budget.

    When each of `raters` votes per input is wrong with rate `eta`, independently of the input
    given its truth y, the labels c of `method` ("majority", "mean" or "bragg" with a constant
    `prior`) satisfy rho(a, c) = f rho(a, y) for every unit a, with
    f = (E[c | y=1] - E[c | y=0]) sd(y) / sd(c), sd(y)^2 = p (1 - p) at prevalence p. The plug-in
    estimator converges to f rho, so its relative correlation error can never fall below
    |1 - f|: the floor of the configuration. ("debiased" labels do not have one: their estimator
    divides by sqrt(p (1 - p)) instead of sd(c), and f is 1.) Arrays broadcast; None stands for
    the default of `ETA`, `RATERS`, `ATTENUATION_OPTIONS` and `PRIOR_PROBABILITY`.

    Examples
    --------
    >>> label_attenuation([0.5, 0.01], raters=3).round(3).tolist()   # majority of 3, eta 0.23
    [0.731, 0.209]
    >>> label_attenuation(0.01, raters=[3, 9, 25], method="bragg").round(3).tolist()
    [0.352, 0.756, 0.986]
    """
    method = ATTENUATION_OPTIONS.resolve(method=method)["method"]
    p = as_reals(prevalence, "prevalence")
    e = as_reals(ETA.default if eta is None else eta, "eta")
    m = as_counts(RATERS.default if raters is None else raters, "raters")
    if not np.all((p > 0) & (p < 1)):
        raise ParameterError("prevalence must lie in (0, 1)")
    _check_each(ETA, e, eta)
    if np.any(m < RATERS.low):
        raise ParameterError(f"raters must be at least {RATERS.low:g}")
    prior_values = _check_each(
        PRIOR_PROBABILITY, as_reals(PRIOR_PROBABILITY.default if prior is None else prior, "prior"), prior
    )
    shape = np.broadcast_shapes(p.shape, e.shape, m.shape, prior_values.shape)
    p, e, m, prior_values = (np.broadcast_to(x, shape).ravel() for x in (p, e, m, prior_values))
    out = np.empty(p.size)
    for i in range(p.size):  # few settings: one exact sum over vote counts each
        a0, a1, s0, s1 = (float(x) for x in _expected_labels(method, int(m[i]), float(e[i]), prior_values[i]))
        mean = p[i] * a1 + (1 - p[i]) * a0
        variance = p[i] * s1 + (1 - p[i]) * s0 - mean * mean
        out[i] = (a1 - a0) * math.sqrt(p[i] * (1 - p[i]) / variance) if variance > 0 else math.nan
    result: Array = out.reshape(shape)
    return result


def _ratings_table(ratings: Any, plan: Plan | None) -> pl.DataFrame:
    table = as_table(ratings, "ratings", "pair, input, vote (and rater)")
    if plan is not None:
        _check_plan(plan)
    table = check_columns(table, "ratings", {"pair": "id", "input": "id", "vote": "any"})
    if table.height == 0:
        raise EmptyInputError("no rating given")
    if "rater" in table.columns:
        rater = table["rater"].dtype
        if not (rater.is_integer() or rater in (pl.String, pl.Categorical) or isinstance(rater, pl.Enum)):
            raise LabelError(f"ratings column 'rater' must hold integer or text ids; got {rater}")
    vote = table["vote"]
    if vote.dtype == pl.Boolean:
        table = table.with_columns(pl.col("vote").cast(pl.Int64))
    elif not vote.dtype.is_numeric():
        raise LabelError(f"votes must be binary (0 = absent, 1 = present); got a column of {vote.dtype}")
    else:
        values = vote.to_numpy()
        bad = np.flatnonzero(~np.isin(values, (0, 1)))  # NaN is not in it either
        if bad.size:
            row = table.row(int(bad[0]), named=True)
            raise LabelError(
                f"votes must be binary (0 = absent, 1 = present); {bad.size} are not "
                f"(first: pair {row['pair']}, input {row['input']}, vote {row['vote']})"
            )
    table = table.with_columns(pl.col("vote").cast(pl.Int64))
    if plan is not None:
        unknown = table.join(plan.inputs(), on=["pair", "input"], how="anti")
        if unknown.height:
            first = unknown.row(0, named=True)
            raise LabelError(
                f"{unknown.height} rating(s) are for a (pair, input) the plan did not draw "
                f"(first: pair {first['pair']}, input {first['input']})"
            )
    return table


def aggregate(
    ratings: Any,
    method: Method | None = None,
    *,
    eta: float | Literal["estimate"] | None = None,
    prior: float | Literal["model"] | None = None,
    plan: Plan | None = None,
    max_iter: int | None = None,
    tol: float | None = None,
) -> pl.DataFrame:
    """One soft label per rated (pair, input), from its binary votes.

    Parameters
    ----------
    ratings : polars.DataFrame (or anything it takes)
        One row per vote: pair, input, vote (0/1 or bool), and optionally rater.
    method : "bragg", "majority", "mean", "debiased" or "composite"
        BRAgg's posterior (`bragg_posterior`); the majority vote (1/2 on a tie); the mean vote;
        BRAgg's posterior debiased: (c - E[c | absent]) / (E[c | present] - E[c | absent])
        under the rater model, an unbiased estimate of the 0/1 truth that may lie outside [0, 1]
        (for ``estimate(..., estimator="debiased")``, whose correlation has no bias floor); or
        both, BRAgg's posterior in label and the debiased one in a debiased column (for
        ``estimator="composite"``).
    eta : float or "estimate"
        Raters' error rate for BRAgg (the paper's by default). "estimate" fits one rate per rater by
        expectation-maximisation (one-coin Dawid-Skene, `rater_error_rates`); needs a rater column
        and method "bragg".
    prior : float or "model"
        BRAgg's prior: a constant, or the concept model's probability at the input, clipped to
        [0.001, 0.999] (needs `plan`).
    plan : Plan, optional
        When given, every rated (pair, input) must be one the plan drew. A sequential plan's
        (``plan(..., rating="sequential")``) eta and prior are the defaults, its "debiased"
        labels are debiased for its stopping rule (`sequential_labels`; null while an input is
        unfinished) and the table gains a finished column.
    max_iter, tol
        The EM's stopping rule, for ``eta="estimate"``.

    The defaults and domains of method, eta, prior, max_iter and tol: see `AGGREGATE_OPTIONS`.

    Returns
    -------
    polars.DataFrame
        pair, input, votes, positive, label (in [0, 1] but for "debiased"), and debiased for
        "composite".

    Examples
    --------
    >>> r = pl.DataFrame({"pair": [0, 0, 0, 0, 0, 0], "input": [4, 4, 4, 9, 9, 9], "vote": [1, 1, 0, 0, 0, 1]})
    >>> aggregate(r, "majority")["label"].to_list(), aggregate(r)["label"].round(4).to_list()
    ([1.0, 0.0], [0.1498, 0.0155])
    >>> aggregate(r, "debiased")["label"].round(4).to_list()
    [0.3498, -0.0537]
    """
    sequential = plan if isinstance(plan, Plan) and plan.rating == "sequential" else None
    if sequential is not None:  # the rule its raters were asked by
        eta = sequential.eta if eta is None else eta
        prior = sequential.prior if prior is None else prior  # type: ignore[assignment]
    values = AGGREGATE_OPTIONS.resolve(method=method, eta=eta, prior=prior, max_iter=max_iter, tol=tol)
    method, eta, prior = values["method"], values["eta"], values["prior"]
    table = _ratings_table(ratings, plan)
    if eta == "estimate" and method != "bragg":
        raise ParameterError(f"eta='estimate' is for method 'bragg' (one rate per rater); got method {method!r}")
    items = table.group_by("pair", "input", maintain_order=True).agg(
        pl.len().alias("votes"), pl.col("vote").sum().alias("positive")
    )
    pos = items["positive"].to_numpy()
    m = items["votes"].to_numpy()
    # a sequential plan's labels are debiased for its stopping rule, null while unfinished
    finished, debiased = None, None
    if sequential is not None:
        finished, debiased = _sequential_items(sequential, items, eta, prior, method)
    prior_values = _prior_values(items, prior, plan) if method in ("bragg", "debiased", "composite") else 0.5
    if method in ("debiased", "composite") and sequential is None:
        debiased = _vote_labels("debiased", pos, m, float(eta), prior_values)
    label: Any
    if eta == "estimate":
        _, label = _dawid_skene(table, items, _prior_values(items, prior, plan), values["max_iter"], values["tol"])
    elif method == "debiased":
        label = debiased
    else:
        label = _vote_labels("bragg" if method == "composite" else method, pos, m, float(eta), prior_values)
    out = items.with_columns(pl.Series("label", label, dtype=pl.Float64).fill_nan(None))
    if method == "composite":
        out = out.with_columns(pl.Series("debiased", debiased, dtype=pl.Float64).fill_nan(None))
    return out if finished is None else out.with_columns(pl.Series("finished", finished, dtype=pl.Boolean))


def _sequential_items(
    plan: Plan, items: pl.DataFrame, eta: Any, prior: Any, method: str
) -> tuple[np.ndarray, Array | None]:
    """For `aggregate` with a sequential plan: whether each item (pair, input, votes, positive)
    is finished, and, for the debiased methods, its label debiased for the plan's stopping rule
    (NaN while unfinished). The debiased labels need the rule the raters were asked by."""
    if method in ("debiased", "composite") and (eta != plan.eta or str(prior) != str(plan.prior)):
        raise ParameterError(
            f"the debiased labels of a sequential plan need the rule its raters were asked by: eta {plan.eta:g}, "
            f"prior {plan.prior}; got eta {eta}, prior {prior}"
        )
    pos = items["positive"].to_numpy().astype(np.float64)
    m = items["votes"].to_numpy().astype(np.float64)
    priors = _prior_values(items, plan.prior, plan)
    etas = np.full(m.size, plan.eta)
    done = _finished(pos, m, etas, priors, plan.confidence, plan.raters_per_input)
    if method not in ("debiased", "composite"):
        return done, None
    debiased = np.full(m.size, np.nan)
    at = np.flatnonzero(done)
    debiased[at], reached = _debiased(pos[at], m[at], etas[at], priors[at], plan.confidence, plan.raters_per_input)
    if not reached.all():
        row = items.row(int(at[np.flatnonzero(~reached)[0]]), named=True)
        raise LabelError(
            f"pair {row['pair']}, input {row['input']} has {row['votes']} votes ({row['positive']} present), past "
            "the sequential rule's stop: it was asked more than the plan's rule asks"
        )
    return done, debiased


def _prior_values(items: pl.DataFrame, prior: float | str, plan: Plan | None) -> Array:
    """Each item's prior: `prior` (checked), or the plan's concept model probability ("model")."""
    if prior == "model":
        if plan is None:
            raise ParameterError("prior='model' needs the plan (it holds the concept model's probabilities)")
        model = plan.draws.select("pair", "input", "model").unique(["pair", "input"])
        joined = items.join(model, on=["pair", "input"], how="left", maintain_order="left")
        clipped: Array = np.clip(joined["model"].to_numpy().astype(np.float64), *_PRIOR_CLIP)
        return clipped
    return np.full(items.height, prior)


def _dawid_skene(
    table: pl.DataFrame, items: pl.DataFrame, prior: Array, max_iter: int, tol: float
) -> tuple[dict[Any, float], Array]:
    """One-coin Dawid-Skene by EM: each rater r is wrong with probability eta_r, whatever the truth."""
    if "rater" not in table.columns:
        raise ParameterError("eta='estimate' needs a rater column in the ratings")
    if table["rater"].null_count():
        raise LabelError("ratings have missing rater ids")
    item_index = items.with_row_index("item").select("pair", "input", "item")
    votes = table.join(item_index, on=["pair", "input"], how="left", maintain_order="left")
    raters, rater_idx = np.unique(votes["rater"].to_numpy(), return_inverse=True)
    item = votes["item"].to_numpy().astype(np.int64)
    vote = votes["vote"].to_numpy().astype(np.float64)
    eta = np.full(raters.size, 0.2)
    logit_prior = np.log(prior / (1 - prior))
    posterior = prior.copy()
    for _ in range(max_iter):
        # E-step: each item's posterior under the current rates.
        lr = np.log((1 - eta) / eta)[rater_idx] * (2 * vote - 1)
        logit = logit_prior + np.bincount(item, weights=lr, minlength=prior.size)
        new = 1.0 / (1.0 + np.exp(-logit))
        # M-step: a rater's rate is its expected share of wrong votes (kept inside (0, 0.5)).
        wrong = vote * (1 - new[item]) + (1 - vote) * new[item]
        counts = np.bincount(rater_idx, minlength=raters.size)
        eta = np.clip(np.bincount(rater_idx, weights=wrong, minlength=raters.size) / counts, 1e-4, 0.4999)
        if np.max(np.abs(new - posterior)) < tol:
            posterior = new
            break
        posterior = new
    return dict(zip(raters.tolist(), eta.tolist(), strict=True)), posterior


def rater_error_rates(
    ratings: Any,
    *,
    prior: float | Literal["model"] | None = None,
    plan: Plan | None = None,
    max_iter: int | None = None,
) -> pl.DataFrame:
    """Each rater's error rate, fitted by EM (one-coin Dawid-Skene): rater, eta, votes.

    prior and max_iter as `aggregate` takes them (`AGGREGATE_OPTIONS`); EM stops at its default tol.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> truth = rng.random(3000) < 0.3
    >>> rows = [(0, i, r, int(truth[i] ^ (rng.random() < e))) for i in range(3000) for r, e in enumerate([0.05, 0.2, 0.35])]
    >>> rates = rater_error_rates(pl.DataFrame(rows, schema=["pair", "input", "rater", "vote"], orient="row"), prior=0.3)
    >>> rates["eta"].round(2).to_list()   # planted: 0.05, 0.2, 0.35
    [0.05, 0.2, 0.36]
    """
    values = AGGREGATE_OPTIONS.only("prior", "max_iter").resolve(prior=prior, max_iter=max_iter)
    table = _ratings_table(ratings, plan)
    items = table.group_by("pair", "input", maintain_order=True).agg(pl.len().alias("votes"))
    prior_values = _prior_values(items, values["prior"], plan)
    rates, _ = _dawid_skene(table, items, prior_values, values["max_iter"], AGGREGATE_OPTIONS["tol"].default)
    counts = table.group_by("rater").len()
    out = pl.DataFrame({"rater": list(rates), "eta": list(rates.values())})
    return out.join(counts.rename({"len": "votes"}), on="rater", how="left").sort("rater")
