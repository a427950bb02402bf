"""The importance-weighted correlation of a plan's labels, with a standard error and a
confidence interval (SPEC section 6)."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from statistics import NormalDist
from typing import Any, Literal, NamedTuple

import numpy as np
import polars as pl

from .. import options as shared
from .._coerce import as_table, check_columns
from ..errors import ConceptRangeError, LabelError, ParameterError, ShapeError
from ..options import Option, Options
from .sampling import SEED, Array, Plan, _check_plan

# --------------------------------------------------------------------------------------------
# Estimation


def _plug_in_value(s1: Array, m1: Array, m2: Array, varied: Any) -> Array:
    """S1 / sqrt(M2 - M1^2): NaN when the labels were constant or the variance is not positive."""
    var = m2 - m1 * m1
    defined = (var > 0) & varied
    with np.errstate(invalid="ignore", divide="ignore"):
        out: Array = np.where(defined, s1 / np.sqrt(np.where(defined, var, 1.0)), np.nan)
    return out


def _debiased_value(s1: Array, p: Array) -> Array:
    """S1 / sqrt(p (1 - p)), the variance of a 0/1 truth from its estimated prevalence p, kept in
    [-1, 1] (a correlation; a small p would otherwise blow the ratio up); NaN unless 0 < p < 1."""
    defined = (p > 0) & (p < 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out: Array = np.where(defined, np.clip(s1 / np.sqrt(np.where(defined, p * (1 - p), 1.0)), -1.0, 1.0), np.nan)
    return out


def _terms(w: Array, abar: Array, c: Array, debiased: bool) -> Array:
    """The per-draw terms whose means the estimator combines, stacked on a new last axis:
    w abar c, w c, and w c^2 for the plug-in estimator."""
    terms = [w * abar * c, w * c] + ([] if debiased else [w * c * c])
    return np.stack(terms, axis=-1)


def _delta_se(mean: Array, cov: Array, n: Any, debiased: bool) -> Array:
    """The delta method's standard error of the estimator from the mean (..., d) and the
    covariance (..., d, d) of its per-draw terms over n draws (NaN where undefined)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        if debiased:
            s1, p = mean[..., 0], mean[..., 1]
            g = p * (1 - p)
            grad = np.stack([1 / np.sqrt(g), -s1 * (1 - 2 * p) / (2 * g**1.5)], axis=-1)
        else:
            s1, m1, m2 = mean[..., 0], mean[..., 1], mean[..., 2]
            v = m2 - m1 * m1
            grad = np.stack([1 / np.sqrt(v), s1 * m1 / v**1.5, -s1 / (2 * v**1.5)], axis=-1)
        variance = np.einsum("...i,...ij,...j->...", grad, cov, grad) / n
        out: Array = np.sqrt(np.where(variance >= 0, variance, np.nan))
    return out


def _rho(w: Array, abar: Array, c: Array, self_normalised: bool, debiased: bool = False) -> Array:
    """SPEC section 6's estimator over the last axis (draws).

    Plug-in (labels in [0, 1]): S1 / sqrt(M2 - M1^2); NaN when the drawn labels are all equal
    (the correlation is then undefined: the plain estimator's M2 - M1^2 would not even be 0, as
    its weights need not average 1) or when the estimated variance is not positive. Debiased
    (labels unbiased for a 0/1 truth): S1 / sqrt(M1 (1 - M1)); NaN unless 0 < M1 < 1.
    """
    norm = w.sum(axis=-1) if self_normalised else np.full(w.shape[:-1], float(w.shape[-1]))
    mean = _terms(w, abar, c, debiased).sum(axis=-2) / norm[..., None]
    if debiased:
        return _debiased_value(mean[..., 0], mean[..., 1])
    return _plug_in_value(mean[..., 0], mean[..., 1], mean[..., 2], c.max(axis=-1) > c.min(axis=-1))


