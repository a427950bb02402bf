"""The statistics of `compare`: named seeds, bootstrap resamples over units, the percentile
interval of a mean, the paired interval of a mean difference (the same units under two
explainers) and the unpaired one (two sets of units, e.g. neurons and SAE latents), win and
tie rates."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from .._coerce import check_integer, check_seed
from ..errors import ParameterError, ShapeError
from ..options import LEVEL, SCORE_OPTIONS, Option, Options

__all__ = [
    "BOOTSTRAP_OPTIONS",
    "Difference",
    "Interval",
    "bootstrap_mean",
    "paired_difference",
    "resample_indices",
    "stream_seed",
    "unpaired_difference",
]

Array = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
#: Resampled values per bootstrap block (32 MiB of float64).
BLOCK = 1 << 22

#: The bootstrap's options: resamples, the intervals' level, the seed of every draw.
BOOTSTRAP_OPTIONS = Options(
    Option("n_boot", "integer", 1000, "bootstrap resamples per interval; 0 makes no intervals", low=0, metavar="B"),
    replace(LEVEL, name="confidence", flag="", help="the intervals' level", metavar="LEVEL"),
    SCORE_OPTIONS["seed"],
)


@dataclass(frozen=True)
class Interval:
    """A mean over `n` values with its percentile bootstrap interval [low, high] (NaN with
    fewer than two values or no resamples) and the median."""

    n: int
    mean: float
    median: float
    low: float
    high: float


@dataclass(frozen=True)
class Difference:
    """A paired comparison of A and B over `n` units: the mean of A - B with its paired
    percentile bootstrap interval, the share of units where A > B (ties counted half) and the
    share of ties (A == B exactly)."""

    n: int
    mean_difference: float
    low: float
    high: float
    win_rate: float
    tie_rate: float


def stream_seed(seed: int, *names: str) -> int:
    """The seed of one named random draw: `seed` and a hash of `names`, so that each draw has a
    stream of its own, independent of the order and number of the others.

    `compare` draws the reference explanations from ``stream_seed(seed, "reference")``, the
    derangement from ``stream_seed(seed, "derangement")``, unit k's permutation from
    ``stream_seed(seed, "shuffled", str(k))``, explainer E's interval of metric m from
    ``stream_seed(seed, "mean", E, m)`` and the interval of A - B from
    ``stream_seed(seed, "difference", A, B, m)``.

    Examples
    --------
    >>> stream_seed(0, "mean", "llm", "correlation") == stream_seed(0, "mean", "llm", "correlation")
    True
    >>> stream_seed(0, "mean", "llm", "auprc") == stream_seed(1, "mean", "llm", "auprc")
    False
    """
    seed = check_seed(seed)
    digest = hashlib.blake2b("\x1f".join(names).encode("utf-8"), digest_size=8).digest()
    mixed = np.random.SeedSequence([seed, int.from_bytes(digest, "little")]).generate_state(2, dtype=np.uint32)
    return int(mixed[0]) | (int(mixed[1]) << 32)


def resample_indices(n: int, n_boot: int, seed: int) -> IntArray:
    """The `n_boot` resamples (rows, each `n` indices drawn with replacement from 0..n-1) that
    `bootstrap_mean` and `paired_difference` draw for `seed` (they draw them a block of rows at a
    time, from the same stream): exposed so that a slow reference can use the same resamples.

    Examples
    --------
    >>> resample_indices(4, 2, seed=0).shape
    (2, 4)
    """
    n = check_integer(n, "n", minimum=1)
    n_boot = BOOTSTRAP_OPTIONS["n_boot"].check(n_boot)
    return np.random.default_rng(check_seed(seed)).integers(0, n, size=(n_boot, n))


def _boot_means(values: Array, n_boot: int, seed: int) -> Array:
    """The mean of `values` in each resample of `resample_indices(values.size, n_boot, seed)`."""
    n = values.size
    rng = np.random.default_rng(seed)
    out = np.empty(n_boot)
    rows = max(1, BLOCK // n)
    for start in range(0, n_boot, rows):
        stop = min(n_boot, start + rows)
        out[start:stop] = values[rng.integers(0, n, size=(stop - start, n))].mean(axis=1)
    return out


def _percentile(values: Array, n_boot: int, confidence: float, seed: int) -> tuple[float, float]:
    if values.size < 2 or n_boot == 0:
        return math.nan, math.nan
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(_boot_means(values, n_boot, seed), [tail, 1.0 - tail])
    return float(low), float(high)


def check_boot(n_boot: Any, confidence: Any, seed: Any) -> tuple[int, float, int]:
    """`BOOTSTRAP_OPTIONS`' values (None: the declared default), each checked."""
    values = BOOTSTRAP_OPTIONS.resolve(n_boot=n_boot, confidence=confidence, seed=seed)
    return values["n_boot"], values["confidence"], values["seed"]


