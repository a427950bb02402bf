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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from . import _core
from ._coerce import as_matrix, as_real_array, check_flag, check_real, check_sequence
from ._registry import METRICS
from ._score import compute
from .errors import ConceptRangeError, EmptyInputError, NonFiniteError, ParameterError, ShapeError, UnknownMetricError
from .files import write_atomic, write_files_atomic
from .meta import _check_units, _run_parameters, _sampling, _truth_indices, split_units, tune
from .options import LEVEL, SCORE_OPTIONS, Option, Options, value_error
from .params import ScoreParams, metric_list

__all__ = [
    "BOOTSTRAP_OPTIONS",
    "DECREASE_OPTIONS",
    "EXPERIMENTAL_OPTIONS",
    "GAMMAS",
    "PAPER_TABLE3",
    "PASS_LEVEL",
    "PERTURBATION_OPTIONS",
    "THEORETICAL_OPTIONS",
    "SanityResult",
    "bootstrap_interval",
    "decrease_accuracy",
    "experimental",
    "extra_labels",
    "missing_labels",
    "theoretical",
]

Array = npt.NDArray[np.float64]

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

#: The perturbations (`missing_labels`, `extra_labels`, and every test that draws them).
PERTURBATION_OPTIONS = Options(
    Option("keep", "real", 0.5, "missing labels: the probability of keeping each label", low=0, high=1),
    Option("rate", "real", 2.0, "extra labels: the expected label mass after over before", low=1),
    SCORE_OPTIONS["seed"],
)
#: The percentile bootstrap interval over units (`bootstrap_interval`).
BOOTSTRAP_OPTIONS = Options(
    replace(LEVEL, help="the bootstrap interval's coverage"),
    Option("resamples", "integer", 1000, "resamples of the units in the bootstrap interval", low=1),
    SCORE_OPTIONS["seed"],
)
#: How a test counts decreases (a delta below -epsilon, strictly), and the interval the
#: experimental tests put around each Decrease Acc (none with 0 resamples).
DECREASE_OPTIONS = Options(
    Option("epsilon", "real", 1e-3, "a delta below -epsilon counts as a decrease", low=0),
    replace(BOOTSTRAP_OPTIONS["resamples"], low=0, rule="", help="resamples of the units in each interval (0: none)"),
    BOOTSTRAP_OPTIONS["level"],
)
#: The experimental test's own options (`experimental`).
EXPERIMENTAL_OPTIONS = Options(
    Option(
        "truth_alpha", "real", 0.005, "alpha of the argmax-IoU concepts taken as correct", low=0, low_open=True, high=1
    ),
    Option("setting", "text", "experimental", "the experimental test's name in the records", metavar="NAME"),
)
#: The theoretical test's perfect unit (`theoretical`).
THEORETICAL_OPTIONS = Options(
    Option("n", "integer", 500_000, "inputs of the theoretical test's perfect unit", low=2),
    Option("seeds", "integer", 1000, "perturbation draws of the theoretical test, per gamma", low=1),
)


# --------------------------------------------------------------------------------------------
# Perturbations


def missing_labels(concepts: Any, keep: float | None = None, seed: int | None = None) -> Array:
    """The "missing labels" perturbation: c-_i = c_i * m_i with m_i ~ Bernoulli(keep).

    Each concept column draws from its own seeded stream, so a column's perturbation does
    not depend on the other columns (or on how many there are).

    Parameters
    ----------
    concepts : array_like, shape (N, T) or (N,)
        Concept probabilities in [0, 1].
    keep, seed : float, int
        Probability of keeping each label (the paper's 0.5 by default: `PERTURBATION_OPTIONS`).

    Examples
    --------
    >>> c = np.ones((100_000, 1))
    >>> float(missing_labels(c, keep=0.3, seed=1).mean().round(2))
    0.3
    """
    c, one_column = _concept_matrix(concepts)
    values = PERTURBATION_OPTIONS.resolve(keep=keep, seed=seed)
    out = np.empty_like(c)
    for t in range(c.shape[1]):
        m = _stream(values["seed"], _MISSING, t).random(c.shape[0]) < values["keep"]
        out[:, t] = c[:, t] * m
    return out[:, 0] if one_column else out