def _pearson(w: Array, abar: Array, c: Array) -> Array:
    """The weighted Pearson correlation of the activations and labels over the last axis (draws),
    weights normalised by their sum: both are centred on the draws' own weighted means and scaled
    by their own weighted spread, so a label that sits far from 0 adds no noise through the
    draws' mean activation, and the value stays in [-1, 1]. NaN when either is constant."""
    total = w.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        da = abar - (w * abar).sum(axis=-1, keepdims=True) / total
        dc = c - (w * c).sum(axis=-1, keepdims=True) / total
        va, vc = (w * da * da).sum(axis=-1), (w * dc * dc).sum(axis=-1)
        defined = (va > 0) & (vc > 0) & (c.max(axis=-1) > c.min(axis=-1))
        value = (w * da * dc).sum(axis=-1) / np.sqrt(np.where(defined, va * vc, 1.0))
    out: Array = np.where(defined, np.clip(value, -1.0, 1.0), np.nan)
    return out


def _fisher_interval(rho: float, w: Array, z: float) -> tuple[float, float, float]:
    """SE and interval of a weighted correlation by Fisher's z with Kish's effective sample size
    n_eff = (sum w)^2 / sum w^2: atanh(rho) +- z / sqrt(n_eff - 3), mapped back by tanh (NaN with
    n_eff <= 3). A percentile bootstrap of a correlation from a few dozen draws covers too
    rarely (measured in `docs/labels.md`); this interval is the textbook one for few draws."""
    n_eff = float(w.sum() ** 2 / (w * w).sum()) if w.size else 0.0
    if not math.isfinite(rho) or n_eff <= 3:
        return math.nan, math.nan, math.nan
    half = 1.0 / math.sqrt(n_eff - 3)
    centre = math.atanh(min(max(rho, -1 + 1e-15), 1 - 1e-15))
    return (1 - rho * rho) * half, math.tanh(centre - z * half), math.tanh(centre + z * half)


def _composite(
    plug_in: Array, plug_in_se: Array, debiased: Array, debiased_se: Array, z: float
) -> tuple[Array, Array, Array]:
    """The composite of the plug-in and debiased estimates of one correlation: estimate, SE, half-width.

    w = v_d / (v_d + v_p + (e_p - e_d)^2) minimises the mean squared error of w e_p + (1 - w) e_d
    when the plug-in's bias is taken as e_p - e_d (the composite estimator of small-area
    estimation). While the budget is small the plug-in's low variance wins; as it grows, v_d
    falls like 1/n while the bias stays, so w goes to 0 and the composite to the debiased
    estimate: consistent, without a floor. SE = w se_p + (1 - w) se_d (their correlation is at
    most 1), and the interval's half-width adds the plug-in's share of the bias,
    z SE + w |e_p - e_d|. Where one part is undefined the other stands alone.
    """
    p_ok, d_ok = np.isfinite(plug_in) & np.isfinite(plug_in_se), np.isfinite(debiased) & np.isfinite(debiased_se)
    e_p, s_p = np.where(p_ok, plug_in, 0.0), np.where(p_ok, plug_in_se, 0.0)
    e_d, s_d = np.where(d_ok, debiased, 0.0), np.where(d_ok, debiased_se, 0.0)
    gap = e_p - e_d
    with np.errstate(invalid="ignore", divide="ignore"):
        w = np.where(p_ok & d_ok, s_d**2 / (s_d**2 + s_p**2 + gap**2), np.where(p_ok, 1.0, 0.0))
    w = np.where(np.isfinite(w), w, 0.5)  # both parts exact and equal: either will do
    estimate = np.where(p_ok | d_ok, w * e_p + (1 - w) * e_d, np.nan)
    se = np.where(p_ok | d_ok, w * s_p + (1 - w) * s_d, np.nan)
    out: tuple[Array, Array, Array] = (estimate, se, z * se + np.where(p_ok & d_ok, w * np.abs(gap), 0.0))
    return out


# --------------------------------------------------------------------------------------------
# Which estimator takes which interval: one table


