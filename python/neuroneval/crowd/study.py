"""A rating study round by round: which inputs need how many votes next, which draws count,
and simulated raters that answer a round's tasks.

A fixed plan has one round: every shown input gets raters_per_input votes. A sequential plan
(``plan(..., rating="sequential")``) asks each input the fewest votes that could decide it
(`votes_to_ask`), round after round, until BRAgg's posterior is sure or the cap is reached.
Its budget counts each draw at its input's votes (a repeated input again, as `simulate`
does), and a pair's counted draws are its first ones whose votes fit in the budget. While votes
are still coming in, a draw's votes are at least its votes so far plus those it is asked next,
so a round asks only about the draws whose lower bounds fit; once no counted draw needs a
vote, the lower bounds are exact and the counted draws are final. A draw that turned out not to
fit keeps the votes it got (reported as not counted), and it is asked no more.

The j-th vote of simulated raters on (pair, input) comes from a stream of its own (the seed,
the pair, the input), so a study's votes do not depend on how its rounds were cut: a study
driven round by round from the command line ends with the ratings of `simulate_study`.
`next_tasks` writes each round's task table.

Examples
--------
>>> import numpy as np
>>> from neuroneval import crowd
>>> rng = np.random.default_rng(0)
>>> y = (rng.random((3000, 1)) < 0.05).astype(float)
>>> a = 2 * y + rng.normal(size=(3000, 1))
>>> model = np.clip(0.7 * y + 0.1 + 0.1 * rng.random((3000, 1)), 0, 1)
>>> p = crowd.plan([(0, 0)], a, model, budget=200, rating="sequential", raters_per_input=9, seed=0)
>>> first = crowd.next_tasks(p)   # round 1: one vote could decide each input
>>> first["raters"].unique().to_list(), first.height
([1], 62)
>>> ratings = crowd.simulate_study(p, y, seed=1)
>>> crowd.next_tasks(p, ratings).height   # finished
0
>>> labels = crowd.aggregate(ratings, "debiased", plan=p)
>>> round(crowd.estimate(p, labels, estimator="debiased")["rho"][0], 3)
0.248
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import polars as pl

from .._coerce import as_matrix, as_table, check_columns
from ..errors import LabelError, ParameterError, ShapeError
from ..options import Options
from .aggregation import _prior_values, _ratings_table
from .sampling import _PRIOR_CLIP, ETA, SEED, Array, Plan, _check_plan, _task_table
from .sequential import _expected_votes, votes_to_ask

__all__ = ["RATE_OPTIONS", "counted_draws", "next_round", "next_tasks", "simulate_study", "simulated_votes"]

#: Simulated raters: their error rate and the seed of their votes.
RATE_OPTIONS = Options(replace(ETA, help="the simulated raters' error rate"), SEED)


def counted_draws(plan: Plan, counts: pl.DataFrame) -> pl.DataFrame:
    """The plan's draws with each input's votes and positive votes so far (`counts`: pair,
    input, votes, positive; an input without a row has none) and, per draw:

    - ask: the votes it could take next (0 once finished: `votes_to_ask`);
    - counted: whether it can be within the budget, on the lower bound votes + ask of each
      draw up to it (final once no counted draw has ask > 0);
    - now: whether this round asks about it: a counted draw with ask > 0 whose draws up to it
      are expected to fit in the budget (each at its expected votes at the stop, given its
      votes so far); when none is, the pair's first counted draw with ask > 0.
    """
    plan = _check_plan(plan)
    counts = as_table(counts, "counts", "pair, input, votes, positive")
    counts = check_columns(counts, "counts", dict.fromkeys(("pair", "input", "votes", "positive"), "id"))
    draws = plan.draws.join(
        counts.select("pair", "input", "votes", "positive"), on=["pair", "input"], how="left", maintain_order="left"
    ).with_columns(pl.col("votes", "positive").fill_null(0).cast(pl.Int64))
    votes, positive = draws["votes"].to_numpy(), draws["positive"].to_numpy()
    if plan.rating != "sequential":
        ask = np.maximum(plan.raters_per_input - votes, 0)
        return draws.with_columns(
            pl.Series("ask", ask, dtype=pl.Int64), pl.lit(True).alias("counted"), pl.Series("now", ask > 0)
        )
    if plan.budget is None:
        raise ParameterError("a sequential plan needs its budget (plans from crowd.plan or Plan.read have one)")
    rule = (
        np.full(votes.size, plan.eta),
        _prior_values(draws, plan.prior, plan),
        plan.confidence,
        plan.raters_per_input,
    )
    ask = votes_to_ask(positive, votes, *rule[:2], confidence=plan.confidence, raters_per_input=plan.raters_per_input)
    # the concept model's probability is the best guess of how often a drawn input holds the
    # concept (MG-IS draws inputs where it does more often than BRAgg's prior says)
    belief = np.clip(draws["model"].to_numpy(), *_PRIOR_CLIP)
    expected = _expected_votes(positive.astype(np.float64), votes.astype(np.float64), *rule, belief)
    waiting = pl.col("counted") & (pl.col("ask") > 0)
    return (
        draws.with_columns(
            pl.Series("ask", ask, dtype=pl.Int64),
            pl.Series("lower", votes + ask, dtype=pl.Int64),
            pl.Series("expected", expected),
        )
        .with_columns(
            (pl.col("lower").cum_sum().over("pair") <= plan.budget).alias("counted"),
            (pl.col("expected").cum_sum().over("pair") <= plan.budget).alias("fits"),
        )
        .with_columns((waiting & pl.col("fits")).alias("now"))
        .with_columns(
            pl.col("now")
            | (waiting & (waiting.cum_sum().over("pair") == 1) & ~pl.col("now").any().over("pair")).alias("now")
        )
        .drop("lower", "expected", "fits")
    )


def next_round(plan: Plan, ratings: Any = None) -> pl.DataFrame:
    """The inputs to ask about next, given the `ratings` so far (a table as `aggregate` takes;
    None: none yet): pair, input, rated (votes so far), positive and raters (votes to ask now),
    one row per (pair, input) in first-drawn order. No row: the study is finished."""
    plan = _check_plan(plan)
    status = counted_draws(plan, _counts(plan, ratings))
    asked = status.filter("now").unique(["pair", "input"], maintain_order=True)
    return asked.select("pair", "input", pl.col("votes").alias("rated"), "positive", pl.col("ask").alias("raters"))


def next_tasks(plan: Plan, ratings: Any = None, batch_size: int | None = None) -> pl.DataFrame:
    """The task table of the next round (`next_round`'s inputs in `Plan.tasks`'s layout: task,
    pair, unit, unit_name, concept, explanation, input, rated, raters). No row: the study is
    finished."""
    return _task_table(plan, next_round(plan, ratings), batch_size)


def simulate_study(plan: Plan, labels: Any, *, eta: float | None = None, seed: int | None = None) -> pl.DataFrame:
    """The ratings a study of `plan` collects from simulated raters, round by round until it is
    finished (`next_tasks`, `simulated_votes`): pair, input, rater (the vote's index on its
    input) and vote. `labels` (N, T) holds the true 0/1 labels of the plan's explanations."""
    values = RATE_OPTIONS.resolve(eta=eta, seed=seed)
    plan = _check_plan(plan)
    truth = _truth(labels, plan.n_inputs)
    rounds = [_no_votes()]
    while True:
        tasks = next_tasks(plan, pl.concat(rounds))
        if tasks.height == 0:
            return pl.concat(rounds)
        rounds.append(simulated_votes(tasks, truth, **values))


