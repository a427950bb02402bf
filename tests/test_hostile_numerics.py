"""Hostile magnitudes: activations that are all subnormal (below 2.2e-308), huge (near 1e308),
or mix both with ordinary values, and concepts whose probabilities are subnormal. Every metric
is defined on such data (Pearson r and cosine are scale-free), so each must come out as it does
on the same data at an ordinary scale, never NaN, 0 or inf from an underflowed or overflowed sum.

References are independent of the library: exact rational arithmetic (`fractions`) for the
sums, so the reference itself can neither underflow nor overflow, and numpy on the data scaled
by an exact power of two into ordinary magnitudes. The scale-invariance property:
metric(a * 2**e, c) equals metric(a, c) (times 2**e for mad) for exponents that drive the values
subnormal or near overflow, through every path (dense and sparse concepts, dense and sparse
units, the pair kernel).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import neuroneval
import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose
from scipy.stats import rankdata

METRICS = list(neuroneval.METRICS)
SCALE_FREE = ["correlation", "cosine", "spearman", "correlation_top_random", "spearman_top_random"]
# Metrics that read the unit only through its order (and the concept through its labels, its
# order or its values): the same for a and a * 2**e, bit for bit.
ORDER_ONLY = [m for m in METRICS if m not in ("correlation", "cosine", "mad", "correlation_top_random")]
TINY = 2.0**-1074  # the smallest subnormal
KW: dict[str, Any] = {"alpha": 0.3, "k": 4, "top_alpha": 0.5, "seed": 3}


# ---------------------------------------------------------------------------------------------
# Exact references.
# ---------------------------------------------------------------------------------------------


def _fractions(x: np.ndarray) -> list[Fraction]:
    return [Fraction(float(v)) for v in x]


def exact_pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson r from exact sums: r^2 = cov^2 / (var_x var_y) as a fraction (scale-free)."""
    fx, fy = _fractions(x), _fractions(y)
    n = len(fx)
    mx, my = sum(fx) / n, sum(fy) / n
    cov = sum((a - mx) * (b - my) for a, b in zip(fx, fy, strict=True))
    vx = sum((a - mx) ** 2 for a in fx)
    vy = sum((b - my) ** 2 for b in fy)
    if vx == 0 or vy == 0:
        return math.nan
    return math.sqrt(float(cov * cov / (vx * vy))) * (1.0 if cov >= 0 else -1.0)


def exact_cosine(x: np.ndarray, y: np.ndarray) -> float:
    fx, fy = _fractions(x), _fractions(y)
    dot = sum(a * b for a, b in zip(fx, fy, strict=True))
    nx, ny = sum(a * a for a in fx), sum(b * b for b in fy)
    if nx == 0 or ny == 0:
        return math.nan
    return math.sqrt(float(dot * dot / (nx * ny))) * (1.0 if dot >= 0 else -1.0)


def exact_mad(x: np.ndarray, c: np.ndarray) -> float:
    y = c >= 0.5
    if y.all() or not y.any():
        return math.nan
    fx = _fractions(x)
    on = [v for v, t in zip(fx, y, strict=True) if t]
    off = [v for v, t in zip(fx, y, strict=True) if not t]
    mad = sum(on) / len(on) - sum(off) / len(off)
    try:
        return float(mad)  # correctly rounded, subnormal or not
    except OverflowError:  # beyond the doubles (means of +-1.7e308): inf is the answer
        return math.inf if mad > 0 else -math.inf


def exact_spearman(x: np.ndarray, y: np.ndarray) -> float:
    return exact_pearson(rankdata(x), rankdata(y))  # ranks read the order only: exact


def close(got: float, want: float, what: str, scale: float = 1.0) -> None:
    """Equal to rounding: within 1e-12 of the data's scale (1 for the metrics in [-1, 1], the
    largest |a| for mad, whose mean difference may cancel), plus two subnormal steps (a
    subnormal result has fewer bits than that)."""
    if math.isnan(want) or math.isinf(want):
        assert got == want or (math.isnan(got) and math.isnan(want)), (what, got, want)
        return
    assert abs(got - want) <= 1e-12 * max(abs(want), scale) + 2 * TINY, (what, got, want)


