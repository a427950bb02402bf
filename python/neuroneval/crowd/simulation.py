"""Simulated raters on real activations and true labels: the relative correlation error per
configuration and budget, and the budgets a target needs (SPEC section 6)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt
import polars as pl

from .._coerce import (
    as_matrix,
    as_pairs,
    as_probabilities,
    as_table,
    as_vector,
    check_columns,
    check_flag,
    check_integer,
    check_pairs,
    check_sequence,
)
from ..errors import EmptyInputError, LabelError, ParameterError, ShapeError
from ..options import Option, Options
from .aggregation import _vote_labels
from .estimation import LEVEL, _composite, _debiased_value, _delta_se, _plug_in_value, _terms
from .posterior import _posterior
from .sampling import (
    _PRIOR_CLIP,
    CONFIDENCE,
    CONFIGURATIONS,
    ETA,
    GAMMA,
    METHODS,
    PRIOR,
    RATERS,
    RATING,
    SEED,
    Array,
    Method,
    Sampling,
    _standardise,
    proposal,
)
from .sequential import _debiased, _finished

#: The relative correlation error to reach.
TARGET = Option("target", "real", 0.275, "the RCE to reach", low=0.0)

#: `simulate`'s options (raters_per_input also takes a sequence of them, to compare).
SIMULATE_OPTIONS = Options(
    replace(ETA, help="the simulated raters' error rate"),
    RATERS,
    RATING,
    CONFIDENCE,
    Option("trials", "integer", 20, "trials per configuration and budget", low=1, metavar="N"),
    GAMMA,
    PRIOR,
    TARGET,
    replace(LEVEL, help="the level of the delta-method intervals whose coverage is reported"),
    SEED,
)

# --------------------------------------------------------------------------------------------
# Simulation


@dataclass(frozen=True)
class Simulation:
    """Relative correlation error (RCE) per configuration, raters per input and budget, from `simulate`.

    `rce` has one row per (sampling, aggregation, raters, budget): inputs (draws per pair,
    budget // raters), rce (mean over pairs and trials of |rho_hat - rho| / |rho|), rce_se (its
    standard error over trials), bias (the mean of (rho_hat - rho) / |rho|) and bias_se, coverage (the share
    of estimates whose delta-method interval at `level` holds rho), nan_estimates (estimates
    that were undefined, e.g. constant labels: counted as rho_hat = 0) and ratings (mean ratings
    actually used per pair: repeated inputs are rated once). `pairs` holds each pair's true
    correlation rho and model_rho, the correlation of the unit with the concept model alone
    (the zero-rating baseline).
    """

    rce: pl.DataFrame
    pairs: pl.DataFrame
    target: float
    eta: float
    trials: int
    budgets: tuple[int, ...] = field(default=())
    raters: tuple[int, ...] = field(default=(RATERS.default,))
    level: float = LEVEL.default
    rating: str = RATING.default

    @property
    def model_rce(self) -> float:
        """The RCE of the concept model alone: mean |model_rho - rho| / |rho| over the pairs, no rating at all."""
        if "model_rho" not in self.pairs.columns:
            return math.nan
        rho = self.pairs["rho"].to_numpy()
        return float(np.mean(np.abs(self.pairs["model_rho"].to_numpy() - rho) / np.abs(rho)))

    def needed(self, target: float | None = None) -> pl.DataFrame:
        """Ratings per pair each (configuration, raters per input) needs to reach RCE <= target,
        as `needed_budgets` finds them (sequentially, inputs are the draws interpolated there)."""
        return self._drawn(needed_budgets(self.rce, self.target if target is None else target))

    def cheapest(self, target: float | None = None) -> pl.DataFrame:
        """Each configuration's cheapest budget over the raters per input, as `cheapest_budgets` finds it."""
        return self._drawn(cheapest_budgets(self.rce, self.target if target is None else target))

    def _drawn(self, table: pl.DataFrame) -> pl.DataFrame:
        """`table` with, for sequential rating, the inputs a needed budget draws: the grid's
        draws interpolated log-linearly (an input takes a varying number of votes, so it is not
        needed / raters)."""
        if self.rating != "sequential" or "inputs" not in table.columns:
            return table
        inputs: list[float | None] = []
        for row in table.iter_rows(named=True):
            if row["needed"] is None:
                inputs.append(None)
                continue
            grid = self.rce.filter(sampling=row["sampling"], aggregation=row["aggregation"], raters=row["raters"])
            grid = grid.sort("budget")
            x, y = (
                np.log(grid["budget"].to_numpy().astype(np.float64)),
                np.log(np.maximum(grid["inputs"].to_numpy().astype(np.float64), 1)),
            )
            inputs.append(float(np.exp(np.interp(math.log(row["needed"]), x, y))))
        return table.with_columns(pl.Series("inputs", inputs, dtype=pl.Float64))

    def plot(self, path: Any) -> Any:
        """RCE against ratings per pair (log scale), one line per configuration at its best raters per
        input (the cheapest to reach the target; else the lowest RCE at the largest budget), the
        concept model alone and the target dashed (PNG)."""
        from ..files import write_atomic

        best = _best_raters(self)

        def draw(p: Any) -> None:
            try:
                from matplotlib.figure import Figure
            except ImportError as e:
                raise ImportError("the RCE plot needs matplotlib: pip install 'neuroneval[plot]'") from e
            fig = Figure(figsize=(7.0, 4.6), dpi=110)
            ax = fig.add_subplot()
            for (sampling, method), raters in best.items():
                group = self.rce.filter(sampling=sampling, aggregation=method)
                label = configuration_name(sampling, method)
                if raters is not None:
                    group = group.filter(raters=raters)
                    label += f" ({raters} per input)"
                ax.errorbar(
                    group["budget"], group["rce"], yerr=group["rce_se"], marker="o", ms=3, capsize=2, label=label
                )
            if math.isfinite(self.model_rce):
                ax.axhline(self.model_rce, color="grey", linestyle=":", linewidth=1, label="concept model alone")
            ax.axhline(self.target, color="black", linestyle="--", linewidth=1, label=f"target RCE {self.target:g}")
            ax.set_xscale("log")
            ax.set_xlabel("ratings per (unit, explanation) pair")
            ax.set_ylabel("relative correlation error")
            ax.set_title(f"Simulated raters (eta = {self.eta:g}), {self.pairs.height} pairs x {self.trials} trials")
            ax.legend(fontsize=8)
            fig.tight_layout()
            fig.savefig(p, format="png")

        return write_atomic(path, draw)