def simulated_votes(tasks: Any, labels: Any, *, eta: float | None = None, seed: int | None = None) -> pl.DataFrame:
    """Simulated raters' answers to a round's task table (`Plan.tasks`: pair, concept, input,
    rated, raters): each asked vote is wrong with probability `eta` against the true label
    ``labels[input, concept]``. The j-th vote on (pair, input) is the j-th of a stream seeded
    by (seed, pair, input), so votes do not depend on the rounds. Returns pair, input, rater
    (the vote's index on its input, from `rated`) and vote."""
    values = RATE_OPTIONS.resolve(eta=eta, seed=seed)
    table = as_table(tasks, "tasks", "pair, concept, input, rated, raters")
    table = check_columns(table, "tasks", dict.fromkeys(("pair", "concept", "input", "rated", "raters"), "id"))
    truth = _truth(labels)
    if table.height and (int(table["input"].max()) >= truth.shape[0] or int(table["concept"].max()) >= truth.shape[1]):  # type: ignore[arg-type]
        raise ShapeError(f"tasks name an input or concept outside labels' {truth.shape[0]} x {truth.shape[1]}")
    rows: list[tuple[int, int, int, int]] = []
    for pair, concept, item, rated, raters in table.select("pair", "concept", "input", "rated", "raters").iter_rows():
        rng = np.random.default_rng([values["seed"], pair, item])
        right = rng.random(rated + raters)[rated:] >= values["eta"]
        truth_vote = int(truth[item, concept])
        rows += [(pair, item, rated + j, truth_vote if ok else 1 - truth_vote) for j, ok in enumerate(right)]
    schema = {"pair": pl.Int64, "input": pl.Int64, "rater": pl.Int64, "vote": pl.Int64}
    return pl.DataFrame(rows, schema=schema, orient="row")


# --------------------------------------------------------------------------------------------


def _no_votes() -> pl.DataFrame:
    return pl.DataFrame(schema={"pair": pl.Int64, "input": pl.Int64, "rater": pl.Int64, "vote": pl.Int64})


def _truth(labels: Any, n_inputs: int | None = None) -> Array:
    """True 0/1 labels (N, T), N the plan's inputs when given."""
    y = as_matrix(labels, "labels")
    if n_inputs is not None and y.shape[0] != n_inputs:
        raise ShapeError(f"labels have {y.shape[0]} inputs (rows) but the plan draws from {n_inputs}")
    if not np.isin(y, (0.0, 1.0)).all():
        raise LabelError("simulated raters need binary true labels (0/1)")
    return y.astype(np.float64)


def _counts(plan: Plan, ratings: Any) -> pl.DataFrame:
    """Votes and positive votes per rated (pair, input): none for None or an empty table."""
    empty = pl.DataFrame(schema={"pair": pl.Int64, "input": pl.Int64, "votes": pl.Int64, "positive": pl.Int64})
    if ratings is None or (isinstance(ratings, pl.DataFrame) and ratings.height == 0):
        return empty
    table = _ratings_table(ratings, plan)
    return table.group_by("pair", "input", maintain_order=True).agg(
        pl.len().cast(pl.Int64).alias("votes"), pl.col("vote").sum().cast(pl.Int64).alias("positive")
    )