def extra_labels(concepts: Any, rate: float | None = None, seed: int | None = None) -> Array:
    """The "extra labels" perturbation: c+_i = min(c_i + e_i, 1), e_i ~ Bernoulli(min(p, 1)).

    p = (rate - 1) ||c||_1 / (N - ||c||_1), so E||c+||_1 = rate ||c||_1 when p <= 1 and the
    labels are binary; chosen entries become exactly 1 (how soft concepts are handled). A
    column with ||c||_1 = N is returned unchanged.

    Parameters
    ----------
    concepts : array_like, shape (N, T) or (N,)
    rate, seed : float, int
        Target ratio of label mass after and before (the paper's 2 by default: `PERTURBATION_OPTIONS`).

    Examples
    --------
    >>> c = np.zeros((100_000, 1)); c[:1000] = 1
    >>> float(extra_labels(c, rate=3.0, seed=1).sum().round(-2))
    3000.0
    """
    c, one_column = _concept_matrix(concepts)
    values = PERTURBATION_OPTIONS.resolve(rate=rate, seed=seed)
    n = c.shape[0]
    out = c.copy()
    for t in range(c.shape[1]):
        mass = float(c[:, t].sum())
        if mass >= n:
            continue
        p = min((values["rate"] - 1.0) * mass / (n - mass), 1.0)
        e = _stream(values["seed"], _EXTRA, t).random(n) < p
        out[e, t] = 1.0
    return out[:, 0] if one_column else out


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
    values: Any, *, level: float | None = None, resamples: int | None = None, seed: int | None = None
) -> npt.NDArray[np.float64]:
    """Percentile bootstrap interval of the mean of `values` over its rows (units).

    Each of `resamples` resamples draws as many rows as there are, uniformly with
    replacement, from numpy's ``default_rng([seed, 3])`` (a stream no perturbation uses): the
    r-th resample's rows are the r-th block of ``integers(0, K, size=K)`` draws, and every
    column is resampled with the same rows. The interval is the (1 - level) / 2 and
    (1 + level) / 2 quantiles of the resampled means (numpy's default, linear interpolation).

    `values` (K >= 1 finite per-unit values, shape (K,) or (K, M), e.g. 0/1 decreases) gives the
    lower and upper ends, shape (2,) or (2, M); `level`, `resamples` and `seed`: see `BOOTSTRAP_OPTIONS`.

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
    options = BOOTSTRAP_OPTIONS.resolve(level=level, resamples=resamples, seed=seed)
    level, resamples = options["level"], options["resamples"]
    rng = np.random.default_rng([options["seed"], _BOOTSTRAP])
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
    alpha: float | None = None,
    lam: float | None = None,
    epsilon: float | None = None,
    keep: float | None = None,
    rate: float | None = None,
    seed: int | None = None,
    k: int | None = None,
    top_alpha: float | None = None,
    resamples: int | None = None,
    level: float | None = None,
) -> SanityResult:
    """Decrease Acc of one metric under both perturbations, on units with known concepts.

    One perturbation draw of the whole concept matrix (seeded) is shared by all units. Each
    unit's delta is (s(a_k, c_pert) - s(a_k, c)) / range for its correct concept; the range
    is the metric's (SPEC section 3), or for wpmi and mad the max minus min over every entry
    of the original, missing and extra score matrices of these units. NaN deltas count as
    "did not decrease" and are reported in `nan_deltas`. `ci_low` and `ci_high` are the
    `bootstrap_interval` (at `level`, `resamples` resamples, `seed`) of the units' 0/1
    decreases, in percent; `resamples` = 0 leaves them null. Defaults: `ScoreParams`,
    `PERTURBATION_OPTIONS` and `DECREASE_OPTIONS`.

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
    names = metric_list([metric])
    a, c = as_matrix(activations, "activations"), _concepts(concepts)
    params = ScoreParams(alpha=alpha, lam=lam, k=k, top_alpha=top_alpha, seed=seed)
    run = _run_options(keep, rate, seed, epsilon, resamples, level)
    setting = EXPERIMENTAL_OPTIONS["setting"].default
    return _experimental_run(names, a, c, truth, {metric: params}, run, units=None, setting=setting)