def configuration_name(sampling: str, aggregation: str) -> str:
    """A configuration as people write it: "MG-IS + BRAgg", "uniform + majority", "MG-IS + debiased"."""
    return f"{'MG-IS' if sampling == 'mgis' else 'uniform'} + {'BRAgg' if aggregation == 'bragg' else aggregation}"


def _best_raters(simulation: Simulation) -> dict[tuple[str, str], int | None]:
    """Each configuration's raters per input (`best_raters`; None for a table without raters)."""
    if "raters" not in simulation.rce.columns:
        return {
            key: None for key in simulation.rce.select("sampling", "aggregation").unique(maintain_order=True).rows()
        }
    best = best_raters(simulation.rce, simulation.target)
    return {
        (s, m): int(r)
        for s, m, r in best.select("sampling", "aggregation", "raters").unique(maintain_order=True).rows()
    }


def best_raters(rce: pl.DataFrame, target: float) -> pl.DataFrame:
    """The rows of an RCE table with raters (as `Simulation.rce`) at each configuration's best
    raters per input: its cheapest to reach RCE <= target (`cheapest_budgets`), else its lowest
    RCE at its largest budget. One curve per configuration, to draw or to report.

    Examples
    --------
    >>> rce = pl.DataFrame({"sampling": ["uniform"] * 4, "aggregation": ["majority"] * 4,
    ...                     "raters": [3, 3, 9, 9], "budget": [300, 900, 300, 900], "rce": [0.5, 0.4, 0.3, 0.2]})
    >>> best_raters(rce, 0.25)["raters"].to_list()
    [9, 9]
    """
    cheapest = cheapest_budgets(rce, target)
    frames = []
    for row in cheapest.iter_rows(named=True):
        group = rce.filter(sampling=row["sampling"], aggregation=row["aggregation"])
        raters = row["raters"]
        if raters is None:
            last = group.filter(pl.col("budget") == group["budget"].max())
            raters = last.sort("rce", maintain_order=True)["raters"][0]
        frames.append(group.filter(raters=raters))
    return pl.concat(frames)


