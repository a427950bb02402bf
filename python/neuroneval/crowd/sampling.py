"""MG-IS sampling (SPEC section 6): the proposal of a cheap concept model and the plans
of which inputs raters see, for many (unit, explanation) pairs; the crowd package's shared types."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import polars as pl

from .._coerce import (
    as_matrix,
    as_pairs,
    as_probabilities,
    as_vector,
    check_columns,
    check_integer,
    check_names,
    check_pairs,
    check_path,
)
from ..errors import EmptyInputError, LabelError, ParameterError, ShapeError, SourceError
from ..options import SCORE_OPTIONS, Option, Options, value_error

Array = npt.NDArray[np.float64]
Sampling = Literal["mgis", "uniform"]
Method = Literal["bragg", "majority", "mean", "debiased", "composite"]
#: The aggregations whose labels lie in [0, 1] (the plug-in estimator's); "debiased" labels need not,
#: and "composite" gives both BRAgg's and the debiased ones (for the composite estimator).
PLUG_IN_METHODS = ("bragg", "majority", "mean")
METHODS = (*PLUG_IN_METHODS, "debiased", "composite")

#: The four configurations of the paper's comparison: (sampling, aggregation).
CONFIGURATIONS: tuple[tuple[Sampling, Method], ...] = (
    ("uniform", "majority"),
    ("uniform", "bragg"),
    ("mgis", "majority"),
    ("mgis", "bragg"),
)

_PRIOR_CLIP = (0.001, 0.999)


# --------------------------------------------------------------------------------------------
# Options: each declared once, here for the parameters the crowd's steps share


def _or_word(option: Option, word: str, help: str) -> Option:
    """`option` (its default and domain) that also takes `word`."""
    return replace(option, help=help, word=word)


def _check_each(option: Option, values: Array, given: Any) -> Array:
    """Every value of an array (a parameter that broadcasts) in `option`'s domain, else the
    option's own error naming what was given."""
    with np.errstate(invalid="ignore"):
        above = values > option.low if option.low_open else values >= option.low
        below = values < option.high if option.high_open else values <= option.high
    if not np.all(above & below & np.isfinite(values)):
        raise value_error(option.name, given, option.rule)
    return values


#: The seed of every draw (the core's rule).
SEED = SCORE_OPTIONS["seed"]
#: MG-IS's floor: the share of uniform sampling mixed into the proposal.
GAMMA = Option(
    "gamma",
    "real",
    0.2,
    "MG-IS: the share of uniform sampling mixed in (1 is uniform)",
    low=0.0,
    low_open=True,
    high=1.0,
)
#: The raters' error rate: BRAgg's eta and the simulated raters'.
ETA = Option(
    "eta", "real", 0.23, "the raters' error rate", low=0.0, low_open=True, high=0.5, high_open=True, metavar="RATE"
)
#: BRAgg's prior, a probability (`bragg_posterior`); `PRIOR` also takes 'model'.
PRIOR_PROBABILITY = Option(
    "prior",
    "real",
    0.05,
    "BRAgg's prior that the concept is present",
    low=0.0,
    low_open=True,
    high=1.0,
    high_open=True,
    metavar="P",
)
PRIOR = _or_word(
    PRIOR_PROBABILITY,
    "model",
    "BRAgg's prior that the concept is present, or 'model' for the concept model's probability",
)
#: Raters per shown input.
RATERS = Option("raters_per_input", "integer", 3, "raters per shown input", low=1, flag="--raters", metavar="N")
#: How raters are asked: a fixed number per shown input, or one at a time until sure.
RATING = Option(
    "rating",
    "choice",
    "fixed",
    "fixed: raters_per_input votes on every shown input; sequential: one vote at a time until BRAgg's posterior "
    "reaches the confidence either way, at most raters_per_input",
    choices=("fixed", "sequential"),
)
#: The sequential rule's confidence (`neuroneval.crowd.sequential`).
CONFIDENCE = Option(
    "confidence",
    "real",
    0.95,
    "stop asking about an input once BRAgg's posterior is this sure either way",
    low=0.5,
    low_open=True,
    high=1.0,
    high_open=True,
)

#: `plan`'s options (eta and prior: BRAgg's, for the sequential rule).
PLAN_OPTIONS = Options(
    RATERS,
    GAMMA,
    Option(
        "sampling",
        "choice",
        "mgis",
        "how the inputs are drawn: mgis (model-guided) or uniform",
        choices=("mgis", "uniform"),
    ),
    RATING,
    CONFIDENCE,
    replace(ETA, help="the raters' error rate BRAgg assumes (the sequential rule's)"),
    replace(PRIOR, help="BRAgg's prior (the sequential rule's), or 'model' for the concept model's probability"),
    SEED,
)
#: `Plan.tasks`'s option.
TASK_OPTIONS = Options(Option("batch_size", "integer", 20, "inputs per task of the task table", low=1, metavar="N"))


