"""The importance-weighted correlation of a plan's labels, with a standard error and a
confidence interval (SPEC section 6)."""

from __future__ import annotations

import math

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
from ..errors import ConceptRangeError, LabelError, ShapeError
from .sampling import Array, Plan, _check_plan

# --------------------------------------------------------------------------------------------
# Estimation


def _rho(w: Array, abar: Array, c: Array, self_normalised: bool) -> Array:
    """SPEC section 6's estimator over the last axis (draws).

    NaN when the drawn labels are all equal (the correlation is then undefined: the plain
    estimator's M2 - M1^2 would not even be 0, as its weights need not average 1) or when the
    estimated variance is not positive.
    """
    norm = w.sum(axis=-1) if self_normalised else np.full(w.shape[:-1], float(w.shape[-1]))
    s1 = (w * abar * c).sum(axis=-1) / norm
    m1 = (w * c).sum(axis=-1) / norm
    m2 = (w * c * c).sum(axis=-1) / norm
    var = m2 - m1 * m1
    defined = (var > 0) & (c.max(axis=-1) > c.min(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        out: Array = np.where(defined, s1 / np.sqrt(np.where(defined, var, 1.0)), np.nan)
    return out


def estimate(
    plan: Plan,
    labels: pl.DataFrame,
    *,
    self_normalised: bool = False,
    level: float = 0.95,
    bootstrap: int = 2000,
    seed: int = 0,
) -> pl.DataFrame:
    """The importance-weighted correlation of each planned pair, with an error bar.

    rho_hat = S1 / sqrt(M2 - M1^2) with S1, M1, M2 the weighted means of abar c, c and c^2 over
    the draws (weights 1 / (N q); with `self_normalised`, divided by the sum of the weights
    instead of n). With a uniform plan it is the plain sample estimate; with every input drawn
    once it is the exact Pearson correlation. The standard error and the percentile interval
    come from `bootstrap` resamples of the draws (seeded); NaN when the labels are constant.

    Parameters
    ----------
    plan : Plan
    labels : polars.DataFrame
        pair, input, label in [0, 1] (as `aggregate` returns): one label per drawn (pair, input).

    Returns
    -------
    polars.DataFrame
        pair, unit, concept, unit_name, explanation, rho, se, ci_low, ci_high, draws, inputs.
    """
    plan = _check_plan(plan)
    labels = as_table(labels, "labels", "pair, input, label")
    self_normalised = check_flag(self_normalised, "self_normalised")
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
        raise LabelError(f"labels column 'label' must hold numbers in [0, 1]; got {dtype}")
    lab = labels["label"].cast(pl.Float64)
    if lab.null_count() or not lab.is_between(0.0, 1.0).all():
        raise ConceptRangeError("labels must lie in [0, 1]")
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
    for index, group in joined.partition_by("pair", as_dict=True, maintain_order=True).items():
        w = group["weight"].to_numpy()
        abar = group["abar"].to_numpy()
        c = group["label"].to_numpy()
        rho = float(_rho(w, abar, c, self_normalised))
        se = low = high = math.nan
        if bootstrap and w.size > 1:
            rng = np.random.default_rng([seed, int(index[0])])
            idx = rng.integers(0, w.size, size=(bootstrap, w.size))
            boot = _rho(w[idx], abar[idx], c[idx], self_normalised)
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