def _all_paths(a: np.ndarray, c: np.ndarray, metrics: list[str], **kw: Any) -> dict[str, Any]:
    """label -> (scores as (K, T) arrays, the activations and concepts scored), through each
    way the library computes them: dense concepts (a matrix product, dense units), sparse
    concepts (sweeps over their entries; the rows tiled and the concepts padded with zero
    rows, so that the units stay dense), sparse units (scipy.sparse, transformed from their
    entries) and the pair kernel."""
    k_units, t_concepts = a.shape[1], c.shape[1]
    pairs = np.array([(k, t) for k in range(k_units) for t in range(t_concepts)])
    copies = 40
    a_tiled = np.tile(a, (copies + 1, 1))
    c_padded = np.vstack([c, np.zeros((copies * a.shape[0], t_concepts))])
    a_padded = np.vstack([a, np.zeros((copies * a.shape[0], k_units))])
    paired = neuroneval.compute(a, c, metrics, pairs=pairs, **kw)
    return {
        "dense concepts": (neuroneval.compute(a, c, metrics, **kw), a, c),
        "sparse concepts": (neuroneval.compute(a_tiled, sp.csc_matrix(c_padded), metrics, **kw), a_tiled, c_padded),
        "sparse units": (neuroneval.compute(sp.csc_matrix(a_padded), c_padded, metrics, **kw), a_padded, c_padded),
        "pairs": ({m: v.reshape(k_units, t_concepts) for m, v in paired.items()}, a, c),
    }


def check_paths(a: np.ndarray, c: np.ndarray, what: str) -> None:
    """correlation, cosine, spearman and mad of every (unit, concept), every path, exactly."""
    for label, (got, data_a, data_c) in _all_paths(a, c, ["correlation", "cosine", "spearman", "mad"]).items():
        for k in range(a.shape[1]):
            for t in range(c.shape[1]):
                x, y = data_a[:, k], data_c[:, t]
                where = f"{what}, {label}, unit {k}, concept {t}"
                close(got["correlation"][k, t], exact_pearson(x, y), f"correlation of {where}")
                close(got["cosine"][k, t], exact_cosine(x, y), f"cosine of {where}")
                close(got["spearman"][k, t], exact_spearman(x, y), f"spearman of {where}")
                close(got["mad"][k, t], exact_mad(x, y), f"mad of {where}", scale=float(np.abs(x).max()))


def pow2(e: int) -> float:
    """2**e as a float for any e >= -1074 (2.0**e itself underflows to 0 below -1074 only)."""
    return math.ldexp(1.0, e)


# ---------------------------------------------------------------------------------------------
# The data.
# ---------------------------------------------------------------------------------------------

CONCEPTS = np.array(
    [
        [1.0, 0.9, 0.0, 1.0],
        [0.0, 0.2, 0.3, 0.0],
        [1.0, 0.8, 0.0, 1.0],
        [1.0, 0.7, 1.0, 0.0],
        [0.0, 0.1, 0.0, 0.0],
        [0.0, 0.0, 0.6, 1.0],
    ]
)

UNITS = {
    # the issue's example: NaN where the same data times 1e300 gave 0.557
    "subnormal": np.array([[1e-310], [0], [1e-310], [0], [0], [1e-310]]),
    "smallest subnormals": np.array([[TINY], [0], [3 * TINY], [2 * TINY], [0], [TINY]]),
    "subnormal signed": np.array([[-2e-320], [1e-315], [4e-309], [0], [-1e-312], [7e-311]]),
    "tiny normal": np.array([[3e-300], [1e-301], [0], [2e-300], [-5e-301], [1e-299]]),
    "huge": np.array([[1.7e308], [-1.7e308], [1.7e308], [1e308], [0], [-1e308]]),
    "huge positive": np.array([[1e308], [1.5e308], [1.7976931348623157e308], [1e308], [1.2e308], [1.1e308]]),
    "1e300": np.array([[1e300], [0], [1e300], [0], [0], [1e300]]),
    "huge and subnormal": np.array([[1e300], [1e-310], [0], [-3e299], [5e-324], [2e300]]),
    "ordinary and subnormal": np.array([[0.5], [1e-310], [0], [-0.25], [5e-324], [1.0]]),
    "constant subnormal": np.array([[1e-310]] * 6),
    "constant huge": np.array([[1e308]] * 6),
}


