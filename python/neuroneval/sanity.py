"""The sanity checks of SPEC section 4: does a metric prefer the right explanation to a worse one?

Two perturbations make an explanation worse: `missing_labels` drops labels (too specific),
`extra_labels` adds labels (too general). A trustworthy metric scores the perturbed concept
lower for almost every unit (Decrease Acc >= 90%).

- `decrease_accuracy`: one metric, units with their correct concepts, one perturbation draw.
- `experimental`: the paper's experimental protocol on real units (seeded validation/test
  split, alpha and lambda tuned on validation meta-AUPRC, Decrease Acc on test).
- `theoretical`: the paper's theoretical protocol (a perfect binary unit, five gammas, many
  seeds), computed from the perturbations' exact count distributions rather than by
  drawing N Bernoulli variables per seed.
- `bootstrap_interval`: a seeded percentile bootstrap over units, which the experimental
  runs use for an interval around each Decrease Acc.

All return a `SanityResult`, which renders as the paper's Table 3, exports to polars, CSV
and markdown, and draws a bar chart.

Examples
--------
>>> from neuroneval import sanity
>>> result = sanity.theoretical(["recall", "f1"], seeds=100)
>>> result.table().select("metric", "missing_theoretical", "extra_theoretical", "passes").rows()
[('recall', 100.0, 0.0, False), ('f1', 100.0, 100.0, True)]
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from . import _core
from ._coerce import (
    as_matrix,
    as_real_array,
    check_between,
    check_flag,
    check_integer,
    check_parameter,
    check_real,
    check_seed,
    check_sequence,
)
from ._registry import METRICS
from ._score import compute
from .errors import ConceptRangeError, EmptyInputError, NonFiniteError, ParameterError, ShapeError, UnknownMetricError
from .files import write_atomic, write_files_atomic
from .meta import (
    _check_fixed_parameters,
    _check_units,
    _truth_indices,
    split_units,
    tune,
)
from .params import DEFAULT_ALPHA, DEFAULT_TOP_RANDOM_ALPHA, metric_list

__all__ = [
    "EPSILON",
    "GAMMAS",
    "PAPER_TABLE3",
    "PASS_LEVEL",
    "SanityResult",
    "bootstrap_interval",
    "decrease_accuracy",
    "experimental",
    "extra_labels",
    "missing_labels",
    "theoretical",
]

Array = npt.NDArray[np.float64]

#: A delta must be below -EPSILON (strictly) to count as a decrease.
EPSILON = 1e-3
#: A metric passes when every Decrease Acc it was tested on is at least this (percent).
PASS_LEVEL = 90.0
#: Concept prevalences of the theoretical test.
GAMMAS: tuple[float, ...] = (0.499, 0.1, 0.01, 0.001, 0.0001)
#: Columns of Table 3, in the paper's order.
COLUMNS: tuple[str, ...] = ("missing_experimental", "missing_theoretical", "extra_experimental", "extra_theoretical")

#: The paper's Table 3 (Decrease Acc %, in the order of `COLUMNS`). The spearman rows used random tie-breaking.
PAPER_TABLE3: dict[str, tuple[float, float, float, float]] = {
    "recall": (98.66, 100, 0, 0),
    "precision": (45.73, 0, 99.81, 100),
    "f1": (93.68, 100, 99.82, 100),
    "iou": (93.62, 100, 99.81, 100),
    "accuracy": (23.79, 60, 70.37, 69.68),
    "balanced_accuracy": (98.65, 100, 53.67, 60),
    "inverse_balanced_accuracy": (64.18, 60, 99.50, 100),
    "auc": (94.96, 100, 59.18, 60),
    "inverse_auc": (52.81, 60, 99.99, 100),
    "correlation": (99.41, 100, 99.92, 100),
    "correlation_top_random": (87.83, 100, 60.26, 43.64),
    "spearman": (64.05, 67.20, 49.21, 44.08),
    "spearman_top_random": (80.04, 100, 59.81, 19.68),
    "cosine": (99.45, 100, 99.26, 100),
    "wpmi": (95.89, 100, 58.84, 100),
    "mad": (59.81, 60, 99.34, 100),
    "auprc": (95.61, 100, 99.46, 100),
    "inverse_auprc": (99.15, 100, 95.58, 89.54),
}

_MISSING, _EXTRA, _BOOTSTRAP = 1, 2, 3  # stream tags: perturbations and resampling never share random numbers
#: Resamples of the bootstrap interval of an experimental Decrease Acc, and its level.
RESAMPLES = 1000
LEVEL = 0.95


# --------------------------------------------------------------------------------------------
# Perturbations


def missing_labels(concepts: Any, keep: float = 0.5, seed: int = 0) -> Array:
    """The "missing labels" perturbation: c-_i = c_i * m_i with m_i ~ Bernoulli(keep).

    Each concept column draws from its own seeded stream, so a column's perturbation does
    not depend on the other columns (or on how many there are).

    Parameters
    ----------
    concepts : array_like, shape (N, T) or (N,)
        Concept probabilities in [0, 1].
    keep : float
        Probability of keeping each label, in [0, 1] (0.5 in the paper).
    seed : int

    Examples
    --------
    >>> c = np.ones((100_000, 1))
    >>> float(missing_labels(c, keep=0.3, seed=1).mean().round(2))
    0.3
    """
    c, one_column = _concept_matrix(concepts)
    seed = check_seed(seed)
    keep = _check_keep(keep)
    out = np.empty_like(c)
    for t in range(c.shape[1]):
        m = _stream(seed, _MISSING, t).random(c.shape[0]) < keep
        out[:, t] = c[:, t] * m
    return out[:, 0] if one_column else out


def extra_labels(concepts: Any, rate: float = 2.0, seed: int = 0) -> Array:
    """The "extra labels" perturbation: c+_i = min(c_i + e_i, 1), e_i ~ Bernoulli(min(p, 1)).

    p = (rate - 1) ||c||_1 / (N - ||c||_1), so E||c+||_1 = rate ||c||_1 when p <= 1 and the
    labels are binary; chosen entries become exactly 1 (how soft concepts are handled). A
    column with ||c||_1 = N is returned unchanged.

    Parameters
    ----------
    concepts : array_like, shape (N, T) or (N,)
    rate : float
        Target ratio of label mass after and before, >= 1 (2 in the paper).
    seed : int

    Examples
    --------
    >>> c = np.zeros((100_000, 1)); c[:1000] = 1
    >>> float(extra_labels(c, rate=3.0, seed=1).sum().round(-2))
    3000.0
    """
    c, one_column = _concept_matrix(concepts)
    seed = check_seed(seed)
    rate = _check_rate(rate)
    n = c.shape[0]
    out = c.copy()
    for t in range(c.shape[1]):
        mass = float(c[:, t].sum())
        if mass >= n:
            continue
        p = min((rate - 1.0) * mass / (n - mass), 1.0)
        e = _stream(seed, _EXTRA, t).random(n) < p
        out[e, t] = 1.0
    return out[:, 0] if one_column else out


def _check_keep(keep: Any) -> float:
    return check_between(keep, "keep", 0.0, 1.0, closed="both")


def _check_rate(rate: Any) -> float:
    return check_between(rate, "rate", 1.0, math.inf, closed="left")


def _stream(seed: int, tag: int, column: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), tag, column])


def _concepts(concepts: Any) -> Array:
    """Concept probabilities as an (N, T) float64 matrix (a 1-D input is one concept)."""
    return _concept_matrix(concepts)[0]


def _concept_matrix(concepts: Any) -> tuple[Array, bool]:
    """`_concepts`, and whether the input was one 1-D concept."""
    c = as_real_array(concepts, "concepts")
    if c.ndim not in (1, 2):
        raise ShapeError(f"concepts must be 1-D or 2-D (inputs x concepts); got shape {c.shape}")
    one_column = c.ndim == 1
    if one_column:
        c = c[:, None]
    if c.shape[0] == 0 or c.shape[1] == 0:
        raise EmptyInputError(f"concepts have shape {c.shape}; need at least one input and one concept")
    bad = ~np.isfinite(c)
    if bad.any():
        i, t = np.argwhere(bad)[0]
        raise NonFiniteError(f"concepts hold a non-finite value at row {i}, column {t}")
    bad = (c < 0) | (c > 1)
    if bad.any():
        i, t = np.argwhere(bad)[0]
        raise ConceptRangeError(f"concepts hold {c[i, t]} at row {i}, column {t}; values must lie in [0, 1]")
    return c, one_column


# --------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class SanityResult:
    """Decrease Acc records of one or more sanity runs, and their renderings.

    `records` has one row per (setting, metric, perturbation[, gamma]): setting (a name such
    as "digits: class units" or "theoretical"), kind ("experimental" or "theoretical"),
    metric, perturbation ("missing" or "extra"), gamma (null except for theoretical per-gamma
    rows), decrease_acc (percent), se (its standard error over seeds, theoretical only),
    nan_deltas, units (units or seeds counted), alpha and lam (the values used), ci_low and
    ci_high (experimental only: a percentile bootstrap interval of decrease_acc over the
    counted units, `bootstrap_interval`; null when no resampling was asked for), and
    tied_alphas (tuned experimental runs, metrics with alpha: how many grid alphas reached
    the best validation meta-AUPRC, so that the first-best rule chose among them when above 1).
    """

    records: pl.DataFrame

    @staticmethod
    def concat(results: Iterable[SanityResult]) -> SanityResult:
        """One result holding the records of several runs (settings are kept apart)."""
        listed = check_sequence(results, "results")
        if not listed:
            raise EmptyInputError("results is empty: no sanity run to concatenate")
        for r in listed:
            if not isinstance(r, SanityResult):
                raise ParameterError(f"results must hold SanityResult; found {type(r).__name__}")
        return SanityResult(pl.concat([r.records for r in listed], how="vertical_relaxed"))

    def table(self) -> pl.DataFrame:
        """The paper's Table 3: one row per metric, Decrease Acc per {missing, extra} x
        {experimental, theoretical}, and `passes` (every present cell >= 90%).

        Experimental cells average the settings, as the paper does; theoretical cells are
        the mean over gammas. A cell with no run is null.
        """
        r = self.records.filter(pl.col("gamma").is_null())
        cells = (
            r.group_by("metric", "perturbation", "kind", maintain_order=True)
            .agg(pl.col("decrease_acc").mean())
            .with_columns((pl.col("perturbation") + "_" + pl.col("kind")).alias("column"))
        )
        order = [m for m in METRICS if m in set(r["metric"].to_list())]
        rows = []
        for m in order:
            row: dict[str, Any] = {"metric": m}
            for col in COLUMNS:
                hit = cells.filter((pl.col("metric") == m) & (pl.col("column") == col))["decrease_acc"]
                row[col] = float(hit[0]) if len(hit) else None
            present = [row[c] for c in COLUMNS if row[c] is not None]
            row["passes"] = bool(present) and all(v >= PASS_LEVEL for v in present)
            rows.append(row)
        schema: dict[str, Any] = {"metric": pl.String, **{c: pl.Float64 for c in COLUMNS}, "passes": pl.Boolean}
        return pl.DataFrame(rows, schema=schema)

    def to_markdown(self, paper: bool = True) -> str:
        """Table 3 as a markdown table; with `paper`, each cell shows the paper's value too."""
        paper = check_flag(paper, "paper")
        table = self.table()
        head = ["metric", "missing exp.", "missing theo.", "extra exp.", "extra theo.", "verdict"]
        if paper:
            head.append("paper's verdict")
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for row in table.iter_rows(named=True):
            ref = PAPER_TABLE3.get(row["metric"])
            cells = [row["metric"]]
            for i, col in enumerate(COLUMNS):
                v = row[col]
                text = "" if v is None else f"{v:.2f}"
                if paper and ref is not None and v is not None:
                    text += f" ({ref[i]:g})"
                cells.append(text)
            cells.append("pass" if row["passes"] else "fail")
            if paper:
                cells.append("" if ref is None else ("pass" if min(ref) >= PASS_LEVEL else "fail"))
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"

    def __str__(self) -> str:
        return self.to_markdown()

    def write(self, out: str | os.PathLike[str], chart: bool = True) -> list[Path]:
        """Write table.csv, table.md, records.csv (and chart.png) into directory `out`.

        All or none: the files are written aside and renamed into place only when every one
        of them succeeded (`chart.png` needs matplotlib: the ``plot`` extra).
        """
        chart = check_flag(chart, "chart")
        files: dict[str, Callable[[Path], object]] = {
            "table.csv": lambda p: self.table().write_csv(p),
            "table.md": lambda p: p.write_text(self.to_markdown()),
            "records.csv": lambda p: self.records.write_csv(p),
        }
        if chart:
            files["chart.png"] = self._draw
        return write_files_atomic(out, files)

    def plot(self, path: str | os.PathLike[str]) -> Path:
        """Write a bar chart of Table 3 (PNG, drawn with matplotlib without a display) with the 90% line."""
        return write_atomic(path, self._draw)

    def _draw(self, path: Path) -> None:
        try:
            from matplotlib.figure import Figure  # a bare Figure draws with Agg: no display, no global state
        except ImportError as e:
            raise ImportError("the sanity-check chart needs matplotlib: pip install 'neuroneval[plot]'") from e

        table = self.table()
        metrics = table["metric"].to_list()
        fig = Figure(figsize=(max(8.0, 0.62 * len(metrics) + 2), 6.4), dpi=110)
        ax = fig.add_subplot()
        x = np.arange(len(metrics))
        width = 0.2
        colours = ("#4c72b0", "#9ab6e0", "#dd8452", "#f2bf96")
        labels = ("missing, experimental", "missing, theoretical", "extra, experimental", "extra, theoretical")
        for i, (col, colour, label) in enumerate(zip(COLUMNS, colours, labels, strict=True)):
            values = np.array([np.nan if v is None else v for v in table[col].to_list()], dtype=np.float64)
            if np.isnan(values).all():
                continue
            ax.bar(x + (i - 1.5) * width, np.nan_to_num(values), width, color=colour, label=label)
        ax.axhline(PASS_LEVEL, color="black", linestyle="--", linewidth=1, label=f"pass: {PASS_LEVEL:g}%")
        ax.set_xticks(x, [m + (" *" if p else "") for m, p in zip(metrics, table["passes"], strict=True)])
        ax.tick_params(axis="x", labelrotation=60)
        for tick in ax.get_xticklabels():
            tick.set_horizontalalignment("right")
        ax.set_ylim(0, 105)
        ax.set_ylabel("Decrease Acc (%)")
        ax.set_title("Sanity checks (* = passes every test)")
        ax.legend(fontsize=8, ncols=3, loc="lower left", bbox_to_anchor=(0, 1.08), frameon=False)
        fig.tight_layout()
        fig.savefig(path, format="png")