def experimental(
    activations: Any,
    concepts: Any,
    truth: Any = None,
    metrics: str | Sequence[str] | None = None,
    *,
    alpha: float | None = None,
    lam: float | None = None,
    validation: float | None = None,
    epsilon: float | None = None,
    keep: float | None = None,
    rate: float | None = None,
    seed: int | None = None,
    truth_alpha: float | None = None,
    k: int | None = None,
    top_alpha: float | None = None,
    setting: str | None = None,
    resamples: int | None = None,
    level: float | None = None,
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

    Defaults: `ScoreParams`, `neuroneval.meta.TUNING_OPTIONS` (alpha and lam) and
    `neuroneval.meta.SPLIT_OPTIONS` (validation), `PERTURBATION_OPTIONS`, `DECREASE_OPTIONS`
    and `EXPERIMENTAL_OPTIONS`. Returns a `SanityResult` whose records carry `setting`, the
    alpha and lambda used, and for tuned metrics with alpha `tied_alphas`: how many grid alphas
    tied for the best validation meta-AUPRC (above 1, the first-best rule decided among them;
    the `validation` share sets how many units tune, and few units tie often).

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
    params, tuned = _run_parameters(alpha, lam, k, top_alpha, seed)
    run = _run_options(keep, rate, seed, epsilon, resamples, level)
    own = EXPERIMENTAL_OPTIONS.resolve(truth_alpha=truth_alpha, setting=setting)
    val, test = split_units(a.shape[1], validation, params.seed)
    if truth is None:
        iou = compute(a, c, ["iou"], alpha=own["truth_alpha"])["iou"]
        truth_idx = np.asarray(np.where(np.isnan(iou), -np.inf, iou).argmax(axis=1), dtype=np.int64)
    else:
        truth_idx = _truth_indices(truth, a.shape[1])
    per_metric = {m: params for m in names}
    ties: dict[str, int | None] = {}
    if tuned:
        chosen = tune(a[:, val], c, truth_idx[val], names, **_sampling(params))
        per_metric = {m: params.replace(alpha=t.alpha, lam=t.lam) for m, t in chosen.items()}
        ties = {m: len(t.tied_alphas) if t.tied_alphas else None for m, t in chosen.items()}
    return _experimental_run(names, a, c, truth_idx, per_metric, run, units=test, setting=own["setting"], ties=ties)


def _run_options(keep: Any, rate: Any, seed: Any, epsilon: Any, resamples: Any, level: Any) -> dict[str, Any]:
    """A test's perturbations (`PERTURBATION_OPTIONS`) and counting (`DECREASE_OPTIONS`), checked before any work."""
    drawn = PERTURBATION_OPTIONS.resolve(keep=keep, rate=rate, seed=seed)
    return {**drawn, **DECREASE_OPTIONS.resolve(epsilon=epsilon, resamples=resamples, level=level)}


def _experimental_run(
    names: list[str],
    a: npt.NDArray[Any],
    c: Array,
    truth: Any,
    params: dict[str, ScoreParams],
    run: dict[str, Any],
    *,
    units: npt.NDArray[np.int64] | None,
    setting: str,
    ties: dict[str, int | None] | None = None,
) -> SanityResult:
    """Decrease Acc of each metric with its parameters (`params`) on `units` (all when None),
    from one perturbation draw of `c`; `run` holds the checked `_run_options`."""
    truth_idx = _correct_concepts(truth, a, c)
    units = np.arange(a.shape[1]) if units is None else units
    versions = {
        "original": c,
        "missing": missing_labels(c, run["keep"], run["seed"]),
        "extra": extra_labels(c, run["rate"], run["seed"]),
    }
    groups: dict[ScoreParams, list[str]] = {}  # metrics scored together: those with the same parameters
    for m in names:
        groups.setdefault(params[m], []).append(m)
    rows: list[dict[str, Any]] = []
    flags: list[npt.NDArray[np.bool_]] = []  # per row: each counted unit's decrease
    for p, group in groups.items():
        own, scale = _truth_scores(a, versions, group, p, units, truth_idx)
        for m in group:
            for version in ("missing", "extra"):
                decreased, nan = _decreased((own[version][m] - own["original"][m]) / scale[m], run["epsilon"])
                flags.append(decreased)
                rows.append(_experimental_row(setting, m, version, decreased, nan, p, (ties or {}).get(m)))
    if run["resamples"] and rows:
        # One resampling of the units for every metric and perturbation: the intervals are paired.
        flat = np.stack(flags, axis=1).astype(np.float64)
        ends = 100.0 * bootstrap_interval(flat, level=run["level"], resamples=run["resamples"], seed=run["seed"])
        for row, (low, high) in zip(rows, ends.T, strict=True):
            row["ci_low"], row["ci_high"] = float(low), float(high)
    order = {m: i for i, m in enumerate(names)}
    rows.sort(key=lambda r: (order[r["metric"]], r["perturbation"] != "missing"))
    return SanityResult(pl.DataFrame(rows, schema=_SCHEMA))


def _correct_concepts(truth: Any, a: npt.NDArray[Any], c: Array) -> npt.NDArray[np.int64]:
    """Each unit's correct concept index, checked against the activations and concepts."""
    if a.shape[0] != c.shape[0]:
        raise ShapeError(f"activations have {a.shape[0]} inputs (rows) but concepts have {c.shape[0]}")
    truth_idx = _truth_indices(truth, a.shape[1])
    if truth_idx.size and truth_idx.max() >= c.shape[1]:
        raise ShapeError(f"truth names concept {truth_idx.max()} but there are {c.shape[1]} concepts")
    return truth_idx


def _truth_scores(
    a: npt.NDArray[Any],
    versions: dict[str, Array],
    group: list[str],
    params: ScoreParams,
    units: npt.NDArray[np.int64],
    truth_idx: npt.NDArray[np.int64],
) -> tuple[dict[str, dict[str, Array]], dict[str, float]]:
    """Each metric's scores of the units' correct concepts, per concept version (original,
    missing, extra), and the range that divides their deltas: the metric's, or for wpmi and
    mad the max minus min of every score of these units under the three versions."""

    given: dict[str, Any] = params.to_dict()

    def scores(units_of: Any, conc: Array, which: list[str], pairs: Any = None) -> dict[str, Array]:
        return compute(units_of, conc, which, **given, pairs=pairs)

    ranged = [m for m in group if METRICS[m].value_range is not None]
    data_ranged = [m for m in group if METRICS[m].value_range is None]
    pairs = np.stack([units, truth_idx[units]], axis=1)
    own = {version: scores(a, conc, ranged, pairs) if ranged else {} for version, conc in versions.items()}
    scale = {m: _value_range(m) for m in ranged}
    if data_ranged:
        # The data range spans every entry of the three score matrices of these units.
        full = {version: scores(a[:, units], conc, data_ranged) for version, conc in versions.items()}
        for m in data_ranged:
            scale[m] = _data_range(*(full[v][m] for v in full))
            for v in full:
                own[v][m] = full[v][m][np.arange(units.size), truth_idx[units]]
    return own, scale


def _experimental_row(
    setting: str,
    metric: str,
    version: str,
    decreased: npt.NDArray[np.bool_],
    nan: int,
    params: ScoreParams,
    tied: int | None,
) -> dict[str, Any]:
    facts = METRICS[metric]
    return dict(
        setting=setting,
        kind="experimental",
        metric=metric,
        perturbation=version,
        gamma=None,
        decrease_acc=100.0 * float(decreased.mean()),
        se=None,
        nan_deltas=nan,
        units=int(decreased.size),
        alpha=params.alpha if facts.uses_alpha else None,
        lam=params.lam if facts.uses_lambda else None,
        ci_low=None,
        ci_high=None,
        tied_alphas=tied if facts.uses_alpha else None,
    )


# --------------------------------------------------------------------------------------------
# Theoretical protocol


def _gammas(gammas: Any, n: int) -> list[float]:
    """The theoretical test's concept prevalences: each in (0, 1) and at least one positive input at `n`."""
    listed = [check_real(g, "gammas") for g in check_sequence(gammas, "gammas")]
    if not listed:
        raise EmptyInputError("no gamma was given")
    for g in listed:
        if not 0.0 < g < 1.0:
            raise value_error("gammas", g, "every gamma must lie in (0, 1)")
        if math.floor(g * n) < 1:
            need = math.floor(1.0 / g)
            while math.floor(g * need) < 1:
                need += 1
            raise value_error("n", n, f"n must be at least {need:,} for one positive input at gamma {g:g}")
    return listed


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
    n: int | None = None,
    gammas: Sequence[float] = GAMMAS,
    seeds: int | None = None,
    keep: float | None = None,
    rate: float | None = None,
    lam: float | None = None,
    k: int | None = None,
    epsilon: float | None = None,
    seed: int | None = None,
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

    wpmi uses `lam`; the data range of wpmi and mad spans all scores of the run (every
    gamma and seed, original and perturbed). Records hold each gamma's Decrease Acc with its
    standard error over seeds, and the mean over gammas (gamma null). Defaults:
    `THEORETICAL_OPTIONS`, `PERTURBATION_OPTIONS`, `DECREASE_OPTIONS` and `ScoreParams`.

    Examples
    --------
    >>> r = theoretical(["accuracy"], seeds=2000, seed=3)
    >>> r.records.filter(pl.col("gamma").is_not_null(), perturbation="missing")["decrease_acc"].to_list()
    [100.0, 100.0, 100.0, 0.0, 0.0]
    """
    names = metric_list(metrics)
    theory = THEORETICAL_OPTIONS.resolve(n=n, seeds=seeds)
    n, seeds = theory["n"], theory["seeds"]
    gamma_list = _gammas(gammas, n)
    run = _run_options(keep, rate, seed, epsilon, None, None)
    params = ScoreParams(lam=lam, k=k, seed=seed)

    # scores[version][metric] has shape (gammas, seeds)
    scores: dict[str, dict[str, list[Array]]] = {v: {m: [] for m in names} for v in ("original", "missing", "extra")}
    for gi, g in enumerate(gamma_list):
        rng = np.random.default_rng([params.seed, gi])
        p_count = math.floor(g * n)
        kept = rng.binomial(p_count, run["keep"], size=seeds)
        p_extra = min((run["rate"] - 1.0) * p_count / (n - p_count), 1.0)
        added = rng.binomial(n - p_count, p_extra, size=seeds)
        tables = {
            "original": (p_count, 0, 0),
            "missing": (kept, p_count - kept, 0),
            "extra": (p_count, 0, added),
        }
        subset = _top_random_subsets(rng, n, p_count, kept, added, params.k, seeds)
        for version, (n11, n10, n01) in tables.items():
            plain = [m for m in names if not METRICS[m].uses_sampling]
            values = _table_scores(n, n11, n10, n01, plain, params.lam) if plain else {}
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
                acc, nan = _decrease((pert[gi] - orig[gi]) / scale, run["epsilon"])
                se = 100.0 * math.sqrt((acc / 100) * (1 - acc / 100) / seeds)
                per_gamma.append((acc, se))
                nan_total += nan
                rows.append(_theory_row(m, version, g, acc, se, nan, seeds, params.lam))
            mean = float(np.mean([a for a, _ in per_gamma]))
            mean_se = math.sqrt(sum(s * s for _, s in per_gamma)) / len(per_gamma)
            rows.append(_theory_row(m, version, None, mean, mean_se, nan_total, seeds * len(gamma_list), params.lam))
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
