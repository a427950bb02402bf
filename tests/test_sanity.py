"""The sanity checks of SPEC section 4 (`neuroneval.sanity`) against references written here.

- The perturbations are pinned by their distributions (the kept and added counts against the
  binomial laws SPEC section 4 states, over many columns), by their exact structure on soft
  concepts, and by seeding rules.
- The core's 2x2-table scores (`_core.table_scores`, used by `theoretical`) are pinned against
  the real kernels on materialised binary vectors for every 2x2 table of a small N.
- `theoretical` is pinned against the paper's Table 3 and against slow simulations that
  materialise the vectors, perturb them with the real perturbations and draw real subsets.
- `decrease_accuracy` and `experimental` are pinned against a slow per-unit loop that calls
  `neuroneval.compute` one pair at a time and normalises exactly as SPEC section 4 says.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import matplotlib.image
import neuroneval
import numpy as np
import polars as pl
import pytest
from neuroneval import errors, meta, sanity
from neuroneval.meta import split_units, tune
from neuroneval.options import SCORE_OPTIONS, Options
from numpy.testing import assert_allclose, assert_array_equal
from option_doors import assert_refused_as_declared, declared_keywords, refused_values
from scipy import stats

METRICS = list(neuroneval.METRICS)
TOP_RANDOM = ("correlation_top_random", "spearman_top_random")
TABLE_METRICS = [m for m in METRICS if m not in TOP_RANDOM]
COLUMNS = ["missing_experimental", "missing_theoretical", "extra_experimental", "extra_theoretical"]
RECORD_COLUMNS = [
    "setting",
    "kind",
    "metric",
    "perturbation",
    "gamma",
    "decrease_acc",
    "se",
    "nan_deltas",
    "units",
    "alpha",
    "lam",
    "ci_low",
    "ci_high",
    "tied_alphas",
]


def value_range(metric: str) -> tuple[float, float] | None:
    return {
        **{m: (0.0, 1.0) for m in METRICS},
        **{m: (-1.0, 1.0) for m in ("correlation", "spearman", "cosine", *TOP_RANDOM)},
        "wpmi": None,
        "mad": None,
    }[metric]


def test_value_ranges_are_the_spec_ranges() -> None:
    for m in METRICS:
        assert neuroneval.METRICS[m].value_range == value_range(m), m


# ---------------------------------------------------------------------------------------------
# Missing labels
# ---------------------------------------------------------------------------------------------


def columns_with_labels(n: int, sizes: list[int], copies: int, rng: np.random.Generator) -> np.ndarray:
    """`copies` binary columns for each label count in `sizes`, labels at random rows."""
    cols = []
    for size in sizes:
        for _ in range(copies):
            col = np.zeros(n)
            col[rng.choice(n, size, replace=False)] = 1.0
            cols.append(col)
    return np.stack(cols, axis=1)


@pytest.mark.parametrize("keep", [0.5, 0.2, 0.8])
def test_missing_keeps_binomial_counts(keep: float) -> None:
    rng = np.random.default_rng(11)
    sizes, copies, n = [7, 40, 150], 1500, 200
    c = columns_with_labels(n, sizes, copies, rng)
    out = sanity.missing_labels(c, keep=keep, seed=5)
    # Only labels are removed: the result is c times a 0/1 mask.
    assert set(np.unique(out)) <= {0.0, 1.0}
    assert np.all(out <= c)
    kept = out.sum(axis=0)
    for i, size in enumerate(sizes):
        x = kept[i * copies : (i + 1) * copies]
        mean, var = keep * size, keep * (1 - keep) * size
        # Standard errors of the sample mean and of the sample variance (binomial fourth moment).
        se_mean = math.sqrt(var / copies)
        mu4 = var * (1 + 3 * (size - 2) * keep * (1 - keep))
        se_var = math.sqrt((mu4 - var**2 * (copies - 3) / (copies - 1)) / copies)
        assert abs(x.mean() - mean) < 5 * se_mean, (size, x.mean(), mean)
        assert abs(x.var(ddof=1) - var) < 5 * se_var, (size, x.var(ddof=1), var)
    # The whole law, not just two moments: a chi-square test of the largest size's counts.
    x = kept[2 * copies :].astype(int)
    pmf = stats.binom.pmf(np.arange(151), 150, keep)
    lo, hi = int(stats.binom.ppf(0.01, 150, keep)), int(stats.binom.ppf(0.99, 150, keep))
    observed = [np.sum(x < lo), *[np.sum(x == v) for v in range(lo, hi + 1)], np.sum(x > hi)]
    expected = [pmf[:lo].sum(), *pmf[lo : hi + 1], pmf[hi + 1 :].sum()]
    expected = np.array(expected) / np.sum(expected) * copies
    assert stats.chisquare(observed, expected).pvalue > 1e-4


def test_missing_soft_values_are_kept_exactly_or_zeroed() -> None:
    rng = np.random.default_rng(3)
    soft = rng.random((500, 6))
    soft[rng.random(soft.shape) < 0.1] = 1.0
    out = sanity.missing_labels(soft, keep=0.5, seed=9)
    kept = out == soft
    zeroed = out == 0.0
    assert np.all(kept | zeroed)
    # Every kept position keeps its exact value, and roughly half are kept.
    assert 0.4 < kept.mean() < 0.6
    # The mask does not depend on the values: it is the mask drawn for an all-ones matrix.
    mask = sanity.missing_labels(np.ones_like(soft), keep=0.5, seed=9)
    assert_array_equal(out, soft * mask)


def test_missing_keep_zero_and_one() -> None:
    c = np.random.default_rng(1).random((300, 4))
    assert_array_equal(sanity.missing_labels(c, keep=0.0, seed=2), np.zeros_like(c))
    assert_array_equal(sanity.missing_labels(c, keep=1.0, seed=2), c)


# ---------------------------------------------------------------------------------------------
# Extra labels
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [2.0, 3.0])
@pytest.mark.parametrize("size", [5, 30, 90])
def test_extra_expected_mass(rate: float, size: int) -> None:
    n, copies = 300, 1500
    c = columns_with_labels(n, [size], copies, np.random.default_rng(size))
    out = sanity.extra_labels(c, rate=rate, seed=4)
    assert set(np.unique(out)) <= {0.0, 1.0}
    assert np.all(out >= c)
    mass = out.sum(axis=0)
    p = (rate - 1) * size / (n - size)
    assert p <= 1
    # E||c+||_1 = rate ||c||_1, and the added count is Binomial(n - |c|, p).
    se = math.sqrt((n - size) * p * (1 - p) / copies)
    assert abs(mass.mean() - rate * size) < 5 * se, (mass.mean(), rate * size)
    var = (n - size) * p * (1 - p)
    assert abs(mass.var(ddof=1) / var - 1) < 5 * math.sqrt(2 / (copies - 1)) + 0.02


def test_extra_soft_concepts() -> None:
    rng = np.random.default_rng(8)
    n, t = 2000, 5
    soft = rng.random((n, t)) * rng.random(t) * 0.4
    soft[:20, 0] = 1.0
    out = sanity.extra_labels(soft, rate=2.0, seed=12)
    assert np.all(out >= soft)
    changed = out != soft
    # Chosen entries become exactly 1; the others are unchanged.
    assert np.all(out[changed] == 1.0)
    for j in range(t):
        mass = soft[:, j].sum()
        p = mass / (n - mass)
        # Entries are chosen with probability p (an entry already at 1 shows no change).
        eligible = soft[:, j] < 1.0
        hits = changed[eligible, j].sum()
        m = eligible.sum()
        assert abs(hits - m * p) < 5 * math.sqrt(m * p * (1 - p)), (j, hits, m * p)


def test_extra_clip_and_identity() -> None:
    rng = np.random.default_rng(2)
    n = 50
    c = np.zeros((n, 4))
    c[:30, 0] = 1.0  # p = 30 / 20 > 1: every entry is chosen
    c[:, 1] = 1.0  # ||c||_1 = N: unchanged
    c[:, 2] = rng.random(n) * 0.5 + 0.5  # soft, mass > N / 2: p > 1 again
    c[:5, 3] = 0.7  # an ordinary column
    out = sanity.extra_labels(c, rate=2.0, seed=1)
    assert_array_equal(out[:, 0], np.ones(n))
    assert_array_equal(out[:, 1], np.ones(n))
    assert_array_equal(out[:, 2], np.ones(n))
    assert np.all(out[:, 3] >= c[:, 3])
    # rate = 1 adds nothing.
    soft = rng.random((n, 3))
    assert_array_equal(sanity.extra_labels(soft, rate=1.0, seed=3), soft)
    # An empty concept stays empty (p = 0).
    assert_array_equal(sanity.extra_labels(np.zeros((n, 2)), rate=3.0, seed=3), np.zeros((n, 2)))


# ---------------------------------------------------------------------------------------------
# Seeding, column independence, shapes, errors (both perturbations)
# ---------------------------------------------------------------------------------------------

PERTURB = {
    "missing": lambda c, seed: sanity.missing_labels(c, keep=0.5, seed=seed),
    "extra": lambda c, seed: sanity.extra_labels(c, rate=2.0, seed=seed),
}


@pytest.mark.parametrize("kind", list(PERTURB))
def test_determinism(kind: str) -> None:
    rng = np.random.default_rng(0)
    c = (rng.random((400, 6)) < 0.2) * rng.random((400, 6))
    f = PERTURB[kind]
    original = c.copy()
    first, again = f(c, 7), f(c.copy(), 7)
    assert first.tobytes() == again.tobytes()
    assert first.dtype == np.float64
    other = f(c, 8)
    assert not np.array_equal(first, other)
    assert all(not np.array_equal(first[:, j], other[:, j]) for j in range(c.shape[1]))
    assert_array_equal(c, original)  # the input is not modified


@pytest.mark.parametrize("kind", list(PERTURB))
def test_column_independence(kind: str) -> None:
    rng = np.random.default_rng(4)
    c = (rng.random((300, 8)) < 0.3).astype(float)
    f = PERTURB[kind]
    whole = f(c, 3)
    # A leading block of columns, or one more column at the end, perturbs the same way.
    for width in (1, 3, 7):
        assert_array_equal(f(c[:, :width], 3), whole[:, :width])
    wider = np.concatenate([c, (rng.random((300, 2)) < 0.5).astype(float)], axis=1)
    assert_array_equal(f(wider, 3)[:, :8], whole)
    # Other columns' values do not matter (same label mass in column 0 for extra's p).
    changed = c.copy()
    changed[:, 1:] = (rng.random((300, 7)) < 0.6).astype(float)
    assert_array_equal(f(changed, 3)[:, 0], whole[:, 0])
    # Columns draw from different streams.
    same = np.repeat(c[:, :1], 4, axis=1)
    out = f(same, 3)
    assert not np.array_equal(out[:, 0], out[:, 1])


@pytest.mark.parametrize("kind", list(PERTURB))
def test_one_dimensional_input(kind: str) -> None:
    c = (np.random.default_rng(5).random(250) < 0.3).astype(float)
    f = PERTURB[kind]
    out = f(c, 6)
    assert out.shape == (250,)
    assert_array_equal(out, f(c[:, None], 6)[:, 0])
    assert_array_equal(f(c.tolist(), 6), out)


@pytest.mark.parametrize("kind", list(PERTURB))
def test_perturbation_errors(kind: str) -> None:
    f = PERTURB[kind]
    good = np.full((5, 2), 0.5)
    bad = good.copy()
    bad[3, 1] = 1.5
    with pytest.raises(errors.ConceptRangeError, match=r"row 3, column 1"):
        f(bad, 0)
    bad[3, 1] = -0.1
    with pytest.raises(errors.ConceptRangeError):
        f(bad, 0)
    bad[3, 1] = np.nan
    with pytest.raises(errors.NonFiniteError, match=r"row 3, column 1"):
        f(bad, 0)
    bad[3, 1] = np.inf
    with pytest.raises(errors.NonFiniteError):
        f(bad, 0)
    for empty in (np.zeros((0, 2)), np.zeros((3, 0)), np.zeros(0)):
        with pytest.raises(errors.EmptyInputError):
            f(empty, 0)
    with pytest.raises(errors.ShapeError):
        f(np.zeros((2, 2, 2)), 0)


def test_extra_rejects_bad_seed_on_full_columns() -> None:
    with pytest.raises(errors.ParameterError, match="seed"):
        sanity.extra_labels(np.ones((5, 2)), rate=2.0, seed=-1)


# ---------------------------------------------------------------------------------------------
# Every declared option is checked where it is taken (the values: its declaration's)
# ---------------------------------------------------------------------------------------------

_A = np.random.default_rng(0).random((60, 4))
_C = (np.random.default_rng(1).random((60, 3)) < 0.3).astype(float)
_T = np.array([0, 1, 2, 0])
_RUN = [sanity.PERTURBATION_OPTIONS, sanity.DECREASE_OPTIONS]

#: Each public function: a call on good data, and the groups that declare its keyword options.
CALLS: dict[str, tuple[Callable[..., Any], list[Options]]] = {
    "missing_labels": (lambda **kw: sanity.missing_labels(_C, **kw), [sanity.PERTURBATION_OPTIONS]),
    "extra_labels": (lambda **kw: sanity.extra_labels(_C, **kw), [sanity.PERTURBATION_OPTIONS]),
    "bootstrap_interval": (lambda **kw: sanity.bootstrap_interval(np.ones(5), **kw), [sanity.BOOTSTRAP_OPTIONS]),
    "decrease_accuracy": (lambda **kw: sanity.decrease_accuracy("f1", _A, _C, _T, **kw), [SCORE_OPTIONS, *_RUN]),
    "experimental": (
        lambda **kw: sanity.experimental(_A, _C, _T, ["f1"], **{"alpha": 0.1, **kw}),
        [meta.TUNING_OPTIONS, meta.SPLIT_OPTIONS, SCORE_OPTIONS, *_RUN, sanity.EXPERIMENTAL_OPTIONS],
    ),
    "theoretical": (lambda **kw: sanity.theoretical(["f1"], **kw), [sanity.THEORETICAL_OPTIONS, SCORE_OPTIONS, *_RUN]),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_every_declared_option_is_checked_where_it_is_taken(name: str) -> None:
    call, groups = CALLS[name]
    options = declared_keywords(getattr(sanity, name), groups)
    assert options
    for option in options:
        for value in refused_values(option):
            assert_refused_as_declared(call, option, value)


# ---------------------------------------------------------------------------------------------
# The core's table scores against the kernels, every 2x2 table of N = 7
# ---------------------------------------------------------------------------------------------


def table_scores(n: Any, n11: Any, n10: Any, n01: Any, metrics: list[str], lam: float = 1.0) -> dict[str, Any]:
    """`_core.table_scores` (what `theoretical` scores its tables with), counts broadcast."""
    counts = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (n, n11, n10, n01)))
    flat = [np.ascontiguousarray(c.reshape(-1)) for c in counts]
    values = neuroneval._core.table_scores(*flat, list(metrics), lam)
    return {m: v.reshape(counts[0].shape) for m, v in zip(metrics, values, strict=True)}


@pytest.mark.parametrize("lam", [1.0, 0.3])
def test_table_scores_match_kernels_on_every_table(lam: float) -> None:
    n = 7
    rng = np.random.default_rng(int(lam * 10))
    tables, got = [], {m: [] for m in TABLE_METRICS}
    for n11 in range(n + 1):
        for n10 in range(n + 1 - n11):
            for n01 in range(n + 1 - n11 - n10):
                nb = n11 + n10
                if nb < 1:
                    continue
                a = np.zeros(n)
                c = np.zeros(n)
                a[:nb] = 1.0
                c[:n11] = 1.0
                c[nb : nb + n01] = 1.0
                order = rng.permutation(n)  # positions should not matter
                a, c = a[order], c[order]
                # n_top = ceil(nb - 0.5) = nb; the cut is 1, so the top set is exactly {a = 1}.
                alpha = (nb - 0.5) / n
                s = neuroneval.compute(a[:, None], c[:, None], TABLE_METRICS, alpha=alpha, lam=lam)
                for m in TABLE_METRICS:
                    got[m].append(s[m][0, 0])
                tables.append((n11, n10, n01))
    assert len(tables) == math.comb(n + 3, 3) - (n + 1)  # all tables but those with n11 + n10 = 0
    t = np.array(tables)
    expected = table_scores(n, t[:, 0], t[:, 1], t[:, 2], TABLE_METRICS, lam=lam)
    assert set(expected) == set(TABLE_METRICS)
    for m in TABLE_METRICS:
        assert expected[m].shape == (len(tables),)
        assert_allclose(expected[m], np.array(got[m]), rtol=1e-12, atol=1e-14, equal_nan=True, err_msg=m)
    # Scalars broadcast the same way.
    one = table_scores(n, 2, 1, 3, TABLE_METRICS, lam=lam)
    row = tables.index((2, 1, 3))
    for m in TABLE_METRICS:
        assert_allclose(one[m], got[m][row], rtol=1e-12, equal_nan=True, err_msg=m)


def test_table_scores_rejects_top_random() -> None:
    for m in TOP_RANDOM:
        with pytest.raises(errors.ParameterError, match=m):
            table_scores(10, 2, 1, 1, [m])


# ---------------------------------------------------------------------------------------------
# The theoretical test
# ---------------------------------------------------------------------------------------------

# SPEC section 4: expected range-normalised delta of a perfect unit, as functions of gamma.
EXPECTED_DELTA = {
    "recall": (lambda g: -0.5, lambda g: 0.0),
    "precision": (lambda g: 0.0, lambda g: -0.5),
    "f1": (lambda g: -1 / 3, lambda g: -1 / 3),
    "iou": (lambda g: -0.5, lambda g: -0.5),
    "accuracy": (lambda g: -g / 2, lambda g: -g),
}


@pytest.mark.parametrize("metric", list(EXPECTED_DELTA))
def test_theoretical_expected_deltas(metric: str) -> None:
    n, seeds = 500_000, 3000
    rng = np.random.default_rng(17)
    for g in sanity.GAMMAS:
        p = math.floor(g * n)
        # At the expected counts (P/2 of P kept; P added) the value is exact.
        orig = table_scores(n, p, 0, 0, [metric])[metric]
        miss = table_scores(n, p / 2, p / 2, 0, [metric])[metric]
        extra = table_scores(n, p, 0, p, [metric])[metric]
        gamma = p / n
        assert_allclose(miss - orig, EXPECTED_DELTA[metric][0](gamma), atol=1e-12)
        assert_allclose(extra - orig, EXPECTED_DELTA[metric][1](gamma), atol=1e-12)
        # Over simulated counts the mean delta agrees to sampling error plus a first-order
        # (Jensen) allowance of 1/P for the ratio metrics.
        kept = rng.binomial(p, 0.5, size=seeds)
        added = rng.binomial(n - p, p / (n - p), size=seeds)
        for which, (n11, n10, n01) in enumerate([(kept, p - kept, 0), (p, 0, added)]):
            d = np.broadcast_to(table_scores(n, n11, n10, n01, [metric])[metric] - orig, (seeds,))
            d = d[np.isfinite(d)]
            assert d.size > 0.9 * seeds
            se = d.std(ddof=1) / math.sqrt(d.size)
            want = EXPECTED_DELTA[metric][which](gamma)
            assert abs(d.mean() - want) < 5 * se + 1 / p + 1e-12, (g, which, d.mean(), want)


PAPER_CHECKED = [
    "recall",
    "precision",
    "f1",
    "iou",
    "accuracy",
    "balanced_accuracy",
    "inverse_balanced_accuracy",
    "auc",
    "inverse_auc",
    "correlation",
    "cosine",
    "mad",
    "auprc",
    "inverse_auprc",
    "wpmi",
]


def test_theoretical_matches_paper_table3() -> None:
    result = sanity.theoretical(PAPER_CHECKED, n=500_000, gammas=sanity.GAMMAS, seeds=1000)
    rec = result.records
    assert sanity.GAMMAS == (0.499, 0.1, 0.01, 0.001, 0.0001)
    for m in PAPER_CHECKED:
        paper = sanity.PAPER_TABLE3[m]
        for pert, idx in (("missing", 1), ("extra", 3)):
            row = rec.filter(pl.col("metric") == m, pl.col("perturbation") == pert, pl.col("gamma").is_null())
            assert row.height == 1
            assert abs(row["decrease_acc"][0] - paper[idx]) <= 1.0, (m, pert, row["decrease_acc"][0], paper[idx])
    table = result.table()
    for m in PAPER_CHECKED:
        row = table.filter(pl.col("metric") == m).row(0, named=True)
        assert abs(row["missing_theoretical"] - sanity.PAPER_TABLE3[m][1]) <= 1.0
        assert row["missing_experimental"] is None and row["extra_experimental"] is None


def test_theoretical_records_layout_and_reproducibility() -> None:
    gammas = [0.3, 0.01, 0.002]
    names = ["accuracy", "wpmi", "correlation_top_random"]
    a = sanity.theoretical(names, n=5000, gammas=gammas, seeds=400, seed=3)
    b = sanity.theoretical(names, n=5000, gammas=gammas, seeds=400, seed=3)
    assert a.records.equals(b.records)
    c = sanity.theoretical(names, n=5000, gammas=gammas, seeds=400, seed=4)
    assert not a.records.equals(c.records)
    rec = a.records
    assert rec.columns == RECORD_COLUMNS
    assert rec.height == len(names) * 2 * (len(gammas) + 1)
    assert set(rec["setting"]) == {"theoretical"} and set(rec["kind"]) == {"theoretical"}
    for m in names:
        for pert in ("missing", "extra"):
            rows = rec.filter(pl.col("metric") == m, pl.col("perturbation") == pert)
            per = rows.filter(pl.col("gamma").is_not_null())
            mean = rows.filter(pl.col("gamma").is_null())
            assert per["gamma"].to_list() == gammas
            assert mean.height == 1
            assert per["units"].to_list() == [400] * len(gammas)
            assert mean["units"][0] == 400 * len(gammas)
            assert_allclose(mean["decrease_acc"][0], per["decrease_acc"].mean(), rtol=1e-12)
            assert mean["nan_deltas"][0] == per["nan_deltas"].sum()
            acc = per["decrease_acc"].to_numpy() / 100
            assert_allclose(per["se"].to_numpy(), 100 * np.sqrt(acc * (1 - acc) / 400), rtol=1e-12, atol=1e-12)
            assert rows["lam"].to_list() == [1.0 if m == "wpmi" else None] * rows.height
            assert rows["alpha"].null_count() == rows.height


def test_theoretical_epsilon_is_strict() -> None:
    # P = 2 labels: recall after missing labels is kept / 2 in {0, 0.5, 1}; with epsilon 0.5 only
    # kept = 0 (delta = -1) counts, probability 1/4. A non-strict rule would give 3/4.
    seeds = 4000
    r = sanity.theoretical(["recall"], n=100, gammas=[0.02], seeds=seeds, epsilon=0.5)
    acc = r.records.filter(pl.col("perturbation") == "missing", pl.col("gamma").is_not_null())["decrease_acc"][0]
    assert abs(acc / 100 - 0.25) < 5 * math.sqrt(0.25 * 0.75 / seeds)


def materialised_theoretical(
    metrics: list[str], n: int, gamma: float, seeds: range, epsilons: list[float], keep: float, rate: float
) -> dict[tuple[str, str, float], float]:
    """Decrease Acc of the theoretical test, by materialising vectors and calling the kernels."""
    p = math.floor(gamma * n)
    a = np.zeros((n, 1))
    a[:p] = 1.0
    c = a[:, 0].copy()
    versions = {
        "original": np.repeat(c[:, None], len(seeds), axis=1),
        "missing": np.stack([sanity.missing_labels(c, keep, s) for s in seeds], axis=1),
        "extra": np.stack([sanity.extra_labels(c, rate, s) for s in seeds], axis=1),
    }
    # The unit is already binary: alpha puts exactly {a = 1} in its top set.
    s = {v: neuroneval.compute(a, cv, metrics, alpha=(p - 0.5) / n) for v, cv in versions.items()}
    out = {}
    for m in metrics:
        rng = value_range(m)
        if rng is None:
            everything = np.concatenate([s[v][m].ravel() for v in s])
            scale = np.nanmax(everything) - np.nanmin(everything)
        else:
            scale = rng[1] - rng[0]
        for v in ("missing", "extra"):
            delta = (s[v][m][0] - s["original"][m][0]) / scale
            for eps in epsilons:
                out[m, v, eps] = 100 * float(np.mean(np.where(np.isnan(delta), False, delta < -eps)))
    return out


@pytest.mark.parametrize("keep, rate", [(0.5, 2.0), (0.3, 3.0)])
def test_theoretical_counts_match_materialised_perturbations(keep: float, rate: float) -> None:
    # One gamma (theoretical's wpmi/mad range spans all gammas), epsilons that put the
    # decrease probability mid-range so that the count laws matter, not just their support.
    n, gamma, ref_seeds, theo_seeds = 2000, 0.05, 600, 20_000
    epsilons = [1e-3, 0.02, 0.25, 0.5]
    ref = materialised_theoretical(TABLE_METRICS, n, gamma, range(ref_seeds), epsilons, keep, rate)
    for eps in epsilons:
        theo = sanity.theoretical(
            TABLE_METRICS, n=n, gammas=[gamma], seeds=theo_seeds, epsilon=eps, seed=1, keep=keep, rate=rate
        )
        rec = theo.records.filter(pl.col("gamma").is_not_null())
        for m, v, acc in rec.select("metric", "perturbation", "decrease_acc").iter_rows():
            if value_range(m) is None and eps > 1e-3:
                continue  # the data range spans every seed of a run: more seeds, wider range
            want = ref[m, v, eps]
            q = max(min((acc + want) / 200, 1 - 1 / ref_seeds), 1 / ref_seeds)
            se = 100 * math.sqrt(q * (1 - q) * (1 / ref_seeds + 1 / theo_seeds))
            assert abs(acc - want) < 5 * se, (m, v, eps, acc, want)


def pearson_or_nan(x: np.ndarray, y: np.ndarray) -> float:
    if np.all(x == x[0]) or np.all(y == y[0]):
        return math.nan
    return float(np.corrcoef(x, y)[0, 1])


@pytest.mark.parametrize("gamma, k", [(0.3, 25), (0.05, 25), (0.01, 25), (0.001, 25), (0.05, 3)])
def test_theoretical_top_random_subsets(gamma: float, k: int) -> None:
    """Real subsets (min(k, P) of the top set without replacement plus k of all n without
    replacement), real perturbations, Pearson with NaN for a constant vector."""
    n, ref_seeds, theo_seeds = 2000, 600, 20_000
    p = math.floor(gamma * n)
    a = np.zeros(n)
    a[:p] = 1.0
    epsilons = [1e-3, 0.05, 0.15, 0.3]
    deltas: dict[str, list[float]] = {"missing": [], "extra": []}
    rng = np.random.default_rng(99)
    for s in range(ref_seeds):
        subset = np.concatenate([rng.choice(np.arange(p), min(k, p), replace=False), rng.choice(n, k, replace=False)])
        orig = pearson_or_nan(a[subset], a[subset])
        for v, cv in (("missing", sanity.missing_labels(a, 0.5, s)), ("extra", sanity.extra_labels(a, 2.0, s))):
            deltas[v].append((pearson_or_nan(a[subset], cv[subset]) - orig) / 2)
    for eps in epsilons:
        theo = sanity.theoretical(["correlation_top_random"], n=n, gammas=[gamma], seeds=theo_seeds, k=k, epsilon=eps)
        rec = theo.records.filter(pl.col("gamma").is_not_null())
        for v in ("missing", "extra"):
            d = np.array(deltas[v])
            want = 100 * np.mean(np.where(np.isnan(d), False, d < -eps))
            acc = rec.filter(pl.col("perturbation") == v)["decrease_acc"][0]
            q = max(min((acc + want) / 200, 1 - 1 / ref_seeds), 1 / ref_seeds)
            se = 100 * math.sqrt(q * (1 - q) * (1 / ref_seeds + 1 / theo_seeds))
            assert abs(acc - want) < 5 * se, (v, eps, acc, want)
    # Both top-random variants take the same subset (spearman of 0/1 vectors is Pearson).
    both = sanity.theoretical(list(TOP_RANDOM), n=n, gammas=[gamma], seeds=500)
    r = both.records.sort("perturbation", "gamma", nulls_last=True)
    corr = r.filter(pl.col("metric") == TOP_RANDOM[0]).drop("metric")
    spear = r.filter(pl.col("metric") == TOP_RANDOM[1]).drop("metric")
    assert corr.equals(spear)


def test_theoretical_errors() -> None:
    with pytest.raises(errors.EmptyInputError):
        sanity.theoretical(["f1"], n=1000, gammas=[])
    for g in (0.0, 1.0, -0.1):
        with pytest.raises(
            errors.ParameterError, match=rf"^invalid parameter gammas = {g}: every gamma must lie in \(0, 1\)$"
        ):
            sanity.theoretical(["f1"], n=1000, gammas=[g])
    # Too few inputs for a gamma: the smallest n that gives it one positive input is named.
    for n, g, need in ((1000, 0.0001, "10,000"), (9_999, 0.0001, "10,000"), (2, 0.3, "4"), (6, 0.1, "10")):
        with pytest.raises(errors.ParameterError, match=rf"^invalid parameter n = {n}: n must be at least {need} for"):
            sanity.theoretical(["f1"], n=n, gammas=[g])
    assert sanity.theoretical(["f1"], n=10_000, gammas=[0.0001], seeds=3).records.height == 4
    assert sanity.theoretical(["f1"], n=4, gammas=[0.3], seeds=3).records.height == 4
    with pytest.raises(errors.UnknownMetricError):
        sanity.theoretical(["nope"], n=100_000)


# ---------------------------------------------------------------------------------------------
# decrease_accuracy and experimental against a slow per-unit loop
# ---------------------------------------------------------------------------------------------


def reference_deltas(
    metric: str,
    a: np.ndarray,
    c: np.ndarray,
    truth: np.ndarray,
    units: np.ndarray,
    *,
    alpha: float,
    lam: float,
    seed: int,
    keep: float = 0.5,
    rate: float = 2.0,
    k: int = 25,
    top_alpha: float = 0.002,
) -> dict[str, list[float]]:
    """Each unit's range-normalised delta per perturbation, one compute call per unit and version."""
    kw: dict[str, Any] = dict(alpha=alpha, lam=lam, k=k, top_alpha=top_alpha, seed=seed)
    versions = {
        "original": c,
        "missing": sanity.missing_labels(c, keep, seed),
        "extra": sanity.extra_labels(c, rate, seed),
    }
    own = {
        v: [float(neuroneval.compute(a, cv, [metric], pairs=[[u, truth[u]]], **kw)[metric][0]) for u in units]
        for v, cv in versions.items()
    }
    rng = value_range(metric)
    if rng is None:
        entries = np.concatenate(
            [neuroneval.compute(a[:, units], cv, [metric], **kw)[metric].ravel() for cv in versions.values()]
        )
        scale = float(np.nanmax(entries) - np.nanmin(entries))
    else:
        scale = rng[1] - rng[0]
    return {
        v: [(after - before) / scale for before, after in zip(own["original"], own[v], strict=True)]
        for v in ("missing", "extra")
    }


