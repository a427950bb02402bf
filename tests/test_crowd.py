"""Crowdsourced estimation (SPEC section 6, `neuroneval.crowd`) against independent references.

- `bragg_posterior` equals SPEC's reference posteriors and a direct Bayes computation (prior times
  the likelihood of the votes under raters wrong with rate eta, normalised).
- `proposal` equals a slow Python transcription of SPEC's formulas (population moments).
- `plan` draws budget // raters_per_input inputs per pair from its own proposal (chi-square
  against q), records q / weight / abar / model as the data says, and round-trips through a file.
- `estimate` is the exact Pearson correlation when every input is drawn once, equals a slow loop
  of SPEC's estimator otherwise, and is consistent over many seeded MG-IS plans (mean, bootstrap
  standard error, interval coverage).
- `aggregate` / `rater_error_rates` equal slow loops, and the EM recovers planted rater error rates.
- `simulate` agrees with an independent Monte Carlo of the same experiment, and has the expected
  qualitative behaviour; `Simulation.needed` is checked on hand-made grids.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl
import pytest
from neuroneval import crowd, errors
from numpy.testing import assert_allclose, assert_array_equal
from scipy import stats

# --------------------------------------------------------------------------------------------
# Independent references


def slow_standardise(x: Any) -> list[float] | None:
    """(x - mean) / std with population moments, in plain Python; None when x is constant."""
    xs = [float(v) for v in x]
    if max(xs) == min(xs):
        return None
    n = len(xs)
    mean = math.fsum(xs) / n
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in xs) / n)
    return [(v - mean) / std for v in xs]


def slow_proposal(a: Any, chat: Any, gamma: float) -> np.ndarray:
    """SPEC section 6: q_i = (1 - gamma) |abar_i chatbar_i| / sum_j |abar_j chatbar_j| + gamma / N."""
    n = len(a)
    abar = slow_standardise(a)
    assert abar is not None
    chatbar = slow_standardise(chat)
    products = [0.0] * n if chatbar is None else [abs(x * y) for x, y in zip(abar, chatbar, strict=True)]
    total = math.fsum(products)
    model = [p / total for p in products] if total > 0 else [1.0 / n] * n
    return np.array([(1.0 - gamma) * m + gamma / n for m in model])


def bayes_posterior(positive: int, votes: int, eta: float, prior: float) -> float:
    """P(present | votes): prior times the likelihood of the votes, normalised."""
    present = prior * (1 - eta) ** positive * eta ** (votes - positive)
    absent = (1 - prior) * eta**positive * (1 - eta) ** (votes - positive)
    return present / (present + absent)


def slow_estimator(weights: Any, abar: Any, c: Any, self_normalised: bool) -> float:
    """SPEC section 6's estimator, one draw at a time."""
    n = len(weights)
    norm = math.fsum(weights) if self_normalised else float(n)
    s1 = math.fsum(w * x * y for w, x, y in zip(weights, abar, c, strict=True)) / norm
    m1 = math.fsum(w * y for w, y in zip(weights, c, strict=True)) / norm
    m2 = math.fsum(w * y * y for w, y in zip(weights, c, strict=True)) / norm
    return s1 / math.sqrt(m2 - m1 * m1)


def slow_aggregate(rows: list[tuple[int, int, int]], method: str, eta: float = 0.23, prior: float = 0.05) -> dict:
    """(pair, input) -> (votes, positive, label), one item at a time."""
    groups: dict[tuple[int, int], list[int]] = {}
    for pair, inp, vote in rows:
        groups.setdefault((pair, inp), []).append(int(vote))
    out = {}
    for key, votes in groups.items():
        m, pos = len(votes), sum(votes)
        if method == "mean":
            label = pos / m
        elif method == "majority":
            label = 1.0 if pos > m - pos else 0.0 if pos < m - pos else 0.5
        else:
            label = bayes_posterior(pos, m, eta, prior)
        out[key] = (m, pos, label)
    return out


def by_item(frame: pl.DataFrame) -> dict:
    return {(r["pair"], r["input"]): (r["votes"], r["positive"], r["label"]) for r in frame.iter_rows(named=True)}


def synthetic(n: int, seed: int, prevalence: float = 0.05, columns: int = 1) -> tuple[np.ndarray, ...]:
    """True labels y, a unit that detects them (a) and a good, imperfect concept model."""
    rng = np.random.default_rng(seed)
    y = (rng.random((n, columns)) < prevalence).astype(np.float64)
    a = 2.0 * y + rng.normal(size=(n, columns))
    model = np.clip(0.7 * y + 0.1 + 0.1 * rng.random((n, columns)), 0.0, 1.0)
    return a, y, model


def labels_for(p: crowd.Plan, c: np.ndarray) -> pl.DataFrame:
    """One label per distinct drawn (pair, input), from a per-input vector c."""
    shown = p.inputs()
    return shown.with_columns(pl.Series("label", c[shown["input"].to_numpy()], dtype=pl.Float64))


def full_plan(a: np.ndarray, order: np.ndarray) -> crowd.Plan:
    """A hand-made plan drawing every input exactly once (q = 1/N, weight 1)."""
    n = a.size
    abar = (a - a.mean()) / a.std()
    draws = pl.DataFrame(
        {
            "pair": np.zeros(n, dtype=np.int64),
            "draw": np.arange(n, dtype=np.int64),
            "input": order.astype(np.int64),
            "q": np.full(n, 1.0 / n),
            "weight": np.ones(n),
            "abar": abar[order],
            "model": np.full(n, 0.5),
        }
    )
    pairs = pl.DataFrame({"pair": [0], "unit": [0], "concept": [0], "unit_name": ["u"], "explanation": ["e"]})
    return crowd.Plan(draws, pairs, n, 3, "uniform", 1.0)


# --------------------------------------------------------------------------------------------
# 1. BRAgg posterior


def test_bragg_spec_reference_posteriors() -> None:
    got = crowd.bragg_posterior(np.arange(4), 3, eta=0.23, prior=0.05)
    assert_allclose(got, [0.001401, 0.015478, 0.149805, 0.663849], atol=1e-6)
    # The defaults are the paper's eta and beta.
    assert_allclose(crowd.bragg_posterior(np.arange(4), 3), got, rtol=0, atol=0)


@pytest.mark.parametrize("eta", [0.01, 0.1, 0.23, 0.4, 0.49])
@pytest.mark.parametrize("prior", [0.001, 0.05, 0.3, 0.5, 0.9, 0.999])
def test_bragg_equals_bayes(eta: float, prior: float) -> None:
    for m in range(1, 9):
        positive = np.arange(m + 1)
        got = crowd.bragg_posterior(positive, m, eta=eta, prior=prior)
        expected = [bayes_posterior(int(k), m, eta, prior) for k in positive]
        assert_allclose(got, expected, rtol=1e-9, atol=0)


def test_bragg_broadcasts_per_item_votes_eta_and_prior() -> None:
    rng = np.random.default_rng(3)
    m = rng.integers(1, 7, size=50)
    positive = rng.integers(0, m + 1)
    eta = rng.uniform(0.02, 0.48, size=50)
    prior = rng.uniform(0.001, 0.999, size=50)
    got = crowd.bragg_posterior(positive, m, eta, prior)
    assert got.shape == (50,)
    expected = [bayes_posterior(int(k), int(v), e, p) for k, v, e, p in zip(positive, m, eta, prior, strict=True)]
    assert_allclose(got, expected, rtol=1e-9)


@pytest.mark.parametrize("eta", [0.0, 0.5, 0.6, -0.1, 1.0, [0.2, 0.5]])
def test_bragg_rejects_eta_outside_open_interval(eta: Any) -> None:
    with pytest.raises(errors.ParameterError, match="eta"):
        crowd.bragg_posterior([0, 1], 3, eta=eta)


