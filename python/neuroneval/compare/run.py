"""`compare` itself: the pairs scored (the explainers' and the baselines'), then the summary
per explainer and the differences between explainers."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from .._registry import METRICS
from .._score import compute
from ..errors import ParameterError, ShapeError
from ..options import SCORE_OPTIONS, Option, Options
from ..params import ScoreParams, metric_list
from ..sources import Source, open_activations
from .inputs import check_duplicates, concept_source, constant_columns, explanation_table, unit_indices
from .result import Comparison
from .statistics import BLOCK, BOOTSTRAP_OPTIONS, Array, IntArray, bootstrap_mean, paired_difference, stream_seed

__all__ = [
    "BASELINES",
    "BASELINE_RANDOM",
    "BASELINE_SHUFFLED",
    "COMPARE_OPTIONS",
    "DEFAULT_METRICS",
    "MIN_TOP_SET",
    "compare",
]

BASELINE_RANDOM = "baseline:random"
BASELINE_SHUFFLED = "baseline:shuffled"
BASELINES: dict[str, str] = {
    BASELINE_RANDOM: (
        "each explained unit k is paired with the concept of r(sigma(k)), the reference explanation of another "
        "unit: sigma is a seeded uniform derangement of the explained units, and r(k) is one of unit k's "
        "explanations drawn uniformly (seeded)"
    ),
    BASELINE_SHUFFLED: (
        "each explained unit k is paired with the concept of its own reference explanation r(k), its input rows "
        "permuted by a seeded permutation drawn for unit k alone"
    ),
}
#: The metrics `compare` reports by default: the five that pass the sanity checks (SPEC section 4).
DEFAULT_METRICS: tuple[str, ...] = ("correlation", "cosine", "auprc", "f1", "iou")
#: The fewest inputs in a unit's top-alpha set, ceil(alpha * N), at which `compare` does not warn:
#: with fewer, the metrics of the top set (f1, iou, auprc, ...) take a handful of values per
#: unit, and a baseline can rank first by chance.
MIN_TOP_SET = 10
#: The options of `compare`: the binary metrics' top-alpha fraction, the baselines, the bootstrap.
COMPARE_OPTIONS = (
    Options(
        SCORE_OPTIONS["alpha"],
        Option("baselines", "flag", True, "score the random and shuffled baselines as explainers"),
    )
    + BOOTSTRAP_OPTIONS
)


def _warn_small_top_set(names: list[str], alpha: float, n: int) -> None:
    binary = [m for m in names if METRICS[m].uses_alpha]
    top = max(1, min(n, math.ceil(alpha * n)))  # the core's top-set size (SPEC section 2)
    if not binary or top >= MIN_TOP_SET:
        return
    remedy = (
        f"raise alpha to at least {math.ceil(1000 * MIN_TOP_SET / n) / 1000:g} (a top set of {MIN_TOP_SET}) or probe more inputs"
        if n >= MIN_TOP_SET
        else "probe more inputs"
    )
    warnings.warn(
        f"alpha = {alpha:g} of {n:,} inputs makes each unit's top set {top} input{'' if top == 1 else 's'}: "
        f"the top-set metrics {', '.join(binary)} rest on so few inputs that they can rank a baseline first by chance; {remedy}",
        UserWarning,
        stacklevel=3,
    )


# --------------------------------------------------------------------------- the baselines


def _reference_rows(units: IntArray, explained: IntArray, seed: int) -> IntArray:
    """r(k) for each explained unit (ascending): one of its rows, drawn uniformly."""
    order = np.lexsort((np.arange(units.size), units))
    counts = np.bincount(units, minlength=int(explained.max()) + 1)[explained]
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    pick = np.floor(np.random.default_rng(stream_seed(seed, "reference")).random(explained.size) * counts)
    return np.asarray(order[starts + pick.astype(np.int64)], dtype=np.int64)


def _derangement(n: int, seed: int) -> IntArray:
    """A uniform random permutation of 0..n-1 without a fixed point (n >= 2), by rejection."""
    rng = np.random.default_rng(seed)
    while True:  # a permutation is a derangement with probability about 1/e
        p = rng.permutation(n)
        if not np.any(p == np.arange(n)):
            return np.asarray(p, dtype=np.int64)


def _shuffled_scores(
    acts: Source, conc: Source, units: IntArray, columns: IntArray, names: list[str], params: ScoreParams, seed: int
) -> dict[str, Array]:
    """Each unit against its column of `conc` with the input rows permuted (its own
    permutation), in batches of units whose permuted columns are built in memory."""
    n = conc.n_rows
    batch = max(1, BLOCK // n)
    parts: dict[str, list[Array]] = {m: [] for m in names}
    for start in range(0, units.size, batch):
        u, c = units[start : start + batch], columns[start : start + batch]
        block = np.array(conc.dense(c), order="F")
        for j, k in enumerate(u.tolist()):
            perm = np.random.default_rng(stream_seed(seed, "shuffled", str(k))).permutation(n)
            block[:, j] = block[perm, j]
        pairs = np.column_stack([u, np.arange(u.size, dtype=np.int64)])
        got = _score_pairs(acts, block, names, params, pairs)
        for m in names:
            parts[m].append(got[m])
    return {m: np.concatenate(parts[m]) if parts[m] else np.empty(0) for m in names}


def _score_pairs(acts: Any, conc: Any, names: list[str], params: ScoreParams, pairs: IntArray) -> dict[str, Array]:
    return compute(acts, conc, names, alpha=params.alpha, seed=params.seed, pairs=pairs)


# --------------------------------------------------------------------------- the comparison


def compare(
    activations: Any,
    explanations: Any,
    concepts: Any,
    *,
    metrics: str | Sequence[str] = DEFAULT_METRICS,
    alpha: float | None = None,
    unit_names: Any = None,
    module: str | None = None,
    baselines: bool | None = None,
    n_boot: int | None = None,
    confidence: float | None = None,
    seed: int | None = None,
) -> Comparison:
    """Compare explainers: every explanation scored against its unit, summarised per explainer
    over units, with paired bootstrap differences between explainers and two baselines.

    Parameters
    ----------
    activations : array_like, path or sparse matrix, shape (N, K)
        Anything `neuroneval.sources.open_activations` takes.
    explanations : polars.DataFrame or path
        A table (or a .csv, .parquet or .jsonl file) with columns `unit` (a column index, or a
        unit name of `unit_names` or the source's names), `explainer` and `explanation`; at most
        one row per (unit, explainer). An optional `concept` column names each row's concept
        in a concept source that names its columns (a concept table, a shard manifest). Or a
        delphi explanations directory, or a Neuronpedia export (`explanation_table`).
    concepts : array_like, path, sparse matrix or neuroneval.label.Labels, shape (N, E)
        Column e is the concept of explanation row e: anything `open_concepts` takes (a long
        (input, concept, probability) table names the concepts by the `concept` column, else by
        the row number "0", "1", ...), or the `Labels` of ``label(judge, inputs, texts)`` (its
        `probabilities`; its texts must be the table's).
    metrics : str or sequence of str
        Names from `neuroneval.METRICS`; the first is the one rankings and reports lead with.
    alpha, baselines, n_boot, confidence, seed : optional
        `COMPARE_OPTIONS` (None: the declared default), described below.
    alpha : float
        The top-alpha fraction of the binary metrics (`neuroneval.compute`). A top set,
        ceil(alpha * N) inputs, under `MIN_TOP_SET` is warned of (`UserWarning`) when a metric
        of the top set is compared.
    unit_names : sequence of str or path, optional
        Names of the K units (a text file: one per line), for a `unit` column of names.
    module : str, optional
        The hookpoint whose explanations to compare, when `explanations` hold several (a delphi
        run's ``explanations/``; default: the hookpoint of a delphi latent cache directory given
        as `activations`; `explanation_table`).
    baselines : bool
        Add `BASELINE_RANDOM` and `BASELINE_SHUFFLED` (module docstring) as explainers.
    n_boot : int
        Bootstrap resamples per interval (0: no intervals).
    confidence : float
        The intervals' level, in (0, 1).
    seed : int
        Seeds every draw (`stream_seed`) and the top-random metrics.

    Returns
    -------
    Comparison

    Examples
    --------
    See the module docstring.
    """
    names = metric_list(metrics)
    if len(set(names)) != len(names):
        raise ParameterError(f"metrics lists a metric more than once: {names}")
    options = COMPARE_OPTIONS.resolve(alpha=alpha, baselines=baselines, n_boot=n_boot, confidence=confidence, seed=seed)
    n_boot, confidence, seed = options["n_boot"], options["confidence"], options["seed"]
    params = ScoreParams(alpha=options["alpha"], seed=seed)
    baselines = options["baselines"]
    acts = open_activations(activations, unit_names=unit_names)
    table = explanation_table(explanations, module=module, activations=activations)
    units = unit_indices(table["unit"], acts.n_columns, acts.names)
    explainer_of = table["explainer"].to_list()
    check_duplicates(units, explainer_of)
    explainers = list(dict.fromkeys(explainer_of))
    if baselines:
        taken = [b for b in BASELINES if b in explainers]
        if taken:
            raise ParameterError(f"explainer {taken[0]!r} is the name of a baseline; rename it or pass baselines=False")
    conc, columns = concept_source(concepts, table, acts.n_rows)
    if conc.n_rows != acts.n_rows:
        raise ShapeError(f"activations have {acts.n_rows} inputs (rows) but concepts have {conc.n_rows}")
    _warn_small_top_set(names, float(params.alpha), acts.n_rows)
    dead = constant_columns(acts)
    texts = table["explanation"].to_list()
    values = _score_pairs(acts, conc, names, params, np.column_stack([units, columns]))
    parts = [(units, explainer_of, texts, np.arange(units.size, dtype=np.int64), values)]
    explained = np.unique(units)
    if baselines:
        if explained.size < 2:
            raise ParameterError("the random baseline needs at least two explained units; pass baselines=False")
        ref = _reference_rows(units, explained, seed)
        borrowed = ref[_derangement(explained.size, stream_seed(seed, "derangement"))]
        random_values = _score_pairs(acts, conc, names, params, np.column_stack([explained, columns[borrowed]]))
        shuffled_values = _shuffled_scores(acts, conc, explained, columns[ref], names, params, seed)
        for name, rows, got in ((BASELINE_RANDOM, borrowed, random_values), (BASELINE_SHUFFLED, ref, shuffled_values)):
            parts.append((explained, [name] * explained.size, [texts[r] for r in rows.tolist()], rows, got))
        explainers += list(BASELINES)
    unit_labels = acts.names if acts.names is not None else [str(k) for k in range(acts.n_columns)]
    all_units = np.concatenate([p[0] for p in parts])
    pairs = pl.DataFrame(
        {
            "unit": all_units,
            "unit_name": pl.Series([unit_labels[k] for k in all_units.tolist()], dtype=pl.String),
            "explainer": pl.Series([x for p in parts for x in p[1]], dtype=pl.String),
            "explanation": pl.Series([x for p in parts for x in p[2]], dtype=pl.String),
            "row": np.concatenate([p[3] for p in parts]),
            "dead": dead[all_units],
            **{m: np.concatenate([p[4][m] for p in parts]).astype(np.float64) for m in names},
        }
    )
    settings = {
        "metrics": names,
        "explainers": explainers,
        "baselines": {b: BASELINES[b] for b in BASELINES} if baselines else {},
        "alpha": float(params.alpha),
        "n_boot": n_boot,
        "confidence": confidence,
        "seed": seed,
        "n_inputs": acts.n_rows,
        "n_units": acts.n_columns,
        "n_explanations": table.height,
        "dead_units": np.flatnonzero(dead).tolist(),
    }
    return _summarise(pairs, settings)


def _summarise(pairs: pl.DataFrame, settings: dict[str, Any]) -> Comparison:
    names: list[str] = settings["metrics"]
    explainers: list[str] = settings["explainers"]
    n_units, n_boot, confidence, seed = (
        settings["n_units"],
        settings["n_boot"],
        settings["confidence"],
        settings["seed"],
    )
    # One row per explainer, one column per unit: the metric's value on live units, else NaN.
    grids = {m: np.full((len(explainers), n_units), np.nan) for m in names}
    rows = []
    for i, name in enumerate(explainers):
        mine = pairs.filter(pl.col("explainer") == name)
        live = mine.filter(~pl.col("dead"))
        unit_idx = live["unit"].to_numpy()
        undefined = np.zeros(live.height, dtype=bool)
        row: dict[str, Any] = {
            "explainer": name,
            "baseline": name in settings["baselines"],
            "units_total": n_units,
            "units_explained": mine.height,
            "units_unexplained": n_units - mine.height,
            "units_dead": mine.height - live.height,
        }
        for m in names:
            v = live[m].to_numpy()
            grids[m][i, unit_idx] = v
            undefined |= ~np.isfinite(v)
            r = bootstrap_mean(v, n_boot=n_boot, confidence=confidence, seed=stream_seed(seed, "mean", name, m))
            row |= {
                f"{m}_n": r.n,
                f"{m}_nan": int(live.height - r.n),
                f"{m}_mean": r.mean,
                f"{m}_median": r.median,
                f"{m}_ci_low": r.low,
                f"{m}_ci_high": r.high,
            }
        row["pairs_with_nan"] = int(undefined.sum())
        rows.append(row)
    for m in names:  # rank 1 = the highest mean; NaN last; ties in explainer order
        means = [r[f"{m}_mean"] for r in rows]
        order = sorted(range(len(rows)), key=lambda j: (1, 0.0, j) if math.isnan(means[j]) else (0, -means[j], j))
        for rank, j in enumerate(order, start=1):
            rows[j][f"{m}_rank"] = rank
    summary = pl.DataFrame(rows).select(
        "explainer",
        "baseline",
        "units_total",
        "units_explained",
        "units_unexplained",
        "units_dead",
        "pairs_with_nan",
        *[f"{m}_{s}" for m in names for s in ("n", "nan", "mean", "median", "ci_low", "ci_high", "rank")],
    )
    diffs = []
    for m in names:
        grid = grids[m]
        for i, a in enumerate(explainers):
            for j in range(i + 1, len(explainers)):
                b = explainers[j]
                d = paired_difference(
                    grid[i],
                    grid[j],
                    n_boot=n_boot,
                    confidence=confidence,
                    seed=stream_seed(seed, "difference", a, b, m),
                )
                diffs.append(
                    {
                        "explainer_a": a,
                        "explainer_b": b,
                        "metric": m,
                        "n_units": d.n,
                        "mean_difference": d.mean_difference,
                        "ci_low": d.low,
                        "ci_high": d.high,
                        "win_rate": d.win_rate,
                        "tie_rate": d.tie_rate,
                    }
                )
    differences = pl.DataFrame(
        diffs,
        schema={
            "explainer_a": pl.String,
            "explainer_b": pl.String,
            "metric": pl.String,
            "n_units": pl.Int64,
            **dict.fromkeys(("mean_difference", "ci_low", "ci_high", "win_rate", "tie_rate"), pl.Float64),
        },
    )
    return Comparison(pairs=pairs, summary=summary, differences=differences, settings=settings)
