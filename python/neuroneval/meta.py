"""Meta-evaluation 2 (SPEC section 5): how well a metric finds known correct concepts.

A unit whose correct concept is known (a class output, a superclass sum, a linear probe)
should score that concept above the others. `meta_auprc` pools every (unit, concept) score
into one average precision against "t is unit k's concept"; `tune` picks each metric's alpha
and lambda on validation units over SPEC's grids; `meta_evaluate` does the whole protocol
(seeded split, tuning on validation, meta-AUPRC on test) for a list of metrics; `ranking`
averages meta-AUPRC and ranks over several settings (the paper's Table 4).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from . import _core
from ._coerce import (
    _as_array,
    as_index_array,
    as_matrix,
    as_real_array,
    check_integer,
    check_parameter,
    check_real,
    check_sequence,
)
from ._registry import METRICS
from ._score import compute
from .errors import (
    DTypeError,
    EmptyInputError,
    LabelError,
    ParameterError,
    ShapeError,
)
from .options import SCORE_OPTIONS, Option, Options, value_error
from .params import ScoreParams, metric_list

__all__ = [
    "ALPHA_GRID",
    "LAMBDA_GRID",
    "PAPER_TABLE4",
    "SPLIT_OPTIONS",
    "TUNING_OPTIONS",
    "MetaAuprc",
    "Tuned",
    "meta_auprc",
    "meta_evaluate",
    "ranking",
    "split_units",
    "truth_matrix",
    "tune",
]

#: The seeded validation/test split of the units (`split_units`; `meta_evaluate` and
#: `neuroneval.sanity.experimental` split with it).
SPLIT_OPTIONS = Options(
    Option(
        "validation",
        "real",
        0.05,
        "the share of the units that tunes alpha and lambda",
        low=0.0,
        low_open=True,
        high=1.0,
        high_open=True,
        metavar="FRACTION",
    ),
    SCORE_OPTIONS["seed"],
)
#: alpha and lam of a run that tunes them (`meta_evaluate`, `neuroneval.sanity.experimental`):
#: the core's declarations, but no alpha (None, the default) means "tune alpha, and wpmi's
#: lambda with it"; lam only goes with a given alpha (a rule of the run, not of one option).
TUNING_OPTIONS = Options(
    replace(
        SCORE_OPTIONS["alpha"],
        default=None,
        optional=True,
        help="one alpha for every metric, or none to tune each metric's on validation",
    ),
    replace(SCORE_OPTIONS["lam"], help="wpmi's lambda; where alpha is tuned, tuned with it"),
)
#: SPEC section 5's alpha grid, searched in this order (the first best wins ties).
ALPHA_GRID: tuple[float, ...] = (0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
#: SPEC section 5's lambda grid for wpmi: 0 to 1 in steps of 0.01.
LAMBDA_GRID: tuple[float, ...] = tuple(i / 100 for i in range(101))
#: The paper's Table 4 (average meta-AUPRC, average rank over its 10 settings) for the metrics
#: it lists; f1 and iou share a row, spearman used random tie-breaking.
PAPER_TABLE4: dict[str, tuple[float, float]] = {
    "correlation": (0.8765, 1.60),
    "cosine": (0.8666, 2.30),
    "auprc": (0.8406, 3.90),
    "f1": (0.8140, 6.70),
    "iou": (0.8140, 6.70),
    "recall": (0.6722, 11.30),
    "spearman": (0.0853, 16.20),
}


@dataclass(frozen=True)
class MetaAuprc:
    """Pooled meta-AUPRC, with the number of NaN scores met (ranked below every number)."""

    value: float
    nan_scores: int
    pairs: int

    def __float__(self) -> float:
        return self.value


def truth_matrix(truth: Any, shape: tuple[int, int]) -> np.ndarray:
    """A (K, T) boolean matrix from either itself (bool or 0/1 values) or one correct concept
    index per unit (integers in [0, T); floats and bools are not indices)."""
    n_units, n_concepts = _matrix_shape(shape)
    t = _truth_array(truth)
    if t.shape == (n_units, n_concepts):
        if t.dtype != bool and not np.isin(t, (0, 1)).all():
            raise LabelError("a truth matrix must hold 0/1 or bool values")
        return t.astype(bool)
    if t.ndim == 1 and t.shape[0] == n_units:
        idx = _index_values(t)
        if idx.size and (idx.min() < 0 or idx.max() >= n_concepts):
            raise LabelError(
                f"truth must hold concept indices in [0, {n_concepts}); found {_first_outside(idx, n_concepts)}"
            )
        y = np.zeros((n_units, n_concepts), dtype=bool)
        y[np.arange(n_units), idx] = True
        return y
    raise ShapeError(f"truth must have shape {(n_units, n_concepts)} or ({n_units},); got {t.shape}")


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
    s = as_real_array(scores, "scores")
    if s.ndim != 2:
        raise ShapeError(f"scores must be 2-D (units, concepts); got shape {s.shape}")
    y = truth_matrix(truth, (s.shape[0], s.shape[1]))
    nan = np.isnan(s)
    # AP depends only on the order of the scores: rank them (ties kept), NaN below every rank (-inf too).
    flat = s.reshape(-1)
    ranks = np.full((flat.size, 1), -1.0)
    _, order = np.unique(flat[~nan.reshape(-1)], return_inverse=True)
    ranks[~nan.reshape(-1), 0] = order
    value = float(_core.rank_statistic_columns("average_precision", y.reshape(-1, 1).astype(np.float64), ranks)[0])
    return MetaAuprc(value=value, nan_scores=int(nan.sum()), pairs=int(s.size))


def split_units(
    n_units: int, validation: float | None = None, seed: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The seeded validation/test split of SPEC section 4: sorted unit indices of each part.

    The validation part has round(validation * n_units) units, at least 1, and the test
    part keeps at least 1 (`validation` and `seed`: see `SPLIT_OPTIONS`).

    Examples
    --------
    >>> val, test = split_units(40, 0.05, seed=0)
    >>> len(val), len(test), sorted(np.concatenate([val, test]).tolist()) == list(range(40))
    (2, 38, True)
    """
    try:
        n = check_integer(n_units, "n_units", minimum=2, maximum=np.iinfo(np.int64).max)
    except ParameterError as e:  # not a number of units at all, or too few: nothing to split
        raise EmptyInputError(f"a validation/test split needs at least 2 units: {e}") from e
    values = SPLIT_OPTIONS.resolve(validation=validation, seed=seed)
    n_val = min(max(1, round(values["validation"] * n)), n - 1)
    order = np.random.default_rng(values["seed"]).permutation(n)
    return np.sort(order[:n_val]), np.sort(order[n_val:])