@pytest.mark.parametrize("prior", [0.0, 1.0, -0.1, 1.5, [0.5, 1.0]])
def test_bragg_rejects_prior_outside_open_interval(prior: Any) -> None:
    with pytest.raises(errors.ParameterError, match="prior"):
        crowd.bragg_posterior([0, 1], 3, prior=prior)


@pytest.mark.parametrize("which", ["eta", "prior"])
def test_bragg_rejects_nan_eta_and_prior(which: str) -> None:
    with pytest.raises(errors.ParameterError):
        crowd.bragg_posterior(1, 3, **{which: float("nan")})


# --------------------------------------------------------------------------------------------
# 2. Proposal


def adversarial_unit_and_model(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.standard_t(2, size=n) * 50 - 1e4  # heavy tails, far from 0
    a[: n // 5] = a[0]  # ties
    chat = rng.random(n)
    chat[rng.random(n) < 0.3] = 0.0  # exact zeros and ones
    chat[rng.random(n) < 0.1] = 1.0
    return a, chat


@pytest.mark.parametrize("gamma", [1e-6, 0.2, 0.5, 0.999, 1.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_proposal_equals_slow_reference(gamma: float, seed: int) -> None:
    n = 97 + 50 * seed
    a, chat = adversarial_unit_and_model(seed, n)
    q = crowd.proposal(a, chat, gamma=gamma)
    assert q.shape == (n,)
    assert_allclose(q, slow_proposal(a, chat, gamma), rtol=1e-9, atol=1e-15)
    assert math.isclose(float(q.sum()), 1.0, rel_tol=1e-12)
    assert np.all(q >= gamma / n * (1 - 1e-12))  # the mixture floor


def test_proposal_default_gamma_is_spec_value() -> None:
    a, chat = adversarial_unit_and_model(5, 60)
    assert_allclose(crowd.proposal(a, chat), slow_proposal(a, chat, 0.2), rtol=1e-9)


def test_proposal_prefers_inputs_with_large_standardised_product() -> None:
    q = crowd.proposal([0.0, 1.0, 2.0, 3.0], [0.1, 0.1, 0.9, 0.9], gamma=0.2)
    # abar = (-3, -1, 1, 3)/sqrt(5), chatbar = (-1, -1, 1, 1): products 3:1:1:3 of total 8.
    assert_allclose(q, [0.8 * 3 / 8 + 0.05, 0.8 / 8 + 0.05, 0.8 / 8 + 0.05, 0.8 * 3 / 8 + 0.05], rtol=1e-12)


def test_proposal_gamma_one_is_uniform() -> None:
    a, chat = adversarial_unit_and_model(4, 123)
    assert_allclose(crowd.proposal(a, chat, gamma=1.0), np.full(123, 1 / 123), rtol=1e-12)


@pytest.mark.parametrize("value", [0.0, 1.0, 0.5, 0.25])
def test_proposal_constant_model_is_uniform(value: float) -> None:
    a, _ = adversarial_unit_and_model(6, 64)
    assert_allclose(crowd.proposal(a, np.full(64, value), gamma=0.2), np.full(64, 1 / 64), rtol=1e-12)


def test_proposal_no_overlap_between_unit_and_model_is_uniform() -> None:
    # abar is zero where chatbar is not, and the other way round: the model part has no mass.
    q = crowd.proposal([1.0, -1.0, 0.0, 0.0], [0.5, 0.5, 0.0, 1.0], gamma=0.3)
    assert_allclose(q, np.full(4, 0.25), rtol=1e-12)


@pytest.mark.parametrize(("value", "n"), [(0.1, 7), (0.3, 1000), (1 / 3, 10)])
def test_proposal_constant_model_with_inexact_mean_is_uniform(value: float, n: int) -> None:
    q = crowd.proposal(np.arange(float(n)), np.full(n, value), gamma=0.2)
    assert_allclose(q, np.full(n, 1 / n), rtol=1e-9)


def test_proposal_constant_unit_with_inexact_mean_raises() -> None:
    with pytest.raises(errors.ParameterError, match="constant"):
        crowd.proposal(np.full(7, 0.1), np.linspace(0, 1, 7))


def test_proposal_constant_unit_raises() -> None:
    with pytest.raises(errors.ParameterError, match="constant"):
        crowd.proposal(np.full(10, 2.0), np.linspace(0, 1, 10))


@pytest.mark.parametrize(
    ("a", "chat", "gamma", "error", "match"),
    [
        ([0.0, np.nan, 1.0], [0.1, 0.2, 0.3], 0.2, errors.NonFiniteError, "activations_k"),
        ([0.0, np.inf, 1.0], [0.1, 0.2, 0.3], 0.2, errors.NonFiniteError, "activations_k"),
        ([0.0, 1.0, 2.0], [0.1, np.nan, 0.3], 0.2, errors.NonFiniteError, "concept_model_probs"),
        ([0.0, 1.0, 2.0], [0.1, 1.5, 0.3], 0.2, errors.ConceptRangeError, "1.5"),
        ([0.0, 1.0, 2.0], [-0.1, 0.5, 0.3], 0.2, errors.ConceptRangeError, "-0.1"),
        ([0.0, 1.0, 2.0], [0.1, 0.2], 0.2, errors.ShapeError, "expected 3"),
        ([[0.0, 1.0]], [0.1, 0.2], 0.2, errors.ShapeError, "1-D"),
        ([], [], 0.2, errors.EmptyInputError, "empty"),
        ([0.0, 1.0, 2.0], [0.1, 0.2, 0.3], 0.0, errors.ParameterError, "gamma"),
        ([0.0, 1.0, 2.0], [0.1, 0.2, 0.3], -0.1, errors.ParameterError, "gamma"),
        ([0.0, 1.0, 2.0], [0.1, 0.2, 0.3], 1.5, errors.ParameterError, "gamma"),
        ([0.0, 1.0, 2.0], [0.1, 0.2, 0.3], float("nan"), errors.ParameterError, "gamma"),
        ([0.0, 1.0, 2.0], [0.1, 0.2, 0.3], "0.2", errors.ParameterError, "gamma"),
    ],
)
def test_proposal_validation(a: Any, chat: Any, gamma: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        crowd.proposal(a, chat, gamma=gamma)


# --------------------------------------------------------------------------------------------
# 3. Plan


@pytest.fixture(scope="module")
def small_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)
    a = rng.standard_t(3, size=(80, 3)) + np.array([0.0, 100.0, -5.0])
    chat = rng.random((80, 4))
    chat[:10, 1] = 0.0
    return a, chat


@pytest.mark.parametrize(("budget", "raters"), [(3, 3), (10, 3), (100, 3), (541, 3), (7, 1), (400, 5), (2000, 2)])
def test_plan_respects_budget(small_data: tuple[np.ndarray, np.ndarray], budget: int, raters: int) -> None:
    a, chat = small_data
    pairs = [(0, 0), (1, 1), (2, 3), (0, 0)]
    p = crowd.plan(pairs, a, chat, budget=budget, raters_per_input=raters, seed=4)
    assert p.raters_per_input == raters and p.n_inputs == 80
    assert p.pairs.height == len(pairs)
    per_pair = p.draws.group_by("pair").agg(pl.len().alias("draws"), pl.col("input").n_unique().alias("distinct"))
    assert sorted(per_pair["pair"].to_list()) == [0, 1, 2, 3]
    assert per_pair["draws"].to_list() == [budget // raters] * 4
    assert (per_pair["distinct"] * raters <= budget).all()
    assert p.ratings_needed() == raters * int(per_pair["distinct"].sum()) <= budget * len(pairs)
    for _, group in p.draws.partition_by("pair", as_dict=True).items():
        assert group["draw"].to_list() == list(range(budget // raters))


def test_plan_records_proposal_and_data(small_data: tuple[np.ndarray, np.ndarray]) -> None:
    a, chat = small_data
    pairs = [(0, 0), (1, 1), (2, 3)]
    for sampling, gamma in (("mgis", 0.2), ("mgis", 0.05), ("uniform", 0.2)):
        p = crowd.plan(pairs, a, chat, budget=300, seed=1, sampling=sampling, gamma=gamma)
        assert p.sampling == sampling and p.gamma == gamma
        for index, (k, t) in enumerate(pairs):
            d = p.draws.filter(pl.col("pair") == index)
            inputs = d["input"].to_numpy()
            assert inputs.min() >= 0 and inputs.max() < 80
            q = slow_proposal(a[:, k], chat[:, t], gamma if sampling == "mgis" else 1.0)
            assert np.all(q[inputs] > 0)
            assert_allclose(d["q"].to_numpy(), q[inputs], rtol=1e-9)
            assert_allclose(d["weight"].to_numpy(), 1.0 / (80 * q[inputs]), rtol=1e-9)
            assert_allclose(d["abar"].to_numpy(), np.array(slow_standardise(a[:, k]))[inputs], rtol=1e-9, atol=1e-12)
            assert_array_equal(d["model"].to_numpy(), chat[inputs, t])
        assert p.pairs["unit"].to_list() == [0, 1, 2] and p.pairs["concept"].to_list() == [0, 1, 3]
        assert p.pairs["unit_name"].to_list() == ["unit 0", "unit 1", "unit 2"]
        assert p.pairs["explanation"].to_list() == ["concept 0", "concept 1", "concept 3"]


def test_plan_is_reproducible_and_seeded(small_data: tuple[np.ndarray, np.ndarray]) -> None:
    a, chat = small_data
    one = crowd.plan([(0, 0), (1, 1)], a, chat, budget=150, seed=9)
    two = crowd.plan([(0, 0), (1, 1)], a, chat, budget=150, seed=9)
    other = crowd.plan([(0, 0), (1, 1)], a, chat, budget=150, seed=10)
    assert one.draws.equals(two.draws) and one.pairs.equals(two.pairs)
    assert not one.draws["input"].equals(other.draws["input"])
    # Each pair has its own stream: appending a pair leaves the first pair's draws alone,
    # and the same (unit, concept) planned twice gets different draws.
    alone = crowd.plan([(0, 0)], a, chat, budget=150, seed=9)
    assert alone.draws.equals(one.draws.filter(pl.col("pair") == 0))
    twice = crowd.plan([(0, 0), (0, 0)], a, chat, budget=150, seed=9)
    first, second = (twice.draws.filter(pl.col("pair") == i)["input"].to_numpy() for i in (0, 1))
    assert not np.array_equal(first, second)


def test_plan_draws_follow_the_proposal() -> None:
    a = np.array([[-2.0, 5.0], [-1.0, 1.0], [0.0, 0.0], [0.5, 2.0], [1.0, -3.0], [3.0, 4.0]])
    chat = np.array([[0.9, 0.0], [0.1, 0.3], [0.5, 1.0], [0.2, 0.3], [0.8, 0.6], [0.95, 0.0]])
    draws = 20000
    p = crowd.plan([(0, 0), (1, 1)], a, chat, budget=3 * draws, seed=2)
    for index, (k, t) in enumerate([(0, 0), (1, 1)]):
        q = slow_proposal(a[:, k], chat[:, t], 0.2)
        assert q.max() / q.min() > 2  # far from uniform, so the check below has power
        counts = np.bincount(p.draws.filter(pl.col("pair") == index)["input"].to_numpy(), minlength=6)
        assert counts.sum() == draws
        assert stats.chisquare(counts, q * draws).pvalue > 1e-4
        assert stats.chisquare(counts, np.full(6, draws / 6)).pvalue < 1e-10


def test_plan_uniform_sampling_is_gamma_one(small_data: tuple[np.ndarray, np.ndarray]) -> None:
    a, chat = small_data
    uniform = crowd.plan([(0, 0), (2, 3)], a, chat, budget=240, seed=5, sampling="uniform")
    gamma_one = crowd.plan([(0, 0), (2, 3)], a, chat, budget=240, seed=5, gamma=1.0)
    assert uniform.draws.equals(gamma_one.draws)
    assert_allclose(uniform.draws["q"].to_numpy(), 1 / 80, rtol=1e-12)
    assert_allclose(uniform.draws["weight"].to_numpy(), 1.0, rtol=1e-12)


def test_plan_tasks_batches_each_pair(small_data: tuple[np.ndarray, np.ndarray]) -> None:
    a, chat = small_data
    names = ["alpha", "beta", "γ unit"]
    texts = ["dogs", 'cats, and "quoted"', "", "sky\nline"]
    pairs = [(2, 1), (0, 3), (2, 1)]
    p = crowd.plan(pairs, a, chat, budget=180, raters_per_input=4, seed=3, unit_names=names, explanations=texts)
    for batch_size in (1, 7, 20, 1000):
        tasks = p.tasks(batch_size=batch_size)
        assert tasks.columns == [
            "task",
            "pair",
            "unit",
            "unit_name",
            "concept",
            "explanation",
            "input",
            "rated",
            "raters",
        ]
        # Exactly the distinct drawn (pair, input), each once.
        assert sorted(tasks.select("pair", "input").rows()) == sorted(set(p.draws.select("pair", "input").rows()))
        assert tasks.height == p.inputs().height
        assert (tasks["raters"] == 4).all()
        for row in tasks.iter_rows(named=True):
            k, t = pairs[row["pair"]]
            assert (row["unit"], row["concept"]) == (k, t)
            assert row["unit_name"] == names[k] and row["explanation"] == texts[t]
        # A task holds one pair's inputs, at most batch_size of them; task ids are unique per batch.
        per_task = tasks.group_by("task").agg(pl.col("pair").n_unique().alias("pairs"), pl.len().alias("size"))
        assert (per_task["pairs"] == 1).all()
        assert (per_task["size"] <= batch_size).all()
        expected_tasks = 0
        for index in range(len(pairs)):
            distinct = p.draws.filter(pl.col("pair") == index)["input"].n_unique()
            n_tasks = tasks.filter(pl.col("pair") == index)["task"].n_unique()
            assert n_tasks == math.ceil(distinct / batch_size)
            expected_tasks += n_tasks
        assert tasks["task"].n_unique() == expected_tasks


@pytest.mark.parametrize("batch_size", [0, -1, 2.5, "3"])
def test_plan_tasks_rejects_bad_batch_size(small_data: tuple[np.ndarray, np.ndarray], batch_size: Any) -> None:
    a, chat = small_data
    p = crowd.plan([(0, 0)], a, chat, budget=30, seed=0)
    with pytest.raises(errors.ParameterError, match="batch_size"):
        p.tasks(batch_size=batch_size)


@pytest.mark.parametrize("sampling", ["mgis", "uniform"])
def test_plan_write_read_round_trip(tmp_path: Any, small_data: tuple[np.ndarray, np.ndarray], sampling: str) -> None:
    a, chat = small_data
    p = crowd.plan(
        [(2, 1), (0, 3), (1, 0)],
        a,
        chat,
        budget=95,
        raters_per_input=2,
        gamma=0.35,
        sampling=sampling,
        seed=7,
        unit_names=["a", "b, c", "δ"],
        explanations=["x", "y", "", "w\tz"],
    )
    path = tmp_path / "plan.parquet"
    assert p.write(path) == path
    assert sorted(x.name for x in tmp_path.iterdir()) == ["plan.parquet"]  # no temporary file left
    back = crowd.Plan.read(path)
    assert back.draws.equals(p.draws) and back.draws.schema == p.draws.schema
    assert back.pairs.equals(p.pairs) and back.pairs.schema == p.pairs.schema
    assert (back.n_inputs, back.raters_per_input, back.sampling, back.gamma) == (80, 2, sampling, 0.35)
    assert back.tasks(5).equals(p.tasks(5))


def test_plan_read_rejects_corrupt_files(tmp_path: Any, small_data: tuple[np.ndarray, np.ndarray]) -> None:
    a, chat = small_data
    good = tmp_path / "good.parquet"
    crowd.plan([(0, 0)], a, chat, budget=30, seed=0).write(good)
    data = good.read_bytes()
    truncated = tmp_path / "truncated.parquet"
    truncated.write_bytes(data[: len(data) // 2])
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"not a parquet file at all" * 10)
    other = tmp_path / "other.parquet"
    pl.DataFrame({"pair": [0], "input": [1]}).write_parquet(other)
    empty = tmp_path / "empty.parquet"
    pl.read_parquet(good).clear().write_parquet(empty)
    for path, match in (
        (truncated, "cannot read"),
        (garbage, "cannot read"),
        (tmp_path / "missing.parquet", "cannot read"),
        (other, "not a neuroneval crowd plan.*draw"),
        (empty, "not a neuroneval crowd plan"),
    ):
        with pytest.raises(errors.SourceError, match=match):
            crowd.Plan.read(path)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"pairs": [(3, 0)]},
            errors.InvalidInputError,
            r"pair 0 = \(3, 0\) is out of range: there are 3 units and 4 concepts",
        ),
        ({"pairs": [(0, 4)]}, errors.InvalidInputError, r"pair 0 = \(0, 4\) is out of range"),
        ({"pairs": [(-1, 0)]}, errors.InvalidInputError, r"pair 0 = \(-1, 0\) is out of range"),
        ({"pairs": np.zeros((0, 2), dtype=int)}, errors.EmptyInputError, "pair"),
        ({"pairs": [(0, 0, 0)]}, errors.ShapeError, "pairs"),
        ({"budget": 2}, errors.ParameterError, "budget"),
        ({"budget": 0}, errors.ParameterError, "budget"),
        ({"budget": 30.0}, errors.ParameterError, "budget"),
        ({"budget": 4, "raters_per_input": 5}, errors.ParameterError, "budget"),
        ({"raters_per_input": 0}, errors.ParameterError, "raters_per_input"),
        ({"raters_per_input": 2.0}, errors.ParameterError, "raters_per_input"),
        ({"sampling": "importance"}, errors.ParameterError, "sampling"),
        ({"gamma": 0.0}, errors.ParameterError, "gamma"),
        ({"gamma": 1.2}, errors.ParameterError, "gamma"),
        ({"concept_model": np.random.default_rng(0).random((79, 4))}, errors.ShapeError, "80 inputs"),
        ({"activations": np.zeros(80)}, errors.ShapeError, "2-D"),
        ({"unit_names": ["a", "b"]}, errors.ShapeError, "unit_names"),
        ({"explanations": ["a", "b", "c", "d", "e"]}, errors.ShapeError, "explanations"),
    ],
)
def test_plan_validation(small_data: tuple[np.ndarray, np.ndarray], kwargs: dict, error: type, match: str) -> None:
    a, chat = small_data
    args: dict[str, Any] = {"pairs": [(0, 0)], "activations": a, "concept_model": chat, "budget": 30}
    args.update(kwargs)
    with pytest.raises(error, match=match):
        crowd.plan(args.pop("pairs"), args.pop("activations"), args.pop("concept_model"), **args)


def test_plan_validates_the_data_of_planned_pairs(small_data: tuple[np.ndarray, np.ndarray]) -> None:
    a, chat = small_data
    bad_model = chat.copy()
    bad_model[5, 2] = 1.01
    with pytest.raises(errors.ConceptRangeError, match="1.01"):
        crowd.plan([(0, 2)], a, bad_model, budget=30)
    bad_unit = a.copy()
    bad_unit[3, 1] = np.nan
    with pytest.raises(errors.NonFiniteError):
        crowd.plan([(1, 0)], bad_unit, chat, budget=30)
    constant = a.copy()
    constant[:, 2] = 4.0
    with pytest.raises(errors.ParameterError, match="constant"):
        crowd.plan([(2, 0)], constant, chat, budget=30)


def test_plan_out_of_range_pair_is_pair_index_error(small_data: tuple[np.ndarray, np.ndarray]) -> None:
    a, chat = small_data
    with pytest.raises(errors.PairIndexError):
        crowd.plan([(3, 0)], a, chat, budget=30)


# --------------------------------------------------------------------------------------------
# 4. Estimator


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_estimate_every_input_once_is_exact_pearson(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 500
    a = rng.standard_t(2, size=n) * 30 + 1e3
    order = rng.permutation(n)
    p = full_plan(a, order)
    binary = (rng.random(n) < 0.07).astype(np.float64)
    soft = rng.beta(0.3, 0.3, size=n)
    for c in (binary, soft):
        exact = np.corrcoef(a, c)[0, 1]
        plain = crowd.estimate(p, labels_for(p, c), bootstrap=0)
        normalised = crowd.estimate(p, labels_for(p, c), bootstrap=0, self_normalised=True)
        assert abs(plain["rho"][0] - exact) < 1e-12
        assert abs(normalised["rho"][0] - plain["rho"][0]) < 1e-12
        assert plain["draws"][0] == n and plain["inputs"][0] == n
        assert math.isnan(plain["se"][0]) and math.isnan(plain["ci_low"][0])
        assert plain.select("unit", "concept", "unit_name", "explanation").row(0) == (0, 0, "u", "e")


@pytest.mark.parametrize("sampling", ["mgis", "uniform"])
@pytest.mark.parametrize("self_normalised", [False, True])
def test_estimate_equals_slow_estimator(sampling: str, self_normalised: bool) -> None:
    a, y, model = synthetic(300, seed=4, columns=2)
    rng = np.random.default_rng(8)
    soft = np.clip(y + rng.normal(0, 0.2, size=y.shape), 0, 1)
    pairs = [(0, 0), (1, 1), (0, 1)]
    p = crowd.plan(pairs, a, model, budget=600, seed=6, sampling=sampling)
    labels = pl.concat(
        [labels_for(p, soft[:, t]).filter(pl.col("pair") == index) for index, (_, t) in enumerate(pairs)]
    ).sample(fraction=1.0, shuffle=True, seed=1)  # the order of the labels does not matter
    result = crowd.estimate(p, labels, self_normalised=self_normalised, bootstrap=0)
    for index, (k, t) in enumerate(pairs):
        inputs = p.draws.filter(pl.col("pair") == index)["input"].to_numpy()
        assert np.unique(inputs).size < inputs.size  # repeated inputs reuse their label
        q = slow_proposal(a[:, k], model[:, t], 0.2 if sampling == "mgis" else 1.0)
        abar = np.array(slow_standardise(a[:, k]))
        expected = slow_estimator(1.0 / (300 * q[inputs]), abar[inputs], soft[inputs, t], self_normalised)
        assert math.isclose(result["rho"][index], expected, rel_tol=1e-9)
        assert result["draws"][index] == 200 and result["inputs"][index] == np.unique(inputs).size


def test_estimate_uniform_plan_is_gamma_one_plan() -> None:
    a, y, model = synthetic(400, seed=2)
    uniform = crowd.plan([(0, 0)], a, model, budget=300, seed=3, sampling="uniform")
    gamma_one = crowd.plan([(0, 0)], a, model, budget=300, seed=3, gamma=1.0)
    one = crowd.estimate(uniform, labels_for(uniform, y[:, 0]), bootstrap=200, seed=1)
    two = crowd.estimate(gamma_one, labels_for(gamma_one, y[:, 0]), bootstrap=200, seed=1)
    assert one.equals(two)


@pytest.fixture(scope="module")
def replicated() -> dict[str, Any]:
    """300 independent MG-IS (and uniform) plans of 300 draws each on N = 5000, exact labels."""
    a, y, model = synthetic(5000, seed=1)
    rho = float(np.corrcoef(a[:, 0], y[:, 0])[0, 1])
    out: dict[str, Any] = {"rho": rho}
    for sampling in ("mgis", "uniform"):
        # 300 copies of the same pair: each draws from its own seeded stream, i.e. 300 plans.
        p = crowd.plan([(0, 0)] * 300, a, model, budget=900, seed=7, sampling=sampling)
        for self_normalised in (False, True):
            out[sampling, self_normalised] = crowd.estimate(
                p, labels_for(p, y[:, 0]), bootstrap=500, seed=3, self_normalised=self_normalised
            )
    return out


@pytest.mark.slow
@pytest.mark.parametrize(("sampling", "self_normalised"), [("mgis", False), ("mgis", True), ("uniform", False)])
def test_estimate_is_consistent_over_many_plans(
    replicated: dict[str, Any], sampling: str, self_normalised: bool
) -> None:
    rho = replicated["rho"]
    result = replicated[sampling, self_normalised]
    rho_hat = result["rho"].to_numpy()
    assert np.all(np.isfinite(rho_hat)) and rho_hat.size == 300
    sd = rho_hat.std(ddof=1)
    # Unbiased up to the ratio estimator's O(1/n) bias (n = 300 draws; allowance 1.5 / n).
    assert abs(rho_hat.mean() - rho) <= 4 * sd / math.sqrt(rho_hat.size) + 1.5 / 300
    # The bootstrap standard error matches the spread across plans.
    assert 0.7 <= result["se"].mean() / sd <= 1.3
    # The 95% percentile interval covers the truth about 95% of the time.
    low, high = result["ci_low"].to_numpy(), result["ci_high"].to_numpy()
    assert np.all(low <= high)
    assert 0.85 <= np.mean((low <= rho) & (rho <= high)) <= 0.99


def test_estimate_mgis_beats_uniform_with_a_good_model(replicated: dict[str, Any]) -> None:
    mgis = replicated["mgis", False]["rho"].to_numpy()
    uniform = replicated["uniform", False]["rho"].to_numpy()
    assert mgis.std(ddof=1) < 0.5 * uniform.std(ddof=1)
    # With uniform weights (all 1), self-normalisation changes nothing.
    assert_allclose(replicated["uniform", True]["rho"].to_numpy(), uniform, rtol=1e-12)


def test_estimate_bootstrap_is_seeded() -> None:
    a, y, model = synthetic(1000, seed=3)
    p = crowd.plan([(0, 0)], a, model, budget=300, seed=0)
    labels = labels_for(p, y[:, 0])
    one = crowd.estimate(p, labels, bootstrap=300, seed=5)
    assert one.equals(crowd.estimate(p, labels, bootstrap=300, seed=5))
    other = crowd.estimate(p, labels, bootstrap=300, seed=6)
    assert one["rho"][0] == other["rho"][0] and one["se"][0] != other["se"][0]
    narrow = crowd.estimate(p, labels, bootstrap=300, seed=5, level=0.5)
    assert one["ci_low"][0] < narrow["ci_low"][0] < narrow["ci_high"][0] < one["ci_high"][0]


@pytest.mark.parametrize("value", [0.0, 0.5, 1.0])
def test_estimate_constant_labels_give_nan_with_unit_weights(value: float) -> None:
    a, _, model = synthetic(200, seed=3)
    p = crowd.plan([(0, 0)], a, model, budget=60, seed=0, sampling="uniform")
    assert (p.draws["weight"] == 1.0).all()
    for self_normalised in (False, True):
        result = crowd.estimate(p, labels_for(p, np.full(200, value)), bootstrap=50, self_normalised=self_normalised)
        assert math.isnan(result["rho"][0]) and math.isnan(result["se"][0])
    p = crowd.plan([(0, 0)], a, model, budget=60, seed=0)
    result = crowd.estimate(p, labels_for(p, np.zeros(200)), bootstrap=50)
    assert math.isnan(result["rho"][0]) and math.isnan(result["se"][0])


@pytest.mark.parametrize(("sampling", "value"), [("mgis", 0.5), ("mgis", 1.0), ("uniform", 0.3), ("uniform", 0.7)])
def test_estimate_constant_labels_give_nan(sampling: str, value: float) -> None:
    a, _, model = synthetic(200, seed=3)
    p = crowd.plan([(0, 0)], a, model, budget=60, seed=0, sampling=sampling)
    for self_normalised in (False, True):
        result = crowd.estimate(p, labels_for(p, np.full(200, value)), bootstrap=50, self_normalised=self_normalised)
        assert math.isnan(result["rho"][0]) and math.isnan(result["se"][0]), (self_normalised, result["rho"][0])


def test_estimate_label_errors() -> None:
    a, y, model = synthetic(200, seed=3)
    p = crowd.plan([(0, 0), (0, 0)], a, model, budget=60, seed=0)
    labels = labels_for(p, y[:, 0])
    dropped = labels.row(labels.height - 1, named=True)
    with pytest.raises(errors.LabelError, match=f"pair {dropped['pair']}, input {dropped['input']}"):
        crowd.estimate(p, labels.head(labels.height - 1), bootstrap=0)
    with pytest.raises(errors.LabelError, match="more than one label"):
        crowd.estimate(p, pl.concat([labels, labels.head(1)]), bootstrap=0)
    for bad in (1.5, -0.1, float("nan"), None):
        changed = labels.with_columns(
            pl.when(pl.int_range(pl.len()) == 3).then(pl.lit(bad, dtype=pl.Float64)).otherwise("label").alias("label")
        )
        with pytest.raises(errors.ConceptRangeError, match=r"\[0, 1\]"):
            crowd.estimate(p, changed, bootstrap=0)
    with pytest.raises(errors.ShapeError, match="label"):
        crowd.estimate(p, labels.drop("label"), bootstrap=0)
    for level in (0.0, 1.0, 1.5):
        with pytest.raises(errors.ParameterError, match="level"):
            crowd.estimate(p, labels, level=level)
    with pytest.raises(errors.ParameterError, match="bootstrap"):
        crowd.estimate(p, labels, bootstrap=-1)


# --------------------------------------------------------------------------------------------
# 5. Aggregation


def random_ratings(seed: int, items: int = 300) -> list[tuple[int, int, int]]:
    """Uneven numbers of votes per item (1 to 7, so ties), rows in random order."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(items):
        pair, inp = int(rng.integers(0, 4)), int(rng.integers(0, 10_000))
        p_yes = rng.random()
        rows += [(pair, inp, int(rng.random() < p_yes)) for _ in range(int(rng.integers(1, 8)))]
    order = rng.permutation(len(rows))
    return [rows[i] for i in order]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(
    ("method", "kwargs"),
    [("mean", {}), ("majority", {}), ("bragg", {}), ("bragg", {"eta": 0.1, "prior": 0.4})],
)
def test_aggregate_equals_slow_loop(seed: int, method: str, kwargs: dict) -> None:
    rows = random_ratings(seed)
    table = pl.DataFrame(rows, schema=["pair", "input", "vote"], orient="row")
    got = crowd.aggregate(table, method, **kwargs)
    assert got.columns == ["pair", "input", "votes", "positive", "label"]
    expected = slow_aggregate(rows, method, **kwargs)
    got_items = by_item(got)
    assert got.height == len(got_items) == len(expected)
    assert got_items.keys() == expected.keys()
    for key, (m, pos, label) in expected.items():
        assert got_items[key][:2] == (m, pos)
        assert math.isclose(got_items[key][2], label, rel_tol=1e-9, abs_tol=1e-15)
    if method == "majority":
        assert 0.5 in got["label"].to_list()  # ties occurred and give 1/2


def test_aggregate_accepts_bool_votes_and_other_integer_dtypes() -> None:
    rows = random_ratings(3, items=80)
    table = pl.DataFrame(rows, schema=["pair", "input", "vote"], orient="row")
    for method in ("mean", "majority", "bragg"):
        reference = crowd.aggregate(table, method)
        as_bool = crowd.aggregate(table.with_columns(pl.col("vote").cast(pl.Boolean)), method)
        narrow = crowd.aggregate(
            table.with_columns(pl.col("pair", "input").cast(pl.UInt32), pl.col("vote").cast(pl.Int8)), method
        )
        assert by_item(as_bool) == by_item(reference) == by_item(narrow)
    # Plain Python rows are taken too.
    assert by_item(crowd.aggregate({"pair": [0, 0], "input": [1, 1], "vote": [True, False]}, "mean")) == {
        (0, 1): (2, 1, 0.5)
    }


def test_aggregate_accepts_float_binary_votes() -> None:
    table = pl.DataFrame({"pair": [0, 0, 0], "input": [1, 1, 2], "vote": [1.0, 0.0, 1.0]})
    assert by_item(crowd.aggregate(table, "mean")) == {(0, 1): (2, 1, 0.5), (0, 2): (1, 1, 1.0)}


@pytest.mark.parametrize("vote", [0.5, float("nan"), 2.0])
def test_aggregate_rejects_non_binary_float_votes(vote: float) -> None:
    table = pl.DataFrame({"pair": [0, 0], "input": [1, 1], "vote": [1.0, vote]})
    with pytest.raises(errors.LabelError, match="binary"):
        crowd.aggregate(table, "mean")


def test_aggregate_model_prior_uses_clipped_plan_values() -> None:
    a = np.array([[0.0], [1.0], [2.0], [3.0], [-1.0], [5.0], [0.5], [2.5]])
    model = np.array([[0.0], [1.0], [0.0004], [0.9995], [0.5], [0.2], [0.001], [0.999]])
    p = crowd.plan([(0, 0)], a, model, budget=600, seed=0)
    assert set(p.draws["input"].to_list()) == set(range(8))  # every input drawn
    rng = np.random.default_rng(0)
    rows = [(0, i, int(rng.random() < 0.5)) for i in range(8) for _ in range(int(rng.integers(1, 6)))]
    table = pl.DataFrame(rows, schema=["pair", "input", "vote"], orient="row")
    got = by_item(crowd.aggregate(table, "bragg", prior="model", plan=p, eta=0.3))
    for (pair, i), (m, pos, label) in got.items():
        prior = min(max(float(model[i, 0]), 0.001), 0.999)
        assert math.isclose(label, bayes_posterior(pos, m, 0.3, prior), rel_tol=1e-9)
        assert pair == 0
    with pytest.raises(errors.ParameterError, match="plan"):
        crowd.aggregate(table, "bragg", prior="model")


def em_ratings(seed: int, rates: list[float], items: int, prevalence: float) -> tuple[pl.DataFrame, np.ndarray]:
    """Each item rated by 3 of the raters (chosen at random), each wrong with its own rate."""
    rng = np.random.default_rng(seed)
    truth = rng.random(items) < prevalence
    raters = np.argsort(rng.random((items, len(rates))), axis=1)[:, :3]
    wrong = rng.random((items, 3)) < np.asarray(rates)[raters]
    votes = (truth[:, None] ^ wrong).astype(np.int64)
    table = pl.DataFrame(
        {
            "pair": np.repeat(np.arange(items) % 2, 3),
            "input": np.repeat(np.arange(items) // 2, 3),
            "rater": [f"r{r}" for r in raters.ravel()],
            "vote": votes.ravel(),
        }
    )
    return table, truth


def test_em_recovers_planted_rater_error_rates() -> None:
    rates = [0.05, 0.12, 0.2, 0.28, 0.35]
    table, truth = em_ratings(0, rates, items=6000, prevalence=0.3)
    fitted = crowd.rater_error_rates(table, prior=0.3)
    assert fitted.columns == ["rater", "eta", "votes"]
    assert fitted["rater"].to_list() == [f"r{i}" for i in range(5)]
    assert_allclose(fitted["eta"].to_numpy(), rates, atol=0.03)
    counts = table.group_by("rater").len().sort("rater")["len"].to_list()
    assert fitted["votes"].to_list() == counts and sum(counts) == table.height


def test_em_posteriors_are_bragg_with_per_rater_rates_and_beat_a_shared_eta() -> None:
    rates = [0.05, 0.12, 0.2, 0.28, 0.35]
    table, truth = em_ratings(1, rates, items=6000, prevalence=0.3)
    fitted = dict(crowd.rater_error_rates(table, prior=0.3).select("rater", "eta").iter_rows())
    em = crowd.aggregate(table, "bragg", eta="estimate", prior=0.3)
    # Each posterior is the Bayes posterior under the fitted per-rater rates (a slow loop).
    logit: dict[tuple[int, int], float] = {}
    for row in table.iter_rows(named=True):
        key = (row["pair"], row["input"])
        e = fitted[row["rater"]]
        logit[key] = logit.get(key, math.log(0.3 / 0.7)) + (2 * row["vote"] - 1) * math.log((1 - e) / e)
    got = by_item(em)
    assert got.keys() == logit.keys()
    for key, value in logit.items():
        assert math.isclose(got[key][2], 1 / (1 + math.exp(-value)), rel_tol=1e-6, abs_tol=1e-9)
    # Closer to the truth than BRAgg with one shared eta (the raters' average rate).
    truth_of = {(i % 2, i // 2): float(t) for i, t in enumerate(truth)}
    shared = by_item(crowd.aggregate(table, "bragg", eta=float(np.mean(rates)), prior=0.3))

    def mae(items: dict) -> float:
        return float(np.mean([abs(v[2] - truth_of[k]) for k, v in items.items()]))

    assert mae(got) < 0.9 * mae(shared)


def test_aggregate_checks_ratings_against_the_plan() -> None:
    a, _, model = synthetic(50, seed=0)
    p = crowd.plan([(0, 0), (0, 0)], a, model, budget=30, seed=0)
    shown = p.inputs()
    good = shown.with_columns(pl.lit(1).alias("vote"))
    assert crowd.aggregate(good, "mean", plan=p).height == shown.height
    not_drawn = next(i for i in range(50) if i not in set(shown.filter(pl.col("pair") == 0)["input"].to_list()))
    for pair, inp in ((7, shown["input"][0]), (0, not_drawn)):
        extra = pl.concat([good, pl.DataFrame({"pair": [pair], "input": [inp], "vote": [0]})], how="vertical_relaxed")
        with pytest.raises(errors.LabelError, match=f"did not draw.*pair {pair}, input {inp}"):
            crowd.aggregate(extra, "mean", plan=p)


@pytest.mark.parametrize(
    ("table", "kwargs", "error", "match"),
    [
        ({"pair": [0, 0], "input": [1, 1], "vote": [1, 2]}, {}, errors.LabelError, "binary.*vote 2"),
        ({"pair": [0, 0], "input": [1, 1], "vote": [-1, 1]}, {}, errors.LabelError, "binary.*vote -1"),
        ({"pair": [0, 0], "input": [1, 1], "vote": ["1", "0"]}, {}, errors.LabelError, "binary"),
        ({"pair": [0, 0], "input": [1, 1]}, {}, errors.ShapeError, "vote"),
        ({"pair": [0, 0], "vote": [1, 0]}, {}, errors.ShapeError, "input"),
        ({"pair": [0, None], "input": [1, 1], "vote": [1, 0]}, {}, errors.LabelError, "missing.*pair"),
        ({"pair": [0, 0], "input": [1, None], "vote": [1, 0]}, {}, errors.LabelError, "missing.*input"),
        ({"pair": [0, 0], "input": [1, 1], "vote": [1, None]}, {}, errors.LabelError, "missing.*vote"),
        ({"pair": [0, 0], "input": [1.5, 1.5], "vote": [1, 0]}, {}, errors.LabelError, "input.*integer"),
        ({"pair": ["a", "a"], "input": [1, 1], "vote": [1, 0]}, {}, errors.LabelError, "pair.*integer"),
        ({"pair": [0, 0], "input": [1, 1], "vote": [1, 0]}, {"eta": "estimate"}, errors.ParameterError, "rater"),
        (
            {"pair": [0, 0], "input": [1, 1], "rater": [1, None], "vote": [1, 0]},
            {"eta": "estimate"},
            errors.LabelError,
            "rater",
        ),
        ({"pair": [0], "input": [1], "vote": [1]}, {"eta": 0.5}, errors.ParameterError, "eta"),
        ({"pair": [0], "input": [1], "vote": [1]}, {"prior": 1.0}, errors.ParameterError, "prior"),
        ({"pair": [0], "input": [1], "vote": [1]}, {"prior": "uniform"}, errors.ParameterError, "prior"),
        ({"pair": [0], "input": [1], "vote": [1]}, {"method": "median"}, errors.ParameterError, "method"),
    ],
)
def test_aggregate_rejects_bad_ratings(table: dict, kwargs: dict, error: type, match: str) -> None:
    method = kwargs.pop("method", "bragg")
    with pytest.raises(error, match=match):
        crowd.aggregate(pl.DataFrame(table), method, **kwargs)


def test_aggregate_rejects_empty_ratings() -> None:
    empty = pl.DataFrame(schema={"pair": pl.Int64, "input": pl.Int64, "vote": pl.Int64})
    with pytest.raises(errors.EmptyInputError):
        crowd.aggregate(empty)


def test_aggregate_rejects_unknown_eta_string() -> None:
    with pytest.raises(errors.ParameterError, match="eta"):
        crowd.aggregate(pl.DataFrame({"pair": [0], "input": [1], "vote": [1]}), eta="estimat")


# --------------------------------------------------------------------------------------------
# 6. Simulation


def reference_rce(
    a: np.ndarray, y: np.ndarray, chat: np.ndarray, sampling: str, method: str, budget: int, trials: int, seed: int
) -> tuple[float, float]:
    """An independent Monte Carlo of one pair's RCE (eta = 0.23, 3 raters, prior = model)."""
    rng = np.random.default_rng(seed)
    n = a.size
    rho = np.corrcoef(a, y)[0, 1]
    q = slow_proposal(a, chat, 0.2 if sampling == "mgis" else 1.0)
    abar = np.array(slow_standardise(a))
    errs = []
    for _ in range(trials):
        drawn = rng.choice(n, size=budget // 3, p=q)
        label = {}
        for i in set(drawn.tolist()):  # a repeated input is rated once
            positive = sum(int(y[i]) ^ int(rng.random() < 0.23) for _ in range(3))
            if method == "majority":
                label[i] = 1.0 if positive >= 2 else 0.0
            else:
                label[i] = bayes_posterior(positive, 3, 0.23, min(max(chat[i], 0.001), 0.999))
        c = [label[i] for i in drawn]
        try:
            est = slow_estimator(1.0 / (n * q[drawn]), abar[drawn], c, False)
        except (ZeroDivisionError, ValueError):
            est = 0.0  # constant labels count as rho_hat = 0
        errs.append(abs(est - rho) / abs(rho))
    return float(np.mean(errs)), float(np.std(errs, ddof=1) / math.sqrt(trials))


@pytest.mark.parametrize(("sampling", "method"), [("mgis", "bragg"), ("uniform", "majority")])
def test_simulate_agrees_with_independent_monte_carlo(sampling: str, method: str) -> None:
    a, y, model = synthetic(400, seed=12, prevalence=0.1)
    sim = crowd.simulate(
        a, y, model, [(0, 0)], [90], configurations=[(sampling, method)], trials=600, prior="model", seed=4
    )
    assert math.isclose(sim.pairs["rho"][0], np.corrcoef(a[:, 0], y[:, 0])[0, 1], rel_tol=1e-9)
    row = sim.rce.row(0, named=True)
    assert (row["sampling"], row["aggregation"], row["budget"]) == (sampling, method, 90)
    ref, ref_se = reference_rce(a[:, 0], y[:, 0], model[:, 0], sampling, method, 90, trials=600, seed=99)
    assert abs(row["rce"] - ref) <= 4 * math.hypot(row["rce_se"], ref_se)
    assert 0 < row["ratings"] <= 90


@pytest.fixture(scope="module")
def simulation() -> tuple[crowd.Simulation, tuple[np.ndarray, ...]]:
    data = synthetic(2000, seed=5, columns=2)
    a, y, model = data
    sim = crowd.simulate(a, y, model, [(0, 0), (1, 1)], [3000, 30, 300, 30], trials=20, prior="model", seed=1)
    return sim, data


def test_simulate_table_shape(simulation: tuple[crowd.Simulation, Any]) -> None:
    sim, (a, y, _) = simulation
    assert sim.budgets == (30, 300, 3000) and sim.trials == 20 and sim.eta == 0.23 and sim.target == 0.275
    assert sim.rce.select("sampling", "aggregation", "budget").rows() == [
        (s, m, b) for s, m in crowd.CONFIGURATIONS for b in (30, 300, 3000)
    ]
    exact = [np.corrcoef(a[:, i], y[:, i])[0, 1] for i in (0, 1)]
    assert_allclose(sim.pairs["rho"].to_numpy(), exact, rtol=1e-9)
    assert (sim.rce["ratings"] <= sim.rce["budget"]).all()
    assert (sim.rce["ratings"] >= 3).all() and (sim.rce["nan_estimates"] >= 0).all()
    assert (sim.rce["rce"] >= 0).all() and (sim.rce["rce_se"] >= 0).all()


def test_simulate_rce_falls_with_budget() -> None:
    # Moderate noise and prevalence, so that the aggregation's bias (majority votes flip labels and
    # attenuate the correlation) stays below the sampling error over this grid.
    a, y, model = synthetic(2000, seed=5, prevalence=0.2, columns=2)
    sim = crowd.simulate(a, y, model, [(0, 0), (1, 1)], [15, 150, 1500], eta=0.1, trials=60, prior="model", seed=0)
    for (sampling, method), group in sim.rce.group_by("sampling", "aggregation", maintain_order=True):
        assert group["budget"].to_list() == [15, 150, 1500]
        rce, se = group["rce"].to_numpy(), group["rce_se"].to_numpy()
        assert np.all(np.diff(rce) < 0), (sampling, method, rce)
        assert rce[-1] + 2 * math.hypot(se[0], se[-1]) < rce[0], (sampling, method)


def test_simulate_mgis_bragg_beats_uniform_majority(simulation: tuple[crowd.Simulation, Any]) -> None:
    sim, _ = simulation
    for budget in (300, 3000):
        at = sim.rce.filter(pl.col("budget") == budget)
        best = at.filter((pl.col("sampling") == "mgis") & (pl.col("aggregation") == "bragg")).row(0, named=True)
        base = at.filter((pl.col("sampling") == "uniform") & (pl.col("aggregation") == "majority")).row(0, named=True)
        assert best["rce"] + 2 * math.hypot(best["rce_se"], base["rce_se"]) < base["rce"]


def test_simulate_without_noise_and_with_many_draws_is_nearly_exact() -> None:
    a, y, model = synthetic(200, seed=8, prevalence=0.2, columns=2)
    sim = crowd.simulate(
        a, y, model, [(0, 0), (1, 1)], [60000], configurations=[("uniform", "mean")], eta=0.001, trials=4, seed=0
    )
    row = sim.rce.row(0, named=True)
    assert row["ratings"] == 600  # 20000 draws per pair reach every one of the 200 inputs
    assert row["rce"] < 0.05


def test_simulate_one_draw_per_trial_is_always_a_constant_label() -> None:
    # budget = raters_per_input: one input per trial, so every estimate is undefined and counted as 0,
    # and the RCE is exactly 1.
    a, y, model = synthetic(49, seed=1, prevalence=0.3)
    sim = crowd.simulate(a, y, model, [(0, 0)], [3], trials=50, seed=0)
    assert sim.rce["nan_estimates"].to_list() == [50] * 4
    assert_allclose(sim.rce["rce"].to_numpy(), 1.0, rtol=1e-12)


def test_simulate_is_seeded() -> None:
    a, y, model = synthetic(300, seed=9)
    args = (a, y, model, [(0, 0)], [30, 90])
    one = crowd.simulate(*args, trials=5, seed=2)
    assert one.rce.equals(crowd.simulate(*args, trials=5, seed=2).rce)
    assert not one.rce["rce"].equals(crowd.simulate(*args, trials=5, seed=3).rce["rce"])


def test_simulate_validation() -> None:
    a, y, model = synthetic(100, seed=10)
    with pytest.raises(errors.LabelError, match="binary"):
        crowd.simulate(a, np.where(y > 0, 0.5, 0.0), model, [(0, 0)], [30])
    with pytest.raises(errors.ParameterError, match="nonzero true correlation"):
        crowd.simulate(a, np.zeros_like(y), model, [(0, 0)], [30])  # constant labels: undefined correlation
    zero_a = np.array([[1.0], [-1.0], [1.0], [-1.0]] * 2)
    zero_y = np.array([[1.0], [1.0], [0.0], [0.0]] * 2)
    assert np.corrcoef(zero_a[:, 0], zero_y[:, 0])[0, 1] == 0.0
    with pytest.raises(errors.ParameterError, match="nonzero true correlation"):
        crowd.simulate(zero_a, zero_y, np.full((8, 1), 0.5), [(0, 0)], [30])
    for budgets in ([2], [1, 30], []):
        with pytest.raises(errors.ParameterError, match="budgets"):
            crowd.simulate(a, y, model, [(0, 0)], budgets)
    for eta in (0.0, 0.5, 0.7):
        with pytest.raises(errors.ParameterError, match="eta"):
            crowd.simulate(a, y, model, [(0, 0)], [30], eta=eta)
    with pytest.raises(errors.ParameterError, match="trials"):
        crowd.simulate(a, y, model, [(0, 0)], [30], trials=0)
    with pytest.raises(errors.ShapeError):
        crowd.simulate(a, y[:99], model, [(0, 0)], [30])
    with pytest.raises(errors.ShapeError):
        crowd.simulate(a, y, np.hstack([model, model]), [(0, 0)], [30])


def test_simulate_rejects_zero_raters() -> None:
    a, y, model = synthetic(100, seed=10)
    with pytest.raises(errors.ParameterError, match="raters_per_input"):
        crowd.simulate(a, y, model, [(0, 0)], [30], raters_per_input=0, trials=2)


def test_simulate_rejects_unknown_configurations() -> None:
    a, y, model = synthetic(100, seed=10)
    with pytest.raises(errors.ParameterError):
        crowd.simulate(a, y, model, [(0, 0)], [30], configurations=[("MGIS", "Majority")], trials=2)


def hand_made(rce: dict[tuple[str, str], list[float]], budgets: list[int], target: float = 0.275) -> crowd.Simulation:
    rows = [
        {"sampling": s, "aggregation": m, "budget": b, "rce": r, "rce_se": 0.01, "nan_estimates": 0, "ratings": b}
        for (s, m), values in rce.items()
        for b, r in zip(budgets, values, strict=True)
    ]
    pairs = pl.DataFrame({"unit": [0], "concept": [0], "rho": [0.5]})
    return crowd.Simulation(pl.DataFrame(rows), pairs, target, 0.23, 10, tuple(budgets))


def test_needed_interpolates_log_linearly() -> None:
    budgets = [10, 100, 1000, 10000]
    sim = hand_made(
        {
            ("uniform", "majority"): [0.5, 0.3, 0.2, 0.1],  # crosses between 100 and 1000
            ("uniform", "bragg"): [0.2, 0.1, 0.05, 0.01],  # the first budget already reaches it
            ("mgis", "majority"): [0.9, 0.8, 0.7, 0.6],  # never
            ("mgis", "bragg"): [0.5, 0.2, 0.4, 0.1],  # a dip that rises again: the last crossing counts
            ("mgis", "mean"): [0.5, 0.275, 0.1, 0.05],  # exactly on a grid point
        },
        budgets,
    )
    got = sim.needed()
    assert got.columns == ["sampling", "aggregation", "needed"]
    assert got.select("sampling", "aggregation").rows() == [
        ("uniform", "majority"),
        ("uniform", "bragg"),
        ("mgis", "majority"),
        ("mgis", "bragg"),
        ("mgis", "mean"),
    ]
    needed = got["needed"].to_list()
    # log(b) = log(100) + (0.3 - 0.275) / (0.3 - 0.2) * (log(1000) - log(100))
    assert math.isclose(needed[0], 100 * 10**0.25, rel_tol=1e-12)
    assert needed[1] == 10.0
    assert needed[2] is None
    assert math.isclose(needed[3], 1000 * 10 ** ((0.4 - 0.275) / (0.4 - 0.1)), rel_tol=1e-12)
    assert math.isclose(needed[4], 100.0, rel_tol=1e-12)
    # Another target.
    other = sim.needed(target=0.65)["needed"].to_list()
    assert other[0] == 10.0 and other[2] is not None
    assert math.isclose(other[2], 1000 * 10 ** ((0.7 - 0.65) / (0.7 - 0.6)), rel_tol=1e-12)


def test_needed_on_a_real_simulation_lies_on_the_grid_span(simulation: tuple[crowd.Simulation, Any]) -> None:
    sim, _ = simulation
    for row in sim.needed(target=10.0).iter_rows(named=True):
        assert row["needed"] == 30.0  # every RCE is below 10
    assert all(v is None for v in sim.needed(target=0.0)["needed"].to_list())


def test_plot_writes_a_png(tmp_path: Any) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.image

    sim = hand_made({("uniform", "majority"): [0.5, 0.3, 0.2], ("mgis", "bragg"): [0.3, 0.1, 0.05]}, [30, 300, 3000])
    path = tmp_path / "rce.png"
    assert sim.plot(path) == path
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rce.png"]  # no temporary file left
    with pytest.raises(errors.OutputError, match="does not exist"):
        sim.plot(tmp_path / "missing" / "rce.png")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rce.png"]


def test_budget_sums_equal_running_sums_read_at_each_budget() -> None:
    """The simulation's sums over each trial's draws within each budget (`_budget_sums`) against a
    running sum over every draw read at the budgets, and the outer-product sums against the
    draws' outer products summed the same way: budgets that repeat, that take one draw (index 0),
    and that take every draw."""
    from neuroneval.crowd.simulation import _budget_sums

    rng = np.random.default_rng(5)
    x = rng.normal(size=(4, 300, 3)) * np.array([1.0, 1e3, 1e-3])
    at = np.sort(rng.integers(0, 300, size=(4, 6)), axis=1)
    at[0, :3] = 0
    at[1, 2:5] = at[1, 2]
    at[2, -1] = 299
    at[3] = 299
    running = np.take_along_axis(np.cumsum(x, axis=1), at[..., None].repeat(3, axis=-1), axis=1)
    assert_allclose(_budget_sums(x, at), running, rtol=1e-12, atol=1e-9)
    outer = np.cumsum(x[..., :, None] * x[..., None, :], axis=1)
    read = np.take_along_axis(outer, np.broadcast_to(at[..., None, None], (*at.shape, 3, 3)), axis=1)
    assert_allclose(_budget_sums(x, at, outer=True), read, rtol=1e-12, atol=1e-6)