def needed_budgets(rce: pl.DataFrame, target: float) -> pl.DataFrame:
    """Ratings per pair each configuration of an RCE table needs to reach RCE <= target.

    `rce` has columns sampling, aggregation, budget, rce, and optionally raters (as
    `Simulation.rce`; one answer per raters value then). A configuration reaches the target at
    the first budget of the grid from which the RCE stays <= target up to the largest budget (a
    noisy dip that rises again does not count); the answer is interpolated log-linearly between
    that budget and the one before it, the first budget when it already does, and null when the
    RCE at the largest budget is above the target. With raters, `inputs` is needed / raters.

    Examples
    --------
    >>> rce = pl.DataFrame({"sampling": ["mgis"] * 4, "aggregation": ["bragg"] * 4,
    ...                     "budget": [100, 200, 400, 800], "rce": [0.5, 0.1, 0.3, 0.1]})
    >>> needed_budgets(rce, 0.2)["needed"].round(1).to_list()   # the dip at 200 does not count
    [565.7]
    """
    rce = as_table(rce, "rce", "sampling, aggregation, budget, rce")
    target = TARGET.check(target)
    rce = check_columns(rce, "rce rows", {"sampling": "any", "aggregation": "any", "budget": "number", "rce": "number"})
    budget = rce["budget"].cast(pl.Float64)
    if not (budget.is_finite() & (budget > 0)).all():
        raise ParameterError("rce column 'budget' must hold positive numbers of ratings")
    with_raters = "raters" in rce.columns
    keys = ["sampling", "aggregation", *(["raters"] if with_raters else [])]
    rows = []
    for key, group in rce.group_by(*keys, maintain_order=True):
        group = group.sort("budget")
        budgets = group["budget"].to_numpy().astype(np.float64)
        values = group["rce"].to_numpy().astype(np.float64)
        above = np.flatnonzero(~(values <= target))  # NaN counts as above
        j = int(above[-1]) + 1 if above.size else 0
        needed: float | None = None
        if j == 0:
            needed = float(budgets[0])
        elif j < budgets.size:
            x0, x1 = math.log(budgets[j - 1]), math.log(budgets[j])
            y0, y1 = values[j - 1], values[j]
            frac = (y0 - target) / (y0 - y1) if y0 != y1 else 1.0
            needed = float(math.exp(x0 + frac * (x1 - x0)))
        row = dict(zip(keys, key, strict=True)) | {"needed": needed}
        if with_raters:
            row["inputs"] = None if needed is None else needed / float(row["raters"])
        rows.append(row)
    schema: dict[str, Any] = {"sampling": pl.String, "aggregation": pl.String}
    if with_raters:
        schema |= {"raters": pl.Int64, "needed": pl.Float64, "inputs": pl.Float64}
    else:
        schema["needed"] = pl.Float64
    return pl.DataFrame(rows, schema=schema)


def cheapest_budgets(rce: pl.DataFrame, target: float) -> pl.DataFrame:
    """Each configuration's cheapest way to reach RCE <= target: the raters per input whose needed
    budget (`needed_budgets`) is the smallest, with needed and inputs; nulls when no raters value
    reaches it. `rce` needs a raters column.

    Examples
    --------
    >>> rce = pl.DataFrame({"sampling": ["uniform"] * 4, "aggregation": ["majority"] * 4,
    ...                     "raters": [3, 3, 9, 9], "budget": [300, 900, 300, 900], "rce": [0.5, 0.4, 0.3, 0.2]})
    >>> cheapest_budgets(rce, 0.25).with_columns(pl.col("needed", "inputs").round(1)).rows()
    [('uniform', 'majority', 9, 519.6, 57.7)]
    """
    needed = needed_budgets(rce, target)
    if "raters" not in needed.columns:
        raise ShapeError("rce lacks the column 'raters': cheapest_budgets chooses among raters per input")
    rows = []
    for (sampling, method), group in needed.group_by("sampling", "aggregation", maintain_order=True):
        reached = group.filter(pl.col("needed").is_not_null()).sort("needed", maintain_order=True)
        best = reached.row(0, named=True) if reached.height else {"raters": None, "needed": None, "inputs": None}
        rows.append(
            {"sampling": sampling, "aggregation": method} | {k: best[k] for k in ("raters", "needed", "inputs")}
        )
    return pl.DataFrame(
        rows,
        schema={
            "sampling": pl.String,
            "aggregation": pl.String,
            "raters": pl.Int64,
            "needed": pl.Float64,
            "inputs": pl.Float64,
        },
    )