@dataclass(frozen=True)
class Tuned:
    """A metric's parameters chosen on validation units, and the meta-AUPRC they reached there.

    `alpha` is None for metrics without a top-alpha set and `lam` None for all but wpmi.
    `tied_alphas` holds, in grid order, every alpha of the grid whose best meta-AUPRC (over
    lambda, for wpmi) equals the chosen one: ``(alpha,)`` when no tie decided, longer when
    the first-best rule did; empty for metrics without alpha.
    """

    metric: str
    alpha: float | None
    lam: float | None
    meta_auprc: float
    nan_scores: int
    tied_alphas: tuple[float, ...] = ()


def tune(
    activations: Any,
    concepts: Any,
    truth: Any,
    metrics: str | Sequence[str] | None = None,
    *,
    alphas: Sequence[float] = ALPHA_GRID,
    lams: Sequence[float] = LAMBDA_GRID,
    k: int | None = None,
    top_alpha: float | None = None,
    seed: int | None = None,
) -> dict[str, Tuned]:
    """Each metric's alpha (and wpmi's lambda) with the best meta-AUPRC on these units.

    The grids are searched in order, alpha first, and the first best wins ties. Every
    alpha costs one call that scores all alpha-using metrics together; wpmi is linear in
    lambda, so its whole lambda grid costs one more call per alpha. Metrics without
    parameters are scored once and reported with their meta-AUPRC. The top-random metrics
    keep their own sampling parameters (`k`, `top_alpha`, `seed`: `ScoreParams`' defaults).

    Parameters
    ----------
    activations, concepts : array_like, shape (N, K) and (N, T)
        The validation units and all concepts.
    truth : array_like, shape (K,) of concept indices or (K, T) of bool
    metrics : names from `neuroneval.METRICS`; all when omitted.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> c = (rng.random((400, 3)) < 0.1).astype(float)
    >>> a = c + 0.01 * rng.random((400, 3))          # unit t fires on concept t
    >>> tune(a, c, np.arange(3), ["correlation", "recall"])["recall"].meta_auprc
    1.0

    Every alpha from 0.005 on (a top set of 2 or more of the 400 inputs) ranks each unit's
    concept first: the first of them is chosen, and `tied_alphas` shows that a tie decided.

    >>> t = tune(a, c, np.arange(3), ["recall"])["recall"]
    >>> t.alpha, t.tied_alphas
    (0.005, (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5))
    """
    names = metric_list(metrics)
    alpha_grid = _grid(alphas, "alphas", "alpha")
    lam_grid = _grid(lams, "lams", "lam")
    if not alpha_grid or not lam_grid:
        raise ParameterError("the alpha and lambda grids (alphas, lams) must not be empty")
    params = ScoreParams(k=k, top_alpha=top_alpha, seed=seed)

    def scores_at(
        which: list[str], alpha: float | None = None, lam: float | None = None
    ) -> dict[str, npt.NDArray[np.float64]]:
        return compute(activations, concepts, which, alpha=alpha, lam=lam, **_sampling(params))

    tuned: dict[str, Tuned] = {}
    plain = [m for m in names if not METRICS[m].uses_alpha]
    if plain:
        for m, s in scores_at(plain).items():
            meta = meta_auprc(s, truth)
            tuned[m] = Tuned(m, None, None, meta.value, meta.nan_scores)
    with_alpha = [m for m in names if METRICS[m].uses_alpha]
    best: dict[str, tuple[float, float, float | None, int]] = {}  # metric -> (value, alpha, lam, nan)
    at_alpha: dict[str, dict[float, float]] = {m: {} for m in with_alpha}  # metric -> alpha -> best value there

    def consider(m: str, s: npt.NDArray[np.float64], alpha: float, lam: float | None) -> None:
        meta = meta_auprc(s, truth)
        if m not in best or meta.value > best[m][0]:
            best[m] = (meta.value, alpha, lam, meta.nan_scores)
        seen = at_alpha[m].get(alpha)
        if seen is None or meta.value > seen:
            at_alpha[m][alpha] = meta.value

    for alpha in alpha_grid:
        if not with_alpha:
            break
        scores = scores_at(with_alpha, alpha, 0.0)
        for m in with_alpha:
            if m != "wpmi":
                consider(m, scores[m], alpha, None)
        if "wpmi" in scores:
            s0 = scores["wpmi"]
            slope = scores_at(["wpmi"], alpha, 1.0)["wpmi"] - s0
            for lam in lam_grid:
                consider("wpmi", s0 + lam * slope, alpha, lam)
    for m in with_alpha:
        value, best_alpha, best_lam, nan = best[m]
        tied = tuple(dict.fromkeys(x for x in alpha_grid if _same(at_alpha[m][x], value)))
        tuned[m] = Tuned(m, best_alpha, best_lam, value, nan, tied)
    return {m: tuned[m] for m in names}