class _Way(NamedTuple):
    """One (estimator, interval) of `estimate`: whether it is allowed and what it needs."""

    estimator: str
    interval: str
    default: bool  # the estimator's interval when none is asked for
    plain_weights: bool  # refused with self_normalised (`_PLAIN_WEIGHTS`)
    labels: tuple[tuple[str, bool], ...]  # the label columns it reads: (column, unbounded)
    refused: str  # "" where the combination is allowed, else the error that refuses it


_LABEL = (("label", False),)  # labels in [0, 1]
_DEBIASED = (("label", True),)  # debiased labels: unbiased for the 0/1 truth, any finite number
_BOTH = (("label", False), ("debiased", True))  # aggregate(method="composite")'s
_PLAIN_WEIGHTS = "interval='delta' is for the plain estimator; use the bootstrap with self_normalised"
_FISHER = "interval='fisher' is the pearson estimator's"
_COMPOSITE = "the composite estimator takes the plain weights and the delta interval"
_PEARSON = "the pearson estimator's interval is fisher's (the default) or the bootstrap's"

#: Every estimator with every interval: the estimators are SPEC's plug-in, the debiased one,
#: their composite, and the weighted Pearson correlation of the draws; the intervals a
#: percentile bootstrap, the delta method and Fisher's z at Kish's effective sample size.
# fmt: off
_WAYS = (
    #    estimator    interval     default plain  labels     refused
    _Way("plug-in",   "bootstrap", True,   False, _LABEL,    ""),
    _Way("plug-in",   "delta",     False,  True,  _LABEL,    ""),
    _Way("plug-in",   "fisher",    False,  False, _LABEL,    _FISHER),
    _Way("debiased",  "bootstrap", True,   False, _DEBIASED, ""),
    _Way("debiased",  "delta",     False,  True,  _DEBIASED, ""),
    _Way("debiased",  "fisher",    False,  False, _DEBIASED, _FISHER),
    _Way("composite", "bootstrap", False,  False, _BOTH,     _COMPOSITE),
    _Way("composite", "delta",     True,   True,  _BOTH,     ""),
    _Way("composite", "fisher",    False,  False, _BOTH,     _FISHER),
    _Way("pearson",   "bootstrap", False,  False, _LABEL,    ""),
    _Way("pearson",   "delta",     False,  True,  _LABEL,    _PEARSON),
    _Way("pearson",   "fisher",    True,   False, _LABEL,    ""),
)
# fmt: on

#: The estimators of `estimate`: SPEC's plug-in, the debiased one, their composite, and the
#: weighted Pearson correlation of the draws.
ESTIMATORS = tuple(dict.fromkeys(way.estimator for way in _WAYS))
INTERVALS = tuple(dict.fromkeys(way.interval for way in _WAYS))

#: The confidence level of an interval (the library's one declaration).
LEVEL = shared.LEVEL

#: `estimate`'s options.
ESTIMATE_OPTIONS = Options(
    Option(
        "estimator",
        "choice",
        "plug-in",
        "plug-in (SPEC's), debiased (labels of aggregate's debiased method: S1 / sqrt(p (1 - p))), composite "
        "(labels of aggregate's composite method) or pearson (the draws' weighted Pearson correlation: for soft "
        "labels such as a judge's probabilities)",
        choices=ESTIMATORS,
    ),
    Option("self_normalised", "flag", False, "divide by the sum of the weights instead of the number of draws"),
    Option(
        "interval",
        "choice",
        None,
        "bootstrap (percentile interval), delta (the delta method: rho +- z SE) or fisher (Fisher's z at Kish's "
        "effective size); none: the estimator's own (delta for composite, fisher for pearson, else bootstrap)",
        choices=INTERVALS,
        optional=True,
    ),
    LEVEL,
    Option("bootstrap", "integer", 2000, "bootstrap resamples (0: none)", low=0, metavar="N"),
    SEED,
)