def reference_decrease(
    metric: str,
    a: np.ndarray,
    c: np.ndarray,
    truth: np.ndarray,
    units: np.ndarray,
    *,
    epsilon: float = 1e-3,
    **kw: Any,
) -> dict[str, tuple[float, int]]:
    """(Decrease Acc, NaN deltas) per perturbation, from `reference_deltas`."""
    out = {}
    for v, deltas in reference_deltas(metric, a, c, truth, units, **kw).items():
        decreased = nan = 0
        for delta in deltas:
            if math.isnan(delta):
                nan += 1
            elif delta < -epsilon:
                decreased += 1
        out[v] = (100 * decreased / len(units), nan)
    return out


def adversarial_data(
    seed: int, n: int = 240, units: int = 10, concepts: int = 7
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    c = np.empty((n, concepts))
    c[:, 0] = (rng.random(n) < 0.15).astype(float)
    c[:, 1] = rng.random(n)  # soft
    c[:, 2] = np.round(rng.random(n) * (rng.random(n) < 0.3), 1)  # soft, sparse, ties
    c[:, 3] = 0.0  # empty concept: wpmi, mad, precision... undefined
    c[:, 4] = 1.0  # full concept: extra labels leave it, mad undefined
    c[:, 5] = (rng.random(n) < 0.5).astype(float)
    c[:, 6] = np.where(rng.random(n) < 0.1, 0.5, 0.0)  # exactly at the label threshold
    truth = np.array([0, 1, 2, 5, 6, 0, 3, 4, 1, 5])[:units] % concepts
    a = np.empty((n, units))
    for k in range(units):
        t = truth[k]
        a[:, k] = c[:, t] + rng.normal(0, 0.4, n)
    a = np.round(a, 1)  # many ties, including at the top-alpha cut
    a[:, 5] = 0.3  # a constant unit: correlation, cosine... NaN deltas
    a[:, 9] = np.where(rng.random(n) < 0.05, 1.0, 0.0)  # a sparse, SAE-like unit
    return a, c, truth


@pytest.mark.parametrize("alpha, seed, epsilon", [(0.05, 0, 1e-3), (0.2, 7, 0.1), (0.02, 3, 0.03)])
def test_decrease_accuracy_against_slow_loop(alpha: float, seed: int, epsilon: float) -> None:
    # Larger epsilons make the normalising range matter, not just the sign of the change.
    a, c, truth = adversarial_data(seed)
    units = np.arange(a.shape[1])
    saw_nan = False
    for m in METRICS:
        lam = 0.4 if m == "wpmi" else 1.0
        kw: dict[str, Any] = dict(alpha=alpha, lam=lam, seed=seed, k=5, top_alpha=0.05, epsilon=epsilon)
        r = sanity.decrease_accuracy(m, a, c, truth, **kw)
        ref = reference_decrease(m, a, c, truth, units, **kw)
        rec = r.records
        assert rec.columns == RECORD_COLUMNS
        assert rec["perturbation"].to_list() == ["missing", "extra"]
        assert rec["metric"].to_list() == [m, m]
        assert rec["units"].to_list() == [a.shape[1]] * 2
        assert set(rec["kind"]) == {"experimental"}
        assert rec["gamma"].null_count() == 2
        assert rec["alpha"].to_list() == [alpha if neuroneval.METRICS[m].uses_alpha else None] * 2
        assert rec["lam"].to_list() == [lam if m == "wpmi" else None] * 2
        for row in rec.iter_rows(named=True):
            want_acc, want_nan = ref[row["perturbation"]]
            assert row["decrease_acc"] == pytest.approx(want_acc, abs=1e-9), (m, row)
            assert row["nan_deltas"] == want_nan, (m, row)
            saw_nan |= want_nan > 0
    assert saw_nan  # the data does exercise NaN deltas


def test_decrease_accuracy_truth_matrix_and_errors() -> None:
    a, c, truth = adversarial_data(1)
    onehot = np.zeros((a.shape[1], c.shape[1]), dtype=bool)
    onehot[np.arange(a.shape[1]), truth] = True
    by_index = sanity.decrease_accuracy("f1", a, c, truth, alpha=0.1, seed=2)
    by_matrix = sanity.decrease_accuracy("f1", a, c, onehot, alpha=0.1, seed=2)
    assert by_index.records.equals(by_matrix.records)
    with pytest.raises(errors.ShapeError):
        sanity.decrease_accuracy("f1", a[:-1], c, truth)
    with pytest.raises(errors.ShapeError):
        sanity.decrease_accuracy("f1", a, c, truth[:-1])
    with pytest.raises(errors.ShapeError):
        sanity.decrease_accuracy("f1", a, c, np.full(a.shape[1], c.shape[1]))
    with pytest.raises(errors.ConceptRangeError):
        sanity.decrease_accuracy("f1", a, c * 2, truth)
    with pytest.raises(errors.UnknownMetricError):
        sanity.experimental(a, c, truth, ["nope"], alpha=0.1)


def test_decrease_accuracy_unknown_metric() -> None:
    a, c, truth = adversarial_data(1)
    with pytest.raises(errors.UnknownMetricError):
        sanity.decrease_accuracy("nope", a, c, truth)


def first_argmax_iou(a: np.ndarray, c: np.ndarray, alpha: float) -> np.ndarray:
    iou = neuroneval.compute(a, c, ["iou"], alpha=alpha)["iou"]
    out = []
    for k in range(iou.shape[0]):
        best, best_t = -math.inf, 0
        for t in range(iou.shape[1]):
            v = iou[k, t]
            if not math.isnan(v) and v > best:
                best, best_t = v, t
        out.append(best_t)
    return np.array(out)


def experimental_data(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n, t, k = 1500, 6, 40
    c = (rng.random((n, t)) < np.array([0.02, 0.05, 0.1, 0.2, 0.3, 0.01])).astype(float)
    c[:, 2] = c[:, 2] * rng.uniform(0.5, 1.0, n)  # soft labels
    truth = rng.integers(0, t, k)
    a = np.round(c[:, truth] + rng.normal(0, 0.35, (n, k)), 1)
    return a, c, truth


def test_experimental_hidden_units_use_argmax_iou_and_test_units() -> None:
    a, c, _ = experimental_data(3)
    seed = 5
    val, test = split_units(a.shape[1], 0.05, seed)
    # The validation units are constant, so a run on all units would read differently.
    a[:, val] = 0.0
    a[0, val] = 1.0
    truth = first_argmax_iou(a, c, 0.005)
    assert len(set(truth.tolist())) > 2
    names = ["recall", "iou", "correlation", "mad", "wpmi", "correlation_top_random"]
    result = sanity.experimental(a, c, None, names, alpha=0.02, lam=0.7, seed=seed, k=10, setting="hidden")
    rec = result.records
    assert rec["setting"].to_list() == ["hidden"] * rec.height
    assert rec["units"].to_list() == [test.size] * rec.height
    assert [(m, p) for m, p in rec.select("metric", "perturbation").iter_rows()] == [
        (m, p) for m in names for p in ("missing", "extra")
    ]
    differs = False
    for m in names:
        lam = 0.7 if m == "wpmi" else 1.0
        ref = reference_decrease(m, a, c, truth, test, alpha=0.02, lam=lam, seed=seed, k=10)
        full = reference_decrease(m, a, c, truth, np.arange(a.shape[1]), alpha=0.02, lam=lam, seed=seed, k=10)
        differs |= ref != full
        for row in rec.filter(pl.col("metric") == m).iter_rows(named=True):
            assert row["decrease_acc"] == pytest.approx(ref[row["perturbation"]][0], abs=1e-9), (m, row)
            assert row["nan_deltas"] == ref[row["perturbation"]][1], (m, row)
            assert row["alpha"] == (0.02 if neuroneval.METRICS[m].uses_alpha else None)
            assert row["lam"] == (0.7 if m == "wpmi" else None)
    assert differs
    # Giving the argmax truth explicitly changes nothing.
    explicit = sanity.experimental(a, c, truth, names, alpha=0.02, lam=0.7, seed=seed, k=10, setting="hidden")
    assert explicit.records.equals(rec)


def test_experimental_with_alpha_does_not_tune(monkeypatch: pytest.MonkeyPatch) -> None:
    a, c, truth = experimental_data(4)

    def no_tuning(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("tune was called although alpha was given")

    monkeypatch.setattr(sanity, "tune", no_tuning)
    r = sanity.experimental(a, c, truth, ["f1", "wpmi", "cosine"], alpha=0.1, seed=1)
    rec = r.records
    assert rec.filter(pl.col("metric") != "cosine")["alpha"].to_list() == [0.1] * 4
    assert rec.filter(pl.col("metric") == "wpmi")["lam"].to_list() == [1.0, 1.0]  # lam defaults to 1


def test_experimental_tunes_on_validation_units() -> None:
    a, c, truth = experimental_data(6)
    seed = 2
    names = ["recall", "f1", "wpmi", "auprc", "correlation"]
    val, test = split_units(a.shape[1], 0.1, seed)
    result = sanity.experimental(a, c, truth, names, validation=0.1, seed=seed)
    chosen = tune(a[:, val], c, truth[val], names, seed=seed)
    for m in names:
        alpha = chosen[m].alpha or 0.005
        lam = 1.0 if chosen[m].lam is None else chosen[m].lam
        ref = reference_decrease(m, a, c, truth, test, alpha=alpha, lam=lam, seed=seed)
        rows = result.records.filter(pl.col("metric") == m)
        assert rows["alpha"].to_list() == [chosen[m].alpha] * 2
        assert rows["lam"].to_list() == [chosen[m].lam] * 2
        for row in rows.iter_rows(named=True):
            assert row["decrease_acc"] == pytest.approx(ref[row["perturbation"]][0], abs=1e-9), (m, row)
            assert row["nan_deltas"] == ref[row["perturbation"]][1]


# ---------------------------------------------------------------------------------------------
# SanityResult
# ---------------------------------------------------------------------------------------------


def records(rows: list[tuple[str, str, str, str, float | None, float]]) -> sanity.SanityResult:
    """Hand-made records: (setting, kind, metric, perturbation, gamma, decrease_acc)."""
    frame = pl.DataFrame(
        [
            dict(
                setting=s,
                kind=k,
                metric=m,
                perturbation=p,
                gamma=g,
                decrease_acc=v,
                se=None,
                nan_deltas=0,
                units=10,
                alpha=None,
                lam=None,
            )
            for s, k, m, p, g, v in rows
        ],
        schema={
            "setting": pl.String,
            "kind": pl.String,
            "metric": pl.String,
            "perturbation": pl.String,
            "gamma": pl.Float64,
            "decrease_acc": pl.Float64,
            "se": pl.Float64,
            "nan_deltas": pl.Int64,
            "units": pl.Int64,
            "alpha": pl.Float64,
            "lam": pl.Float64,
        },
    )
    return sanity.SanityResult(frame)


def test_table_pass_rule() -> None:
    r = records(
        [
            # f1: every cell >= 90, one exactly 90; a low per-gamma row is not a cell.
            ("x", "experimental", "f1", "missing", None, 90.0),
            ("x", "experimental", "f1", "extra", None, 99.0),
            ("theoretical", "theoretical", "f1", "missing", None, 100.0),
            ("theoretical", "theoretical", "f1", "missing", 0.1, 0.0),
            ("theoretical", "theoretical", "f1", "extra", None, 95.0),
            # iou: one cell just below.
            ("x", "experimental", "iou", "missing", None, 89.99),
            ("x", "experimental", "iou", "extra", None, 100.0),
            ("theoretical", "theoretical", "iou", "missing", None, 100.0),
            ("theoretical", "theoretical", "iou", "extra", None, 100.0),
            # recall: only theoretical cells, both fine -> passes on the present cells.
            ("theoretical", "theoretical", "recall", "missing", None, 100.0),
            ("theoretical", "theoretical", "recall", "extra", None, 91.0),
            # cosine: one present cell below.
            ("x", "experimental", "cosine", "extra", None, 10.0),
        ]
    )
    t = r.table()
    assert t.columns == ["metric", *COLUMNS, "passes"]
    assert t.schema["passes"] == pl.Boolean
    # Rows come in the registry's order.
    assert t["metric"].to_list() == ["recall", "f1", "iou", "cosine"]
    got = {row["metric"]: row for row in t.iter_rows(named=True)}
    assert [got["f1"][c] for c in COLUMNS] == [90.0, 100.0, 99.0, 95.0]
    assert got["f1"]["passes"] is True
    assert got["iou"]["passes"] is False
    assert got["recall"]["passes"] is True
    assert got["recall"]["missing_experimental"] is None and got["recall"]["extra_experimental"] is None
    assert got["cosine"]["passes"] is False
    assert [got["cosine"][c] for c in COLUMNS] == [None, None, 10.0, None]


def test_table_averages_experimental_settings() -> None:
    a1, c1, t1 = experimental_data(7)
    a2, c2, t2 = experimental_data(8)
    names = ["recall", "iou", "accuracy"]
    r1 = sanity.experimental(a1, c1, t1, names, alpha=0.05, seed=1, setting="one")
    r2 = sanity.experimental(a2, c2, t2, names, alpha=0.05, seed=2, setting="two")
    theo = sanity.theoretical(names, n=20_000, seeds=50)
    both = sanity.SanityResult.concat([r1, r2, theo])
    assert both.records.height == r1.records.height + r2.records.height + theo.records.height
    assert set(both.records["setting"]) == {"one", "two", "theoretical"}
    table = both.table()
    for m in names:
        row = table.filter(pl.col("metric") == m).row(0, named=True)
        for pert in ("missing", "extra"):
            values = [
                r.records.filter(pl.col("metric") == m, pl.col("perturbation") == pert)["decrease_acc"][0]
                for r in (r1, r2)
            ]
            assert row[f"{pert}_experimental"] == pytest.approx(sum(values) / 2, abs=1e-12)
            want = theo.records.filter(pl.col("metric") == m, pl.col("perturbation") == pert, pl.col("gamma").is_null())
            assert row[f"{pert}_theoretical"] == want["decrease_acc"][0]
        cells = [row[c] for c in COLUMNS]
        assert row["passes"] == all(v >= 90 for v in cells)
    # The recall row does not pass (extra labels never lower recall).
    assert table.filter(pl.col("metric") == "recall")["passes"][0] is False


def test_markdown_shows_paper_values() -> None:
    r = records(
        [
            ("x", "experimental", "recall", "missing", None, 97.5),
            ("theoretical", "theoretical", "recall", "missing", None, 100.0),
            ("theoretical", "theoretical", "recall", "extra", None, 0.0),
            ("x", "experimental", "f1", "extra", None, 99.0),
        ]
    )
    md = r.to_markdown()
    lines = md.strip().splitlines()
    assert lines[0].startswith("| metric |") and "paper's verdict" in lines[0]
    recall = next(line for line in lines if line.startswith("| recall |"))
    assert "97.50 (98.66)" in recall
    assert "100.00 (100)" in recall
    assert "0.00 (0)" in recall
    assert recall.rstrip().endswith("| fail |")  # the paper's verdict on recall
    f1 = next(line for line in lines if line.startswith("| f1 |"))
    assert "99.00 (99.82)" in f1
    assert "| pass | pass |" in f1
    plain = r.to_markdown(paper=False)
    assert "(" not in plain and "paper" not in plain
    assert str(r) == md


def test_write_creates_files_atomically(tmp_path: Any) -> None:
    r = sanity.theoretical(["recall", "f1", "wpmi"], n=10_000, seeds=50)
    out = tmp_path / "nested" / "run"
    written = r.write(out)
    names = sorted(p.name for p in out.iterdir())
    assert names == ["chart.png", "records.csv", "table.csv", "table.md"]  # no temporary files left
    assert sorted(p.name for p in written) == names
    assert pl.read_csv(out / "table.csv", schema=r.table().schema).equals(r.table())
    assert pl.read_csv(out / "records.csv").height == r.records.height
    assert (out / "table.md").read_text() == r.to_markdown()
    png = (out / "chart.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    image = matplotlib.image.imread(out / "chart.png")
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    # Rewriting replaces the files and still leaves nothing else.
    r.write(out, chart=False)
    assert sorted(p.name for p in out.iterdir()) == names
    other = tmp_path / "nochart"
    r.write(other, chart=False)
    assert sorted(p.name for p in other.iterdir()) == ["records.csv", "table.csv", "table.md"]


# ---------------------------------------------------------------------------------------------
# Bootstrap intervals over units, and ties of the tuned alpha
# ---------------------------------------------------------------------------------------------


def reference_interval(values: np.ndarray, level: float, resamples: int, seed: int) -> np.ndarray:
    """A slow percentile bootstrap: one resample at a time from default_rng([seed, 3]), each
    column's mean over the drawn rows, then the two quantiles by linear interpolation by hand."""
    rng = np.random.default_rng([seed, 3])
    v = values if values.ndim == 2 else values[:, None]
    n = v.shape[0]
    means = []
    for _ in range(resamples):
        rows = rng.integers(0, n, size=n)
        means.append(v[rows].mean(axis=0))
    means_arr = np.array(means)
    out = np.empty((2, v.shape[1]))
    for i, q in enumerate(((1 - level) / 2, (1 + level) / 2)):
        for j in range(v.shape[1]):
            col = sorted(means_arr[:, j])
            pos = q * (resamples - 1)
            lo = math.floor(pos)
            hi = min(lo + 1, resamples - 1)
            out[i, j] = col[lo] + (pos - lo) * (col[hi] - col[lo])
    return out if values.ndim == 2 else out[:, 0]


@pytest.mark.parametrize(
    "n, columns, level, resamples, seed",
    [(1, 1, 0.95, 50, 0), (7, 1, 0.9, 333, 4), (40, 3, 0.95, 200, 1), (25_000, 2, 0.8, 170, 9)],
)
def test_bootstrap_interval_equals_slow_loop(n: int, columns: int, level: float, resamples: int, seed: int) -> None:
    # 25,000 rows resample in batches of 160: the batches draw exactly what one resample at a time draws.
    rng = np.random.default_rng(seed + 100)
    values = np.concatenate([rng.random((n, 1)) < 0.7, rng.normal(size=(n, 2))], axis=1)[:, :columns].astype(float)
    got = sanity.bootstrap_interval(values, level=level, resamples=resamples, seed=seed)
    want = reference_interval(values, level, resamples, seed)
    assert got.shape == (2, columns)
    assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    one = sanity.bootstrap_interval(values[:, 0], level=level, resamples=resamples, seed=seed)
    assert one.shape == (2,)
    assert_allclose(one, want[:, 0], rtol=1e-12, atol=1e-12)  # a column's interval does not depend on the others


def test_bootstrap_interval_properties_and_errors() -> None:
    flags = np.array([1.0] * 30 + [0.0] * 10)
    low, high = sanity.bootstrap_interval(flags, seed=3)
    assert low <= 0.75 <= high and high - low < 0.35
    assert_array_equal(sanity.bootstrap_interval(np.ones(12), seed=1), [1.0, 1.0])
    again = sanity.bootstrap_interval(flags, seed=3)
    assert_array_equal(again, [low, high])
    assert not np.array_equal(sanity.bootstrap_interval(flags, seed=4), again)
    wider = sanity.bootstrap_interval(flags, level=0.99, seed=3)
    assert wider[0] <= low and wider[1] >= high
    with pytest.raises(errors.EmptyInputError):
        sanity.bootstrap_interval(np.empty(0))
    with pytest.raises(errors.NonFiniteError, match="row 2"):
        sanity.bootstrap_interval([1.0, 0.0, np.nan])
    with pytest.raises(errors.ShapeError):
        sanity.bootstrap_interval(np.zeros((2, 2, 2)))
    # bootstrap_interval needs a resample; the experimental tests take 0 for no interval.
    with pytest.raises(
        errors.ParameterError, match="^invalid parameter resamples = 0: resamples must be an integer >= 1$"
    ):
        sanity.bootstrap_interval(flags, resamples=0)


def test_experimental_intervals_resample_the_test_units() -> None:
    a, c, truth = experimental_data(7)
    seed = 3
    names = ["f1", "correlation", "wpmi"]
    _, test = split_units(a.shape[1], 0.2, seed)
    result = sanity.experimental(a, c, truth, names, alpha=0.05, validation=0.2, seed=seed, resamples=300, level=0.9)
    for m in names:
        deltas = reference_deltas(m, a, c, truth, test, alpha=0.05, lam=1.0, seed=seed)
        for row in result.records.filter(metric=m).iter_rows(named=True):
            flags = np.array([not math.isnan(d) and d < -1e-3 for d in deltas[row["perturbation"]]], dtype=float)
            low, high = 100 * reference_interval(flags, 0.9, 300, seed)
            assert row["ci_low"] == pytest.approx(low, abs=1e-9), (m, row)
            assert row["ci_high"] == pytest.approx(high, abs=1e-9), (m, row)
            assert row["ci_low"] <= row["decrease_acc"] <= row["ci_high"]
    # No resampling, no interval; the rest is unchanged.
    plain = sanity.experimental(a, c, truth, names, alpha=0.05, validation=0.2, seed=seed, resamples=0)
    assert plain.records["ci_low"].null_count() == plain.records.height
    assert plain.records.drop("ci_low", "ci_high").equals(result.records.drop("ci_low", "ci_high"))
    # decrease_accuracy counts every unit.
    one = sanity.decrease_accuracy("f1", a, c, truth, alpha=0.05, seed=seed, resamples=300, level=0.9)
    deltas = reference_deltas("f1", a, c, truth, np.arange(a.shape[1]), alpha=0.05, lam=1.0, seed=seed)
    flags = np.array([not math.isnan(d) and d < -1e-3 for d in deltas["missing"]], dtype=float)
    assert one.records["ci_low"][0] == pytest.approx(100 * reference_interval(flags, 0.9, 300, seed)[0], abs=1e-9)
    # Checked before any work: before the split and the tuning (were it not for alpha).
    with pytest.raises(
        errors.ParameterError, match="^invalid parameter resamples = -1: resamples must be an integer >= 0$"
    ):
        sanity.experimental(a, c, truth, names, resamples=-1)


def test_experimental_reports_tied_alphas() -> None:
    a, c, truth = experimental_data(8)
    seed = 4
    names = ["recall", "f1", "wpmi", "correlation"]
    val, _ = split_units(a.shape[1], 0.25, seed)
    result = sanity.experimental(a, c, truth, names, validation=0.25, seed=seed, resamples=0)
    saw_tie = False
    for m in names:
        # Brute force: each alpha's best validation meta-AUPRC (over lambda for wpmi).
        lams = [i / 100 for i in range(101)] if m == "wpmi" else [1.0]
        per_alpha = [
            max(
                neuroneval.meta_auprc(neuroneval.compute(a[:, val], c, [m], alpha=x, lam=lam)[m], truth[val]).value
                for lam in lams
            )
            for x in neuroneval.meta.ALPHA_GRID
        ]
        rows = result.records.filter(metric=m)
        if not neuroneval.METRICS[m].uses_alpha:
            assert rows["tied_alphas"].null_count() == 2
            continue
        best = max(per_alpha)
        ties = sum(v == best for v in per_alpha)
        saw_tie |= ties > 1
        assert rows["tied_alphas"].to_list() == [ties, ties], m
        assert rows["alpha"][0] == neuroneval.meta.ALPHA_GRID[per_alpha.index(best)]
    assert saw_tie  # recall ties on these units
    fixed = sanity.experimental(a, c, truth, names, alpha=0.05, seed=seed, resamples=0)
    assert fixed.records["tied_alphas"].null_count() == fixed.records.height
    theory = sanity.theoretical(["f1"], n=100_000, seeds=5).records
    assert theory.select("ci_low", "ci_high", "tied_alphas").null_count().row(0) == (theory.height,) * 3