# --------------------------------------------------------------------------------------------
# Sampling


def _standardise(x: Array) -> Array | None:
    """(x - mean) / std with population moments; None when x is constant."""
    if x.max() == x.min():  # exact, unlike a std that rounding can leave above 0
        return None
    centred = x - x.mean()
    std = math.sqrt(float(np.mean(centred * centred)))
    return None if std == 0.0 else centred / std


def proposal(activations_k: Any, concept_model_probs: Any, gamma: float | None = None) -> Array:
    """The MG-IS proposal over the N inputs for one (unit, explanation) pair (SPEC section 6).

    q_i = (1 - gamma) |abar_i chatbar_i| / sum_j |abar_j chatbar_j| + gamma / N, where abar and
    chatbar are the unit's activations and the concept model's probabilities standardised with
    population moments. When the model is constant (or no input has both terms nonzero) the
    model part carries no information and q is uniform. gamma = 1 is uniform sampling (default:
    see `PLAN_OPTIONS`).

    Examples
    --------
    >>> q = proposal([0.0, 1.0, 2.0, 3.0], [0.1, 0.1, 0.9, 0.9], gamma=0.2)
    >>> q.round(3).tolist(), float(q.sum())
    ([0.35, 0.15, 0.15, 0.35], 1.0)
    """
    a = as_vector(activations_k, "activations_k")
    chat = as_probabilities(concept_model_probs, "concept_model_probs", a.size)
    gamma = PLAN_OPTIONS.only("gamma").resolve(gamma=gamma)["gamma"]
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

    With ``rating="fixed"`` every shown input gets `raters_per_input` votes in one round. With
    ``rating="sequential"`` raters are asked round by round (`neuroneval.crowd.next_tasks`)
    until BRAgg's posterior (with `eta` and `prior`) is `confidence` sure, at most
    `raters_per_input` votes an input; the draws counted are each pair's first ones whose votes
    fit in `budget` (`neuroneval.crowd.study`).
    """

    draws: pl.DataFrame
    pairs: pl.DataFrame
    n_inputs: int
    raters_per_input: int
    sampling: str
    gamma: float
    rating: str = RATING.default
    confidence: float = CONFIDENCE.default
    eta: float = ETA.default
    prior: float | str = PRIOR.default
    budget: int | None = None

    def inputs(self) -> pl.DataFrame:
        """The distinct (pair, input) to show raters, in first-drawn order (sequentially: that may be shown)."""
        return self.draws.select("pair", "input").unique(maintain_order=True)

    def ratings_needed(self) -> int:
        """Ratings this plan asks for: raters_per_input per distinct (pair, input); sequentially,
        at most the budget per pair."""
        if self.rating == "sequential" and self.budget is not None:
            return self.budget * self.pairs.height
        return self.raters_per_input * self.inputs().height

    def tasks(self, batch_size: int | None = None) -> pl.DataFrame:
        """The task table of a fixed plan's one round, for a crowdsourcing platform.

        One row per distinct (pair, input); each pair's inputs are grouped into tasks of at
        most `batch_size` inputs (one explanation per task; default: see `TASK_OPTIONS`), each
        to be shown to `raters_per_input` raters. Columns: task, pair, unit, unit_name, concept,
        explanation, input, rated (0: votes so far) and raters. A sequential plan's tasks come
        round by round: `neuroneval.crowd.next_tasks` (which also continues a fixed plan).
        """
        if self.rating == "sequential":
            raise ParameterError(
                "a sequential plan's tasks come round by round: crowd.next_tasks(plan, ratings_so_far)"
            )
        shown = self.inputs().with_columns(pl.lit(0).alias("rated"), pl.lit(self.raters_per_input).alias("raters"))
        return _task_table(self, shown, batch_size)

    def write(self, path: Any) -> Any:
        """One parquet file holding the draws, the pairs and the plan's parameters."""
        from ..files import write_atomic

        return write_atomic(check_path(path), self._frame().write_parquet)

    def _frame(self) -> pl.DataFrame:
        meta = dict(
            n_inputs=self.n_inputs,
            raters_per_input=self.raters_per_input,
            sampling=self.sampling,
            gamma=self.gamma,
            rating=self.rating,
            confidence=self.confidence,
            eta=self.eta,
            prior=str(self.prior),
            budget=-1 if self.budget is None else self.budget,
        )
        joined = self.draws.join(self.pairs, on="pair", how="left", maintain_order="left")
        return joined.with_columns(*(pl.lit(v).alias(k) for k, v in meta.items()))

    @staticmethod
    def read(path: Any) -> Plan:
        """A plan written by `Plan.write` (a fixed plan's file from before sequential rating too)."""
        path = check_path(path)
        try:
            frame = pl.read_parquet(path)
        except (OSError, pl.exceptions.PolarsError) as e:
            raise SourceError(f"cannot read a plan from {path}: {e}") from e
        _check_plan_frame(frame, path)
        rule = _read_rule(frame, path)
        return Plan(
            draws=frame.select("pair", "draw", "input", "q", "weight", "abar", "model"),
            pairs=frame.select("pair", "unit", "concept", "unit_name", "explanation").unique(
                "pair", maintain_order=True
            ),
            n_inputs=int(frame["n_inputs"][0]),
            raters_per_input=int(frame["raters_per_input"][0]),
            sampling=str(frame["sampling"][0]),
            gamma=float(frame["gamma"][0]),
            **rule,
        )