def default_interval(estimator: str) -> str:
    """The interval `estimate` gives `estimator` when none is asked for.

    >>> [default_interval(e) for e in ESTIMATORS]
    ['bootstrap', 'bootstrap', 'delta', 'fisher']
    """
    estimator = ESTIMATE_OPTIONS["estimator"].check(estimator)
    return next(way.interval for way in _WAYS if way.estimator == estimator and way.default)


def _way(estimator: str, interval: str | None, self_normalised: bool) -> _Way:
    """The table's row of the estimator and the interval (None: the estimator's default), or
    the error that refuses them."""
    interval = default_interval(estimator) if interval is None else interval
    way = next(way for way in _WAYS if (way.estimator, way.interval) == (estimator, interval))
    if way.plain_weights and self_normalised:
        raise ParameterError(_PLAIN_WEIGHTS)
    if way.refused:
        raise ParameterError(way.refused)
    return way


# --------------------------------------------------------------------------------------------
# The estimate


def estimate(
    plan: Plan,
    labels: pl.DataFrame,
    *,
    estimator: Literal["plug-in", "debiased", "composite", "pearson"] | None = None,
    self_normalised: bool | None = None,
    interval: Literal["bootstrap", "delta", "fisher"] | None = None,
    level: float | None = None,
    bootstrap: int | None = None,
    seed: int | None = None,
) -> pl.DataFrame:
    """The importance-weighted correlation of each planned pair, with an error bar.

    **plug-in** (SPEC section 6): rho_hat = S1 / sqrt(M2 - M1^2) with S1, M1, M2 the weighted
    means of abar c, c and c^2 over the draws (weights 1 / (N q); with `self_normalised`, divided
    by the sum of the weights instead of n). With a uniform plan it is the plain sample
    estimate; with every input drawn once it is the exact Pearson correlation. NaN when the
    labels are constant.

    **debiased**: the labels are unbiased estimates of a 0/1 truth (``aggregate(...,
    method="debiased")``) and rho_hat = S1 / sqrt(M1 (1 - M1)): S1 and M1 are then unbiased
    for cov(a, y) / sd(a) and the prevalence, so the estimate converges to the true correlation
    with any number of raters per input (one included), where plug-in labels converge to an
    attenuated one (`label_attenuation`). Kept in [-1, 1]; NaN unless 0 < M1 < 1. Its interval is
    conditional on the shown inputs' labels: it is the whole uncertainty while the draws are
    few against the N inputs (a study's case), and too narrow when most inputs repeat.

    **composite**: labels from ``aggregate(..., method="composite")`` (BRAgg's posterior in
    label, its debiased version in debiased); the precision-weighted composite of the two
    estimates (`_composite`): the plug-in's low variance at small budgets, the debiased one's
    consistency at large ones. Its interval is built from the two delta-method intervals.

    **pearson**: the weighted Pearson correlation of the drawn inputs' activations and labels
    (weights 1 / (N q), normalised by their sum; `_pearson`), with Fisher's interval at Kish's
    effective sample size (`_fisher_interval`; ``interval="bootstrap"`` for the bootstrap's). Both
    are centred and scaled on the draws themselves, so labels with a large mean and a small
    spread (a judge's probabilities, all near its base rate) do not blow the estimate up as they
    do the plug-in's S1 / sqrt(M2 - M1^2); it stays in [-1, 1] and is consistent.

    The standard error and interval come from `bootstrap` resamples of the draws (seeded;
    percentile interval), or with ``interval="delta"`` from the delta method on the means of
    the per-draw terms (rho_hat +- z se; the plain estimator only). The default is the
    bootstrap, the delta method for the composite and Fisher's for pearson; which estimator
    takes which interval is one table, `_WAYS`.

    Parameters
    ----------
    plan : Plan
    labels : polars.DataFrame
        pair, input, label (as `aggregate` returns): one label per drawn (pair, input), in [0, 1]
        unless debiased; for the composite also the debiased column.
    estimator, self_normalised, interval, level, bootstrap, seed
        See `ESTIMATE_OPTIONS` (None: the declared default).

    Returns
    -------
    polars.DataFrame
        pair, unit, concept, unit_name, explanation, rho, se, ci_low, ci_high, draws, inputs.
    """
    values = ESTIMATE_OPTIONS.resolve(
        estimator=estimator,
        self_normalised=self_normalised,
        interval=interval,
        level=level,
        bootstrap=bootstrap,
        seed=seed,
    )
    plan = _check_plan(plan)
    labels = as_table(labels, "labels", "pair, input, label")
    way = _way(values["estimator"], values["interval"], values["self_normalised"])
    joined = _labelled_draws(plan, labels, way)
    tail = (1.0 - values["level"]) / 2.0
    z = NormalDist().inv_cdf(1.0 - tail)
    rows = [
        _pair_row(int(index[0]), group, way, values, z, tail)
        for index, group in joined.partition_by("pair", as_dict=True, maintain_order=True).items()
    ]
    return plan.pairs.join(pl.DataFrame(rows), on="pair", how="left", maintain_order="left")


