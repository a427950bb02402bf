"""`crowd.estimate(estimator="pearson")`: the draws' weighted Pearson correlation, against
numpy's weighted covariance on the same draws, its consistency, and why soft labels need it."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from neuroneval import crowd
from neuroneval.errors import ParameterError

N = 4000


def _setting(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A unit, soft labels near a base rate of 0.15 with a small spread (a judge's), a cheap model."""
    rng = np.random.default_rng(seed)
    y = (rng.random(N) < 0.1).astype(float)
    a = 1.5 * y + rng.normal(size=N)
    c = np.clip(0.15 + 0.04 * y + 0.02 * rng.normal(size=N), 0, 1)
    model = np.clip(0.5 * y + 0.2 * rng.random(N), 0, 1)
    return a, c, model


def _labels(plan: crowd.Plan, c: np.ndarray) -> pl.DataFrame:
    shown = plan.inputs()
    return shown.with_columns(pl.Series("label", c[shown["input"].to_numpy()]))


def test_pearson_is_the_weighted_correlation_of_the_draws() -> None:
    a, c, model = _setting(0)
    plan = crowd.plan([(0, 0)], a[:, None], model[:, None], budget=300, raters_per_input=1, seed=3)
    got = crowd.estimate(plan, _labels(plan, c), estimator="pearson", interval="bootstrap", bootstrap=200, seed=0)
    draws = plan.draws
    w = draws["weight"].to_numpy()
    x = draws["abar"].to_numpy()
    y = c[draws["input"].to_numpy()]
    cov = np.cov(x, y, aweights=w)
    assert got["rho"][0] == pytest.approx(cov[0, 1] / np.sqrt(cov[0, 0] * cov[1, 1]), abs=1e-12)
    assert got["ci_low"][0] < got["rho"][0] < got["ci_high"][0]


def test_pearson_is_consistent_under_mgis_weights() -> None:
    a, c, model = _setting(1)
    truth = np.corrcoef(a, c)[0, 1]
    plan = crowd.plan([(0, 0)], a[:, None], model[:, None], budget=200_000, raters_per_input=1, seed=0)
    got = crowd.estimate(plan, _labels(plan, c), estimator="pearson", bootstrap=0)
    assert got["rho"][0] == pytest.approx(truth, abs=0.01)


def test_soft_labels_near_a_base_rate_blow_up_the_plug_in_not_pearson() -> None:
    errors: dict[str, list[float]] = {"pearson": [], "plug-in": []}
    for seed in range(20):
        a, c, model = _setting(100 + seed)
        truth = np.corrcoef(a, c)[0, 1]
        plan = crowd.plan([(0, 0)], a[:, None], model[:, None], budget=40, raters_per_input=1, seed=seed)
        labels = _labels(plan, c)
        for estimator in errors:
            got = crowd.estimate(plan, labels, estimator=estimator, bootstrap=0, self_normalised=estimator == "plug-in")
            errors[estimator].append(abs(got["rho"][0] - truth))
    assert np.all(np.abs(errors["pearson"]) <= 2.0)  # a correlation: never outside [-1, 1]
    assert np.median(errors["pearson"]) < 0.5 * np.median(errors["plug-in"]), errors


def test_pearson_s_fisher_interval_at_kish_s_effective_size() -> None:
    a, c, model = _setting(4)
    plan = crowd.plan([(0, 0)], a[:, None], model[:, None], budget=50, raters_per_input=1, seed=1)
    got = crowd.estimate(plan, _labels(plan, c), estimator="pearson", level=0.9)
    w = plan.draws["weight"].to_numpy()
    n_eff = w.sum() ** 2 / (w**2).sum()
    assert 3 < n_eff < w.size
    centre, half = np.arctanh(got["rho"][0]), 1.6448536269514722 / np.sqrt(n_eff - 3)
    assert got["ci_low"][0] == pytest.approx(np.tanh(centre - half), abs=1e-12)
    assert got["ci_high"][0] == pytest.approx(np.tanh(centre + half), abs=1e-12)
    assert got["se"][0] == pytest.approx((1 - got["rho"][0] ** 2) / np.sqrt(n_eff - 3), abs=1e-12)


def test_pearson_takes_the_fisher_or_bootstrap_interval_and_fisher_only_pearson() -> None:
    a, c, model = _setting(2)
    plan = crowd.plan([(0, 0)], a[:, None], model[:, None], budget=60, raters_per_input=1)
    with pytest.raises(ParameterError, match="fisher"):
        crowd.estimate(plan, _labels(plan, c), estimator="pearson", interval="delta")
    with pytest.raises(ParameterError, match="pearson"):
        crowd.estimate(plan, _labels(plan, c), interval="fisher")