def _task_table(plan: Plan, shown: pl.DataFrame, batch_size: int | None) -> pl.DataFrame:
    """A round's task table: `shown` (pair, input, rated, raters, in order) with the pairs'
    names, each pair's inputs in tasks of at most `batch_size` (`TASK_OPTIONS`)."""
    batch_size = TASK_OPTIONS.resolve(batch_size=batch_size)["batch_size"]
    shown = shown.select("pair", "input", "rated", "raters").with_columns(
        pl.int_range(pl.len()).over("pair").alias("position")
    )
    table = shown.with_columns((pl.col("position") // batch_size).alias("batch")).join(
        plan.pairs, on="pair", how="left", maintain_order="left"
    )
    task_ids = table.select("pair", "batch").unique(maintain_order=True).with_row_index("task")
    return table.join(task_ids, on=["pair", "batch"], how="left", maintain_order="left").select(
        pl.col("task").cast(pl.Int64),
        "pair",
        "unit",
        "unit_name",
        "concept",
        "explanation",
        "input",
        pl.col("rated").cast(pl.Int64),
        pl.col("raters").cast(pl.Int64),
    )


#: A plan file's columns, by kind.
_PLAN_COLUMNS = {
    **dict.fromkeys(("pair", "draw", "input", "unit", "concept", "n_inputs", "raters_per_input"), "id"),
    **dict.fromkeys(("q", "weight", "abar", "model", "gamma"), "number"),
    **dict.fromkeys(("unit_name", "explanation", "sampling"), "text"),
}


def _check_plan_frame(frame: pl.DataFrame, path: Any) -> None:
    """A plan file's columns, of their types with no missing value, and values a plan can hold."""
    try:
        check_columns(frame, "plan rows", _PLAN_COLUMNS)
    except (ShapeError, LabelError) as e:
        raise SourceError(f"{path} is not a neuroneval crowd plan: {e}") from e
    n = frame["n_inputs"].max() if frame.height else 0
    valid = [
        frame.height > 0 and n >= 1 and frame["raters_per_input"].min() >= 1,  # type: ignore[operator]
        frame["sampling"].is_in(PLAN_OPTIONS["sampling"].choices).all()
        and frame["gamma"].is_between(GAMMA.low, GAMMA.high, closed="right").all(),
        frame["input"].is_between(0, n - 1).all() and frame["q"].is_between(0.0, 1.0, closed="right").all(),  # type: ignore[operator]
        (frame["weight"].is_finite() & (frame["weight"] > 0) & frame["abar"].is_finite()).all(),
        frame["model"].is_between(0.0, 1.0).all(),
    ]
    if not all(valid):
        raise SourceError(
            f"{path} is not a neuroneval crowd plan: no rows, or values no plan holds (n_inputs, raters_per_input, "
            "sampling, gamma, input, q, weight, abar or model)"
        )


#: The rating rule's columns of a plan file, absent from a file written before sequential rating.
_RULE_COLUMNS = {"rating": "text", "confidence": "number", "eta": "number", "prior": "text", "budget": "id"}


def _read_rule(frame: pl.DataFrame, path: Any) -> dict[str, Any]:
    """A plan file's rating rule (rating, confidence, eta, prior, budget), each checked where
    `plan` checks it; a file without these columns is a fixed plan's."""
    if not any(c in frame.columns for c in _RULE_COLUMNS):
        return {}
    try:
        check_columns(frame, "plan rows", _RULE_COLUMNS)
        prior_text = str(frame["prior"][0])
        values = PLAN_OPTIONS.only("rating", "confidence", "eta", "prior").resolve(
            rating=str(frame["rating"][0]),
            confidence=float(frame["confidence"][0]),
            eta=float(frame["eta"][0]),
            prior=prior_text if prior_text == PRIOR.word else float(prior_text),
        )
        budget = int(frame["budget"][0])
        if values["rating"] == "sequential" and budget < 1:
            raise ParameterError(f"a sequential plan needs a budget of at least 1; got {budget}")
    except (ShapeError, LabelError, ParameterError, ValueError) as e:
        raise SourceError(f"{path} is not a neuroneval crowd plan: its rating rule is not one a plan holds: {e}") from e
    for column in _RULE_COLUMNS:
        if frame[column].n_unique() != 1:
            raise SourceError(f"{path} is not a neuroneval crowd plan: its column {column!r} varies between rows")
    return values | {"budget": None if budget < 1 else budget}


def _check_plan(plan: Any) -> Plan:
    if not isinstance(plan, Plan):
        raise ParameterError(f"plan must be a crowd.Plan (from crowd.plan or Plan.read); got {type(plan).__name__}")
    return plan


def plan(
    pairs: Any,
    activations: Any,
    concept_model: Any,
    budget: int,
    *,
    raters_per_input: int | None = None,
    gamma: float | None = None,
    sampling: Sampling | None = None,
    rating: Literal["fixed", "sequential"] | None = None,
    confidence: float | None = None,
    eta: float | None = None,
    prior: float | Literal["model"] | None = None,
    seed: int | None = None,
    unit_names: Sequence[str] | None = None,
    explanations: Sequence[str] | None = None,
) -> Plan:
    """Draw the inputs to rate for each (unit, explanation) pair.

    Each pair gets budget // raters_per_input draws from its proposal (`proposal`, or uniform
    with ``sampling="uniform"``), with replacement; repeated inputs are shown once, so a pair
    never needs more than `budget` ratings. Each pair draws from its own seeded stream.

    With ``rating="sequential"`` a pair gets `budget` draws (a draw takes at least one vote),
    of which a study counts the first ones whose votes fit in the budget; raters are asked
    round by round (`next_tasks`) until BRAgg's posterior with `eta` and `prior` is
    `confidence` sure, at most raters_per_input votes an input.

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
    raters_per_input, gamma, sampling, seed
        See `PLAN_OPTIONS` (None: the declared default).
    unit_names, explanations : sequence of str, optional
        Names of the K units and texts of the T explanations, for the task table.
    """
    values = PLAN_OPTIONS.resolve(
        raters_per_input=raters_per_input, gamma=gamma, sampling=sampling, rating=rating, confidence=confidence,
        eta=eta, prior=prior, seed=seed,
    )  # fmt: skip
    raters_per_input, gamma, sampling = values["raters_per_input"], values["gamma"], values["sampling"]
    sequential = values["rating"] == "sequential"
    pair_array = as_pairs(pairs)
    if pair_array.shape[0] == 0:
        raise EmptyInputError("no (unit, concept) pair to plan")
    a = as_matrix(activations, "activations")
    chat = as_matrix(concept_model, "concept_model")
    if a.shape[0] != chat.shape[0]:
        raise ShapeError(f"activations have {a.shape[0]} inputs (rows) but concept_model has {chat.shape[0]}")
    if a.shape[0] == 0:
        raise EmptyInputError("activations and concept_model have no inputs (rows)")
    n_units, n_concepts = a.shape[1], chat.shape[1]
    check_pairs(pair_array, n_units, n_concepts)
    # At most 2^53: ratings are counted in float64, exactly.
    budget = check_integer(budget, "budget", minimum=1, maximum=2**53)
    if budget < raters_per_input and not sequential:
        raise ParameterError(
            f"budget must be an integer of at least raters_per_input ({raters_per_input}); got {budget!r}"
        )
    unit_names = check_names(unit_names, n_units, "unit_names")
    explanations = check_names(explanations, n_concepts, "explanations")
    n = a.shape[0]
    n_draws = budget if sequential else budget // raters_per_input
    frames = []
    for index, (k, t) in enumerate(pair_array):
        unit = as_vector(a[:, k], f"activations column {k}")
        model = as_probabilities(chat[:, t], f"concept_model column {t}")
        abar = _standardise(unit)
        if abar is None:
            raise ParameterError(f"activations column {k} is constant: its correlation with any concept is undefined")
        q = proposal(unit, model, gamma if sampling == "mgis" else 1.0)
        rng = np.random.default_rng([values["seed"], index])
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
    rule = {k: values[k] for k in ("rating", "confidence", "eta", "prior")}
    return Plan(pl.concat(frames), pair_table, n, raters_per_input, sampling, gamma, **rule, budget=budget)
