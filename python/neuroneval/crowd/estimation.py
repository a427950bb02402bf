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
    s1 = (w * abar * c).sum(axis=-1) / norm
    m1 = (w * c).sum(axis=-1) / norm
    if debiased:
        return _debiased_value(s1, m1)
    m2 = (w * c * c).sum(axis=-1) / norm
    return _plug_in_value(s1, m1, m2, c.max(axis=-1) > c.min(axis=-1))


def estimate(
    plan: Plan,
    labels: pl.DataFrame,
    *,
    debiased: bool = False,
    self_normalised: bool = False,
    interval: Literal["bootstrap", "delta"] = "bootstrap",
    level: float = 0.95,
    bootstrap: int = 2000,
    seed: int = 0,
) -> pl.DataFrame:
    """The importance-weighted correlation of each planned pair, with an error bar.

    rho_hat = S1 / sqrt(M2 - M1^2) with S1, M1, M2 the weighted means of abar c, c and c^2 over
    the draws (weights 1 / (N q); with `self_normalised`, divided by the sum of the weights
    instead of n). With a uniform plan it is the plain sample estimate; with every input drawn
    once it is the exact Pearson correlation. NaN when the labels are constant.

    With `debiased`, the labels are unbiased estimates of a 0/1 truth (``aggregate(...,
    method="debiased")``) and rho_hat = S1 / sqrt(M1 (1 - M1)): S1 and M1 are then unbiased
    for cov(a, y) / sd(a) and the prevalence, so the estimate converges to the true correlation
    with any number of raters per input (one included), where plug-in labels converge to an
    attenuated one (`label_attenuation`). Kept in [-1, 1]; NaN unless 0 < M1 < 1. Its interval is
    conditional on the shown inputs' labels: it is the whole uncertainty while the draws are
    few against the N inputs (a study's case), and too narrow when most inputs repeat.

    The standard error and interval come from `bootstrap` resamples of the draws (seeded;
    percentile interval), or with ``interval="delta"`` from the delta method on the means of
    the per-draw terms (rho_hat +- z se; the plain estimator only).

    Parameters
    ----------
    plan : Plan
    labels : polars.DataFrame
        pair, input, label (as `aggregate` returns): one label per drawn (pair, input), in [0, 1]
        unless `debiased`.

    Returns
    -------
    polars.DataFrame
        pair, unit, concept, unit_name, explanation, rho, se, ci_low, ci_high, draws, inputs.
    """
    plan = _check_plan(plan)
    labels = as_table(labels, "labels", "pair, input, label")
    debiased = check_flag(debiased, "debiased")
    self_normalised = check_flag(self_normalised, "self_normalised")
    if not isinstance(interval, str) or interval not in ("bootstrap", "delta"):
        raise ParameterError(f"interval must be 'bootstrap' or 'delta'; got {interval!r}")
    if interval == "delta" and self_normalised:
        raise ParameterError("interval='delta' is for the plain estimator; use the bootstrap with self_normalised")
    level = check_between(level, "level", 0.0, 1.0)
    bootstrap = check_integer(bootstrap, "bootstrap", minimum=0)
    seed = check_seed(seed)
    labels = check_columns(labels, "labels", {"pair": "id", "input": "id"})
    if "label" not in labels.columns:
        raise ShapeError("labels lack the column(s) ['label']")
    if labels.select("pair", "input").is_duplicated().any():
        raise LabelError("labels hold more than one label for some (pair, input)")
    dtype = labels["label"].dtype
    if not (dtype.is_numeric() or dtype == pl.Boolean):
        raise LabelError(f"labels column 'label' must hold numbers{'' if debiased else ' in [0, 1]'}; got {dtype}")
    lab = labels["label"].cast(pl.Float64)
    if debiased:
        if lab.null_count() or not lab.is_finite().all():
            raise ConceptRangeError("debiased labels must be finite numbers")
    elif lab.null_count() or not lab.is_between(0.0, 1.0).all():
        raise ConceptRangeError(
            "labels must lie in [0, 1] (debiased labels, from aggregate(method='debiased'), need debiased=True)"
        )
    joined = plan.draws.join(
        labels.select("pair", "input", lab.alias("label")),
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
        rho = float(_rho(w, abar, c, self_normalised, debiased))
        se = low = high = math.nan
        if interval == "delta":
            if w.size > 1 and math.isfinite(rho):
                terms = _terms(w, abar, c, debiased)
                se = float(_delta_se(terms.mean(axis=0), np.cov(terms, rowvar=False), w.size, debiased))
                low, high = rho - z * se, rho + z * se
        elif bootstrap and w.size > 1:
            rng = np.random.default_rng([seed, int(index[0])])
            idx = rng.integers(0, w.size, size=(bootstrap, w.size))
            boot = _rho(w[idx], abar[idx], c[idx], self_normalised, debiased)
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
