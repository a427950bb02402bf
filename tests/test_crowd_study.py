"""Crowd studies round by round (`neuroneval.crowd.study`, `Plan.tasks` with ratings): the votes
each round asks against the sequential rule checked vote by vote, the counted draws against a
slow loop over the budget, the expected votes against a slow simulation, simulated raters'
streams, and the labels and estimates of a finished study against the functions they must equal.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pytest
from neuroneval import crowd
from neuroneval.crowd.sequential import _expected_votes
from neuroneval.errors import LabelError, ParameterError, ShapeError, SourceError
from polars.testing import assert_frame_equal

N = 2000


def _data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)
    y = (rng.random((N, 2)) < [0.05, 0.12]).astype(np.float64)
    a = np.column_stack([2.0 * y[:, 0], y[:, 1]]) + rng.normal(size=(N, 2))
    model = np.clip(0.6 * y + 0.1 + 0.2 * rng.random((N, 2)), 0.0, 1.0)
    return a, y, model


A, Y, MODEL = _data()
PAIRS = [(0, 0), (1, 1)]


def sequential_plan(budget: int = 150, **kwargs: Any) -> crowd.Plan:
    options: dict[str, Any] = {"rating": "sequential", "raters_per_input": 7, "seed": 4, **kwargs}
    return crowd.plan(PAIRS, A, MODEL, budget, **options)


@pytest.fixture(scope="module", params=[0.05, "model"], ids=["prior 0.05", "prior model"])
def study(request: pytest.FixtureRequest) -> dict[str, Any]:
    """A finished study of a sequential plan, with the ratings of each round."""
    p = sequential_plan(prior=request.param)
    rounds = []
    ratings = pl.DataFrame(schema={"pair": pl.Int64, "input": pl.Int64, "rater": pl.Int64, "vote": pl.Int64})
    while (tasks := crowd.next_tasks(p, ratings)).height:
        rounds.append(tasks)
        ratings = pl.concat([ratings, crowd.simulated_votes(tasks, Y, seed=9)])
    return {"plan": p, "ratings": ratings, "rounds": rounds}


def _stream(
    seed: int, pair: int, item: int, concept: int, k: int, eta: float = crowd.RATE_OPTIONS["eta"].default
) -> list[int]:
    """The first k votes of simulated raters on (pair, input), drawn here one by one."""
    rng = np.random.default_rng([seed, pair, item])
    truth = int(Y[item, concept])
    return [truth if rng.random() >= eta else 1 - truth for _ in range(k)]


def _prior(p: crowd.Plan, pair: int, item: int) -> float:
    if p.prior == "model":
        return float(np.clip(MODEL[item, PAIRS[pair][1]], 0.001, 0.999))
    return float(p.prior)


def _stops_at(p: crowd.Plan, votes: list[int], pair: int, item: int) -> int:
    """The number of votes at which the sequential rule, fed `votes` one at a time, stops."""
    for k in range(1, len(votes) + 1):
        done = crowd.sequential_finished(
            sum(votes[:k]),
            k,
            p.eta,
            _prior(p, pair, item),
            confidence=p.confidence,
            raters_per_input=p.raters_per_input,
        )
        if bool(done):
            return k
    return len(votes) + 1  # not yet


def test_each_input_is_asked_until_the_rule_stops_and_no_further(study: dict[str, Any]) -> None:
    p, ratings = study["plan"], study["ratings"]
    assert len(study["rounds"]) >= 3
    concept = dict(enumerate(t for _, t in PAIRS))
    for (pair, item), group in ratings.group_by("pair", "input", maintain_order=True):
        group = group.sort("rater")
        votes = group["vote"].to_list()
        assert group["rater"].to_list() == list(range(len(votes)))
        assert votes == _stream(9, pair, item, concept[pair], len(votes))
        # never past a stop; the inputs still short of one are the ones beyond the budget
        assert _stops_at(p, votes, pair, item) >= len(votes)
    # each round asks an input the fewest votes that could stop it: all "absent" or all "present"
    for tasks in study["rounds"]:
        for row in tasks.iter_rows(named=True):
            before = (
                ratings.filter(pair=row["pair"], input=row["input"]).sort("rater")["vote"].to_list()[: row["rated"]]
            )
            for extra in (0, 1):
                fed = before + [extra] * row["raters"]
                assert _stops_at(p, fed, row["pair"], row["input"]) >= len(fed)
            assert any(
                _stops_at(p, before + [extra] * row["raters"], row["pair"], row["input"]) == len(before) + row["raters"]
                for extra in (0, 1)
            )


def test_counted_draws_are_each_pairs_first_draws_that_fit_in_the_budget(study: dict[str, Any]) -> None:
    p, ratings = study["plan"], study["ratings"]
    labels = crowd.aggregate(ratings, "debiased", plan=p)
    status = crowd.counted_draws(p, labels)
    votes = {(r["pair"], r["input"]): r["votes"] for r in labels.iter_rows(named=True)}
    finished = {(r["pair"], r["input"]): r["finished"] for r in labels.iter_rows(named=True)}
    for pair in range(len(PAIRS)):
        spent, expected = 0, []
        for row in p.draws.filter(pair=pair).iter_rows(named=True):  # a repeated input is charged again
            spent += votes.get((pair, row["input"]), 0)
            if spent > p.budget or not finished.get((pair, row["input"]), False):
                break
            expected.append(row["draw"])
        got = status.filter(pl.col("counted") & (pl.col("pair") == pair))["draw"].to_list()
        assert got == expected
        assert 20 < len(got) < p.budget
    assert (status.filter("counted")["ask"] == 0).all()
    # the votes on draws that turned out beyond the budget are few
    beyond = labels.join(status.filter("counted").select("pair", "input"), on=["pair", "input"], how="anti")
    assert beyond["votes"].sum() <= 0.1 * ratings.height


def test_study_labels_and_estimate_equal_the_functions_they_come_from(study: dict[str, Any]) -> None:
    p, ratings = study["plan"], study["ratings"]
    assert_frame_equal(crowd.simulate_study(p, Y, seed=9), ratings)
    composite = crowd.aggregate(ratings, "composite", plan=p)
    done = composite.filter("finished")
    priors = [_prior(p, r["pair"], r["input"]) for r in done.iter_rows(named=True)]
    rule = {"confidence": p.confidence, "raters_per_input": p.raters_per_input}
    expected = crowd.sequential_labels(done["positive"], done["votes"], p.eta, np.array(priors), **rule)
    np.testing.assert_allclose(done["debiased"], expected, rtol=1e-12)
    np.testing.assert_allclose(
        done["label"], crowd.bragg_posterior(done["positive"], done["votes"], p.eta, np.array(priors))
    )
    debiased = crowd.aggregate(ratings, "debiased", plan=p)
    assert_frame_equal(debiased.select("label"), composite.select(pl.col("debiased").alias("label")))
    assert debiased.filter(~pl.col("finished"))["label"].is_null().all()
    # the estimate reads the counted draws only: as a fixed plan holding just them
    counted = crowd.counted_draws(p, debiased).filter("counted").select(p.draws.columns)
    as_fixed = crowd.Plan(counted, p.pairs, p.n_inputs, p.raters_per_input, p.sampling, p.gamma)
    got = crowd.estimate(p, debiased, estimator="debiased", seed=2)
    kept = debiased.join(counted.select("pair", "input"), on=["pair", "input"], how="semi")
    assert_frame_equal(got, crowd.estimate(as_fixed, kept, estimator="debiased", seed=2))
    assert got["draws"].to_list() == counted.group_by("pair", maintain_order=True).len()["len"].to_list()


def test_an_unfinished_study_is_not_estimated(study: dict[str, Any]) -> None:
    p, rounds = study["plan"], study["rounds"]
    first = crowd.simulated_votes(rounds[0], Y, seed=9)
    labels = crowd.aggregate(first, "debiased", plan=p)
    assert (~labels["finished"]).any()
    with pytest.raises(LabelError, match="the study is not finished"):
        crowd.estimate(p, labels, estimator="debiased")
    with pytest.raises(ParameterError, match="the rule its raters were asked by"):
        crowd.aggregate(first, "debiased", plan=p, eta=0.1)
    with pytest.raises(ShapeError, match="votes"):  # votes, not their counts
        crowd.counted_draws(p, first)
    # votes past the rule's stop: another "absent" on an input one "absent" vote decided
    stopped = labels.filter(pl.col("finished") & (pl.col("votes") == 1) & (pl.col("positive") == 0)).row(0, named=True)
    extra = pl.DataFrame({"pair": [stopped["pair"]], "input": [stopped["input"]], "rater": [99], "vote": [0]})
    with pytest.raises(LabelError, match="past the sequential rule's stop"):
        crowd.aggregate(pl.concat([first, extra]), "debiased", plan=p)


def test_expected_votes_against_a_slow_simulation() -> None:
    eta, confidence, cap = 0.23, 0.95, 7
    rng = np.random.default_rng(3)
    states = [(0, 0, 0.05, 0.3), (1, 1, 0.05, 0.05), (1, 2, 0.2, 0.5), (2, 3, 0.05, 0.9), (0, 1, 0.5, 0.5)]
    for pos, m, prior, belief in states:
        got = _expected_votes(
            np.array([pos], float),
            np.array([m], float),
            np.array([eta]),
            np.array([prior]),
            confidence,
            cap,
            np.array([belief]),
        )[0]
        # the truth from the posterior of the votes so far under `belief`, then votes until the rule stops
        weight = float(crowd.bragg_posterior(pos, m, eta, belief))
        totals = []
        for _ in range(4000):
            present = rng.random() < weight
            s, k = pos, m
            while not crowd.sequential_finished(s, k, eta, prior, confidence=confidence, raters_per_input=cap):
                s += int(rng.random() < (1 - eta if present else eta))
                k += 1
            totals.append(k)
        se = np.std(totals) / np.sqrt(len(totals))
        assert abs(got - np.mean(totals)) <= 4 * se + 1e-12, (pos, m, got, np.mean(totals))


def test_simulated_votes_do_not_depend_on_the_rounds() -> None:
    one = pl.DataFrame({"pair": [0, 1], "concept": [0, 1], "input": [5, 5], "rated": [0, 0], "raters": [6, 6]})
    two = [one.with_columns(raters=pl.lit(2)), one.with_columns(rated=pl.lit(2), raters=pl.lit(4))]
    together = crowd.simulated_votes(one, Y, seed=1)
    apart = pl.concat([crowd.simulated_votes(t, Y, seed=1) for t in two]).sort("pair", "rater")
    assert_frame_equal(together.sort("pair", "rater"), apart)
    assert together["rater"].to_list() == [0, 1, 2, 3, 4, 5] * 2
    # each vote wrong with rate eta: over many votes, within four standard errors
    many = pl.DataFrame({"pair": 0, "concept": 0, "input": np.arange(N), "rated": 0, "raters": 10})
    votes = crowd.simulated_votes(many, Y, eta=0.3, seed=2)
    wrong = np.mean(votes["vote"].to_numpy() != Y[votes["input"].to_numpy(), 0])
    assert abs(wrong - 0.3) < 4 * np.sqrt(0.3 * 0.7 / votes.height)
    assert not votes.equals(crowd.simulated_votes(many, Y, eta=0.3, seed=3))
    with pytest.raises(ParameterError, match="eta"):
        crowd.simulated_votes(one, Y, eta=0.5)


def test_a_fixed_plan_has_one_round() -> None:
    p = crowd.plan(PAIRS, A, MODEL, 60, raters_per_input=3, seed=1)
    first = p.tasks()
    assert_frame_equal(crowd.next_tasks(p), first)
    assert (first["raters"] == 3).all() and (first["rated"] == 0).all()
    assert first.height == p.inputs().height
    ratings = crowd.simulate_study(p, Y, seed=1)
    assert ratings.height == 3 * p.inputs().height
    assert crowd.next_tasks(p, ratings).height == 0
    partial = ratings.filter(pl.col("rater") < 1)  # one vote each: two more asked
    again = crowd.next_tasks(p, partial)
    assert (again["raters"] == 2).all() and (again["rated"] == 1).all() and again.height == first.height
    labels = crowd.aggregate(ratings, "majority", plan=p)
    assert "finished" not in labels.columns
    assert crowd.estimate(p, labels)["draws"].to_list() == [20, 20]


def test_a_sequential_plan_file_keeps_its_rule(tmp_path: Any) -> None:
    p = sequential_plan(prior="model", confidence=0.9, eta=0.2)
    p.write(tmp_path / "p.parquet")
    back = crowd.Plan.read(tmp_path / "p.parquet")
    assert (back.rating, back.confidence, back.eta, back.prior, back.budget) == ("sequential", 0.9, 0.2, "model", 150)
    assert_frame_equal(crowd.next_tasks(back), crowd.next_tasks(p))
    with pytest.raises(ParameterError, match="round by round"):
        p.tasks()
    assert p.draws.height == 150 * len(PAIRS)  # a draw takes at least one vote
    frame = pl.read_parquet(tmp_path / "p.parquet")
    # a file from before sequential rating is a fixed plan's
    frame.drop("rating", "confidence", "eta", "prior", "budget").write_parquet(tmp_path / "old.parquet")
    assert crowd.Plan.read(tmp_path / "old.parquet").rating == "fixed"
    for column, value in [("rating", "bogus"), ("confidence", 1.5), ("prior", "often"), ("budget", 0)]:
        frame.with_columns(pl.lit(value).alias(column)).write_parquet(tmp_path / "bad.parquet")
        with pytest.raises(SourceError, match="rating rule"):
            crowd.Plan.read(tmp_path / "bad.parquet")
    frame.drop("eta").write_parquet(tmp_path / "bad.parquet")
    with pytest.raises(SourceError, match="rating rule"):
        crowd.Plan.read(tmp_path / "bad.parquet")
    frame.with_columns(pl.int_range(pl.len()).alias("budget") + 1).write_parquet(tmp_path / "bad.parquet")
    with pytest.raises(SourceError, match="varies"):
        crowd.Plan.read(tmp_path / "bad.parquet")


@pytest.mark.slow
def test_studies_label_the_counted_draws_without_bias() -> None:
    """Over 200 seeded studies at a large budget, the counted draws' weighted means of the
    debiased labels (the prevalence) and of the activations times the labels (the covariance),
    from which the debiased estimator is made, are within three standard errors of the truth:
    neither the stopping rule nor the budget's prefix biases them. (The correlation, their
    nonlinear ratio, carries the estimator's own O(1/n) bias.)"""

    def standardised(x: np.ndarray) -> np.ndarray:
        return (x - x.mean()) / x.std()

    truth = np.array([[Y[:, t].mean(), np.mean(standardised(A[:, k]) * Y[:, t])] for k, t in PAIRS])
    got = []
    for seed in range(200):
        p = sequential_plan(budget=400, seed=seed)
        labels = crowd.aggregate(crowd.simulate_study(p, Y, seed=seed), "debiased", plan=p)
        counted = crowd.counted_draws(p, labels).filter("counted")
        counted = counted.join(labels.select("pair", "input", "label"), on=["pair", "input"], how="left")
        means = []
        for pair in range(len(PAIRS)):
            g = counted.filter(pair=pair)
            w, c = g["weight"].to_numpy(), g["label"].to_numpy()
            means.append([np.mean(w * c), np.mean(w * g["abar"].to_numpy() * c)])
        got.append(means)
    values = np.array(got)
    se = values.std(axis=0, ddof=1) / np.sqrt(len(values))
    assert np.all(np.abs(values.mean(axis=0) - truth) <= 3 * se), (values.mean(axis=0), truth, se)