def simulate(
    activations: Any,
    labels: Any,
    concept_model: Any,
    pairs: Any,
    budgets: Sequence[int],
    *,
    configurations: Sequence[tuple[Sampling, Method]] = CONFIGURATIONS,
    eta: float | None = None,
    raters_per_input: int | Sequence[int] | None = None,
    rating: Literal["fixed", "sequential"] | None = None,
    confidence: float | None = None,
    trials: int | None = None,
    gamma: float | None = None,
    prior: float | Literal["model"] | None = None,
    target: float | None = None,
    level: float | None = None,
    seed: int | None = None,
    progress: bool = True,
) -> Simulation:
    """Simulate crowdsourced correlation estimates on real data, to choose a budget and raters per input.

    For each sampling, raters per input m, pair and trial: draw budget // m inputs (`plan`'s
    proposal), let m simulated raters label each shown input, each wrong independently with
    probability `eta` against the true label, aggregate the votes (`aggregate`'s rules; BRAgg
    and "debiased" with `prior` and the true eta) and estimate the correlation (`estimate`'s
    estimators: the debiased one for "debiased", the composite of BRAgg's and the debiased one for
    "composite"). The error is measured against the exact
    correlation of the unit with the true labels over all N inputs.

    The budgets of one (sampling, m, pair, trial) are nested: the draws of a smaller budget are
    the first draws of the largest one, as in a study that keeps rating, and the configurations
    of one sampling share the draws and the votes (each (sampling, m, pair) has its own seeded
    stream). So one sequence of draws serves the whole budget grid, and configurations differ
    by their aggregation alone.

    Parameters
    ----------
    activations : array_like, shape (N, K)
    labels : array_like, shape (N, T)
        True binary labels (the ground truth the raters try to report).
    concept_model : array_like, shape (N, T)
        The cheap concept model's probabilities (used by MG-IS, by prior="model" and by the
        zero-rating baseline, `Simulation.model_rce`).
    pairs : array_like, shape (M, 2)
    budgets : sequence of int
        Ratings per pair; each at least the smallest raters per input (a budget below m is
        skipped for m), or at least 1 with ``rating="sequential"``.
    raters_per_input : int or sequence of int
        Raters per shown input: one value, or several to compare (`Simulation.cheapest` picks
        the cheapest per configuration); with ``rating="sequential"``, the most raters an input
        is asked.
    rating : "fixed" or "sequential"
        "sequential" asks one rater at a time about each shown input until BRAgg's posterior
        (with `prior`) reaches `confidence` either way (`neuroneval.crowd.sequential`); a budget
        then buys as many draws as the votes they took fit in, and "debiased" labels are
        debiased for the stopping rule (`sequential_labels`), so its estimator stays unbiased.
    level : float
        The level of the delta-method intervals whose coverage is reported.
    eta, confidence, trials, gamma, prior, target, seed
        The defaults and domains of these and of the ones above: see `SIMULATE_OPTIONS`.
    progress : bool
        A progress bar over (sampling, raters, pair) steps on a terminal.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> y = (rng.random((4000, 1)) < 0.05).astype(float)
    >>> a = y + rng.normal(size=(4000, 1))
    >>> model = np.clip(0.6 * y + 0.2 * rng.random((4000, 1)), 0, 1)
    >>> sim = simulate(a, y, model, [(0, 0)], [100, 300, 1000, 3000], raters_per_input=[1, 3, 9],
    ...                configurations=[("uniform", "majority"), ("mgis", "debiased")], trials=50, progress=False)
    >>> sim.cheapest(target=0.3).with_columns(pl.col("needed", "inputs").round()).rows()
    [('uniform', 'majority', None, None, None), ('mgis', 'debiased', 9, 553.0, 61.0)]
    >>> round(sim.model_rce, 3)     # the concept model alone, without a rating
    0.078
    """
    values = SIMULATE_OPTIONS.but("raters_per_input").resolve(
        eta=eta, rating=rating, confidence=confidence, trials=trials, gamma=gamma, prior=prior, target=target,
        level=level, seed=seed,
    )  # fmt: skip
    raters = _check_raters(raters_per_input)
    progress = check_flag(progress, "progress")
    a, y, chat, pair_array = _simulation_data(activations, labels, concept_model, pairs)
    configurations = _check_configurations(configurations)
    # sequentially a draw may take a single vote: any budget buys one
    budget_list = _check_budgets(budgets, raters if values["rating"] == "fixed" else (1,))
    data = _Data(a, y, chat, pair_array, *_true_correlations(a, y, chat, pair_array))
    results = _simulate_all(data, configurations, raters, budget_list, values, progress)
    pair_table = pl.DataFrame(
        {"unit": pair_array[:, 0], "concept": pair_array[:, 1], "rho": data.rho, "model_rho": data.model_rho}
    )
    return Simulation(
        pl.DataFrame(_rce_rows(results, configurations, raters, values["trials"], pair_array.shape[0])),
        pair_table,
        values["target"],
        values["eta"],
        values["trials"],
        tuple(budget_list),
        raters,
        values["level"],
        values["rating"],
    )