def _pair_row(
    pair: int, group: pl.DataFrame, way: _Way, values: dict[str, Any], z: float, tail: float
) -> dict[str, Any]:
    """One pair's estimate, SE and interval from its labelled draws, the way the table says."""
    w = group["weight"].to_numpy()
    abar, c = group["abar"].to_numpy(), group["label"].to_numpy()
    if way.interval == "delta":
        debiased = group["debiased"].to_numpy() if way.estimator == "composite" else None
        rho, se, low, high = _delta_interval(way.estimator, w, abar, c, debiased, z)
    else:
        statistic = _statistic(way.estimator, values["self_normalised"])
        rho = float(statistic(w, abar, c))
        if way.interval == "fisher":
            se, low, high = _fisher_interval(rho, w, z)
        else:
            rng = np.random.default_rng([values["seed"], pair])
            se, low, high = _bootstrap_interval(statistic, w, abar, c, values["bootstrap"], rng, tail)
    inputs = int(group["input"].n_unique())
    return {"pair": pair, "rho": rho, "se": se, "ci_low": low, "ci_high": high, "draws": w.size, "inputs": inputs}


def _labelled_draws(plan: Plan, labels: pl.DataFrame, way: _Way) -> pl.DataFrame:
    """The plan's draws with the label columns the estimator reads, each checked; every draw labelled."""
    labels = check_columns(labels, "labels", {"pair": "id", "input": "id"})
    missing = [column for column, _ in way.labels if column not in labels.columns]
    if missing:
        hint = " (from aggregate(method='composite'))" if way.estimator == "composite" else ""
        raise ShapeError(f"labels lack the column(s) {missing}{hint}")
    if labels.select("pair", "input").is_duplicated().any():
        raise LabelError("labels hold more than one label for some (pair, input)")
    draws = plan.draws
    if plan.rating == "sequential":
        draws = _counted_draws(plan, labels)
        labels = labels.join(draws.select("pair", "input"), on=["pair", "input"], how="semi")
    values = [_label_column(labels, column, unbounded).alias(column) for column, unbounded in way.labels]
    joined = draws.join(
        labels.select("pair", "input", *values), on=["pair", "input"], how="left", maintain_order="left"
    )
    unlabelled = joined.filter(pl.col("label").is_null()).select("pair", "input").unique()
    if unlabelled.height:
        first = unlabelled.row(0, named=True)
        raise LabelError(
            f"{unlabelled.height} drawn (pair, input) have no label (first: pair {first['pair']}, input {first['input']})"
        )
    return joined