_SCHEMA: dict[str, Any] = {
    "setting": pl.String,
    "kind": pl.String,
    "metric": pl.String,
    "perturbation": pl.String,
    "gamma": pl.Float64,
    "decrease_acc": pl.Float64,
    "se": pl.Float64,
    "nan_deltas": pl.Int64,
    "units": pl.Int64,
    "alpha": pl.Float64,
    "lam": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "tied_alphas": pl.Int64,
}


def _decrease(delta: Array, epsilon: float) -> tuple[float, int]:
    """Decrease Acc in percent (NaN counts as "did not decrease") and the NaN count."""
    decreased, nan = _decreased(delta, epsilon)
    return 100.0 * float(decreased.mean()), nan


def _decreased(delta: Array, epsilon: float) -> tuple[npt.NDArray[np.bool_], int]:
    """Per unit: did the score decrease (delta < -epsilon; NaN counts as no)? And the NaN count."""
    nan = np.isnan(delta)
    return np.where(nan, False, delta < -epsilon), int(nan.sum())


def bootstrap_interval(
    values: Any, *, level: float = LEVEL, resamples: int = RESAMPLES, seed: int = 0
) -> npt.NDArray[np.float64]:
    """Percentile bootstrap interval of the mean of `values` over its rows (units).

    Each of `resamples` resamples draws as many rows as there are, uniformly with
    replacement, from numpy's ``default_rng([seed, 3])`` (a stream no perturbation uses): the
    r-th resample's rows are the r-th block of ``integers(0, K, size=K)`` draws, and every
    column is resampled with the same rows. The interval is the (1 - level) / 2 and
    (1 + level) / 2 quantiles of the resampled means (numpy's default, linear interpolation).

    `values` (K >= 1 finite per-unit values, shape (K,) or (K, M), e.g. 0/1 decreases) gives the
    lower and upper ends, shape (2,) or (2, M); `level` is in (0, 1), `resamples` at least 1.

    Examples
    --------
    >>> decreased = np.array([1] * 45 + [0] * 5, dtype=float)   # Decrease Acc 90%, 50 units
    >>> (100 * bootstrap_interval(decreased, seed=0)).round(1).tolist()
    [82.0, 98.0]
    """
    v = as_real_array(values, "values")
    one_column = v.ndim == 1
    if one_column:
        v = v[:, None]
    if v.ndim != 2:
        raise ShapeError(f"values must be 1-D or 2-D (units x columns); got shape {v.shape}")
    if v.shape[0] == 0 or v.shape[1] == 0:
        raise EmptyInputError(f"values have shape {v.shape}; need at least one unit and one column")
    if not np.isfinite(v).all():
        i, j = np.argwhere(~np.isfinite(v))[0]
        raise NonFiniteError(f"values hold a non-finite value at row {i}, column {j}")
    level = check_between(level, "level", 0.0, 1.0)
    resamples = check_integer(resamples, "resamples", minimum=1)
    seed = check_seed(seed)
    rng = np.random.default_rng([seed, _BOOTSTRAP])
    n = v.shape[0]
    means = np.empty((resamples, v.shape[1]))
    block = max(1, 4_000_000 // n)  # resamples per batch: bounded memory, the same draws in the same order
    for start in range(0, resamples, block):
        r = min(block, resamples - start)
        rows = rng.integers(0, n, size=(r, n))
        counts = np.bincount((rows + n * np.arange(r)[:, None]).ravel(), minlength=r * n).reshape(r, n)
        means[start : start + r] = (counts @ v) / n
    out = np.quantile(means, [(1.0 - level) / 2.0, (1.0 + level) / 2.0], axis=0)
    return out[:, 0] if one_column else out


def _data_range(*scores: Array) -> float:
    """max - min over the finite entries of all score arrays (SPEC's range of wpmi and mad)."""
    finite = np.concatenate([s[np.isfinite(s)].ravel() for s in scores])
    return float(finite.max() - finite.min()) if finite.size else math.nan


def _value_range(metric: str, *scores: Array) -> float:
    fixed = METRICS[metric].value_range
    return fixed[1] - fixed[0] if fixed is not None else _data_range(*scores)


# --------------------------------------------------------------------------------------------
# Experimental protocol


def decrease_accuracy(
    metric: str,
    activations: Any,
    concepts: Any,
    truth: Any,
    *,
    alpha: float = DEFAULT_ALPHA,
    lam: float = 1.0,
    epsilon: float = EPSILON,
    keep: float = 0.5,
    rate: float = 2.0,
    seed: int = 0,
    k: int = 25,
    top_alpha: float = DEFAULT_TOP_RANDOM_ALPHA,
    resamples: int = RESAMPLES,
    level: float = LEVEL,
) -> SanityResult:
    """Decrease Acc of one metric under both perturbations, on units with known concepts.

    One perturbation draw of the whole concept matrix (seeded) is shared by all units. Each
    unit's delta is (s(a_k, c_pert) - s(a_k, c)) / range for its correct concept; the range
    is the metric's (SPEC section 3), or for wpmi and mad the max minus min over every entry
    of the original, missing and extra score matrices of these units. NaN deltas count as
    "did not decrease" and are reported in `nan_deltas`. `ci_low` and `ci_high` are the
    `bootstrap_interval` (at `level`, `resamples` resamples, `seed`) of the units' 0/1
    decreases, in percent; `resamples` = 0 leaves them null.

    Parameters
    ----------
    metric : str
    activations : array_like, shape (N, K)
    concepts : array_like, shape (N, T)
    truth : array_like, shape (K,)
        Each unit's correct concept index (or a one-hot (K, T) matrix).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> c = (rng.random((2000, 4)) < 0.2).astype(float)
    >>> a = c + 0.3 * rng.random((2000, 4))
    >>> r = decrease_accuracy("correlation", a, c, np.arange(4), seed=1)
    >>> r.records.select("perturbation", "decrease_acc").rows()
    [('missing', 100.0), ('extra', 100.0)]
    """
    if not isinstance(metric, str):
        raise UnknownMetricError(f"metric must be one name from neuroneval.METRICS; got {metric!r}")
    return _experimental_run(
        metric_list([metric]),
        as_matrix(activations, "activations"),
        _concepts(concepts),
        truth,
        {metric: (alpha, lam)},
        units=None,
        epsilon=epsilon,
        keep=keep,
        rate=rate,
        seed=seed,
        k=k,
        top_alpha=top_alpha,
        setting="experimental",
        resamples=resamples,
        level=level,
    )


def experimental(
    activations: Any,
    concepts: Any,
    truth: Any = None,
    metrics: str | Sequence[str] | None = None,
    *,
    alpha: float | None = None,
    lam: float | None = None,
    validation: float = 0.05,
    epsilon: float = EPSILON,
    keep: float = 0.5,
    rate: float = 2.0,
    seed: int = 0,
    truth_alpha: float = 0.005,
    k: int = 25,
    top_alpha: float = DEFAULT_TOP_RANDOM_ALPHA,
    setting: str = "experimental",
    resamples: int = RESAMPLES,
    level: float = LEVEL,
) -> SanityResult:
    """The paper's experimental sanity check on real units (SPEC section 4).

    1. Correct concepts: `truth` (one concept index per unit), or when omitted each unit's
       argmax-IoU concept at alpha = `truth_alpha` (hidden units; NaN lowest, first on ties).
    2. A seeded split: `validation` (5%) of the units for tuning, the rest for testing.
    3. Unless `alpha` is given, each metric's alpha (and wpmi's lambda) is the first best
       meta-AUPRC on the validation units over SPEC's grids (`neuroneval.meta.tune`).
    4. One perturbation draw of the concept matrix (missing and extra, seeded), shared by
       all units; Decrease Acc on the test units, with a `bootstrap_interval` over them
       (`level`, `resamples`; 0 resamples for none) in `ci_low` and `ci_high`.

    Returns a `SanityResult` whose records carry `setting`, the alpha and lambda used, and
    for tuned metrics with alpha `tied_alphas`: how many grid alphas tied for the best
    validation meta-AUPRC (above 1, the first-best rule decided among them; the `validation`
    share sets how many units tune, and few units tie often).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> c = (rng.random((3000, 5)) < 0.1).astype(float)
    >>> a = np.concatenate([c + 0.2 * rng.random((3000, 5))] * 8, axis=1)   # 40 units
    >>> r = experimental(a, c, np.arange(40) % 5, ["recall", "iou"], alpha=0.05, seed=0)
    >>> r.table().select("metric", "missing_experimental", "extra_experimental").rows()
    [('recall', 100.0, 0.0), ('iou', 100.0, 100.0)]

    Tuned instead, alpha goes to the first grid value with the best validation meta-AUPRC:
    here every unit is perfect at 0.0005 already, where the top set (2 inputs) is so small
    that iou barely moves when the concept loses half its labels.

    >>> r = experimental(a, c, np.arange(40) % 5, ["iou"], seed=0)
    >>> r.records.select("perturbation", "decrease_acc", "alpha").rows()
    [('missing', 0.0, 0.0005), ('extra', 100.0, 0.0005)]
    """
    names = metric_list(metrics)
    a = as_matrix(activations, "activations")
    c = _concepts(concepts)
    _check_units(a)
    if a.shape[0] != c.shape[0]:
        raise ShapeError(f"activations have {a.shape[0]} inputs (rows) but concepts have {c.shape[0]}")
    _check_fixed_parameters(alpha, lam, k, top_alpha)
    _check_run_parameters(epsilon, keep, rate, seed)
    if not isinstance(setting, str) or not setting.strip():
        raise ParameterError(f"setting must be a non-empty name (a str); got {setting!r}")
    val, test = split_units(a.shape[1], validation, seed)
    if truth is None:
        check_parameter("truth_alpha", alpha=truth_alpha)
        iou = compute(a, c, ["iou"], alpha=truth_alpha)["iou"]
        truth_idx = np.asarray(np.where(np.isnan(iou), -np.inf, iou).argmax(axis=1), dtype=np.int64)
    else:
        truth_idx = _truth_indices(truth, a.shape[1])
    ties: dict[str, int | None] = {}
    if alpha is None:
        chosen = tune(a[:, val], c, truth_idx[val], names, k=k, top_alpha=top_alpha, seed=seed)
        params = {m: (t.alpha or DEFAULT_ALPHA, 1.0 if t.lam is None else t.lam) for m, t in chosen.items()}
        ties = {m: len(t.tied_alphas) if t.tied_alphas else None for m, t in chosen.items()}
    else:
        params = {m: (alpha, 1.0 if lam is None else lam) for m in names}
    return _experimental_run(
        names,
        a,
        c,
        truth_idx,
        params,
        units=test,
        epsilon=epsilon,
        keep=keep,
        rate=rate,
        seed=seed,
        k=k,
        top_alpha=top_alpha,
        setting=setting,
        resamples=resamples,
        level=level,
        ties=ties,
    )


def _experimental_run(
    names: list[str],
    a: npt.NDArray[Any],
    c: Array,
    truth: Any,
    params: dict[str, tuple[float, float]],
    *,
    units: npt.NDArray[np.int64] | None,
    epsilon: float,
    keep: float,
    rate: float,
    seed: int,
    k: int,
    top_alpha: float,
    setting: str,
    resamples: int,
    level: float,
    ties: dict[str, int | None] | None = None,
) -> SanityResult:
    if a.shape[0] != c.shape[0]:
        raise ShapeError(f"activations have {a.shape[0]} inputs (rows) but concepts have {c.shape[0]}")
    truth_idx = _truth_indices(truth, a.shape[1])
    if truth_idx.size and truth_idx.max() >= c.shape[1]:
        raise ShapeError(f"truth names concept {truth_idx.max()} but there are {c.shape[1]} concepts")
    epsilon, keep, rate, seed = _check_run_parameters(epsilon, keep, rate, seed)
    for alpha, lam in params.values():
        check_parameter("alpha", alpha=alpha)
        check_parameter("lam", lam=lam)
    check_parameter("k", k=k)
    check_parameter("top_alpha", top_alpha=top_alpha)
    resamples = check_integer(resamples, "resamples", minimum=0)
    level = check_between(level, "level", 0.0, 1.0)
    if units is None:
        units = np.arange(a.shape[1])
    perturbed = {"missing": missing_labels(c, keep, seed), "extra": extra_labels(c, rate, seed)}
    pairs = np.stack([units, truth_idx[units]], axis=1)
    groups: dict[tuple[float, float], list[str]] = {}
    for m in names:
        groups.setdefault(params[m], []).append(m)
    rows: list[dict[str, Any]] = []
    flags: list[npt.NDArray[np.bool_]] = []  # per row: each counted unit's decrease
    for (alpha, lam), group in groups.items():

        def scores(
            units_of: Any, conc: Array, which: list[str], pairs: Any = None, alpha: float = alpha, lam: float = lam
        ) -> dict[str, Array]:
            return compute(
                units_of, conc, which, alpha=alpha, lam=lam, k=k, top_alpha=top_alpha, seed=seed, pairs=pairs
            )

        ranged = [m for m in group if METRICS[m].value_range is not None]
        data_ranged = [m for m in group if METRICS[m].value_range is None]
        own: dict[str, dict[str, Array]] = {}  # concept version -> metric -> scores of the truth pairs
        span: dict[str, float] = {}
        for version, conc in (("original", c), *perturbed.items()):
            own[version] = scores(a, conc, ranged, pairs) if ranged else {}
        if data_ranged:
            # The data range spans every entry of the three score matrices of these units.
            block = a[:, units]
            full = {
                version: scores(block, conc, data_ranged) for version, conc in (("original", c), *perturbed.items())
            }
            for m in data_ranged:
                span[m] = _data_range(*(full[v][m] for v in full))
                for v in full:
                    own[v][m] = full[v][m][np.arange(units.size), truth_idx[units]]
        for m in group:
            scale = span[m] if m in span else _value_range(m)
            for version in ("missing", "extra"):
                delta = (own[version][m] - own["original"][m]) / scale
                decreased, nan = _decreased(delta, epsilon)
                acc = 100.0 * float(decreased.mean())
                flags.append(decreased)
                rows.append(
                    dict(
                        setting=setting,
                        kind="experimental",
                        metric=m,
                        perturbation=version,
                        gamma=None,
                        decrease_acc=acc,
                        se=None,
                        nan_deltas=nan,
                        units=int(units.size),
                        alpha=alpha if METRICS[m].uses_alpha else None,
                        lam=lam if METRICS[m].uses_lambda else None,
                        ci_low=None,
                        ci_high=None,
                        tied_alphas=(ties or {}).get(m) if METRICS[m].uses_alpha else None,
                    )
                )
    if resamples and rows:
        # One resampling of the units for every metric and perturbation: the intervals are paired.
        ends = 100.0 * bootstrap_interval(
            np.stack(flags, axis=1).astype(np.float64), level=level, resamples=resamples, seed=seed
        )
        for row, (low, high) in zip(rows, ends.T, strict=True):
            row["ci_low"], row["ci_high"] = float(low), float(high)
    order = {m: i for i, m in enumerate(names)}
    rows.sort(key=lambda r: (order[r["metric"]], r["perturbation"] != "missing"))
    return SanityResult(pl.DataFrame(rows, schema=_SCHEMA))


# --------------------------------------------------------------------------------------------
# Theoretical protocol


def _check_run_parameters(epsilon: Any, keep: Any, rate: Any, seed: Any) -> tuple[float, float, float, int]:
    """The counting and perturbation parameters of a run, checked before any work: epsilon, keep, rate, seed."""
    epsilon = check_between(epsilon, "epsilon", 0.0, math.inf, closed="left")
    return epsilon, _check_keep(keep), _check_rate(rate), check_seed(seed)


def _table_scores(n: Any, n11: Any, n10: Any, n01: Any, metrics: list[str], lam: float) -> dict[str, Array]:
    """The core's scores of 2x2 tables (`_core.table_scores`: the pair kernel's formulas for a
    binary unit, used as already binarised, against a binary concept), counts broadcast."""
    counts = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (n, n11, n10, n01)))
    n_, n11_, n10_, n01_ = (np.ascontiguousarray(c.reshape(-1)) for c in counts)
    values = _core.table_scores(n_, n11_, n10_, n01_, metrics, lam)
    return {m: v.reshape(counts[0].shape) for m, v in zip(metrics, values, strict=True)}