_SAMPLINGS = ("uniform", "mgis")


class _Data(NamedTuple):
    """What is simulated: activations (N, K), true labels and the concept model (N, T), the
    (unit, concept) pairs, and each pair's true and concept-model correlation."""

    a: Array
    y: Array
    chat: Array
    pairs: npt.NDArray[np.int64]
    rho: Array
    model_rho: Array


def _simulation_data(activations: Any, labels: Any, concept_model: Any, pairs: Any) -> tuple[Array, Array, Array, Any]:
    """The arrays as float64 matrices of one number of inputs, binary true labels, and the pairs."""
    a = as_matrix(activations, "activations").astype(np.float64)
    y = as_matrix(labels, "labels").astype(np.float64)
    chat = as_matrix(concept_model, "concept_model").astype(np.float64)
    pair_array = as_pairs(pairs)
    if not (a.shape[0] == y.shape[0] == chat.shape[0]):
        raise ShapeError(
            f"activations ({a.shape[0]}), labels ({y.shape[0]}) and concept_model ({chat.shape[0]}) must have "
            "the same number of inputs (rows)"
        )
    if a.shape[0] == 0:
        raise EmptyInputError("activations, labels and concept_model have no inputs (rows)")
    if y.shape != chat.shape:
        raise ShapeError(f"labels {y.shape} and concept_model {chat.shape} must have the same shape")
    not_binary = np.argwhere(~np.isin(y, (0.0, 1.0)))
    if not_binary.size:
        i, t = not_binary[0]
        raise LabelError(
            f"simulated raters need binary true labels (0/1); labels hold {y[i, t]} at row {i}, column {t}"
        )
    if pair_array.shape[0] == 0:
        raise EmptyInputError("no (unit, concept) pair to simulate")
    check_pairs(pair_array, a.shape[1], y.shape[1])
    return a, y, chat, pair_array


def _check_budgets(budgets: Any, raters: tuple[int, ...]) -> list[int]:
    """The budgets, sorted without repeats: integers of at least the smallest raters per input."""
    budget_list = sorted({check_integer(b, "budgets", minimum=1) for b in check_sequence(budgets, "budgets")})
    if not budget_list or budget_list[0] < raters[0]:
        raise ParameterError(f"budgets must be integers of at least raters_per_input ({raters[0]})")
    return budget_list


def _true_correlations(a: Array, y: Array, chat: Array, pair_array: Any) -> tuple[Array, Array]:
    """Each pair's exact correlation with the true labels (defined and nonzero: the RCE divides by
    it) and with the concept model; each pair's data named before any work."""
    from .._score import compute

    for k, t in pair_array:
        as_vector(a[:, k], f"activations column {k}")
        as_probabilities(chat[:, t], f"concept_model column {t}")
    rho = compute(a, y, ["correlation"], pairs=pair_array)["correlation"]
    if not np.all(np.isfinite(rho)) or np.any(rho == 0):
        raise ParameterError("every pair needs a defined, nonzero true correlation (RCE divides by it)")
    model_rho = compute(a, chat, ["correlation"], pairs=pair_array)["correlation"]
    return rho, model_rho