def _counted_draws(plan: Plan, labels: pl.DataFrame) -> pl.DataFrame:
    """A sequential plan's draws within its budget, by the votes of `labels` (`aggregate`'s
    votes and positive columns); every one finished."""
    from .study import counted_draws

    missing = [c for c in ("votes", "positive") if c not in labels.columns]
    if missing:
        raise ShapeError(
            f"labels of a sequential plan need the columns votes and positive (aggregate's); lack {missing}"
        )
    counts = check_columns(labels, "labels", {"votes": "id", "positive": "id"})
    status = counted_draws(plan, counts)
    waiting = status.filter(pl.col("counted") & (pl.col("ask") > 0))
    if waiting.height:
        first = waiting.row(0, named=True)
        raise LabelError(
            f"the study is not finished: {waiting.select('pair', 'input').n_unique():,} counted (pair, input) need "
            f"more votes (first: pair {first['pair']}, input {first['input']}, {first['votes']} votes); ask the "
            "next round's tasks (crowd.next_tasks; neuroneval crowd next)"
        )
    return status.filter("counted").select(plan.draws.columns)


def _label_column(labels: pl.DataFrame, column: str, unbounded: bool) -> pl.Series:
    """A label column as float64: numbers in [0, 1], or any finite numbers where `unbounded`."""
    dtype = labels[column].dtype
    if not (dtype.is_numeric() or dtype == pl.Boolean):
        raise LabelError(f"labels column {column!r} must hold numbers{'' if unbounded else ' in [0, 1]'}; got {dtype}")
    values = labels[column].cast(pl.Float64)
    if unbounded:
        if values.null_count() or not values.is_finite().all():
            raise ConceptRangeError(f"debiased labels (column {column!r}) must be finite numbers")
    elif values.null_count() or not values.is_between(0.0, 1.0).all():
        raise ConceptRangeError(
            "labels must lie in [0, 1] (debiased labels, from aggregate(method='debiased'), need estimator='debiased')"
        )
    return values


def _statistic(estimator: str, self_normalised: bool) -> Callable[[Array, Array, Array], Array]:
    """The estimator over the last axis (draws) of weights, activations and labels."""
    if estimator == "pearson":
        return _pearson
    return partial(_rho, self_normalised=self_normalised, debiased=estimator == "debiased")


def _bootstrap_interval(
    statistic: Callable[[Array, Array, Array], Array],
    w: Array,
    abar: Array,
    c: Array,
    resamples: int,
    rng: np.random.Generator,
    tail: float,
) -> tuple[float, float, float]:
    """SE and percentile interval from resamples of the draws (NaN with fewer than two defined)."""
    if not resamples or w.size < 2:
        return math.nan, math.nan, math.nan
    idx = rng.integers(0, w.size, size=(resamples, w.size))
    boot = statistic(w[idx], abar[idx], c[idx])
    boot = boot[np.isfinite(boot)]
    if boot.size < 2:
        return math.nan, math.nan, math.nan
    low, high = (float(v) for v in np.quantile(boot, [tail, 1.0 - tail]))
    return float(boot.std(ddof=1)), low, high


def _delta_interval(
    estimator: str, w: Array, abar: Array, c: Array, debiased: Array | None, z: float
) -> tuple[float, float, float, float]:
    """rho, SE and interval by the delta method: the plain estimator's, or the composite of the
    plug-in estimate of `c` and the debiased one of `debiased`."""
    if debiased is not None:
        plug_in, unbiased = _delta_estimate(w, abar, c, False), _delta_estimate(w, abar, debiased, True)
        rho, se, half = (float(v) for v in _composite(*plug_in, *unbiased, z))
        return rho, se, rho - half, rho + half
    value, error = _delta_estimate(w, abar, c, estimator == "debiased")
    rho = float(value)
    if not math.isfinite(rho):
        return rho, math.nan, math.nan, math.nan
    se = float(error)
    return rho, se, rho - z * se, rho + z * se


def _delta_estimate(w: Array, abar: Array, c: Array, debiased: bool) -> tuple[Array, Array]:
    """The plain estimate over the draws and its delta-method SE (NaN SE with one draw)."""
    value = _rho(w, abar, c, False, debiased)
    if w.size < 2:
        return value, np.asarray(math.nan)
    terms = _terms(w, abar, c, debiased)
    return value, _delta_se(terms.mean(axis=0), np.cov(terms, rowvar=False), w.size, debiased)