def _values(x: Any, name: str) -> Array:
    try:
        v = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ParameterError(f"{name} must be a 1-D array of numbers: {e}") from e
    if v.ndim != 1:
        raise ShapeError(f"{name} must be 1-D (one value per unit); got shape {v.shape}")
    return v


def bootstrap_mean(
    values: Any, *, n_boot: int | None = None, confidence: float | None = None, seed: int | None = None
) -> Interval:
    """The mean and median of the finite `values` (NaN left out) and a percentile bootstrap
    interval of the mean: the (1 - confidence) / 2 and (1 + confidence) / 2 quantiles (numpy's
    linear interpolation) of the means of `n_boot` resamples (`resample_indices`). The options
    are `BOOTSTRAP_OPTIONS` (None: the declared default).

    Examples
    --------
    >>> r = bootstrap_mean([0.1, 0.2, float("nan"), 0.6], n_boot=500, seed=1)
    >>> r.n, round(r.mean, 3), r.low <= r.mean <= r.high
    (3, 0.3, True)
    """
    n_boot, confidence, seed = check_boot(n_boot, confidence, seed)
    v = _values(values, "values")
    v = v[np.isfinite(v)]
    if v.size == 0:
        return Interval(0, math.nan, math.nan, math.nan, math.nan)
    low, high = _percentile(v, n_boot, confidence, seed)
    return Interval(int(v.size), float(v.mean()), float(np.median(v)), low, high)


def paired_difference(
    a: Any, b: Any, *, n_boot: int | None = None, confidence: float | None = None, seed: int | None = None
) -> Difference:
    """A - B over the units where both are finite: the mean difference with a *paired* percentile
    bootstrap interval (each resample draws units, `resample_indices`, and takes both A's and
    B's values of the same units: the bootstrap of the per-unit differences), the win rate
    (share of units with A > B, ties counted half) and the tie rate (A == B exactly). The
    options are `BOOTSTRAP_OPTIONS`.

    Examples
    --------
    >>> d = paired_difference([0.5, 0.4, 0.3, 0.2], [0.4, 0.4, 0.1, 0.3], n_boot=500)
    >>> d.n, round(d.mean_difference, 3), d.win_rate, d.tie_rate
    (4, 0.05, 0.625, 0.25)
    """
    n_boot, confidence, seed = check_boot(n_boot, confidence, seed)
    x, y = _values(a, "a"), _values(b, "b")
    if x.shape != y.shape:
        raise ShapeError(f"a and b must hold one value per unit each; got {x.size} and {y.size} values")
    both = np.isfinite(x) & np.isfinite(y)
    x, y = x[both], y[both]
    if x.size == 0:
        return Difference(0, math.nan, math.nan, math.nan, math.nan, math.nan)
    d = x - y
    low, high = _percentile(d, n_boot, confidence, seed)
    ties = float(np.mean(x == y))
    return Difference(int(d.size), float(d.mean()), low, high, float(np.mean(x > y)) + ties / 2, ties)


def unpaired_difference(
    a: Any, b: Any, *, n_boot: int | None = None, confidence: float | None = None, seed: int | None = None
) -> Difference:
    """mean(A) - mean(B) for two *different* sets of units (e.g. a model's neurons and an SAE's
    latents under one explainer), finite values only: a percentile bootstrap interval that
    resamples each set independently (A's resamples from `seed`, B's from
    ``stream_seed(seed, "unpaired", "b")``), the probability of superiority P(A > B) of a
    random unit of each (ties counted half) as the win rate, and P(A == B) as the tie rate.
    `n` is the smaller set's size. The options are `BOOTSTRAP_OPTIONS`.

    Examples
    --------
    >>> d = unpaired_difference([0.5, 0.4, 0.3], [0.4, 0.1], n_boot=500)
    >>> round(d.mean_difference, 3), round(d.win_rate, 3), round(d.tie_rate, 3)
    (0.15, 0.75, 0.167)
    """
    n_boot, confidence, seed = check_boot(n_boot, confidence, seed)
    x, y = _values(a, "a"), _values(b, "b")
    x, y = x[np.isfinite(x)], y[np.isfinite(y)]
    if x.size == 0 or y.size == 0:
        return Difference(min(x.size, y.size), math.nan, math.nan, math.nan, math.nan, math.nan)
    if x.size < 2 or y.size < 2 or n_boot == 0:
        low = high = math.nan
    else:
        diffs = _boot_means(x, n_boot, seed) - _boot_means(y, n_boot, stream_seed(seed, "unpaired", "b"))
        tail = (1.0 - confidence) / 2.0
        low, high = (float(q) for q in np.quantile(diffs, [tail, 1.0 - tail]))
    sorted_y = np.sort(y)
    below = np.searchsorted(sorted_y, x, side="left")
    equal = np.searchsorted(sorted_y, x, side="right") - below
    pairs = float(x.size) * float(y.size)
    ties = float(equal.sum()) / pairs
    win = float(below.sum()) / pairs + ties / 2
    return Difference(int(min(x.size, y.size)), float(x.mean() - y.mean()), low, high, win, ties)