def _same(x: float, y: float) -> bool:
    """Equal, NaN equal to NaN (a NaN meta-AUPRC that nothing beat is still the chosen value)."""
    return x == y or (np.isnan(x) and np.isnan(y))


def meta_evaluate(
    activations: Any,
    concepts: Any,
    truth: Any,
    metrics: str | Sequence[str] | None = None,
    *,
    validation: float | None = None,
    seed: int | None = None,
    alpha: float | None = None,
    lam: float | None = None,
    k: int | None = None,
    top_alpha: float | None = None,
) -> pl.DataFrame:
    """SPEC section 5 end to end: split the units, tune on validation, meta-AUPRC on test.

    With `alpha` given, nothing is tuned: alpha and `lam` are used (`TUNING_OPTIONS`). `seed`
    seeds the split and the top-random metrics' draws (`SPLIT_OPTIONS`). Returns one
    row per metric: metric, alpha, lam, validation_meta_auprc (null when not tuned),
    meta_auprc and nan_scores on the test units, and the paper's sanity verdict.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(1)
    >>> c = (rng.random((500, 4)) < 0.2).astype(float)
    >>> a = c + 0.5 * rng.random((500, 4))
    >>> a = np.concatenate([a] * 5, axis=1)               # 20 units, unit k explains concept k % 4
    >>> table = meta_evaluate(a, c, np.arange(20) % 4, ["correlation", "recall"])
    >>> table.select("metric", "alpha", "meta_auprc").rows()
    [('correlation', None, 1.0), ('recall', 0.0001, 0.7916666666666666)]
    """
    names = metric_list(metrics)
    a = as_matrix(activations, "activations")
    _check_units(a)
    truth_idx = _truth_indices(truth, a.shape[1])
    params, tuned = _run_parameters(alpha, lam, k, top_alpha, seed)
    val, test = split_units(a.shape[1], validation, params.seed)
    if tuned:
        chosen = tune(a[:, val], concepts, truth_idx[val], names, **_sampling(params))
    else:
        chosen = {
            m: Tuned(
                m,
                params.alpha if METRICS[m].uses_alpha else None,
                params.lam if METRICS[m].uses_lambda else None,
                np.nan,
                0,
            )
            for m in names
        }
    rows = []
    for m in names:
        t = chosen[m]
        # a metric without alpha (or lambda) is scored at the default (None), as when it was tuned
        s = compute(a[:, test], concepts, [m], alpha=t.alpha, lam=t.lam, **_sampling(params))[m]
        meta = meta_auprc(s, truth_idx[test])
        rows.append(
            {
                "metric": m,
                "alpha": t.alpha,
                "lam": t.lam,
                "validation_meta_auprc": t.meta_auprc if tuned else None,
                "meta_auprc": meta.value,
                "nan_scores": meta.nan_scores,
                "passes_sanity_in_paper": METRICS[m].passes_sanity,
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "metric": pl.String,
            "alpha": pl.Float64,
            "lam": pl.Float64,
            "validation_meta_auprc": pl.Float64,
            "meta_auprc": pl.Float64,
            "nan_scores": pl.Int64,
            "passes_sanity_in_paper": pl.Boolean,
        },
    )


