"""The importance-weighted correlation of a plan's labels, with a standard error and a
confidence interval (SPEC section 6)."""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any, Literal

import numpy as np
import polars as pl

from .._coerce import (
    as_table,
    check_between,
    check_columns,
    check_flag,
    check_integer,
    check_seed,
)
from ..errors import ConceptRangeError, LabelError, ParameterError, ShapeError
from .sampling import Array, Plan, _check_plan

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


#: The estimators of `estimate`: SPEC's plug-in, the debiased one, their composite, and the
#: weighted Pearson correlation of the draws.
ESTIMATORS = ("plug-in", "debiased", "composite", "pearson")


def estimate(
    plan: Plan,
    labels: pl.DataFrame,
    *,
    estimator: Literal["plug-in", "debiased", "composite", "pearson"] = "plug-in",
    self_normalised: bool = False,
    interval: Literal["bootstrap", "delta", "fisher"] | None = None,
    level: float = 0.95,
    bootstrap: int = 2000,
    seed: int = 0,
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
    bootstrap, and the delta method for the composite.

    Parameters
    ----------
    plan : Plan
    labels : polars.DataFrame
        pair, input, label (as `aggregate` returns): one label per drawn (pair, input), in [0, 1]
        unless debiased; for the composite also the debiased column.

    Returns
    -------
    polars.DataFrame
        pair, unit, concept, unit_name, explanation, rho, se, ci_low, ci_high, draws, inputs.
    """
    plan = _check_plan(plan)
    labels = as_table(labels, "labels", "pair, input, label")
    if not isinstance(estimator, str) or estimator not in ESTIMATORS:
        raise ParameterError(f"estimator must be 'plug-in', 'debiased', 'composite' or 'pearson'; got {estimator!r}")
    self_normalised = check_flag(self_normalised, "self_normalised")
    if interval is None:
        interval = "delta" if estimator == "composite" else "fisher" if estimator == "pearson" else "bootstrap"
    if not isinstance(interval, str) or interval not in ("bootstrap", "delta", "fisher"):
        raise ParameterError(f"interval must be 'bootstrap', 'delta' or 'fisher'; got {interval!r}")
    if interval == "delta" and self_normalised:
        raise ParameterError("interval='delta' is for the plain estimator; use the bootstrap with self_normalised")
    if estimator == "pearson" and interval == "delta":
        raise ParameterError("the pearson estimator's interval is fisher's (the default) or the bootstrap's")
    if interval == "fisher" and estimator != "pearson":
        raise ParameterError("interval='fisher' is the pearson estimator's")
    if estimator == "composite" and (interval != "delta" or self_normalised):
        raise ParameterError("the composite estimator takes the plain weights and the delta interval")
    level = check_between(level, "level", 0.0, 1.0)
    bootstrap = check_integer(bootstrap, "bootstrap", minimum=0)
    seed = check_seed(seed)
    labels = check_columns(labels, "labels", {"pair": "id", "input": "id"})
    columns = {"label": estimator == "debiased"} | ({"debiased": True} if estimator == "composite" else {})
    missing = [c for c in columns if c not in labels.columns]
    if missing:
        hint = " (from aggregate(method='composite'))" if estimator == "composite" else ""
        raise ShapeError(f"labels lack the column(s) {missing}{hint}")
    if labels.select("pair", "input").is_duplicated().any():
        raise LabelError("labels hold more than one label for some (pair, input)")
    values = {}
    for column, unbounded in columns.items():
        dtype = labels[column].dtype
        if not (dtype.is_numeric() or dtype == pl.Boolean):
            raise LabelError(
                f"labels column {column!r} must hold numbers{'' if unbounded else ' in [0, 1]'}; got {dtype}"
            )
        lab = labels[column].cast(pl.Float64)
        if unbounded:
            if lab.null_count() or not lab.is_finite().all():
                raise ConceptRangeError(f"debiased labels (column {column!r}) must be finite numbers")
        elif lab.null_count() or not lab.is_between(0.0, 1.0).all():
            raise ConceptRangeError(
                "labels must lie in [0, 1] (debiased labels, from aggregate(method='debiased'), need "
                "estimator='debiased')"
            )
        values[column] = lab
    joined = plan.draws.join(
        labels.select("pair", "input", *(v.alias(c) for c, v in values.items())),
        on=["pair", "input"],
        how="left",
        maintain_order="left",
    )
    unlabelled = joined.filter(pl.col("label").is_null()).select("pair", "input").unique()
    if unlabelled.height:
        first = unlabelled.row(0, named=True)
        raise LabelError(
            f"{unlabelled.height} drawn (pair, input) have no label (first: pair {first['pair']}, input {first['input']})"
        )
    rows = []
    tail = (1.0 - level) / 2.0
    z = NormalDist().inv_cdf(1.0 - tail)
    for index, group in joined.partition_by("pair", as_dict=True, maintain_order=True).items():
        w = group["weight"].to_numpy()
        abar = group["abar"].to_numpy()
        c = group["label"].to_numpy()
        debiased = estimator == "debiased"
        se = low = high = math.nan
        if estimator == "composite":
            parts = [
                _delta_estimate(w, abar, x, flag) for x, flag in ((c, False), (group["debiased"].to_numpy(), True))
            ]
            rho, se, half = (float(v) for v in _composite(*parts[0], *parts[1], z))
            low, high = rho - half, rho + half
        elif interval == "delta":
            value, error = _delta_estimate(w, abar, c, debiased)
            rho = float(value)
            if math.isfinite(rho):
                se = float(error)
                low, high = rho - z * se, rho + z * se
        elif estimator == "pearson":
            rho = float(_pearson(w, abar, c))
            if interval == "fisher":
                se, low, high = _fisher_interval(rho, w, z)
        else:
            rho = float(_rho(w, abar, c, self_normalised, debiased))
        if interval == "bootstrap" and bootstrap and w.size > 1:
            rng = np.random.default_rng([seed, int(index[0])])
            idx = rng.integers(0, w.size, size=(bootstrap, w.size))
            boot = (
                _pearson(w[idx], abar[idx], c[idx])
                if estimator == "pearson"
                else _rho(w[idx], abar[idx], c[idx], self_normalised, debiased)
            )
            boot = boot[np.isfinite(boot)]
            if boot.size > 1:
                se = float(boot.std(ddof=1))
                low, high = (float(v) for v in np.quantile(boot, [tail, 1.0 - tail]))
        rows.append(
            {
                "pair": int(index[0]),
                "rho": rho,
                "se": se,
                "ci_low": low,
                "ci_high": high,
                "draws": w.size,
                "inputs": int(group["input"].n_unique()),
            }
        )
    result = pl.DataFrame(rows)
    return plan.pairs.join(result, on="pair", how="left", maintain_order="left")


def _delta_estimate(w: Array, abar: Array, c: Array, debiased: bool) -> tuple[Array, Array]:
    """The plain estimate over the draws and its delta-method SE (NaN SE with one draw)."""
    value = _rho(w, abar, c, False, debiased)
    if w.size < 2:
        return value, np.asarray(math.nan)
    terms = _terms(w, abar, c, debiased)
    return value, _delta_se(terms.mean(axis=0), np.cov(terms, rowvar=False), w.size, debiased)
