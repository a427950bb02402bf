"""Simulated raters on real activations and true labels: the relative correlation error per
configuration and budget, and the budgets a target needs (SPEC section 6)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
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
    check_seed,
    check_sequence,
)
from ..errors import EmptyInputError, LabelError, ParameterError, ShapeError
from .aggregation import bragg_posterior
from .estimation import _rho
from .sampling import (
    _PRIOR_CLIP,
    CONFIGURATIONS,
    Method,
    Sampling,
    _check_gamma,
    _check_prior,
    _check_rate,
    _check_target,
    _standardise,
    proposal,
)

# --------------------------------------------------------------------------------------------
# Simulation


@dataclass(frozen=True)
class Simulation:
    """Relative correlation error (RCE) per configuration and budget, from `simulate`.

    `rce` has one row per (sampling, aggregation, budget): rce (mean over pairs and trials of
    |rho_hat - rho| / |rho|), rce_se (its standard error over trials), nan_estimates (trials
    whose labels were constant: counted as rho_hat = 0) and ratings (mean ratings actually
    used per pair: repeated inputs are rated once). `pairs` holds each pair's true correlation.
    """

    rce: pl.DataFrame
    pairs: pl.DataFrame
    target: float
    eta: float
    trials: int
    budgets: tuple[int, ...] = field(default=())

    def needed(self, target: float | None = None) -> pl.DataFrame:
        """Ratings per pair each configuration needs to reach RCE <= target.

        Interpolated log-linearly between the first budget of the grid that reaches the target
        and the one before it; null when no budget of the grid reaches it.
        """
        return needed_budgets(self.rce, self.target if target is None else target)

    def plot(self, path: Any) -> Any:
        """RCE against ratings per pair (log scale), one line per configuration, the target dashed (PNG)."""
        from ..files import write_atomic

        def draw(p: Any) -> None:
            try:
                from matplotlib.figure import Figure
            except ImportError as e:
                raise ImportError("the RCE plot needs matplotlib: pip install 'neuroneval[plot]'") from e
            fig = Figure(figsize=(7.0, 4.6), dpi=110)
            ax = fig.add_subplot()
            for (sampling, method), group in self.rce.group_by("sampling", "aggregation", maintain_order=True):
                label = f"{'MG-IS' if sampling == 'mgis' else 'uniform'} + {'BRAgg' if method == 'bragg' else method}"
                ax.errorbar(
                    group["budget"], group["rce"], yerr=group["rce_se"], marker="o", ms=3, capsize=2, label=label
                )
            ax.axhline(self.target, color="black", linestyle="--", linewidth=1, label=f"target RCE {self.target:g}")
            ax.set_xscale("log")
            ax.set_xlabel("ratings per (unit, explanation) pair")
            ax.set_ylabel("relative correlation error")
            ax.set_title(f"Simulated raters (eta = {self.eta:g}), {self.pairs.height} pairs x {self.trials} trials")
            ax.legend(fontsize=8)
            fig.tight_layout()
            fig.savefig(p, format="png")

        return write_atomic(path, draw)


def needed_budgets(rce: pl.DataFrame, target: float) -> pl.DataFrame:
    """Ratings per pair each configuration of an RCE table needs to reach RCE <= target.

    `rce` has columns sampling, aggregation, budget, rce (as `Simulation.rce`). Interpolated
    log-linearly between the first budget reaching the target and the one before it; the first
    budget when it already does; null when no budget does.

    Examples
    --------
    >>> rce = pl.DataFrame({"sampling": ["mgis"] * 3, "aggregation": ["bragg"] * 3,
    ...                     "budget": [100, 200, 400], "rce": [0.5, 0.3, 0.1]})
    >>> needed_budgets(rce, 0.2)["needed"].round(1).to_list()
    [282.8]
    """
    rce = as_table(rce, "rce", "sampling, aggregation, budget, rce")
    target = _check_target(target)
    rce = check_columns(rce, "rce rows", {"sampling": "any", "aggregation": "any", "budget": "number", "rce": "number"})
    budget = rce["budget"].cast(pl.Float64)
    if not (budget.is_finite() & (budget > 0)).all():
        raise ParameterError("rce column 'budget' must hold positive numbers of ratings")
    rows = []
    for (sampling, method), group in rce.group_by("sampling", "aggregation", maintain_order=True):
        group = group.sort("budget")
        budgets = group["budget"].to_numpy().astype(np.float64)
        values = group["rce"].to_numpy()
        hit = np.flatnonzero(values <= target)
        needed: float | None = None
        if hit.size:
            j = int(hit[0])
            if j == 0:
                needed = float(budgets[0])
            else:
                x0, x1 = math.log(budgets[j - 1]), math.log(budgets[j])
                y0, y1 = values[j - 1], values[j]
                frac = (y0 - target) / (y0 - y1) if y0 != y1 else 1.0
                needed = float(math.exp(x0 + frac * (x1 - x0)))
        rows.append({"sampling": sampling, "aggregation": method, "needed": needed})
    return pl.DataFrame(rows, schema={"sampling": pl.String, "aggregation": pl.String, "needed": pl.Float64})


def simulate(
    activations: Any,
    labels: Any,
    concept_model: Any,
    pairs: Any,
    budgets: Sequence[int],
    *,
    configurations: Sequence[tuple[Sampling, Method]] = CONFIGURATIONS,
    eta: float = 0.23,
    raters_per_input: int = 3,
    trials: int = 20,
    gamma: float = 0.2,
    prior: float | Literal["model"] = 0.05,
    target: float = 0.275,
    seed: int = 0,
    progress: bool = True,
) -> Simulation:
    """Simulate crowdsourced correlation estimates on real data, to choose a budget.

    For each trial, configuration, budget and pair: draw the inputs (`plan`), let
    `raters_per_input` simulated raters label each shown input, each wrong independently with
    probability `eta` against the true label, aggregate the votes (`aggregate`; BRAgg with
    `prior` and the true eta) and estimate the correlation (`estimate`'s estimator). The error is
    measured against the exact correlation of the unit with the true labels over all N inputs.
    Every (configuration, budget, pair) draws from its own seeded stream.

    Parameters
    ----------
    activations : array_like, shape (N, K)
    labels : array_like, shape (N, T)
        True binary labels (the ground truth the raters try to report).
    concept_model : array_like, shape (N, T)
        The cheap concept model's probabilities (used by MG-IS and by prior="model").
    pairs : array_like, shape (M, 2)
    budgets : sequence of int
        Ratings per pair.
    progress : bool
        A progress bar over (configuration, budget) steps on a terminal.
    """
    from .._score import compute
    from ..progress import Progress

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
    eta = _check_rate(eta)
    raters_per_input = check_integer(raters_per_input, "raters_per_input", minimum=1)
    trials = check_integer(trials, "trials", minimum=1)
    gamma = _check_gamma(gamma)
    prior = _check_prior(prior)
    target = _check_target(target)
    seed = check_seed(seed)
    progress = check_flag(progress, "progress")
    configurations = _check_configurations(configurations)
    budget_list = sorted({check_integer(b, "budgets", minimum=1) for b in check_sequence(budgets, "budgets")})
    if not budget_list or budget_list[0] < raters_per_input:
        raise ParameterError(f"budgets must be integers of at least raters_per_input ({raters_per_input})")
    for k, t in pair_array:  # each pair's data, named, before any work
        as_vector(a[:, k], f"activations column {k}")
        as_probabilities(chat[:, t], f"concept_model column {t}")
    rho = compute(a, y, ["correlation"], pairs=pair_array)["correlation"]
    if not np.all(np.isfinite(rho)) or np.any(rho == 0):
        raise ParameterError("every pair needs a defined, nonzero true correlation (RCE divides by it)")
    n = a.shape[0]
    rows = []
    bar = Progress(progress).bar("simulating", total=len(configurations) * len(budget_list), unit="step")
    for ci, (sampling, method) in enumerate(configurations):
        for budget in budget_list:
            n_draws = budget // raters_per_input
            errors = np.empty((trials, pair_array.shape[0]))
            used = np.empty((trials, pair_array.shape[0]))
            nan_count = 0
            for pi, (k, t) in enumerate(pair_array):
                q = proposal(a[:, k], chat[:, t], gamma if sampling == "mgis" else 1.0)
                abar = _standardise(a[:, k])
                assert abar is not None
                rng = np.random.default_rng([seed, ci, budget, pi])
                drawn = rng.choice(n, size=(trials, n_draws), p=q)
                w = 1.0 / (n * q[drawn])
                soft = np.empty((trials, n_draws))
                for trial in range(trials):
                    shown, first = np.unique(drawn[trial], return_inverse=True)
                    truth = y[shown, t]
                    wrong = rng.random((shown.size, raters_per_input)) < eta
                    positive = (truth[:, None] != wrong).sum(axis=1)
                    if method == "majority":
                        label = np.where(
                            2 * positive > raters_per_input, 1.0, np.where(2 * positive == raters_per_input, 0.5, 0.0)
                        )
                    elif method == "mean":
                        label = positive / raters_per_input
                    else:
                        p = np.clip(chat[shown, t], *_PRIOR_CLIP) if prior == "model" else float(prior)
                        label = bragg_posterior(positive, raters_per_input, eta, p)
                    soft[trial] = label[first]
                    used[trial, pi] = shown.size * raters_per_input
                estimate_ = _rho(w, abar[drawn], soft, self_normalised=False)
                nan = ~np.isfinite(estimate_)
                nan_count += int(nan.sum())
                estimate_ = np.where(nan, 0.0, estimate_)
                errors[:, pi] = np.abs(estimate_ - rho[pi]) / abs(rho[pi])
            per_trial = errors.mean(axis=1)
            rows.append(
                {
                    "sampling": sampling,
                    "aggregation": method,
                    "budget": budget,
                    "rce": float(per_trial.mean()),
                    "rce_se": float(per_trial.std(ddof=1) / math.sqrt(trials)) if trials > 1 else math.nan,
                    "nan_estimates": nan_count,
                    "ratings": float(used.mean()),
                }
            )
            bar.update(1)
    bar.close()
    pair_table = pl.DataFrame({"unit": pair_array[:, 0], "concept": pair_array[:, 1], "rho": rho})
    return Simulation(pl.DataFrame(rows), pair_table, target, eta, trials, tuple(budget_list))


def _check_configurations(configurations: Any) -> list[tuple[Sampling, Method]]:
    """A non-empty sequence of (sampling, aggregation) pairs of known names."""
    checked: list[tuple[Sampling, Method]] = []
    for configuration in check_sequence(configurations, "configurations"):
        parts = tuple(configuration) if isinstance(configuration, (tuple, list)) else ()
        parts = parts if all(isinstance(x, str) for x in parts) else ()
        if len(parts) != 2 or parts[0] not in ("mgis", "uniform") or parts[1] not in ("bragg", "majority", "mean"):
            raise ParameterError(
                f"unknown configuration {configuration!r} in configurations: (sampling, aggregation) with sampling "
                "'mgis' or 'uniform' and aggregation 'bragg', 'majority' or 'mean'"
            )
        checked.append((parts[0], parts[1]))
    if not checked:
        raise EmptyInputError("configurations is empty: no (sampling, aggregation) to simulate")
    return checked
