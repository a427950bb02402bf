"""The raters-per-input grid, the bias floor of plug-in labels and the debiased estimator
(`neuroneval.crowd`), against independent references.

- debiased labels are unbiased for the 0/1 truth: exact sums over scipy's binomial vote counts;
- `label_attenuation` equals the correlation of plug-in labels with the unit on a large simulated
  population (votes drawn per input), and predicts the simulator's floor;
- `cheapest_budgets` picks the raters per input with the smallest needed budget on a hand-made
  grid; `Simulation.model_rce` is the concept model's own error, from numpy's correlations;
- majority vote that never reaches the target with 3 raters does with 25;
- the debiased estimator: `estimate(estimator="debiased")` equals a slow loop; over seeded trials its
  bias vanishes as the budget grows where the plug-in estimator's does not, and its delta-method
  interval covers the true correlation in 90-98% of trials;
- the budgets of one simulation are nested: a grid's largest budget equals a run of it alone.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from neuroneval import crowd, errors
from scipy import stats


def rare_population(n: int, prevalence: float, seed: int) -> tuple[np.ndarray, ...]:
    """A rare concept y, a unit correlated with it (r about 0.3) and an imperfect concept model."""
    rng = np.random.default_rng(seed)
    y = (rng.random((n, 1)) < prevalence).astype(np.float64)
    a = 1.5 * y + rng.normal(size=(n, 1))
    model = np.clip(0.5 * y + 0.3 * rng.random((n, 1)), 0.0, 1.0)
    return a, y, model


# --------------------------------------------------------------------------------------------
# Debiased labels and floors


@pytest.mark.parametrize("votes", [1, 2, 3, 5, 9, 25])
@pytest.mark.parametrize(("eta", "prior"), [(0.23, 0.05), (0.1, 0.5), (0.4, 0.003)])
def test_debiased_labels_are_unbiased_for_the_truth(votes: int, eta: float, prior: float) -> None:
    k = np.arange(votes + 1)
    table = pl.DataFrame(
        {
            "pair": np.zeros(sum(votes for _ in k), dtype=np.int64),
            "input": np.repeat(k, votes),
            "vote": np.concatenate([[1] * i + [0] * (votes - i) for i in k]),
        }
    )
    labels = crowd.aggregate(table, "debiased", eta=eta, prior=prior).sort("input")
    assert labels["positive"].to_list() == k.tolist()
    label = labels["label"].to_numpy()
    assert math.isclose(float(stats.binom.pmf(k, votes, 1 - eta) @ label), 1.0, rel_tol=1e-9)
    assert abs(float(stats.binom.pmf(k, votes, eta) @ label)) < 1e-9
    # BRAgg's posterior, mapped by its expectations under absent and present truth.
    posterior = crowd.bragg_posterior(k, votes, eta, prior)
    absent, present = stats.binom.pmf(k, votes, eta) @ posterior, stats.binom.pmf(k, votes, 1 - eta) @ posterior
    assert np.allclose(label, (posterior - absent) / (present - absent), rtol=1e-9, atol=1e-12)


def test_debiased_aggregation_refuses_fitted_rates() -> None:
    table = pl.DataFrame({"pair": [0, 0], "input": [1, 1], "rater": [0, 1], "vote": [1, 0]})
    with pytest.raises(errors.ParameterError, match="eta='estimate' is for method 'bragg'"):
        crowd.aggregate(table, "debiased", eta="estimate")


@pytest.mark.parametrize(
    ("method", "prevalence", "raters"),
    [("majority", 0.5, 3), ("majority", 0.02, 3), ("majority", 0.02, 9), ("mean", 0.1, 5), ("bragg", 0.02, 3)],
)
def test_label_attenuation_equals_a_large_population(method: str, prevalence: float, raters: int) -> None:
    rng = np.random.default_rng(3)
    n = 2_000_000
    y = rng.random(n) < prevalence
    a = y + rng.normal(size=n)
    positive = rng.binomial(raters, np.where(y, 0.77, 0.23))
    if method == "majority":
        c = np.where(2 * positive > raters, 1.0, np.where(2 * positive == raters, 0.5, 0.0))
    elif method == "mean":
        c = positive / raters
    else:
        c = crowd.bragg_posterior(positive, raters, 0.23, 0.05)
    measured = np.corrcoef(a, c)[0, 1] / np.corrcoef(a, y)[0, 1]
    predicted = float(crowd.label_attenuation(prevalence, 0.23, raters, method, 0.05))
    assert abs(measured - predicted) < 0.01, (measured, predicted)


def test_label_attenuation_validation() -> None:
    for kwargs, match in [
        ({"prevalence": 0.0}, "prevalence"),
        ({"prevalence": 0.1, "eta": 0.5}, "eta"),
        ({"prevalence": 0.1, "raters": 0}, "raters"),
        ({"prevalence": 0.1, "method": "debiased"}, "method"),
        ({"prevalence": 0.1, "prior": 1.0}, "prior"),
    ]:
        with pytest.raises(errors.ParameterError, match=match):
            crowd.label_attenuation(**kwargs)


# --------------------------------------------------------------------------------------------
# The raters-per-input grid


def grid(rce: dict[tuple[str, str, int], list[float]], budgets: list[int]) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {"sampling": s, "aggregation": m, "raters": r, "budget": b, "rce": v}
            for (s, m, r), values in rce.items()
            for b, v in zip(budgets, values, strict=True)
        ]
    )


def test_cheapest_budget_is_the_raters_with_the_smallest_need() -> None:
    budgets = [100, 1000, 10000]
    rce = grid(
        {
            ("uniform", "majority", 3): [0.9, 0.8, 0.7],  # never: a floor
            ("uniform", "majority", 9): [0.5, 0.2, 0.1],  # reaches between 100 and 1000
            ("uniform", "majority", 25): [0.6, 0.3, 0.1],  # reaches between 1000 and 10000
            ("mgis", "bragg", 3): [0.2, 0.1, 0.05],  # already at the first budget
            ("mgis", "bragg", 9): [0.2, 0.3, 0.1],  # a dip: reaches only between 1000 and 10000
            ("mgis", "mean", 3): [0.9, 0.9, 0.9],
        },
        budgets,
    )
    needed = crowd.needed_budgets(rce, 0.25)
    assert needed.columns == ["sampling", "aggregation", "raters", "needed", "inputs"]
    by_key = {(r["sampling"], r["aggregation"], r["raters"]): r for r in needed.iter_rows(named=True)}
    nine = 100 * 10 ** ((0.5 - 0.25) / (0.5 - 0.2))
    assert by_key[("uniform", "majority", 3)]["needed"] is None
    assert math.isclose(by_key[("uniform", "majority", 9)]["needed"], nine, rel_tol=1e-12)
    assert math.isclose(by_key[("uniform", "majority", 9)]["inputs"], nine / 9, rel_tol=1e-12)
    assert math.isclose(by_key[("mgis", "bragg", 9)]["needed"], 1000 * 10 ** (0.05 / 0.2), rel_tol=1e-12)
    cheapest = crowd.cheapest_budgets(rce, 0.25)
    assert cheapest.rows() == [
        ("uniform", "majority", 9, pytest.approx(nine), pytest.approx(nine / 9)),
        ("mgis", "bragg", 3, 100.0, pytest.approx(100 / 3)),
        ("mgis", "mean", None, None, None),
    ]
    with pytest.raises(errors.ShapeError, match="raters"):
        crowd.cheapest_budgets(rce.drop("raters"), 0.25)


def test_model_rce_is_the_concept_models_own_error() -> None:
    a, y, model = rare_population(3000, 0.05, seed=1)
    a = np.hstack([a, a + np.random.default_rng(2).normal(size=a.shape)])
    sim = crowd.simulate(a, y, model, [(0, 0), (1, 0)], [30], trials=2, progress=False)
    rho = [np.corrcoef(a[:, k], y[:, 0])[0, 1] for k in (0, 1)]
    model_rho = [np.corrcoef(a[:, k], model[:, 0])[0, 1] for k in (0, 1)]
    assert np.allclose(sim.pairs["model_rho"].to_numpy(), model_rho, rtol=1e-9)
    expected = np.mean([abs(m - r) / abs(r) for m, r in zip(model_rho, rho, strict=True)])
    assert math.isclose(sim.model_rce, expected, rel_tol=1e-9)
    perfect = crowd.simulate(a, y, y * 0.98 + 0.01, [(0, 0)], [30], trials=2, progress=False)
    assert perfect.model_rce < 1e-9  # an affine map of the truth has its correlation


def test_majority_reaches_the_target_when_raters_grow() -> None:
    a, y, model = rare_population(20000, 0.02, seed=4)
    budgets = [300 * 2**i for i in range(8)]
    sim = crowd.simulate(
        a, y, model, [(0, 0)], budgets, configurations=[("uniform", "majority")], raters_per_input=[3, 25],
        trials=30, seed=0, progress=False,
    )  # fmt: skip
    needed = {r["raters"]: r["needed"] for r in sim.needed().iter_rows(named=True)}
    assert needed[3] is None and needed[25] is not None
    assert sim.cheapest()["raters"].to_list() == [25]
    # With three raters the RCE floors where `label_attenuation` says.
    floor = 1 - float(crowd.label_attenuation(0.02, 0.23, 3, "majority"))
    last = sim.rce.filter(raters=3, budget=budgets[-1]).row(0, named=True)
    assert abs(last["rce"] - floor) < 0.05 + 3 * last["rce_se"], (last["rce"], floor)


def test_budgets_are_nested_draws_of_one_stream() -> None:
    a, y, model = rare_population(2000, 0.1, seed=5)
    kwargs = {"raters_per_input": [1, 3], "trials": 5, "seed": 3, "progress": False, "prior": "model"}
    grid_run = crowd.simulate(a, y, model, [(0, 0)], [30, 90, 270], **kwargs)
    alone = crowd.simulate(a, y, model, [(0, 0)], [270], **kwargs)
    assert grid_run.rce.filter(budget=270).equals(alone.rce)


def test_simulate_rejects_bad_raters_lists() -> None:
    a, y, model = rare_population(200, 0.1, seed=6)
    for raters in ([], [0, 3], [2.5], "3"):
        with pytest.raises(errors.ParameterError, match="raters_per_input"):
            crowd.simulate(a, y, model, [(0, 0)], [30], raters_per_input=raters, progress=False)
    with pytest.raises(errors.ParameterError, match="budgets"):
        crowd.simulate(a, y, model, [(0, 0)], [2], raters_per_input=[3, 5], progress=False)


# --------------------------------------------------------------------------------------------
# The debiased estimator


def slow_debiased(w: np.ndarray, abar: np.ndarray, c: np.ndarray) -> tuple[float, float]:
    """S1 / sqrt(p (1 - p)) and its delta-method SE, in plain Python loops."""
    n = len(w)
    u = [wi * ai * ci for wi, ai, ci in zip(w, abar, c, strict=True)]
    v = [wi * ci for wi, ci in zip(w, c, strict=True)]
    s1, p = math.fsum(u) / n, math.fsum(v) / n
    g = p * (1 - p)
    rho = s1 / math.sqrt(g)
    d_s, d_p = 1 / math.sqrt(g), -s1 * (1 - 2 * p) / (2 * g**1.5)
    cuu = math.fsum((x - s1) ** 2 for x in u) / (n - 1)
    cvv = math.fsum((x - p) ** 2 for x in v) / (n - 1)
    cuv = math.fsum((x - s1) * (y - p) for x, y in zip(u, v, strict=True)) / (n - 1)
    return rho, math.sqrt((d_s * d_s * cuu + 2 * d_s * d_p * cuv + d_p * d_p * cvv) / n)


@pytest.mark.parametrize("sampling", ["mgis", "uniform"])
def test_estimate_debiased_equals_slow_loop(sampling: str) -> None:
    a, y, model = rare_population(3000, 0.1, seed=7)
    p = crowd.plan([(0, 0)], a, model, budget=900, sampling=sampling, seed=1)
    rng = np.random.default_rng(8)
    shown = p.inputs()
    votes = [
        (r["pair"], r["input"], j, int(y[r["input"], 0]) ^ int(rng.random() < 0.23))
        for r in shown.iter_rows(named=True)
        for j in range(3)
    ]
    ratings = pl.DataFrame(votes, schema=["pair", "input", "rater", "vote"], orient="row")
    labels = crowd.aggregate(ratings, "debiased", prior="model", plan=p)
    assert (labels["label"] < 0).any()  # debiased labels leave [0, 1]
    with pytest.raises(errors.ConceptRangeError, match="estimator='debiased'"):
        crowd.estimate(p, labels)
    result = crowd.estimate(p, labels, estimator="debiased", interval="delta").row(0, named=True)
    joined = p.draws.join(labels, on=["pair", "input"], how="left", maintain_order="left")
    rho, se = slow_debiased(joined["weight"].to_numpy(), joined["abar"].to_numpy(), joined["label"].to_numpy())
    assert math.isclose(result["rho"], rho, rel_tol=1e-9) and math.isclose(result["se"], se, rel_tol=1e-6)
    z = stats.norm.ppf(0.975)
    assert math.isclose(result["ci_low"], rho - z * se, rel_tol=1e-6)
    boot = crowd.estimate(p, labels, estimator="debiased", bootstrap=3000, seed=2).row(0, named=True)
    assert boot["rho"] == result["rho"] and abs(boot["se"] / se - 1) < 0.15  # the two errors agree
    with pytest.raises(errors.ParameterError, match="plain estimator"):
        crowd.estimate(p, labels, estimator="debiased", interval="delta", self_normalised=True)


def test_composite_weighs_the_two_estimates_by_precision() -> None:
    a, y, model = rare_population(3000, 0.1, seed=11)
    p = crowd.plan([(0, 0)], a, model, budget=600, seed=3)
    rng = np.random.default_rng(12)
    votes = [
        (r["pair"], r["input"], j, int(y[r["input"], 0]) ^ int(rng.random() < 0.23))
        for r in p.inputs().iter_rows(named=True)
        for j in range(3)
    ]
    ratings = pl.DataFrame(votes, schema=["pair", "input", "rater", "vote"], orient="row")
    both = crowd.aggregate(ratings, "composite", prior="model", plan=p)
    bragg = crowd.aggregate(ratings, "bragg", prior="model", plan=p)
    debiased = crowd.aggregate(ratings, "debiased", prior="model", plan=p)
    assert both["label"].equals(bragg["label"]) and both["debiased"].equals(debiased["label"])
    e_p = crowd.estimate(p, bragg, interval="delta").row(0, named=True)
    e_d = crowd.estimate(p, debiased, estimator="debiased", interval="delta").row(0, named=True)
    got = crowd.estimate(p, both, estimator="composite").row(0, named=True)
    gap = e_p["rho"] - e_d["rho"]
    w = e_d["se"] ** 2 / (e_d["se"] ** 2 + e_p["se"] ** 2 + gap**2)
    assert 0 < w < 1
    assert math.isclose(got["rho"], w * e_p["rho"] + (1 - w) * e_d["rho"], rel_tol=1e-12)
    se = w * e_p["se"] + (1 - w) * e_d["se"]
    assert math.isclose(got["se"], se, rel_tol=1e-12)
    half = stats.norm.ppf(0.975) * se + w * abs(gap)
    assert math.isclose(got["ci_high"] - got["rho"], half, rel_tol=1e-9)
    with pytest.raises(errors.ShapeError, match="composite"):
        crowd.estimate(p, bragg, estimator="composite")
    with pytest.raises(errors.ParameterError, match="composite"):
        crowd.estimate(p, both, estimator="composite", interval="bootstrap")


@pytest.mark.slow
def test_debiased_estimator_is_consistent_and_its_interval_covers() -> None:
    # Draws far fewer than the inputs: the interval is conditional on the shown inputs' labels,
    # which is the whole variance only while few inputs repeat.
    a, y, model = rare_population(400_000, 0.1, seed=9)
    budgets = [1000, 8000, 64000]
    sim = crowd.simulate(
        a, y, model, [(0, 0)], budgets, configurations=[("uniform", "bragg"), ("mgis", "debiased"), ("mgis", "composite")],
        raters_per_input=[1, 3], trials=200, prior="model", seed=0, progress=False,
    )  # fmt: skip
    for method, raters in [(m, r) for m in ("debiased", "composite") for r in (1, 3)]:
        rows = sim.rce.filter(aggregation=method, raters=raters).sort("budget").rows(named=True)
        assert abs(rows[-1]["bias"]) <= 3 * rows[-1]["bias_se"], rows[-1]  # no bias left at the largest budget
        assert rows[-1]["rce"] < rows[0]["rce"] / 2  # the error keeps falling: no floor
        for r in rows[1:]:
            assert 0.90 <= r["coverage"] <= 0.98, r
    plug_in = sim.rce.filter(aggregation="bragg", raters=3, budget=budgets[-1]).row(0, named=True)
    assert abs(plug_in["bias"]) > 10 * plug_in["bias_se"]  # the plug-in labels' floor stays
    assert plug_in["coverage"] < 0.5