def _simulate_all(
    data: _Data,
    configurations: list[tuple[Sampling, Method]],
    raters: tuple[int, ...],
    budget_list: list[int],
    values: dict[str, Any],
    progress: bool,
) -> dict[tuple[str, str, int], dict[str, Any]]:
    """Every (sampling, raters per input, pair) step, each with its own seeded stream: the errors
    of each (sampling, aggregation, raters per input) at each budget, over trials and pairs."""
    from ..progress import Progress

    n_pairs = data.pairs.shape[0]
    z = NormalDist().inv_cdf(0.5 + values["level"] / 2.0)
    samplings = list(dict.fromkeys(s for s, _ in configurations))
    bar = Progress(progress).bar("simulating", total=len(samplings) * len(raters) * n_pairs, unit="step")
    results: dict[tuple[str, str, int], dict[str, Any]] = {}
    for sampling in samplings:
        methods = [m for s, m in configurations if s == sampling]
        for m in raters:
            least = 1 if values["rating"] == "sequential" else m  # the fewest ratings a draw takes
            budgets_m = np.array([b for b in budget_list if b >= least], dtype=np.int64)
            if budgets_m.size == 0:
                bar.update(n_pairs)
                continue
            out = _no_errors_yet(methods, budgets_m, values["trials"], n_pairs)
            for pi, (k, t) in enumerate(data.pairs):
                rng = np.random.default_rng([values["seed"], _SAMPLINGS.index(sampling), m, pi])
                _simulate_pair(out, data, pi, k, t, sampling, m, budgets_m, values, z, rng)
                bar.update(1)
            for method in methods:
                results[(sampling, method, m)] = out[method]
    bar.close()
    return results


def _no_errors_yet(
    methods: Sequence[str], budgets: npt.NDArray[np.int64], trials: int, n_pairs: int
) -> dict[str, dict[str, Any]]:
    """Each aggregation's arrays of errors (trials, budgets, pairs) and counts per budget, to fill."""
    shape = (trials, budgets.size, n_pairs)
    return {
        method: {
            "budgets": budgets,
            "error": np.empty(shape),
            "signed": np.empty(shape),
            "covered": np.empty(shape, dtype=bool),
            "nan": np.zeros(budgets.size, dtype=np.int64),
            "ratings": np.zeros(budgets.size),
            "draws": np.zeros(budgets.size),
        }
        for method in methods
    }


def _rce_rows(
    results: dict[tuple[str, str, int], dict[str, Any]],
    configurations: list[tuple[Sampling, Method]],
    raters: tuple[int, ...],
    trials: int,
    n_pairs: int,
) -> list[dict[str, Any]]:
    """`Simulation.rce`'s rows: one per (configuration, raters per input, budget) simulated."""
    rows = []
    for sampling, method in configurations:
        for m in raters:
            result = results.get((sampling, method, m))
            if result is None:
                continue
            per_trial = result["error"].mean(axis=2)
            signed = result["signed"].mean(axis=2)
            for j, budget in enumerate(result["budgets"]):
                rows.append(
                    {
                        "sampling": sampling,
                        "aggregation": method,
                        "raters": m,
                        "budget": int(budget),
                        "inputs": int(round(result["draws"][j] / (trials * n_pairs))),
                        "rce": float(per_trial[:, j].mean()),
                        "rce_se": float(per_trial[:, j].std(ddof=1) / math.sqrt(trials)) if trials > 1 else math.nan,
                        "bias": float(result["signed"][:, j].mean()),
                        "bias_se": float(signed[:, j].std(ddof=1) / math.sqrt(trials)) if trials > 1 else math.nan,
                        "coverage": float(result["covered"][:, j].mean()),
                        "nan_estimates": int(result["nan"][j]),
                        "ratings": float(result["ratings"][j] / n_pairs),
                    }
                )
    return rows


def _draw(
    rng: np.random.Generator, sampling: str, a: Array, chat: Array, gamma: float, shape: tuple[int, int]
) -> tuple[npt.NDArray[np.int64], Array]:
    """Inputs drawn with replacement (MG-IS's proposal or uniform) and their weights 1 / (N q)."""
    n = a.size
    if sampling == "mgis":
        q = proposal(a, chat, gamma)
        drawn = rng.choice(n, size=shape, p=q)
        return drawn, 1.0 / (n * q[drawn])
    return rng.integers(0, n, size=shape), np.ones(shape)


