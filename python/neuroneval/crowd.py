"""Crowdsourced evaluation (SPEC section 6): the correlation of a unit with an explanation from a
few noisy human ratings.

Correlation over the whole probing set is the metric to trust, but with human raters it needs a
label for every input. The CVPR 2026 recipe makes it affordable:

1. `proposal` / `plan`: a cheap concept model picks which inputs raters see (model-guided
   importance sampling, MG-IS): inputs where the unit's standardised activation times the
   model's standardised probability is large are drawn more often; a floor gamma / N keeps
   every input possible. `plan` draws them for many (unit, explanation) pairs and exports a
   task table for a crowdsourcing platform.
2. `aggregate`: each input's ratings become a soft label, by Bayesian rating aggregation
   (BRAgg: a posterior under raters wrong with rate eta), majority vote or the mean vote. With
   rater ids, ``eta="estimate"`` fits each rater's own error rate (one-coin Dawid-Skene, EM).
3. `estimate`: the importance-weighted correlation with a standard error and a confidence
   interval.
4. `simulate`: all of it with simulated raters on real activations and true labels, to plan a
   budget: the relative correlation error (RCE) per configuration and budget.

Examples
--------
>>> import numpy as np, polars as pl
>>> from neuroneval import crowd
>>> rng = np.random.default_rng(0)
>>> y = (rng.random(5000) < 0.05).astype(float)              # the true concept
>>> a = 2 * y + rng.normal(size=5000)                         # a unit that detects it
>>> model = np.clip(0.7 * y + 0.1 + 0.1 * rng.random(5000), 0, 1)  # a cheap, imperfect concept model
>>> p = crowd.plan([(0, 0)], a[:, None], model[:, None], budget=300, seed=0)
>>> shown = p.inputs()                                        # (pair, input) to show raters
>>> votes = [(r["pair"], r["input"], j, int(y[r["input"]])) for r in shown.iter_rows(named=True) for j in range(3)]
>>> ratings = pl.DataFrame(votes, schema=["pair", "input", "rater", "vote"], orient="row")
>>> result = crowd.estimate(p, crowd.aggregate(ratings, method="majority"), seed=0)
>>> round(float(np.corrcoef(a, y)[0, 1]), 3), round(result["rho"][0], 3)   # exact, and from 100 inputs
(0.398, 0.409)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import polars as pl

from ._coerce import as_matrix, as_pairs
from .errors import (
    ConceptRangeError,
    EmptyInputError,
    LabelError,
    NonFiniteError,
    PairIndexError,
    ParameterError,
    ShapeError,
)
from .params import ScoreParams

__all__ = [
    "CONFIGURATIONS",
    "Plan",
    "Simulation",
    "aggregate",
    "bragg_posterior",
    "estimate",
    "needed_budgets",
    "plan",
    "proposal",
    "rater_error_rates",
    "simulate",
]

Array = npt.NDArray[np.float64]
Sampling = Literal["mgis", "uniform"]
Method = Literal["bragg", "majority", "mean"]

#: The four configurations of the paper's comparison: (sampling, aggregation).
CONFIGURATIONS: tuple[tuple[Sampling, Method], ...] = (
    ("uniform", "majority"),
    ("uniform", "bragg"),
    ("mgis", "majority"),
    ("mgis", "bragg"),
)

_PRIOR_CLIP = (0.001, 0.999)


# --------------------------------------------------------------------------------------------
# Sampling


def _standardise(x: Array) -> Array | None:
    """(x - mean) / std with population moments; None when x is constant."""
    if x.max() == x.min():  # exact, unlike a std that rounding can leave above 0
        return None
    centred = x - x.mean()
    std = math.sqrt(float(np.mean(centred * centred)))
    return None if std == 0.0 else centred / std


def _vector(x: Any, name: str, n: int | None = None) -> Array:
    v = np.asarray(x, dtype=np.float64)
    if v.ndim != 1:
        raise ShapeError(f"{name} must be 1-D (one value per input); got shape {v.shape}")
    if v.size == 0:
        raise EmptyInputError(f"{name} is empty")
    if n is not None and v.size != n:
        raise ShapeError(f"{name} has {v.size} inputs; expected {n}")
    bad = np.flatnonzero(~np.isfinite(v))
    if bad.size:
        raise NonFiniteError(f"{name} holds a non-finite value at input {bad[0]}")
    return v


def _probabilities(x: Any, name: str, n: int | None = None) -> Array:
    v = _vector(x, name, n)
    bad = np.flatnonzero((v < 0) | (v > 1))
    if bad.size:
        raise ConceptRangeError(f"{name} holds {v[bad[0]]} at input {bad[0]}; probabilities must lie in [0, 1]")
    return v


def _check_gamma(gamma: float) -> float:
    if not (isinstance(gamma, (int, float)) and 0.0 < gamma <= 1.0):
        raise ParameterError(f"gamma must lie in (0, 1]; got {gamma!r}")
    return float(gamma)


def proposal(activations_k: Any, concept_model_probs: Any, gamma: float = 0.2) -> Array:
    """The MG-IS proposal over the N inputs for one (unit, explanation) pair (SPEC section 6).

    q_i = (1 - gamma) |abar_i chatbar_i| / sum_j |abar_j chatbar_j| + gamma / N, where abar and
    chatbar are the unit's activations and the concept model's probabilities standardised with
    population moments. When the model is constant (or no input has both terms nonzero) the
    model part carries no information and q is uniform. gamma = 1 is uniform sampling.

    Examples
    --------
    >>> q = proposal([0.0, 1.0, 2.0, 3.0], [0.1, 0.1, 0.9, 0.9], gamma=0.2)
    >>> q.round(3).tolist(), float(q.sum())
    ([0.35, 0.15, 0.15, 0.35], 1.0)
    """
    a = _vector(activations_k, "activations_k")
    chat = _probabilities(concept_model_probs, "concept_model_probs", a.size)
    gamma = _check_gamma(gamma)
    n = a.size
    abar = _standardise(a)
    if abar is None:
        raise ParameterError("the unit's activations are constant: its correlation with any concept is undefined")
    chatbar = _standardise(chat)
    weight = np.zeros(n) if chatbar is None else np.abs(abar * chatbar)
    total = float(weight.sum())
    model_part = weight / total if total > 0 else np.full(n, 1.0 / n)
    q: Array = (1.0 - gamma) * model_part + gamma / n
    return q


@dataclass(frozen=True)
class Plan:
    """Which inputs raters see for each (unit, explanation) pair, and how to weight them.

    `draws` has one row per draw (with replacement, so an input can appear more than once):
    pair (index into `pairs`), draw (0..n-1), input, q (its proposal probability), weight
    (1 / (N q)), abar (the unit's standardised activation there) and model (the concept
    model's probability there). `pairs` has one row per pair: pair, unit, concept,
    unit_name and explanation. A repeated input is shown to raters once and its label reused
    (`inputs`). Plans round-trip through `write` and `read` (one parquet file).
    """

    draws: pl.DataFrame
    pairs: pl.DataFrame
    n_inputs: int
    raters_per_input: int
    sampling: str
    gamma: float

    def inputs(self) -> pl.DataFrame:
        """The distinct (pair, input) to show raters, in first-drawn order."""
        return self.draws.select("pair", "input").unique(maintain_order=True)

    def ratings_needed(self) -> int:
        """Ratings this plan asks for: raters_per_input per distinct (pair, input)."""
        return self.raters_per_input * self.inputs().height

    def tasks(self, batch_size: int = 20) -> pl.DataFrame:
        """The task table for a crowdsourcing platform.

        One row per distinct (pair, input); each pair's inputs are grouped into tasks of at
        most `batch_size` inputs (one explanation per task), each to be shown to
        `raters_per_input` raters. Columns: task, pair, unit, unit_name, concept,
        explanation, input, raters.
        """
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ParameterError(f"batch_size must be a positive integer; got {batch_size!r}")
        shown = self.inputs().with_columns(pl.int_range(pl.len()).over("pair").alias("position"))
        table = (
            shown.with_columns((pl.col("position") // batch_size).alias("batch"))
            .join(self.pairs, on="pair", how="left", maintain_order="left")
            .with_columns(pl.lit(self.raters_per_input).alias("raters"))
        )
        task_ids = table.select("pair", "batch").unique(maintain_order=True).with_row_index("task")
        return table.join(task_ids, on=["pair", "batch"], how="left", maintain_order="left").select(
            pl.col("task").cast(pl.Int64), "pair", "unit", "unit_name", "concept", "explanation", "input", "raters"
        )

    def write(self, path: Any) -> Any:
        """One parquet file holding the draws, the pairs and the plan's parameters."""
        from .files import write_atomic

        return write_atomic(path, self._frame().write_parquet)

    def _frame(self) -> pl.DataFrame:
        meta = {
            "n_inputs": self.n_inputs,
            "raters_per_input": self.raters_per_input,
            "sampling": self.sampling,
            "gamma": self.gamma,
        }
        joined = self.draws.join(self.pairs, on="pair", how="left", maintain_order="left")
        return joined.with_columns(*(pl.lit(v).alias(k) for k, v in meta.items()))

    @staticmethod
    def read(path: Any) -> Plan:
        """A plan written by `Plan.write`."""
        from .errors import SourceError

        try:
            frame = pl.read_parquet(path)
        except (OSError, pl.exceptions.PolarsError) as e:
            raise SourceError(f"cannot read a plan from {path}: {e}") from e
        needed = {
            "pair",
            "draw",
            "input",
            "q",
            "weight",
            "abar",
            "model",
            "unit",
            "concept",
            "unit_name",
            "explanation",
        }
        needed |= {"n_inputs", "raters_per_input", "sampling", "gamma"}
        missing = needed - set(frame.columns)
        if missing or frame.height == 0:
            raise SourceError(f"{path} is not a neuroneval crowd plan (missing columns: {sorted(missing)})")
        return Plan(
            draws=frame.select("pair", "draw", "input", "q", "weight", "abar", "model"),
            pairs=frame.select("pair", "unit", "concept", "unit_name", "explanation").unique(
                "pair", maintain_order=True
            ),
            n_inputs=int(frame["n_inputs"][0]),
            raters_per_input=int(frame["raters_per_input"][0]),
            sampling=str(frame["sampling"][0]),
            gamma=float(frame["gamma"][0]),
        )


def _check_pairs(pairs: npt.NDArray[np.int64], n_units: int, n_concepts: int) -> None:
    for k, t in pairs:
        if not (0 <= k < n_units and 0 <= t < n_concepts):
            raise PairIndexError(f"pair ({k}, {t}) is outside {n_units} units x {n_concepts} concepts")


def plan(
    pairs: Any,
    activations: Any,
    concept_model: Any,
    budget: int,
    *,
    raters_per_input: int = 3,
    gamma: float = 0.2,
    sampling: Sampling = "mgis",
    seed: int = 0,
    unit_names: Sequence[str] | None = None,
    explanations: Sequence[str] | None = None,
) -> Plan:
    """Draw the inputs to rate for each (unit, explanation) pair.

    Each pair gets budget // raters_per_input draws from its proposal (`proposal`, or uniform
    with ``sampling="uniform"``), with replacement; repeated inputs are shown once, so a pair
    never needs more than `budget` ratings. Each pair draws from its own seeded stream.

    Parameters
    ----------
    pairs : array_like, shape (M, 2)
        (unit, concept) indices into the columns of `activations` and `concept_model`.
    activations : array_like, shape (N, K)
        The units' activations over all N inputs (known: one forward pass).
    concept_model : array_like, shape (N, T)
        The cheap concept model's probability that each explanation holds for each input.
    budget : int
        Ratings per pair.
    unit_names, explanations : sequence of str, optional
        Names of the K units and texts of the T explanations, for the task table.
    """
    pair_array = as_pairs(pairs)
    if pair_array.shape[0] == 0:
        raise EmptyInputError("no (unit, concept) pair to plan")
    a = as_matrix(activations, "activations")
    chat = as_matrix(concept_model, "concept_model")
    if a.shape[0] != chat.shape[0]:
        raise ShapeError(f"activations have {a.shape[0]} inputs (rows) but concept_model has {chat.shape[0]}")
    n_units, n_concepts = a.shape[1], chat.shape[1]
    _check_pairs(pair_array, n_units, n_concepts)
    if not isinstance(raters_per_input, (int, np.integer)) or raters_per_input < 1:
        raise ParameterError(f"raters_per_input must be a positive integer; got {raters_per_input!r}")
    if not isinstance(budget, (int, np.integer)) or budget < raters_per_input:
        raise ParameterError(
            f"budget must be an integer of at least raters_per_input ({raters_per_input}); got {budget!r}"
        )
    if sampling not in ("mgis", "uniform"):
        raise ParameterError(f"sampling must be 'mgis' or 'uniform'; got {sampling!r}")
    ScoreParams(seed=seed)  # the one seed rule
    gamma = _check_gamma(gamma)
    for names, count, what in ((unit_names, n_units, "unit_names"), (explanations, n_concepts, "explanations")):
        if names is not None and len(names) != count:
            raise ShapeError(f"{what} has {len(names)} entries for {count} columns")
    n = a.shape[0]
    n_draws = int(budget) // int(raters_per_input)
    frames = []
    for index, (k, t) in enumerate(pair_array):
        unit = np.asarray(a[:, k], dtype=np.float64)
        model = _probabilities(chat[:, t], f"concept_model column {t}")
        q = proposal(unit, model, gamma if sampling == "mgis" else 1.0)
        abar = _standardise(unit)
        assert abar is not None  # proposal rejected a constant unit
        rng = np.random.default_rng([int(seed), index])
        drawn = rng.choice(n, size=n_draws, p=q)
        frames.append(
            pl.DataFrame(
                {
                    "pair": np.full(n_draws, index, dtype=np.int64),
                    "draw": np.arange(n_draws, dtype=np.int64),
                    "input": drawn.astype(np.int64),
                    "q": q[drawn],
                    "weight": 1.0 / (n * q[drawn]),
                    "abar": abar[drawn],
                    "model": model[drawn],
                }
            )
        )
    units, concepts = pair_array[:, 0], pair_array[:, 1]
    pair_table = pl.DataFrame(
        {
            "pair": np.arange(pair_array.shape[0], dtype=np.int64),
            "unit": units,
            "concept": concepts,
            "unit_name": [str(unit_names[k]) if unit_names is not None else f"unit {k}" for k in units],
            "explanation": [str(explanations[t]) if explanations is not None else f"concept {t}" for t in concepts],
        }
    )
    return Plan(pl.concat(frames), pair_table, n, int(raters_per_input), sampling, gamma)


# --------------------------------------------------------------------------------------------
# Aggregation


def bragg_posterior(positive: Any, votes: Any, eta: Any = 0.23, prior: Any = 0.05) -> Array:
    """BRAgg's posterior that the concept is present, from `positive` "present" votes of `votes`.

    logit(c) = logit(prior) + (2 positive - votes) log((1 - eta) / eta) (SPEC section 6).
    Arrays broadcast.

    Examples
    --------
    >>> bragg_posterior([0, 1, 2, 3], 3).round(6).tolist()
    [0.001401, 0.015478, 0.149805, 0.663849]
    """
    pos = np.asarray(positive, dtype=np.float64)
    m = np.asarray(votes, dtype=np.float64)
    e = np.asarray(eta, dtype=np.float64)
    p = np.asarray(prior, dtype=np.float64)
    if not np.all((e > 0) & (e < 0.5)):  # NaN fails too
        raise ParameterError("eta must lie in (0, 0.5): raters must be right more often than wrong")
    if not np.all((p > 0) & (p < 1)):
        raise ParameterError("the prior must lie in (0, 1)")
    logit = np.log(p / (1 - p)) + (2 * pos - m) * np.log((1 - e) / e)
    out: Array = 1.0 / (1.0 + np.exp(-logit))
    return out


def _ratings_table(ratings: Any, plan: Plan | None) -> pl.DataFrame:
    if isinstance(ratings, pl.DataFrame):
        table = ratings
    else:
        try:
            table = pl.DataFrame(ratings)
        except Exception as e:  # noqa: BLE001 - anything that is not a table
            raise ShapeError(f"ratings must be a table with columns pair, input, vote (and rater); {e}") from e
    missing = {"pair", "input", "vote"} - set(table.columns)
    if missing:
        raise ShapeError(f"ratings lack the column(s) {sorted(missing)}; expected pair, input, vote (and rater)")
    if table.height == 0:
        raise EmptyInputError("no rating given")
    for column in ("pair", "input", "vote"):
        if table[column].null_count():
            raise LabelError(f"ratings have {table[column].null_count()} missing value(s) in column {column!r}")
    for column in ("pair", "input"):
        if not table[column].dtype.is_integer():
            raise LabelError(f"ratings column {column!r} must hold integer ids; got {table[column].dtype}")
    vote = table["vote"]
    if vote.dtype == pl.Boolean:
        table = table.with_columns(pl.col("vote").cast(pl.Int64))
    elif not vote.dtype.is_numeric():
        raise LabelError(f"votes must be binary (0 = absent, 1 = present); got a column of {vote.dtype}")
    else:
        values = vote.to_numpy()
        bad = np.flatnonzero(~np.isin(values, (0, 1)))  # NaN is not in it either
        if bad.size:
            row = table.row(int(bad[0]), named=True)
            raise LabelError(
                f"votes must be binary (0 = absent, 1 = present); {bad.size} are not "
                f"(first: pair {row['pair']}, input {row['input']}, vote {row['vote']})"
            )
    table = table.with_columns(
        pl.col("pair").cast(pl.Int64), pl.col("input").cast(pl.Int64), pl.col("vote").cast(pl.Int64)
    )
    if plan is not None:
        unknown = table.join(plan.inputs(), on=["pair", "input"], how="anti")
        if unknown.height:
            first = unknown.row(0, named=True)
            raise LabelError(
                f"{unknown.height} rating(s) are for a (pair, input) the plan did not draw "
                f"(first: pair {first['pair']}, input {first['input']})"
            )
    return table


def aggregate(
    ratings: Any,
    method: Method = "bragg",
    *,
    eta: float | Literal["estimate"] = 0.23,
    prior: float | Literal["model"] = 0.05,
    plan: Plan | None = None,
    max_iter: int = 200,
    tol: float = 1e-9,
) -> pl.DataFrame:
    """One soft label per rated (pair, input), from its binary votes.

    Parameters
    ----------
    ratings : polars.DataFrame (or anything it takes)
        One row per vote: pair, input, vote (0/1 or bool), and optionally rater.
    method : "bragg", "majority" or "mean"
        BRAgg's posterior (`bragg_posterior`); the majority vote (1/2 on a tie); the mean vote.
    eta : float or "estimate"
        Raters' error rate for BRAgg (0.23 in the paper). "estimate" fits one rate per rater by
        expectation-maximisation (one-coin Dawid-Skene, `rater_error_rates`); needs a rater column.
    prior : float or "model"
        BRAgg's prior: a constant (0.05), or the concept model's probability at the input,
        clipped to [0.001, 0.999] (needs `plan`).
    plan : Plan, optional
        When given, every rated (pair, input) must be one the plan drew.

    Returns
    -------
    polars.DataFrame
        pair, input, votes, positive, label (in [0, 1]).

    Examples
    --------
    >>> r = pl.DataFrame({"pair": [0, 0, 0, 0, 0, 0], "input": [4, 4, 4, 9, 9, 9], "vote": [1, 1, 0, 0, 0, 1]})
    >>> aggregate(r, "majority")["label"].to_list(), aggregate(r)["label"].round(4).to_list()
    ([1.0, 0.0], [0.1498, 0.0155])
    """
    table = _ratings_table(ratings, plan)
    if method not in ("bragg", "majority", "mean"):
        raise ParameterError(f"method must be 'bragg', 'majority' or 'mean'; got {method!r}")
    items = table.group_by("pair", "input", maintain_order=True).agg(
        pl.len().alias("votes"), pl.col("vote").sum().alias("positive")
    )
    pos = items["positive"].to_numpy().astype(np.float64)
    m = items["votes"].to_numpy().astype(np.float64)
    if method == "mean":
        label = pos / m
    elif method == "majority":
        label = np.where(2 * pos > m, 1.0, np.where(2 * pos == m, 0.5, 0.0))
    else:
        prior_values = _prior_values(items, prior, plan)
        if eta == "estimate":
            _, posterior = _dawid_skene(table, items, prior_values, max_iter, tol)
            label = posterior
        elif isinstance(eta, str):
            raise ParameterError(f"eta must be a rate in (0, 0.5) or 'estimate'; got {eta!r}")
        else:
            label = bragg_posterior(pos, m, eta, prior_values)
    return items.with_columns(pl.Series("label", label, dtype=pl.Float64))


def _prior_values(items: pl.DataFrame, prior: Any, plan: Plan | None) -> Array:
    if isinstance(prior, str):
        if prior != "model":
            raise ParameterError(f"prior must be a probability or 'model'; got {prior!r}")
        if plan is None:
            raise ParameterError("prior='model' needs the plan (it holds the concept model's probabilities)")
        model = plan.draws.select("pair", "input", "model").unique(["pair", "input"])
        joined = items.join(model, on=["pair", "input"], how="left", maintain_order="left")
        clipped: Array = np.clip(joined["model"].to_numpy().astype(np.float64), *_PRIOR_CLIP)
        return clipped
    p = float(prior)
    if not 0.0 < p < 1.0:
        raise ParameterError(f"the prior must lie in (0, 1); got {prior!r}")
    return np.full(items.height, p)


def _dawid_skene(
    table: pl.DataFrame, items: pl.DataFrame, prior: Array, max_iter: int, tol: float
) -> tuple[dict[Any, float], Array]:
    """One-coin Dawid-Skene by EM: each rater r is wrong with probability eta_r, whatever the truth."""
    if "rater" not in table.columns:
        raise ParameterError("eta='estimate' needs a rater column in the ratings")
    if table["rater"].null_count():
        raise LabelError("ratings have missing rater ids")
    item_index = items.with_row_index("item").select("pair", "input", "item")
    votes = table.join(item_index, on=["pair", "input"], how="left", maintain_order="left")
    raters, rater_idx = np.unique(votes["rater"].to_numpy(), return_inverse=True)
    item = votes["item"].to_numpy().astype(np.int64)
    vote = votes["vote"].to_numpy().astype(np.float64)
    eta = np.full(raters.size, 0.2)
    logit_prior = np.log(prior / (1 - prior))
    posterior = prior.copy()
    for _ in range(max_iter):
        # E-step: each item's posterior under the current rates.
        lr = np.log((1 - eta) / eta)[rater_idx] * (2 * vote - 1)
        logit = logit_prior + np.bincount(item, weights=lr, minlength=prior.size)
        new = 1.0 / (1.0 + np.exp(-logit))
        # M-step: a rater's rate is its expected share of wrong votes (kept inside (0, 0.5)).
        wrong = vote * (1 - new[item]) + (1 - vote) * new[item]
        counts = np.bincount(rater_idx, minlength=raters.size)
        eta = np.clip(np.bincount(rater_idx, weights=wrong, minlength=raters.size) / counts, 1e-4, 0.4999)
        if np.max(np.abs(new - posterior)) < tol:
            posterior = new
            break
        posterior = new
    return dict(zip(raters.tolist(), eta.tolist(), strict=True)), posterior


def rater_error_rates(
    ratings: Any, *, prior: float | Literal["model"] = 0.05, plan: Plan | None = None, max_iter: int = 200
) -> pl.DataFrame:
    """Each rater's error rate, fitted by EM (one-coin Dawid-Skene): rater, eta, votes.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> truth = rng.random(3000) < 0.3
    >>> rows = [(0, i, r, int(truth[i] ^ (rng.random() < e))) for i in range(3000) for r, e in enumerate([0.05, 0.2, 0.35])]
    >>> rates = rater_error_rates(pl.DataFrame(rows, schema=["pair", "input", "rater", "vote"], orient="row"), prior=0.3)
    >>> rates["eta"].round(2).to_list()   # planted: 0.05, 0.2, 0.35
    [0.05, 0.2, 0.36]
    """
    table = _ratings_table(ratings, plan)
    items = table.group_by("pair", "input", maintain_order=True).agg(pl.len().alias("votes"))
    rates, _ = _dawid_skene(table, items, _prior_values(items, prior, plan), max_iter, 1e-9)
    counts = table.group_by("rater").len()
    out = pl.DataFrame({"rater": list(rates), "eta": list(rates.values())})
    return out.join(counts.rename({"len": "votes"}), on="rater", how="left").sort("rater")


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
    if not 0.0 < level < 1.0:
        raise ParameterError(f"level must lie in (0, 1); got {level}")
    if not isinstance(bootstrap, int) or bootstrap < 0:
        raise ParameterError(f"bootstrap must be a non-negative integer; got {bootstrap!r}")
    ScoreParams(seed=seed)  # the one seed rule
    missing = {"pair", "input", "label"} - set(labels.columns)
    if missing:
        raise ShapeError(f"labels lack the column(s) {sorted(missing)}")
    if labels.select("pair", "input").is_duplicated().any():
        raise LabelError("labels hold more than one label for some (pair, input)")
    lab = labels["label"].cast(pl.Float64)
    if lab.null_count() or not lab.is_between(0.0, 1.0).all():
        raise ConceptRangeError("labels must lie in [0, 1]")
    joined = plan.draws.join(
        labels.select(pl.col("pair").cast(pl.Int64), pl.col("input").cast(pl.Int64), lab.alias("label")),
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
            rng = np.random.default_rng([int(seed), int(index[0])])
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
        from .files import write_atomic

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
    from ._score import compute
    from .progress import Progress

    a = as_matrix(activations, "activations").astype(np.float64)
    y = as_matrix(labels, "labels").astype(np.float64)
    chat = as_matrix(concept_model, "concept_model").astype(np.float64)
    pair_array = as_pairs(pairs)
    if not (a.shape[0] == y.shape[0] == chat.shape[0]):
        raise ShapeError("activations, labels and concept_model must have the same number of inputs (rows)")
    if y.shape != chat.shape:
        raise ShapeError(f"labels {y.shape} and concept_model {chat.shape} must have the same shape")
    if not np.isin(y, (0.0, 1.0)).all():
        raise LabelError("simulated raters need binary true labels (0/1)")
    if not (0.0 < eta < 0.5):
        raise ParameterError(f"eta must lie in (0, 0.5); got {eta}")
    if not isinstance(raters_per_input, (int, np.integer)) or raters_per_input < 1:
        raise ParameterError(f"raters_per_input must be a positive integer; got {raters_per_input!r}")
    ScoreParams(seed=seed)  # the one seed rule
    for sampling, method in configurations:
        if sampling not in ("mgis", "uniform") or method not in ("bragg", "majority", "mean"):
            raise ParameterError(
                f"unknown configuration ({sampling!r}, {method!r}): sampling is 'mgis' or 'uniform', "
                "aggregation 'bragg', 'majority' or 'mean'"
            )
    if isinstance(prior, str) and prior != "model":
        raise ParameterError(f"prior must be a probability in (0, 1) or 'model'; got {prior!r}")
    if not isinstance(prior, str) and not 0.0 < float(prior) < 1.0:
        raise ParameterError(f"prior must lie in (0, 1); got {prior!r}")
    _check_pairs(pair_array, a.shape[1], y.shape[1])
    budget_list = sorted({int(b) for b in budgets})
    if not budget_list or budget_list[0] < raters_per_input:
        raise ParameterError(f"budgets must be integers of at least raters_per_input ({raters_per_input})")
    if not isinstance(trials, int) or trials < 1:
        raise ParameterError(f"trials must be a positive integer; got {trials!r}")
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
                rng = np.random.default_rng([int(seed), ci, budget, pi])
                drawn = rng.choice(n, size=(trials, n_draws), p=q)
                w = 1.0 / (n * q[drawn])
                soft = np.empty((trials, n_draws))
                for trial in range(trials):
                    shown, first = np.unique(drawn[trial], return_inverse=True)
                    truth = y[shown, t]
                    wrong = rng.random((shown.size, raters_per_input)) < eta
                    positive = (truth[:, None] != wrong).sum(axis=1).astype(np.float64)
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
    return Simulation(pl.DataFrame(rows), pair_table, float(target), float(eta), int(trials), tuple(budget_list))