def ranking(results: pl.DataFrame) -> pl.DataFrame:
    """The paper's Table 4: each metric's average meta-AUPRC and average rank over settings.

    `results` has one row per (setting, metric) with columns ``setting``, ``metric`` and
    ``meta_auprc`` (e.g. `meta_evaluate`'s tables, each with a ``setting`` column added);
    every setting must hold the same metrics, each once. Within a setting the metrics are
    ranked by meta-AUPRC, 1 the highest; tied values share the mean of their ranks, and NaN
    ranks below every number (NaNs tie with each other). A metric's ``meta_auprc`` is its
    mean over the settings (NaN when one is NaN, counted in ``nan_settings``) and ``rank`` its
    mean rank. Rows are ordered by mean rank, then mean meta-AUPRC (NaN last), then first
    appearance; ``paper_meta_auprc`` and ``paper_rank`` are `PAPER_TABLE4` (null where the
    paper does not list the metric).

    Examples
    --------
    >>> results = pl.DataFrame({
    ...     "setting": ["a", "a", "a", "b", "b", "b"],
    ...     "metric": ["correlation", "recall", "f1"] * 2,
    ...     "meta_auprc": [1.0, 0.5, 0.75, 0.75, 0.75, float("nan")],
    ... })
    >>> ranking(results).select("metric", "settings", "meta_auprc", "rank", "nan_settings").rows()
    [('correlation', 2, 0.875, 1.25, 0), ('recall', 2, 0.625, 2.25, 0), ('f1', 2, nan, 2.5, 1)]
    """
    if not isinstance(results, pl.DataFrame):
        raise ParameterError(f"results must be a polars DataFrame; got {type(results).__name__}")
    missing = [c for c in ("setting", "metric", "meta_auprc") if c not in results.columns]
    if missing:
        raise ShapeError(f"results lack the column(s) {', '.join(missing)}; need setting, metric, meta_auprc")
    if results.height == 0:
        raise EmptyInputError("results are empty: no setting to rank metrics over")
    settings = list(dict.fromkeys(results["setting"].to_list()))
    metrics = list(dict.fromkeys(results["metric"].to_list()))
    values = np.full((len(settings), len(metrics)), np.nan)
    seen = np.zeros(values.shape, dtype=np.int64)
    s_index = {s: i for i, s in enumerate(settings)}
    m_index = {m: j for j, m in enumerate(metrics)}
    for setting, metric, value in results.select("setting", "metric", "meta_auprc").iter_rows():
        i, j = s_index[setting], m_index[metric]
        seen[i, j] += 1
        v = np.nan if value is None else check_real(value, "meta_auprc", finite=False)
        if np.isinf(v):
            raise ParameterError(
                f"meta_auprc of {metric!r} in setting {setting!r} is {v}; expected a number in [0, 1] or NaN"
            )
        values[i, j] = v
    if (seen != 1).any():
        i, j = np.argwhere(seen != 1)[0]
        raise ShapeError(
            f"setting {settings[i]!r} holds metric {metrics[j]!r} {seen[i, j]} times; every setting needs every metric once"
        )
    ranks = np.empty_like(values)
    for i in range(len(settings)):
        ranks[i] = _midranks_descending(values[i])
    mean_value = values.mean(axis=0)
    mean_rank = ranks.mean(axis=0)
    nan_settings = np.isnan(values).sum(axis=0)
    order = sorted(
        range(len(metrics)),
        key=lambda j: (mean_rank[j], -mean_value[j] if not np.isnan(mean_value[j]) else np.inf, j),
    )
    rows = [
        {
            "metric": metrics[j],
            "settings": len(settings),
            "meta_auprc": float(mean_value[j]),
            "rank": float(mean_rank[j]),
            "nan_settings": int(nan_settings[j]),
            "paper_meta_auprc": PAPER_TABLE4[metrics[j]][0] if metrics[j] in PAPER_TABLE4 else None,
            "paper_rank": PAPER_TABLE4[metrics[j]][1] if metrics[j] in PAPER_TABLE4 else None,
        }
        for j in order
    ]
    return pl.DataFrame(
        rows,
        schema={
            "metric": pl.String,
            "settings": pl.Int64,
            "meta_auprc": pl.Float64,
            "rank": pl.Float64,
            "nan_settings": pl.Int64,
            "paper_meta_auprc": pl.Float64,
            "paper_rank": pl.Float64,
        },
    )