def theoretical(
    metrics: str | Sequence[str] | None = None,
    *,
    n: int = 500_000,
    gammas: Sequence[float] = GAMMAS,
    seeds: int = 1000,
    keep: float = 0.5,
    rate: float = 2.0,
    lam: float = 1.0,
    k: int = 25,
    epsilon: float = EPSILON,
    seed: int = 0,
) -> SanityResult:
    """The paper's theoretical sanity check (SPEC section 4), exactly and in milliseconds.

    A perfect unit a = c with its first floor(gamma n) inputs 1 and the rest 0. Each seed
    perturbs c; the score decreased or it did not. Every metric of a binary unit against a
    binary concept is a function of their 2x2 table (the pair kernel's formulas, applied by the
    core to the counts: `_core.table_scores`), and the perturbations
    only move counts: missing labels keep X ~ Binomial(P, keep) of the P labels, extra labels
    add E ~ Binomial(n - P, min(p, 1)). So each seed draws two binomials instead of n
    Bernoulli variables, with the same distribution of every score. The top-random metrics
    draw their subset's composition from the matching hypergeometric distributions: min(k, P)
    inputs of the top set {a = 1} and k of all n, the same subset for the original and both
    perturbed concepts of a seed (as a unit's seed fixes it).

    wpmi uses `lam` (1); the data range of wpmi and mad spans all scores of the run (every
    gamma and seed, original and perturbed). Records hold each gamma's Decrease Acc with its
    standard error over seeds, and the mean over gammas (gamma null).

    Examples
    --------
    >>> r = theoretical(["accuracy"], seeds=2000, seed=3)
    >>> r.records.filter(pl.col("gamma").is_not_null(), perturbation="missing")["decrease_acc"].to_list()
    [100.0, 100.0, 100.0, 0.0, 0.0]
    """
    names = metric_list(metrics)
    n = check_integer(n, "n", minimum=2)
    seeds = check_integer(seeds, "seeds", minimum=1)
    gamma_list = [check_real(g, "gammas") for g in check_sequence(gammas, "gammas")]
    if not gamma_list:
        raise EmptyInputError("no gamma was given")
    for g in gamma_list:
        if not (0.0 < g < 1.0 and math.floor(g * n) >= 1):
            raise ParameterError(f"gamma {g} must lie in (0, 1) and give at least one positive input at n = {n}")
    epsilon, keep, rate, seed = _check_run_parameters(epsilon, keep, rate, seed)
    check_parameter("k", k=k)
    check_parameter("lam", lam=lam)

    # scores[version][metric] has shape (gammas, seeds)
    scores: dict[str, dict[str, list[Array]]] = {v: {m: [] for m in names} for v in ("original", "missing", "extra")}
    for gi, g in enumerate(gamma_list):
        rng = np.random.default_rng([int(seed), gi])
        p_count = math.floor(g * n)
        kept = rng.binomial(p_count, keep, size=seeds)
        p_extra = min((rate - 1.0) * p_count / (n - p_count), 1.0)
        added = rng.binomial(n - p_count, p_extra, size=seeds)
        tables = {
            "original": (p_count, 0, 0),
            "missing": (kept, p_count - kept, 0),
            "extra": (p_count, 0, added),
        }
        subset = _top_random_subsets(rng, n, p_count, kept, added, k, seeds)
        for version, (n11, n10, n01) in tables.items():
            plain = [m for m in names if not METRICS[m].uses_sampling]
            values = _table_scores(n, n11, n10, n01, plain, lam)
            for m in names:
                if METRICS[m].uses_sampling:
                    n11s, n10s, n01s = subset[version]
                    s = _table_scores(subset["size"], n11s, n10s, n01s, ["correlation"], 1.0)["correlation"]
                else:
                    s = values[m]
                scores[version][m].append(np.broadcast_to(s, (seeds,)).astype(np.float64))
    rows = []
    for m in names:
        orig, miss, extra = (np.stack(scores[v][m]) for v in ("original", "missing", "extra"))
        scale = _value_range(m, orig, miss, extra)
        for version, pert in (("missing", miss), ("extra", extra)):
            per_gamma = []
            nan_total = 0
            for gi, g in enumerate(gamma_list):
                acc, nan = _decrease((pert[gi] - orig[gi]) / scale, epsilon)
                se = 100.0 * math.sqrt((acc / 100) * (1 - acc / 100) / seeds)
                per_gamma.append((acc, se))
                nan_total += nan
                rows.append(_theory_row(m, version, g, acc, se, nan, seeds, lam))
            mean = float(np.mean([a for a, _ in per_gamma]))
            mean_se = math.sqrt(sum(s * s for _, s in per_gamma)) / len(per_gamma)
            rows.append(_theory_row(m, version, None, mean, mean_se, nan_total, seeds * len(gamma_list), lam))
    return SanityResult(pl.DataFrame(rows, schema=_SCHEMA))


