"""Meta-evaluation 2 (SPEC section 5, `neuroneval.meta`) against independent references.

- `meta_auprc` equals scikit-learn's average precision of the flattened score matrix, with NaN
  replaced by a value below every score.
- `tune` equals a brute-force search written here (one `compute` call per grid point, first
  best wins), and finds the right alpha on a constructed case where it is known.
- `meta_evaluate` equals a manual split + tune + meta_auprc.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import neuroneval
import numpy as np
import polars as pl
import pytest
from neuroneval import errors, meta
from neuroneval.meta import ALPHA_GRID, LAMBDA_GRID, meta_auprc, meta_evaluate, ranking, split_units, tune
from neuroneval.options import SCORE_OPTIONS, Options
from numpy.testing import assert_allclose, assert_array_equal
from option_doors import assert_refused_as_declared, declared_keywords, refused_values
from sklearn.metrics import average_precision_score

METRICS = list(neuroneval.METRICS)
ALPHA_METRICS = [m for m in METRICS if neuroneval.METRICS[m].uses_alpha]


def sklearn_meta_auprc(scores: np.ndarray, y: np.ndarray) -> float:
    s = np.asarray(scores, dtype=np.float64).ravel()
    finite = s[~np.isnan(s)]
    below = np.nextafter(finite.min(), -np.inf) if finite.size else 0.0  # strictly below every score
    return float(average_precision_score(y.ravel().astype(int), np.where(np.isnan(s), below, s)))


def one_hot(truth: np.ndarray, n_concepts: int) -> np.ndarray:
    y = np.zeros((truth.size, n_concepts), dtype=bool)
    y[np.arange(truth.size), truth] = True
    return y


# ---------------------------------------------------------------------------------------------
# meta_auprc
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_meta_auprc_matches_sklearn(seed: int) -> None:
    rng = np.random.default_rng(seed)
    k, t = rng.integers(2, 30), rng.integers(2, 12)
    scores = np.round(rng.normal(size=(k, t)), int(rng.integers(0, 2)))  # heavy ties
    scores[rng.random((k, t)) < 0.15] = np.nan
    truth = rng.integers(0, t, k)
    got = meta_auprc(scores, truth)
    assert got.value == pytest.approx(sklearn_meta_auprc(scores, one_hot(truth, t)), rel=1e-12, abs=1e-12)
    assert got.nan_scores == int(np.isnan(scores).sum())
    assert got.pairs == k * t
    assert float(got) == got.value
    # The same truth as a boolean or 0/1 matrix.
    assert meta_auprc(scores, one_hot(truth, t)) == got
    assert meta_auprc(scores, one_hot(truth, t).astype(np.int64)) == got
    assert meta_auprc(scores.tolist(), truth.tolist()) == got


def test_meta_auprc_pools_pairs_and_takes_any_truth_matrix() -> None:
    rng = np.random.default_rng(10)
    scores = rng.random((20, 7))
    scores[3] = np.nan
    y = rng.random((20, 7)) < 0.2  # rows with zero, one or several correct concepts
    assert {int(v) for v in y.sum(axis=1)} >= {0, 1, 2}
    got = meta_auprc(scores, y)
    assert got.value == pytest.approx(sklearn_meta_auprc(scores, y), rel=1e-12)
    # Pooled, not a mean of per-unit APs.
    per_unit = [average_precision_score(y[i], scores[i]) for i in range(20) if y[i].any() and i != 3]
    assert abs(got.value - float(np.mean(per_unit))) > 1e-6
    # All NaN: one tied block, AP = prevalence; no positive at all: NaN.
    all_nan = meta_auprc(np.full((4, 5), np.nan), np.array([0, 1, 2, 3]))
    assert all_nan.value == pytest.approx(4 / 20) and all_nan.nan_scores == 20
    assert math.isnan(meta_auprc(scores, np.zeros((20, 7), dtype=bool)).value)


def test_meta_auprc_nan_ranks_below_every_finite_score() -> None:
    # The true pair's score is the lowest finite number; a NaN wrong pair is still below it.
    scores = np.array([[-1e300, np.nan], [0.5, 0.2]])
    assert meta_auprc(scores, np.array([0, 0])).value == pytest.approx(
        sklearn_meta_auprc(scores, one_hot(np.array([0, 0]), 2))
    )
    assert meta_auprc(np.array([[-1e300, np.nan]]), np.array([0])).value == 1.0


def test_meta_auprc_nan_ranks_below_minus_infinity() -> None:
    assert meta_auprc(np.array([[-np.inf, np.nan]]), np.array([0])).value == 1.0


def test_meta_auprc_errors() -> None:
    s = np.random.default_rng(0).random((4, 3))
    with pytest.raises(errors.ShapeError):
        meta_auprc(s[0], np.array([0]))
    with pytest.raises(errors.ShapeError):
        meta_auprc(s[None], np.array([0, 1, 2, 0]))
    with pytest.raises(errors.ShapeError):
        meta_auprc(s, np.array([0, 1, 2]))
    with pytest.raises(errors.ShapeError):
        meta_auprc(s, np.zeros((4, 2), dtype=bool))
    for bad in (np.array([0, 1, 3, 0]), np.array([0, -1, 2, 0]), np.array([0.0, 1.0, 2.0, 0.0])):
        with pytest.raises(errors.LabelError):
            meta_auprc(s, bad)
    with pytest.raises(errors.LabelError):
        meta_auprc(s, np.full((4, 3), 2))


# ---------------------------------------------------------------------------------------------
# split_units
# ---------------------------------------------------------------------------------------------


def test_split_sizes_cover_and_disjoint() -> None:
    for n in range(2, 260):
        for frac in (0.05, 0.3):
            val, test = split_units(n, frac, seed=n)
            r = frac * n
            if abs(r - math.floor(r) - 0.5) > 1e-9:  # not a rounding half: round is unambiguous
                assert len(val) == min(max(1, math.floor(r + 0.5)), n - 1), (n, frac)
            else:
                assert len(val) in (max(1, math.floor(r)), min(math.ceil(r), n - 1))
            assert len(test) >= 1 and len(val) >= 1
            both = np.concatenate([val, test])
            assert_array_equal(np.sort(both), np.arange(n))  # disjoint and covering
            assert np.all(np.diff(val) > 0) and np.all(np.diff(test) > 0)  # sorted
            assert val.dtype.kind in "iu" and test.dtype.kind in "iu"


def test_split_seeded_and_uniform() -> None:
    a = split_units(100, 0.05, seed=7)
    b = split_units(100, 0.05, seed=7)
    assert_array_equal(a[0], b[0]) and assert_array_equal(a[1], b[1])
    assert not all(np.array_equal(split_units(100, 0.05, seed=s)[0], a[0]) for s in range(8, 12))
    # Every unit is equally likely to be in validation.
    n, draws = 20, 3000
    counts = np.zeros(n)
    for s in range(draws):
        counts[split_units(n, 0.25, seed=s)[0]] += 1
    p = 5 / n
    assert np.all(np.abs(counts / draws - p) < 5 * math.sqrt(p * (1 - p) / draws))


def test_split_errors() -> None:
    for n in (0, 1, -3):
        with pytest.raises(errors.EmptyInputError):
            split_units(n)
    with pytest.raises(errors.EmptyInputError):
        split_units(10.0)  # type: ignore[arg-type]
    # Two units: one each way, whatever the fraction.
    for frac in (0.01, 0.99):
        val, test = split_units(2, frac)
        assert len(val) == 1 and len(test) == 1


# ---------------------------------------------------------------------------------------------
# tune
# ---------------------------------------------------------------------------------------------


def test_grids_are_the_spec_grids() -> None:
    assert ALPHA_GRID == (0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
    assert len(LAMBDA_GRID) == 101
    assert_allclose(LAMBDA_GRID, np.linspace(0, 1, 101), atol=1e-15)
    assert LAMBDA_GRID[0] == 0.0 and LAMBDA_GRID[-1] == 1.0


def brute_force(
    a: np.ndarray, c: np.ndarray, truth: Any, metric: str, alphas: Any, lams: Any = (1.0,)
) -> tuple[float, float, float]:
    """First best (alpha, lam, meta-AUPRC) in grid order, alpha outer, one compute call each."""
    best: tuple[float, float, float] | None = None
    for alpha in alphas:
        for lam in lams:
            v = meta_auprc(neuroneval.compute(a, c, [metric], alpha=alpha, lam=lam)[metric], truth).value
            if best is None or v > best[2]:
                best = (alpha, lam, v)
    assert best is not None
    return best


def known_alpha_case() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """20 disjoint concepts of 500 inputs each (N = 10,000); unit types whose meta-AUPRC is 1
    at alpha = 0.05 (the prevalence) and below 1 at every other grid alpha:

    A: fires highest on 50 inputs of the next concept, then on all of its own.
    B: fires highest on its own concept, then on all of the next one (ties at alpha >= 0.1).
    C: fires highest on 200 inputs of the next concept, then on all of its own (wrong at <= 0.02).
    """
    rng = np.random.default_rng(5)
    n, t, size = 10_000, 20, 500
    rows = rng.permutation(n)
    members = [rows[i * size : (i + 1) * size] for i in range(t)]
    c = np.zeros((n, t))
    for j, idx in enumerate(members):
        c[idx, j] = 1.0
    units, truth = [], []
    for kind, leak in (("A", 50), ("B", size), ("C", 200)):
        for j in range(4):
            own = {"A": 3 * j, "B": 3 * j + 1, "C": 3 * j + 2}[kind]
            nxt = (own + 1) % t
            a = rng.random(n)  # noise below 1
            if kind == "B":
                a[members[own]] = 20 + rng.random(size)
                a[members[nxt]] = 10 + rng.random(size)
            else:
                a[members[own]] = 10 + rng.random(size)
                a[members[nxt][:leak]] = 20 + rng.random(leak)
            units.append(a)
            truth.append(own)
    return np.stack(units, axis=1), c, np.array(truth)


def test_tune_finds_the_known_alpha() -> None:
    a, c, truth = known_alpha_case()
    names = ["recall", "precision", "iou", "f1"]
    chosen = tune(a, c, truth, names)
    assert list(chosen) == names
    for m in names:
        per_alpha = [meta_auprc(neuroneval.compute(a, c, [m], alpha=x)[m], truth).value for x in ALPHA_GRID]
        # The construction does what it says: 1 at the prevalence only.
        assert per_alpha[ALPHA_GRID.index(0.05)] == 1.0, m
        assert all(v < 1.0 for x, v in zip(ALPHA_GRID, per_alpha, strict=True) if x != 0.05), (m, per_alpha)
        assert chosen[m].alpha == 0.05 and chosen[m].meta_auprc == 1.0, (m, chosen[m])
        assert chosen[m].lam is None and chosen[m].metric == m


def test_tune_ties_go_to_the_first_grid_value() -> None:
    # Only B-like units: at every alpha up to the prevalence the top set lies inside the right
    # concept, so meta-AUPRC is 1 for recall at each of them.
    a, c, truth = known_alpha_case()
    b = a[:, 4:8]
    tb = truth[4:8]
    for grid in ([0.01, 0.02, 0.05], [0.05, 0.02, 0.01], [0.02, 0.1, 0.01]):
        values = [meta_auprc(neuroneval.compute(b, c, ["recall"], alpha=x)["recall"], tb).value for x in grid]
        got = tune(b, c, tb, ["recall"], alphas=grid)["recall"]
        assert got.alpha == grid[values.index(max(values))]
        assert got.meta_auprc == max(values)
    assert tune(b, c, tb, ["recall"], alphas=[0.01, 0.02, 0.05])["recall"].alpha == 0.01
    assert tune(b, c, tb, ["recall"], alphas=[0.05, 0.02, 0.01])["recall"].alpha == 0.05
    assert tune(b, c, tb, ["recall"])["recall"].alpha == ALPHA_GRID[0]


def random_case(
    seed: int, n: int = 600, units: int = 12, concepts: int = 8
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    prevalence = rng.uniform(0.01, 0.4, concepts)
    c = (rng.random((n, concepts)) < prevalence).astype(float)
    c[:, : concepts // 2] *= rng.uniform(0.3, 1.0, (n, concepts // 2))  # soft concepts
    truth = rng.integers(0, concepts, units)
    a = np.round(c[:, truth] * rng.uniform(0.2, 2.0, units) + rng.normal(0, 0.6, (n, units)), 1)
    return a, c, truth


@pytest.mark.parametrize("seed", [0, 1])
def test_tune_equals_brute_force(seed: int) -> None:
    a, c, truth = random_case(seed)
    chosen = tune(a, c, truth, None)
    assert list(chosen) == METRICS
    for m in METRICS:
        info = neuroneval.METRICS[m]
        t = chosen[m]
        if m == "wpmi":
            continue  # lambda: below
        if info.uses_alpha:
            alpha, _, value = brute_force(a, c, truth, m, ALPHA_GRID)
            assert t.alpha == alpha, (m, t, alpha)
            assert t.meta_auprc == value, m
            s = neuroneval.compute(a, c, [m], alpha=alpha)[m]
        else:
            assert t.alpha is None, m
            s = neuroneval.compute(a, c, [m])[m]
            assert t.meta_auprc == meta_auprc(s, truth).value, m
        assert t.lam is None
        assert t.nan_scores == int(np.isnan(s).sum())


# Seeds whose best lambda is interior (8), or tied between two or three grid values (0, 10).
@pytest.mark.parametrize("seed", [0, 8, 10])
def test_tune_wpmi_lambda_equals_brute_force(seed: int) -> None:
    a, c, truth = random_case(seed)
    alphas, lams = [0.005, 0.02, 0.1, 0.3], [0.0, 0.2, 0.45, 0.7, 0.9, 1.0]
    got = tune(a, c, truth, ["wpmi"], alphas=alphas, lams=lams)["wpmi"]
    alpha, lam, value = brute_force(a, c, truth, "wpmi", alphas, lams)
    assert (got.alpha, got.lam) == (alpha, lam)
    assert got.meta_auprc == pytest.approx(value, abs=1e-12)
    # lambda matters on this data, so the search is not trivially at the first point.
    values = {meta_auprc(neuroneval.compute(a, c, ["wpmi"], alpha=alpha, lam=x)["wpmi"], truth).value for x in lams}
    assert len(values) > 1


def test_tune_errors() -> None:
    a, c, truth = random_case(4)
    with pytest.raises(errors.ParameterError):
        tune(a, c, truth, ["f1"], alphas=[])
    with pytest.raises(errors.ParameterError):
        tune(a, c, truth, ["wpmi"], lams=[])
    with pytest.raises(errors.UnknownMetricError):
        tune(a, c, truth, ["nope"])
    with pytest.raises(errors.EmptyInputError):
        tune(a, c, truth, [])


# ---------------------------------------------------------------------------------------------
# meta_evaluate
# ---------------------------------------------------------------------------------------------

EVAL_METRICS = [
    "recall",
    "f1",
    "auprc",
    "wpmi",
    "correlation",
    "inverse_auprc",
    "mad",
    "spearman",
    "correlation_top_random",
]


def test_meta_evaluate_equals_manual_protocol() -> None:
    a, c, truth = random_case(5, n=800, units=40)
    seed, validation = 3, 0.1
    table = meta_evaluate(a, c, truth, EVAL_METRICS, validation=validation, seed=seed, k=10, top_alpha=0.01)
    assert table.columns == [
        "metric",
        "alpha",
        "lam",
        "validation_meta_auprc",
        "meta_auprc",
        "nan_scores",
        "passes_sanity_in_paper",
    ]
    assert table["metric"].to_list() == EVAL_METRICS
    val, test = split_units(a.shape[1], validation, seed)
    assert len(val) == 4
    # The seed also seeds the top-random draws, in tuning and on test.
    chosen = tune(a[:, val], c, truth[val], EVAL_METRICS, k=10, top_alpha=0.01, seed=seed)
    for row in table.iter_rows(named=True):
        m = row["metric"]
        t = chosen[m]
        alpha = 0.005 if t.alpha is None else t.alpha
        lam = 1.0 if t.lam is None else t.lam
        s = neuroneval.compute(a[:, test], c, [m], alpha=alpha, lam=lam, k=10, top_alpha=0.01, seed=seed)[m]
        want = meta_auprc(s, truth[test])
        assert row["alpha"] == t.alpha and row["lam"] == t.lam, (m, row, t)
        assert row["validation_meta_auprc"] == pytest.approx(t.meta_auprc, abs=1e-15, nan_ok=True)
        assert row["meta_auprc"] == pytest.approx(want.value, abs=1e-15), m
        assert row["nan_scores"] == want.nan_scores
        assert row["passes_sanity_in_paper"] == neuroneval.METRICS[m].passes_sanity
    # The one-hot truth gives the same table.
    onehot = one_hot(truth, c.shape[1])
    again = meta_evaluate(a, c, onehot, EVAL_METRICS, validation=validation, seed=seed, k=10, top_alpha=0.01)
    assert again.equals(table)


def test_meta_evaluate_with_alpha_does_not_tune(monkeypatch: pytest.MonkeyPatch) -> None:
    a, c, truth = random_case(6, units=30)

    def no_tuning(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("tune was called although alpha was given")

    monkeypatch.setattr(meta, "tune", no_tuning)
    table = meta_evaluate(a, c, truth, ["f1", "wpmi", "correlation"], alpha=0.1, lam=0.4, seed=1)
    _, test = split_units(30, 0.05, 1)
    assert table["alpha"].to_list() == [0.1, 0.1, None]
    assert table["lam"].to_list() == [None, 0.4, None]
    assert table["validation_meta_auprc"].null_count() == 3
    for m, value in table.select("metric", "meta_auprc").iter_rows():
        s = neuroneval.compute(a[:, test], c, [m], alpha=0.1, lam=0.4)[m]
        assert value == pytest.approx(meta_auprc(s, truth[test]).value, abs=1e-15)
    # Without lam, wpmi uses 1.
    plain = meta_evaluate(a, c, truth, ["wpmi"], alpha=0.1, seed=1)
    s = neuroneval.compute(a[:, test], c, ["wpmi"], alpha=0.1, lam=1.0)["wpmi"]
    assert plain["meta_auprc"][0] == pytest.approx(meta_auprc(s, truth[test]).value, abs=1e-15)
    assert plain["lam"][0] == 1.0  # the value used is recorded
    assert table.schema["alpha"] == pl.Float64


def test_meta_evaluate_errors() -> None:
    a, c, truth = random_case(7)
    with pytest.raises(errors.ShapeError):
        meta_evaluate(a, c, truth[:-1], ["f1"])
    with pytest.raises(errors.LabelError):
        meta_evaluate(a, c, -truth - 1, ["f1"])
    with pytest.raises(errors.EmptyInputError):
        meta_evaluate(a[:, :1], c, truth[:1], ["f1"])
    with pytest.raises(errors.UnknownMetricError):
        meta_evaluate(a, c, truth, ["nope"])


def test_lam_goes_with_alpha_only() -> None:
    a, c, truth = random_case(7)
    rule = "lam is used only with alpha; without alpha, alpha and lambda are tuned together"
    with pytest.raises(errors.ParameterError, match=f"^invalid parameter lam = 0.5: {rule}$"):
        meta_evaluate(a, c, truth, ["wpmi"], lam=0.5)


# ---------------------------------------------------------------------------------------------
# Every declared option is checked where it is taken (the values: its declaration's)
# ---------------------------------------------------------------------------------------------

_A, _C, _T = random_case(8, n=60, units=4, concepts=3)

#: Each public function: a call on good data, and the groups that declare its keyword options.
CALLS: dict[str, tuple[Callable[..., Any], list[Options]]] = {
    "split_units": (lambda **kw: split_units(10, **kw), [meta.SPLIT_OPTIONS]),
    "tune": (lambda **kw: tune(_A, _C, _T, ["f1"], **kw), [SCORE_OPTIONS]),
    "meta_evaluate": (
        lambda **kw: meta_evaluate(_A, _C, _T, ["f1"], **{"alpha": 0.1, **kw}),
        [meta.TUNING_OPTIONS, meta.SPLIT_OPTIONS, SCORE_OPTIONS],
    ),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_every_declared_option_is_checked_where_it_is_taken(name: str) -> None:
    call, groups = CALLS[name]
    options = declared_keywords(getattr(meta, name), groups)
    assert options
    for option in options:
        for value in refused_values(option):
            assert_refused_as_declared(call, option, value)


# ---------------------------------------------------------------------------------------------
# Ties of the tuned alpha
# ---------------------------------------------------------------------------------------------


def brute_force_ties(a: np.ndarray, c: np.ndarray, truth: Any, metric: str, alphas: Any, lams: Any) -> list[float]:
    """Every alpha whose best meta-AUPRC (over lams) equals the best over the whole grid, in grid order."""
    per_alpha = {}
    for alpha in alphas:
        per_alpha[alpha] = max(
            meta_auprc(neuroneval.compute(a, c, [metric], alpha=alpha, lam=lam)[metric], truth).value for lam in lams
        )
    best = max(per_alpha.values())
    return [x for x in alphas if per_alpha[x] == best]


def test_tune_reports_every_tied_alpha() -> None:
    a, c, truth = known_alpha_case()
    b, tb = a[:, 4:8], truth[4:8]  # B-like units: perfect at every alpha up to the prevalence
    for grid in (list(ALPHA_GRID), [0.05, 0.02, 0.01, 0.5], [0.02, 0.1, 0.01]):
        chosen = tune(b, c, tb, ["recall", "f1", "correlation"], alphas=grid, lams=[1.0])
        for m in ("recall", "f1"):
            want = brute_force_ties(b, c, tb, m, grid, [1.0])
            assert list(chosen[m].tied_alphas) == want, (m, grid)
            assert chosen[m].alpha == want[0]
        assert chosen["correlation"].tied_alphas == ()
    assert len(tune(b, c, tb, ["recall"])["recall"].tied_alphas) > 1
    # On the mixed units only alpha = 0.05 is best: a tie of one.
    assert tune(a, c, truth, ["f1"])["f1"].tied_alphas == (0.05,)


@pytest.mark.parametrize("seed", [0, 10])
def test_tune_wpmi_ties_take_the_best_lambda_of_each_alpha(seed: int) -> None:
    a, c, truth = random_case(seed)
    alphas, lams = [0.005, 0.02, 0.1, 0.3, 0.5], [0.0, 0.5, 1.0]
    got = tune(a, c, truth, ["wpmi"], alphas=alphas, lams=lams)["wpmi"]
    assert list(got.tied_alphas) == brute_force_ties(a, c, truth, "wpmi", alphas, lams)
    assert got.tied_alphas[0] == got.alpha


# ---------------------------------------------------------------------------------------------
# ranking (Table 4)
# ---------------------------------------------------------------------------------------------


def reference_ranking(results: pl.DataFrame) -> dict[str, tuple[float, float, int]]:
    """metric -> (mean meta-AUPRC, mean rank, NaN settings), ranks counted pair by pair."""
    settings = list(dict.fromkeys(results["setting"].to_list()))
    metrics = list(dict.fromkeys(results["metric"].to_list()))
    value = {(r["setting"], r["metric"]): r["meta_auprc"] for r in results.iter_rows(named=True)}
    out = {}
    for m in metrics:
        ranks, values = [], []
        for s in settings:
            v = value[(s, m)]
            values.append(v)
            higher = ties = 0
            for other in metrics:
                if other == m:
                    continue
                w = value[(s, other)]
                if math.isnan(v):
                    ties += math.isnan(w)
                    higher += not math.isnan(w)
                elif not math.isnan(w):
                    higher += w > v
                    ties += w == v
            ranks.append(1 + higher + ties / 2)
        nan = sum(math.isnan(v) for v in values)
        mean = math.nan if nan else sum(values) / len(values)
        out[m] = (mean, sum(ranks) / len(ranks), nan)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_ranking_equals_pairwise_counts(seed: int) -> None:
    rng = np.random.default_rng(seed)
    metrics = ["correlation", "cosine", "auprc", "f1", "iou", "recall", "spearman", "mad", "wpmi"]
    rows = []
    for s in range(5):
        values = np.round(rng.random(len(metrics)), 1)  # coarse: many ties
        values[rng.random(len(metrics)) < 0.1] = np.nan
        if s == 2:
            values[:] = 0.5  # every metric tied
        order = rng.permutation(len(metrics))  # the row order within a setting does not matter
        rows += [{"setting": f"s{s}", "metric": metrics[j], "meta_auprc": float(values[j])} for j in order]
    results = pl.DataFrame(rows)
    table = ranking(results)
    want = reference_ranking(results)
    assert table.columns == [
        "metric",
        "settings",
        "meta_auprc",
        "rank",
        "nan_settings",
        "paper_meta_auprc",
        "paper_rank",
    ]
    assert sorted(table["metric"].to_list()) == sorted(metrics)
    for r in table.iter_rows(named=True):
        mean, rank, nan = want[r["metric"]]
        assert r["settings"] == 5
        assert r["rank"] == pytest.approx(rank, abs=1e-12)
        assert r["nan_settings"] == nan
        assert (math.isnan(r["meta_auprc"]) and math.isnan(mean)) or r["meta_auprc"] == pytest.approx(mean, abs=1e-12)
        paper = meta.PAPER_TABLE4.get(r["metric"])
        assert (r["paper_meta_auprc"], r["paper_rank"]) == (paper if paper else (None, None))
    # Rows by mean rank, then mean meta-AUPRC (NaN last).
    keys = [(r, -v if not math.isnan(v) else math.inf) for r, v in zip(table["rank"], table["meta_auprc"], strict=True)]
    assert keys == sorted(keys)
    # Ranks of each setting sum to 1 + 2 + ... + T, so the mean ranks do too.
    assert sum(table["rank"]) == pytest.approx(len(metrics) * (len(metrics) + 1) / 2)


def test_ranking_of_meta_evaluate_tables_and_errors() -> None:
    frames = []
    for seed in (0, 1):
        a, c, truth = random_case(seed, units=30)
        t = meta_evaluate(a, c, truth, ["correlation", "recall", "f1"], validation=0.2, seed=seed)
        frames.append(t.select(pl.lit(f"case {seed}").alias("setting"), pl.all()))
    table = ranking(pl.concat(frames))
    assert table["settings"].to_list() == [2, 2, 2]
    assert set(table["metric"]) == {"correlation", "recall", "f1"}
    with pytest.raises(errors.ShapeError, match="meta_auprc"):
        ranking(pl.DataFrame({"setting": ["a"], "metric": ["f1"]}))
    with pytest.raises(errors.EmptyInputError):
        ranking(pl.DataFrame({"setting": [], "metric": [], "meta_auprc": []}))
    with pytest.raises(errors.ShapeError, match="2 times"):
        ranking(pl.DataFrame({"setting": ["a", "a"], "metric": ["f1", "f1"], "meta_auprc": [0.1, 0.2]}))
    with pytest.raises(errors.ShapeError, match="0 times"):
        ranking(
            pl.DataFrame({"setting": ["a", "b", "b"], "metric": ["f1", "f1", "iou"], "meta_auprc": [0.1, 0.2, 0.3]})
        )
    with pytest.raises(errors.ParameterError):
        ranking(pl.DataFrame({"setting": ["a"], "metric": ["f1"], "meta_auprc": [math.inf]}))
    with pytest.raises(errors.ParameterError):
        ranking({"setting": ["a"]})  # type: ignore[arg-type]