@pytest.mark.parametrize("unit", list(UNITS))
def test_extreme_units_match_exact_arithmetic(unit: str) -> None:
    check_paths(UNITS[unit], CONCEPTS, unit)


def test_the_issue_example() -> None:
    a = UNITS["subnormal"]
    c = np.array([[1.0], [0.0], [0.0], [1.0], [0.0], [1.0]])
    got = neuroneval.compute(a, c, ["correlation", "cosine"])
    ordinary = neuroneval.compute(a * 1e300, c, ["correlation", "cosine"])
    for m in got:
        assert np.isfinite(got[m]).all(), m
        assert_allclose(got[m], ordinary[m], rtol=1e-12, err_msg=m)
    assert_allclose(got["correlation"], [[exact_pearson(a[:, 0], c[:, 0])]], rtol=1e-12)


SUBNORMAL_CONCEPTS = {
    "all subnormal": np.array([[1e-310], [0], [3e-310], [0], [TINY], [2e-309]]),
    "smallest": np.array([[TINY], [0], [TINY], [2 * TINY], [0], [0]]),
    "tiny normal": np.array([[1e-300], [0], [4e-301], [0], [1e-302], [0]]),
    "one and subnormal": np.array([[1.0], [1e-310], [0], [0.0], [5e-324], [0.75]]),
}
ORDINARY_UNITS = np.array(
    [[0.9, -2.0], [0.8, 0.0], [0.7, 3.0], [0.1, 0.0], [0.2, 1.5], [0.05, -0.5]],
)


@pytest.mark.parametrize("concept", list(SUBNORMAL_CONCEPTS))
@pytest.mark.parametrize("units", ["ordinary", "subnormal", "huge"])
def test_subnormal_concepts_match_exact_arithmetic(concept: str, units: str) -> None:
    a = {"ordinary": ORDINARY_UNITS, "subnormal": UNITS["subnormal signed"], "huge": UNITS["huge"]}[units]
    check_paths(a, SUBNORMAL_CONCEPTS[concept], f"{units} units, {concept} concept")


def test_wpmi_of_a_subnormal_concept() -> None:
    # wpmi reads log(mean c): a subnormal mean is a number like any other
    c = SUBNORMAL_CONCEPTS["all subnormal"]
    a = ORDINARY_UNITS[:, :1]
    got = neuroneval.compute(a, c, ["wpmi"], alpha=0.5, lam=0.7)["wpmi"][0, 0]
    top = a[:, 0] >= np.sort(a[:, 0])[-3]
    mean_c = float(sum(_fractions(c[:, 0])) / len(c))
    want = np.mean(np.log(np.maximum(c[top, 0], 1e-8))) - 0.7 * math.log(mean_c)
    assert math.isfinite(got)
    assert abs(got - want) <= 1e-12 * abs(want), (got, want)


# ---------------------------------------------------------------------------------------------
# Scale invariance: metric(a * 2**e, c) = metric(a, c), every path.
# ---------------------------------------------------------------------------------------------

RNG = np.random.default_rng(7)
N = 300
# Integer-valued activations (below 2^10): a * 2**e is exact for every e >= -1074, subnormal or not.
INT_UNITS = RNG.integers(-1000, 1000, size=(N, 5)).astype(np.float64)
INT_UNITS[:, 1] = np.abs(INT_UNITS[:, 1])
INT_UNITS[RNG.random(N) < 0.7, 2] = 0.0  # mostly zero: the sparse-unit transform
INT_UNITS[:, 3] = np.round(INT_UNITS[:, 3] / 250)  # heavy ties
SOFT = np.round(RNG.random((N, 6)) * 16) / 16 * (RNG.random((N, 6)) < 0.4)
SOFT[:, 0] = RNG.random(N) < 0.3  # binary

# Exponents that drive |a| to the smallest subnormals, through the normal range, to 2^1010.
EXPONENTS = [
    -1074 + 10,
    -1070,
    -1060,
    -1050,
    -1040,
    -1030,
    -1023,
    -1000,
    -700,
    -501,
    -499,
    -200,
    0,
    300,
    499,
    501,
    700,
    900,
    1000,
    1010,
]


