"""Thread count and fork safety: SPEC section 1 asks for bit-identical results whatever the
thread count; the pool reads NEURONEVAL_NUM_THREADS at each call and is rebuilt after a fork."""

from __future__ import annotations

import multiprocessing as mp
import queue
import sys
from typing import Any

import neuroneval
import numpy as np
import pytest

KW: dict[str, Any] = {"alpha": 0.01, "lam": 0.7, "k": 9, "top_alpha": 0.02, "seed": 1234}


def _units(n: int, k_units: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(n, k_units))
    a[:, ::7] = rng.integers(0, 3, (n, a[:, ::7].shape[1]))  # heavy ties
    sae = a[:, 1::5]
    sae[rng.random(sae.shape) < 0.97] = 0.0  # mostly zero: top-alpha cut inside the zeros
    a[:, 1::5] = sae
    a[:, 2] = 0.0
    return a


def _concepts(n: int, t_concepts: int, density: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    mask = rng.random((n, t_concepts)) < density
    c = np.where(mask, rng.choice([0.3, 0.5, 1.0], (n, t_concepts)), 0.0)
    c[:, 0] = 0.0
    return c


N = 600
UNITS = _units(N, 300, 0)
SPARSE = _concepts(N, 30, 0.01, 1)
DENSE = _concepts(N, 30, 0.3, 2)


def _same(x: dict[str, np.ndarray], y: dict[str, np.ndarray]) -> None:
    assert list(x) == list(y)
    for m in x:
        assert x[m].shape == y[m].shape, m
        assert np.array_equal(x[m], y[m], equal_nan=True), (m, np.argwhere(~((x[m] == y[m]) | np.isnan(x[m])))[:5])


@pytest.mark.parametrize("concepts", ["sparse", "dense"])
def test_bit_identical_across_thread_counts(concepts: str, monkeypatch: pytest.MonkeyPatch) -> None:
    c = SPARSE if concepts == "sparse" else DENSE
    pairs = np.column_stack([np.arange(300) % 300, (np.arange(300) * 7) % c.shape[1]])
    results = []
    for threads in ("1", "2", "3", "1"):
        monkeypatch.setenv("NEURONEVAL_NUM_THREADS", threads)
        assert neuroneval.num_threads() == int(threads)
        results.append(
            (
                neuroneval.compute(UNITS, c, **KW),
                neuroneval.compute(UNITS, c, pairs=pairs, **KW),
                neuroneval.compute(UNITS.astype(np.float32), c, ["correlation", "spearman", "auprc"], **KW),
            )
        )
    for other in results[1:]:
        for x, y in zip(results[0], other, strict=True):
            _same(x, y)
    # The sampled metrics are there and mostly defined (sparse concepts are often constant
    # on an 18-input subset, hence NaN).
    full = results[0][0]
    for m in ("correlation_top_random", "spearman_top_random"):
        assert np.isfinite(full[m]).mean() > (0.5 if concepts == "dense" else 0.05), m


def test_rank_statistic_columns_identical_across_thread_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    y = (rng.random((2000, 64)) < 0.2).astype(np.float64)
    s = rng.integers(0, 10, (2000, 64)).astype(np.float64)
    out = []
    for threads in ("1", "2"):
        monkeypatch.setenv("NEURONEVAL_NUM_THREADS", threads)
        out.append(
            (
                neuroneval.metrics.roc_auc_score_columns(y, s),
                neuroneval.metrics.average_precision_score_columns(y, s),
            )
        )
    for a, b in zip(out[0], out[1], strict=True):
        assert np.array_equal(a, b, equal_nan=True)


def _child(q: Any) -> None:
    try:
        q.put(("ok", neuroneval.compute(UNITS[:, :60], DENSE, **KW)))
    except BaseException as err:  # report anything, never hang the parent
        q.put(("error", repr(err)))


@pytest.mark.skipif(sys.platform == "win32" or "fork" not in mp.get_all_start_methods(), reason="needs fork")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # "use of fork() may lead to deadlocks"
def test_forked_child_after_parent_used_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURONEVAL_NUM_THREADS", "2")
    expected = neuroneval.compute(UNITS[:, :60], DENSE, **KW)  # the parent's pool is now running
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    proc = ctx.Process(target=_child, args=(q,))
    proc.start()
    try:
        status, value = q.get(timeout=60)
    except queue.Empty:
        proc.kill()
        proc.join(5)
        pytest.fail("the forked child did not finish within 60 s (deadlocked thread pool?)")
    proc.join(30)
    assert not proc.is_alive()
    assert proc.exitcode == 0
    assert status == "ok", value
    _same(value, expected)
    # The parent's pool still works after the fork.
    _same(neuroneval.compute(UNITS[:, :60], DENSE, **KW), expected)