def _midranks_descending(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Ranks 1..n, highest value first, ties sharing the mean of their ranks, NaN below every number."""
    key = np.where(np.isnan(values), np.inf, -values)  # ascending key; NaN (and only NaN) last
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    ranks = np.empty(values.size)
    start = 0
    while start < values.size:
        stop = start
        while stop + 1 < values.size and sorted_key[stop + 1] == sorted_key[start]:
            stop += 1
        ranks[order[start : stop + 1]] = (start + stop) / 2 + 1
        start = stop + 1
    return ranks


# --------------------------------------------------------------------------------------------
# Input rules of meta and sanity


def _run_parameters(alpha: Any, lam: Any, k: Any, top_alpha: Any, seed: Any) -> tuple[ScoreParams, bool]:
    """The scoring parameters of a run that tunes alpha unless it is given (`TUNING_OPTIONS`),
    and whether it tunes: `lam` goes only with `alpha` (without it, both are tuned together)."""
    if alpha is None and lam is not None:
        raise value_error("lam", lam, "lam is used only with alpha; without alpha, alpha and lambda are tuned together")
    given = TUNING_OPTIONS.resolve(alpha=alpha, lam=lam)
    return ScoreParams(alpha=given["alpha"], lam=given["lam"], k=k, top_alpha=top_alpha, seed=seed), alpha is None


def _sampling(params: ScoreParams) -> dict[str, Any]:
    """The top-random metrics' parameters (k, top_alpha, seed), which tuning keeps as they are."""
    return {"k": params.k, "top_alpha": params.top_alpha, "seed": params.seed}


def _check_units(a: npt.NDArray[Any]) -> None:
    """Activations with enough units (columns) for a validation/test split."""
    if a.shape[1] < 2:
        raise EmptyInputError(f"activations have {a.shape[1]} unit(s) (columns); the validation/test split needs 2")


def _grid(values: Any, name: str, field: str) -> list[float]:
    """A grid of parameter values: a sequence of real numbers, each valid as `field`."""
    grid = [check_real(v, name) for v in check_sequence(values, name)]
    for x in grid:
        check_parameter(name, **{field: x})
    return grid


def _matrix_shape(shape: Any) -> tuple[int, int]:
    """`shape` as (units, concepts)."""
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Iterable) or len(tuple(shape)) != 2:
        raise ShapeError(f"shape must be (units, concepts); got {shape!r}")
    n_units, n_concepts = tuple(shape)
    return check_integer(n_units, "shape", minimum=0), check_integer(n_concepts, "shape", minimum=0)