def _theory_row(
    metric: str, version: str, gamma: float | None, acc: float, se: float, nan: int, count: int, lam: float
) -> dict[str, Any]:
    return dict(
        setting="theoretical",
        kind="theoretical",
        metric=metric,
        perturbation=version,
        gamma=gamma,
        decrease_acc=acc,
        se=se,
        nan_deltas=nan,
        units=count,
        alpha=None,
        lam=lam if METRICS[metric].uses_lambda else None,
        ci_low=None,
        ci_high=None,
        tied_alphas=None,
    )


def _top_random_subsets(
    rng: np.random.Generator,
    n: int,
    p_count: int,
    kept: npt.NDArray[np.int64],
    added: npt.NDArray[np.int64],
    k: int,
    seeds: int,
) -> dict[str, Any]:
    """2x2 tables of each seed's top-random subset, for the original and both perturbations.

    The subset is min(k, P) draws without replacement from the top set {a = 1} plus k draws
    without replacement from all n inputs (duplicates kept). Which inputs it holds is shared
    by the three concept versions; only their labels differ.
    """
    top, k = min(k, p_count), min(k, n)
    # Second half: how many of the k draws fall in {a = 1}.
    from_top = rng.hypergeometric(p_count, n - p_count, k, size=seeds)
    from_rest = k - from_top
    # Missing labels: of the subset's a = 1 inputs, those whose label was kept.
    kept_first = rng.hypergeometric(kept, p_count - kept, top) if top else np.zeros(seeds, dtype=np.int64)
    kept_second = _hypergeometric(rng, kept, p_count - kept, from_top)
    # Extra labels: of the subset's a = 0 inputs, those that gained a label.
    gained = _hypergeometric(rng, added, n - p_count - added, from_rest)
    ones = top + from_top
    return {
        "size": top + k,
        "original": (ones, 0, 0),
        "missing": (kept_first + kept_second, ones - kept_first - kept_second, 0),
        "extra": (ones, 0, gained),
    }


def _hypergeometric(
    rng: np.random.Generator, good: npt.NDArray[np.int64], bad: Any, sample: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """numpy's hypergeometric, allowing a zero sample (it would reject ngood + nbad = 0)."""
    good = np.broadcast_to(good, sample.shape)
    bad = np.broadcast_to(bad, sample.shape)
    out = np.zeros(sample.shape, dtype=np.int64)
    draw = sample > 0
    if draw.any():
        out[draw] = rng.hypergeometric(good[draw], bad[draw], sample[draw])
    return out