def _scores(paths: dict[str, Any]) -> dict[str, dict[str, np.ndarray]]:
    return {label: got for label, (got, _, _) in paths.items()}


@pytest.fixture(scope="module")
def unscaled() -> dict[str, dict[str, np.ndarray]]:
    return _scores(_all_paths(INT_UNITS, SOFT, METRICS, **KW))


@pytest.mark.parametrize("e", EXPONENTS)
def test_scaling_the_units_by_a_power_of_two_changes_nothing(
    e: int, unscaled: dict[str, dict[str, np.ndarray]]
) -> None:
    scaled = INT_UNITS * pow2(e)
    assert np.array_equal(np.ldexp(scaled, -e), INT_UNITS)  # the scaling is exact
    got = _scores(_all_paths(scaled, SOFT, METRICS, **KW))
    for label, base in unscaled.items():
        for m in SCALE_FREE:
            assert_allclose(got[label][m], base[m], rtol=1e-12, atol=0, equal_nan=True, err_msg=f"{m}, {label}, 2^{e}")
        for m in ORDER_ONLY:
            assert np.array_equal(got[label][m], base[m], equal_nan=True), (m, label, e)
        # mad is data-valued: it scales with the data (exactly, unless it is subnormal)
        want = np.ldexp(base["mad"], e)
        defined = ~np.isnan(want)
        assert np.array_equal(defined, ~np.isnan(got[label]["mad"])), (label, e)
        err = np.abs(got[label]["mad"][defined] - want[defined])
        assert np.all(err <= 1e-12 * np.abs(want[defined]) + 2 * TINY), (label, e, err.max())


@pytest.mark.parametrize("e", [-1, -10, -200, -499, -501, -900, -1022, -1030, -1050, -1066])
def test_scaling_the_concepts_by_a_power_of_two_keeps_the_scale_free_metrics(e: int) -> None:
    # c * 2**e stays a probability (e <= 0); sixteenths scale exactly down to 2^-1070
    c = SOFT * pow2(e)
    assert np.array_equal(np.ldexp(c, -e), SOFT)
    base = _scores(_all_paths(INT_UNITS, SOFT, SCALE_FREE, **KW))
    got = _scores(_all_paths(INT_UNITS, c, SCALE_FREE, **KW))
    for label, scores in base.items():
        for m in SCALE_FREE:
            assert_allclose(
                got[label][m], scores[m], rtol=1e-12, atol=0, equal_nan=True, err_msg=f"{m}, {label}, 2^{e}"
            )


def test_random_extreme_data_against_numpy_on_rescaled_data() -> None:
    # numpy computes on ordinary magnitudes: the data divided by the power of two, exactly
    rng = np.random.default_rng(11)
    n = 2000
    base = rng.integers(-(2**20), 2**20, size=(n, 4)).astype(np.float64)
    c = np.round(rng.random((n, 3)) * 64) / 64
    want_r = np.corrcoef(base.T, c.T)[:4, 4:]
    want_cos = (base.T @ c) / np.outer(np.linalg.norm(base, axis=0), np.linalg.norm(c, axis=0))
    for e in (-1050, -1040, -600, 600, 980):
        a = base * pow2(e)
        assert np.array_equal(np.ldexp(a, -e), base)  # 21 bits survive even at 2^-1050
        got = neuroneval.compute(a, c, ["correlation", "cosine"])
        assert_allclose(got["correlation"], want_r, rtol=1e-10, err_msg=f"2^{e}")
        assert_allclose(got["cosine"], want_cos, rtol=1e-10, err_msg=f"2^{e}")


def test_ordinary_data_keep_their_bits() -> None:
    # The rescaling happens only for magnitudes outside 2^-500 .. 2^500: ordinary data take
    # the computation they always took, so doubling them doubles every intermediate exactly.
    a = RNG.normal(size=(N, 4))
    one = neuroneval.compute(a, SOFT, METRICS, **KW)
    for e in (-400, -1, 1, 400):
        other = neuroneval.compute(a * pow2(e), SOFT, METRICS, **KW)
        for m in METRICS:
            want = np.ldexp(one[m], e) if m == "mad" else one[m]
            assert np.array_equal(other[m], want, equal_nan=True), (m, e)