def _truth_array(truth: Any) -> np.ndarray:
    """`truth` as a numpy array of its own dtype (a tensor's integer indices stay integers);
    a `DTypeError` for complex, strings and objects, a `ShapeError` for ragged rows."""
    t = _as_array(truth, "truth")
    if t.dtype.kind not in "biuf":
        what = "complex values are not accepted" if t.dtype.kind == "c" else "expected concept indices or 0/1 values"
        raise DTypeError(f"truth has dtype {t.dtype}; {what}")
    return t


def _index_values(t: np.ndarray) -> npt.NDArray[np.int64]:
    """Concept indices of an integer dtype as int64 (floats and bools are not indices)."""
    if t.dtype.kind not in "iu":
        raise LabelError(f"truth must hold integer concept indices; got dtype {t.dtype}")
    return as_index_array(t, "truth")


def _first_outside(idx: npt.NDArray[np.int64], n_concepts: int) -> int:
    return int(idx[np.flatnonzero((idx < 0) | (idx >= n_concepts))[0]])


def _truth_indices(truth: Any, n_units: int) -> npt.NDArray[np.int64]:
    """One correct concept index per unit, from indices or a one-hot (K, T) matrix."""
    t = _truth_array(truth)
    if t.ndim == 2:
        if t.shape[0] != n_units:
            raise ShapeError(f"truth has {t.shape[0]} rows for {n_units} units")
        y = truth_matrix(t, (t.shape[0], t.shape[1]))
        if not (y.sum(axis=1) == 1).all():
            raise LabelError("each unit needs exactly one correct concept in a truth matrix")
        return np.asarray(y.argmax(axis=1), dtype=np.int64)
    if t.ndim != 1 or t.shape[0] != n_units:
        raise ShapeError(f"truth must have one concept index per unit ({n_units},); got shape {t.shape}")
    idx = _index_values(t)
    if idx.size and idx.min() < 0:
        raise LabelError(f"truth must hold non-negative integer concept indices; found {int(idx.min())}")
    return idx