def _simulate_pair(
    out: dict[str, dict[str, Any]],
    data: _Data,
    pi: int,
    k: int,
    t: int,
    sampling: str,
    m: int,
    budgets: npt.NDArray[np.int64],
    values: dict[str, Any],
    z: float,
    rng: np.random.Generator,
) -> None:
    """One pair's trials at one (sampling, raters per input), every budget and aggregation at once:
    the draws and votes of the largest budget, the estimators' terms summed over each budget's first draws."""
    a, y, chat, rho = data.a[:, k], data.y[:, t], data.chat[:, t], data.rho[pi]
    trials, eta, prior = values["trials"], values["eta"], values["prior"]
    sequential = values["rating"] == "sequential"
    n = a.size
    n_max = int(budgets[-1]) if sequential else int(budgets[-1]) // m  # a draw costs at least 1 or m ratings
    abar = _standardise(a)
    assert abar is not None  # the true correlation is defined
    drawn, w = _draw(rng, sampling, a, chat, values["gamma"], (trials, n_max))
    # A repeated input is rated once per trial: one vote count per distinct (trial, input).
    keys = drawn + n * np.arange(trials)[:, None]
    shown, first, inverse = np.unique(keys.ravel(), return_index=True, return_inverse=True)
    shown_input = shown % n
    prior_items: Any = np.clip(chat[shown_input], *_PRIOR_CLIP) if prior == "model" else prior
    present = np.where(y[shown_input] > 0, 1.0 - eta, eta)
    if sequential:
        positive, votes = _sequential_votes(rng, present, eta, prior_items, values["confidence"], m)
    else:
        positive, votes = rng.binomial(m, present).astype(np.float64), np.full(shown.size, float(m))
    is_first = np.zeros(keys.size, dtype=bool)
    is_first[first] = True
    spent = np.cumsum(np.where(is_first, votes[inverse], 0.0).reshape(trials, n_max), axis=1)
    # Draws each budget buys in each trial: budget // m at a fixed m; sequentially, all whose
    # votes fit in it. Either way a draw is charged its input's votes, repeated or not (a
    # repeated input is not rated again: `spent` is what the raters did), so the draws of a
    # budget do not depend on how often the proposal repeats itself.
    if sequential:
        charged = np.cumsum(votes[inverse].reshape(trials, n_max), axis=1)
        count = np.stack([np.searchsorted(row, budgets, side="right") for row in charged])
    else:
        count = np.broadcast_to(budgets // m, (trials, budgets.size))
    at = np.maximum(count - 1, 0)
    nn = count.astype(np.float64)
    ab = abar[drawn]
    rule = (prior_items, values["confidence"], m) if sequential else None
    estimates: dict[str, tuple[Array, Array]] = {}

    def estimated(method: str) -> tuple[Array, Array]:
        """The estimate and delta-method SE at every budget, once per aggregation."""
        if method not in estimates:
            debiased = method == "debiased"
            c = _item_labels(method, positive, votes, eta, prior_items, rule)[inverse].reshape(trials, n_max)
            terms = _terms(w, ab, c, debiased)  # (trials, n_max, d)
            with np.errstate(invalid="ignore", divide="ignore"):
                mean = _budget_sums(terms, at) / nn[..., None]
                cross = _budget_sums(terms, at, outer=True)
                cov = (cross - nn[..., None, None] * mean[..., :, None] * mean[..., None, :]) / (
                    nn[..., None, None] - 1.0
                )
            if debiased:
                value = _debiased_value(mean[..., 0], mean[..., 1])
            else:
                low = np.take_along_axis(np.minimum.accumulate(c, axis=1), at, axis=1)
                high = np.take_along_axis(np.maximum.accumulate(c, axis=1), at, axis=1)
                value = _plug_in_value(mean[..., 0], mean[..., 1], mean[..., 2], low < high)
            estimates[method] = (value, _delta_se(mean, cov, nn, debiased))
        return estimates[method]

    used = np.where(count > 0, np.take_along_axis(spent, at, axis=1), 0.0)
    for method, result in out.items():
        if method == "composite":
            estimate_, _, half = _composite(*estimated("bragg"), *estimated("debiased"), z)
        else:
            estimate_, se = estimated(method)
            half = z * se
        estimate_ = np.where(count > 0, estimate_, np.nan)  # no draw fits in the budget
        nan = ~np.isfinite(estimate_)
        result["nan"] += nan.sum(axis=0)
        filled = np.where(nan, 0.0, estimate_)
        result["error"][:, :, pi] = np.abs(filled - rho) / abs(rho)
        result["signed"][:, :, pi] = (filled - rho) / abs(rho)
        result["covered"][:, :, pi] = np.abs(estimate_ - rho) <= half  # NaN compares False
        result["ratings"] += used.mean(axis=0)
        result["draws"] += count.sum(axis=0)


def _budget_sums(x: Array, at: npt.NDArray[np.int64], *, outer: bool = False) -> Array:
    """Per trial and budget, the sum of `x`'s draws 0..`at` (x: (trials, n_max, d); `at`:
    (trials, budgets)), or with `outer` of each draw's outer product x_k x_k^T, (trials,
    budgets, d, d). Each budget's sum is taken over its own draws from the first, so that it
    does not depend on which other budgets are asked for (a budget of a grid equals that budget
    alone, bit for bit), without a running sum over every draw or the outer products in memory."""
    trials, _, d = x.shape
    out = np.empty((trials, at.shape[1], *((d, d) if outer else (d,))))
    for r in range(trials):
        ends, which = np.unique(at[r] + 1, return_inverse=True)
        if outer:
            sums = [np.einsum("kd,ke->de", x[r, :e], x[r, :e]) for e in ends]
        else:
            sums = [x[r, :e].sum(axis=0) for e in ends]
        out[r] = np.stack(sums)[which]
    return out


def _sequential_votes(
    rng: np.random.Generator, present: Array, eta: float, prior: Any, confidence: float, cap: int
) -> tuple[Array, Array]:
    """Votes asked one at a time of each item (a vote is "present" with probability `present`)
    until the sequential rule finishes it: (positive, votes) per item."""
    positive, votes = np.zeros(present.size), np.zeros(present.size)
    priors = np.broadcast_to(np.asarray(prior, dtype=np.float64), present.shape)
    live = np.arange(present.size)
    for _ in range(cap):
        positive[live] += rng.random(live.size) < present[live]
        votes[live] += 1
        live = live[~_finished(positive[live], votes[live], eta, priors[live], confidence, cap)]
        if live.size == 0:
            break
    return positive, votes


def _item_labels(
    method: str, positive: Array, votes: Array, eta: float, prior: Any, rule: tuple[Any, float, int] | None
) -> Array:
    """Each rated item's label under `method`; with a sequential `rule` (priors, confidence, cap),
    "debiased" labels are debiased for its stopping rule, and BRAgg's are its posterior at the stop."""
    if rule is None:
        return _vote_labels(method, positive, votes, eta, prior)
    priors = np.broadcast_to(np.asarray(rule[0], dtype=np.float64), positive.shape)
    if method == "debiased":
        return _debiased(positive, votes, np.full(positive.shape, eta), priors, rule[1], rule[2])[0]  # the rule's own
    if method == "bragg":
        return _posterior(positive, votes, eta, priors)
    return _vote_labels(method, positive, votes, eta, prior)


def _check_raters(raters: Any) -> tuple[int, ...]:
    """Raters per input: one value of `RATERS` (None: its default) or a non-empty sequence of
    them (sorted, without repeats)."""
    if isinstance(raters, (list, tuple, np.ndarray, range)):
        values = sorted({RATERS.check(r) for r in check_sequence(raters, "raters_per_input")})
        if not values:
            raise ParameterError("raters_per_input is empty: give at least one number of raters per input")
        return tuple(values)
    return (RATERS.default if raters is None else RATERS.check(raters),)


def _check_configurations(configurations: Any) -> list[tuple[Sampling, Method]]:
    """A non-empty sequence of (sampling, aggregation) pairs of known names."""
    checked: list[tuple[Sampling, Method]] = []
    for configuration in check_sequence(configurations, "configurations"):
        parts = tuple(configuration) if isinstance(configuration, (tuple, list)) else ()
        parts = parts if all(isinstance(x, str) for x in parts) else ()
        if len(parts) != 2 or parts[0] not in ("mgis", "uniform") or parts[1] not in METHODS:
            raise ParameterError(
                f"unknown configuration {configuration!r} in configurations: (sampling, aggregation) with sampling "
                "'mgis' or 'uniform' and aggregation 'bragg', 'majority', 'mean', 'debiased' or 'composite'"
            )
        checked.append((parts[0], parts[1]))
    if not checked:
        raise EmptyInputError("configurations is empty: no (sampling, aggregation) to simulate")
    return list(dict.fromkeys(checked))  # a repeated configuration is simulated once
