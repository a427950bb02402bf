"""Sequential rating (`neuroneval.crowd.sequential`), against independent references:

- the posterior after each vote against Bayes' rule written out as a product of likelihoods;
- the stopping rule and the votes to ask next against a slow loop over vote sequences;
- the labels are unbiased for the 0/1 truth under the stopping rule: exact sums over every vote
  sequence (enumerated, each stopped by the slow loop), and a Monte Carlo check;
- inputs that need more votes, or went past a stop, are refused by name.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from neuroneval import crowd, errors
from test_crowd_debiased import rare_population


def bayes(votes: list[int], eta: float, prior: float) -> float:
    """P(present | votes) as a product of likelihoods: the reference."""
    present = prior * math.prod((1 - eta) if v else eta for v in votes)
    absent = (1 - prior) * math.prod(eta if v else (1 - eta) for v in votes)
    return present / (present + absent)


def slow_stop(votes: list[int], eta: float, prior: float, confidence: float, cap: int) -> int | None:
    """The number of votes after which the rule stops this sequence, or None if it never does."""
    for k in range(1, len(votes) + 1):
        c = bayes(votes[:k], eta, prior)
        if c >= confidence - 1e-12 or c <= 1 - confidence + 1e-12 or k == cap:  # a tie counts as sure
            return k
    return None


RULES = [(0.23, 0.05, 0.95, 9), (0.23, 0.5, 0.9, 5), (0.1, 0.2, 0.99, 7), (0.35, 0.01, 0.8, 8), (0.23, 0.97, 0.95, 1)]


def test_posterior_after_each_vote_by_hand() -> None:
    votes = [1, 1, 0, 1, 0, 0]
    for eta, prior in ((0.23, 0.05), (0.1, 0.7), (0.45, 0.5)):
        path = crowd.posterior_path(votes, eta=eta, prior=prior)
        expected = [bayes(votes[: k + 1], eta, prior) for k in range(len(votes))]
        np.testing.assert_allclose(path, expected, rtol=1e-12)
    with pytest.raises(errors.ParameterError, match="0 .absent. and 1 .present."):
        crowd.posterior_path([1, 2])


@pytest.mark.parametrize(("eta", "prior", "confidence", "cap"), RULES)
def test_stopping_rule_and_votes_to_ask_against_a_slow_loop(
    eta: float, prior: float, confidence: float, cap: int
) -> None:
    rule = {"confidence": confidence, "raters_per_input": cap}
    for votes in itertools.product((0, 1), repeat=cap):
        stop = slow_stop(list(votes), eta, prior, confidence, cap)
        assert stop is not None
        for k in range(stop + 1):
            s = sum(votes[:k])
            finished = bool(crowd.sequential_finished(s, k, eta=eta, prior=prior, **rule))
            assert finished == (k == stop), (votes, k)
            # the fewest further votes that can finish it: all one way or all the other
            fewest = min(
                j for j in range(1, cap + 1) if any(
                    slow_stop(list(votes[:k]) + [v] * j, eta, prior, confidence, cap) == k + j for v in (0, 1)
                )
            ) if k < stop else 0  # fmt: skip
            assert int(crowd.votes_to_ask(s, k, eta=eta, prior=prior, **rule)) == fewest, (votes, k)


@pytest.mark.parametrize(("eta", "prior", "confidence", "cap"), RULES)
def test_labels_are_unbiased_for_the_truth_under_the_rule(
    eta: float, prior: float, confidence: float, cap: int
) -> None:
    """Every vote sequence of `cap` votes, stopped by the slow loop: the stopping points' labels,
    weighted by the probability of the sequences, average to the truth exactly."""
    rule = {"confidence": confidence, "raters_per_input": cap}
    expected = {0: 0.0, 1: 0.0}
    for votes in itertools.product((0, 1), repeat=cap):
        k = slow_stop(list(votes), eta, prior, confidence, cap)
        s = sum(votes[:k])
        label = float(crowd.sequential_labels(s, k, eta=eta, prior=prior, **rule))
        for truth, theta in ((0, eta), (1, 1 - eta)):
            # the whole sequence's probability: its stopped prefix and any continuation
            expected[truth] += theta ** sum(votes) * (1 - theta) ** (cap - sum(votes)) * label
    assert expected[1] == pytest.approx(1.0, abs=1e-10)
    assert expected[0] == pytest.approx(0.0, abs=1e-10)


def test_labels_of_many_inputs_equal_one_call_per_input() -> None:
    """One call over inputs whose (eta, prior) pairs repeat, share an eta or a prior, or are all
    their own gives each input the label a call on it alone gives, bit for bit; an input past
    its stop is named by its position among them."""
    rng = np.random.default_rng(5)
    n, cap = 300, 7
    pool = rng.integers(0, 6, n)
    eta = np.where(pool < 3, np.array([0.1, 0.23, 0.3])[pool % 3], rng.uniform(0.05, 0.4, n))
    prior = np.where(pool % 2 == 0, np.array([0.05, 0.5, 0.9])[pool % 3], rng.uniform(0.01, 0.99, n))
    positive, votes = np.zeros(n, int), np.zeros(n, int)
    rule = {"confidence": 0.95, "raters_per_input": cap}
    while not (done := crowd.sequential_finished(positive, votes, eta=eta, prior=prior, **rule)).all():
        positive += ~done & (rng.random(n) < 0.4)
        votes += ~done
    labels = crowd.sequential_labels(positive, votes, eta=eta, prior=prior, **rule)
    alone = [
        float(crowd.sequential_labels(positive[i], votes[i], eta=eta[i], prior=prior[i], **rule)) for i in range(n)
    ]
    assert labels.tolist() == alone
    stopped = int(np.flatnonzero(votes < cap)[3])
    votes[stopped] = cap  # more "absent" votes up to the cap, which always finishes an input
    with pytest.raises(errors.ParameterError, match=f"input {stopped} .*went past a stop"):
        crowd.sequential_labels(positive, votes, eta=eta, prior=prior, **rule)


def test_labels_are_unbiased_by_simulation_and_cost_fewer_votes() -> None:
    rng = np.random.default_rng(0)
    eta, n = 0.23, 40_000
    prior = np.clip(rng.beta(0.5, 4, n), 0.01, 0.99)
    truth = (rng.random(n) < prior).astype(int)
    positive, votes = np.zeros(n, int), np.zeros(n, int)
    waiting = np.ones(n, bool)
    while waiting.any():
        ask = crowd.votes_to_ask(positive, votes, eta=eta, prior=prior, raters_per_input=9)
        assert not (ask[waiting] == 0).any() and not ask[~waiting].any()
        for _ in range(int(ask.max())):
            live = ask > 0
            wrong = rng.random(n) < eta
            positive += live & (truth ^ wrong).astype(bool)
            votes += live
            ask -= live
        waiting = ~crowd.sequential_finished(positive, votes, eta=eta, prior=prior, raters_per_input=9)
    labels = crowd.sequential_labels(positive, votes, eta=eta, prior=prior, raters_per_input=9)
    for t in (0, 1):
        chosen = labels[truth == t]
        assert abs(chosen.mean() - t) < 3 * chosen.std() / math.sqrt(chosen.size), t
    assert votes.mean() < 4  # the rule asks about 2-3 raters an input where a fixed design asks 9


def test_unfinished_and_overrun_inputs_are_refused() -> None:
    with pytest.raises(errors.ParameterError, match="input 0 .0 present of 0 votes. is not finished"):
        crowd.sequential_labels(0, 0, prior=0.05)
    with pytest.raises(errors.ParameterError, match="input 1 .1 present of 1 votes. is not finished"):
        crowd.sequential_labels([0, 1], [1, 1], prior=0.05)
    # one "absent" vote already stops an input with prior 0.05: a second vote went past the stop
    assert bool(crowd.sequential_finished(0, 1, prior=0.05))
    with pytest.raises(errors.ParameterError, match="input 0 .0 present of 2 votes. went past a stop"):
        crowd.sequential_labels(0, 2, prior=0.05)
    with pytest.raises(errors.ParameterError, match="positive must not exceed votes"):
        crowd.sequential_finished(3, 2)
    with pytest.raises(errors.ParameterError, match="confidence"):
        crowd.votes_to_ask(0, 0, confidence=0.4)


# --------------------------------------------------------------------------------------------
# The simulator


@pytest.mark.slow
def test_sequential_debiased_estimator_is_consistent_and_its_interval_covers() -> None:
    """Over 200 seeded trials the sequentially rated, debiased estimate has no bias left at the
    largest budget (within 3 standard errors), its error keeps falling, its delta-method interval
    covers the truth at about its level, and an input takes fewer votes than the cap."""
    a, y, model = rare_population(400_000, 0.1, seed=9)
    budgets = [1000, 8000, 64000]
    sim = crowd.simulate(
        a, y, model, [(0, 0)], budgets, configurations=[("mgis", "debiased"), ("mgis", "composite")],
        raters_per_input=9, rating="sequential", trials=200, prior="model", seed=0, progress=False,
    )  # fmt: skip
    assert sim.rating == "sequential"
    for method in ("debiased", "composite"):
        rows = sim.rce.filter(aggregation=method).sort("budget").rows(named=True)
        assert abs(rows[-1]["bias"]) <= 3 * rows[-1]["bias_se"], rows[-1]
        assert rows[-1]["rce"] < rows[0]["rce"] / 2
        for r in rows[1:]:
            assert 0.90 <= r["coverage"] <= 0.98, r
        for r in rows:
            assert r["ratings"] <= r["budget"]  # draws are charged their votes until the next would not fit
            assert r["ratings"] / r["inputs"] < 5  # far fewer than the cap of 9 per input


def test_sequential_budgets_are_nested_and_fixed_rating_is_unchanged() -> None:
    """A grid's largest budget gives what a run of it alone gives; "fixed" is the default."""
    a, y, model = rare_population(20_000, 0.1, seed=2)
    common = dict(configurations=[("mgis", "debiased"), ("uniform", "majority")], raters_per_input=5, trials=4,
                  prior="model", seed=3, progress=False)  # fmt: skip
    grid = crowd.simulate(a, y, model, [(0, 0)], [50, 400], rating="sequential", **common)
    alone = crowd.simulate(a, y, model, [(0, 0)], [400], rating="sequential", **common)
    last = grid.rce.filter(budget=400).drop("budget")
    assert last.equals(alone.rce.drop("budget"))
    fixed = crowd.simulate(a, y, model, [(0, 0)], [50, 400], **common)
    assert fixed.rating == "fixed" and fixed.rce["inputs"].to_list() == [10, 80, 10, 80]
    assert not fixed.rce.equals(grid.rce)
