"""Thread count and fork safety: SPEC section 1 asks for bit-identical results whatever the
thread count; the pool reads NEURONEVAL_NUM_THREADS at each call (capped at the CPU count, with
a RuntimeWarning) and is rebuilt after a fork. Results do not depend on how the units are split
into blocks either (a call with few units splits them finely, to use every thread)."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import queue
import subprocess
import sys
import textwrap
import warnings
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


def _cpus(monkeypatch: pytest.MonkeyPatch) -> int:
    """The pool's cap: the threads a call uses when NEURONEVAL_NUM_THREADS is unset."""
    monkeypatch.delenv("NEURONEVAL_NUM_THREADS", raising=False)
    return neuroneval.num_threads()


@pytest.mark.parametrize("concepts", ["sparse", "dense"])
def test_bit_identical_across_thread_counts(concepts: str, monkeypatch: pytest.MonkeyPatch) -> None:
    c = SPARSE if concepts == "sparse" else DENSE
    pairs = np.column_stack([np.arange(300) % 300, (np.arange(300) * 7) % c.shape[1]])
    cpus = _cpus(monkeypatch)
    results = []
    for threads in ("1", "2", "3", "1"):
        monkeypatch.setenv("NEURONEVAL_NUM_THREADS", threads)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # 3 > the CPUs of a 2-CPU machine
            assert neuroneval.num_threads() == min(int(threads), cpus)
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


# ---------------------------------------------------------------------------------------------
# The thread count is capped at the CPU count; blocks do not change results.
# ---------------------------------------------------------------------------------------------

_CAPPED_CHILD = textwrap.dedent(
    """
    import json, os, warnings
    import numpy as np
    import neuroneval

    rng = np.random.default_rng(0)
    a, c = rng.normal(size=(40, 3)), (rng.random((40, 2)) < 0.5).astype(float)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # count every warning the library issues
        first = neuroneval.compute(a, c, ["correlation", "auprc"], alpha=0.1)
        again = neuroneval.compute(a, c, ["correlation", "auprc"], alpha=0.1)
        threads = neuroneval.num_threads()
        os.environ["NEURONEVAL_NUM_THREADS"] = "100001"  # another value warns once more
        neuroneval.compute(a, c, ["correlation"])
        neuroneval.num_threads()
    print(json.dumps({
        "threads": threads,
        "warnings": [(w.category.__name__, str(w.message)) for w in caught],
        "same": all(np.array_equal(first[m], again[m], equal_nan=True) for m in first),
    }))
    """
)


def test_huge_thread_count_is_capped_at_the_cpu_count(monkeypatch: pytest.MonkeyPatch) -> None:
    # NEURONEVAL_NUM_THREADS=100000 (what `--threads 100000` sets) once started 100,000
    # threads: minutes on a 40 x 3 input. It runs on the CPUs there are, and says so once.
    cpus = _cpus(monkeypatch)
    assert 1 <= cpus <= (os.cpu_count() or cpus)
    env = {**os.environ, "NEURONEVAL_NUM_THREADS": "100000"}
    done = subprocess.run(
        [sys.executable, "-c", _CAPPED_CHILD], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["threads"] == cpus
    assert report["same"]
    expected = [
        f"NEURONEVAL_NUM_THREADS={n} exceeds the {cpus} CPUs of this machine; using {cpus}" for n in (100000, 100001)
    ]
    assert report["warnings"] == [["RuntimeWarning", message] for message in expected]


def test_capped_count_warns_once_per_value(monkeypatch: pytest.MonkeyPatch) -> None:
    cpus = _cpus(monkeypatch)
    monkeypatch.setenv("NEURONEVAL_NUM_THREADS", str(cpus + 7919))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        counts = [neuroneval.num_threads() for _ in range(3)]
        neuroneval.compute(UNITS[:, :3], DENSE, ["correlation"])
    assert counts == [cpus] * 3
    assert [type(w.message) for w in caught] == [RuntimeWarning]
    assert f"NEURONEVAL_NUM_THREADS={cpus + 7919} exceeds" in str(caught[0].message)


def test_count_beyond_64_bits_is_capped_too(monkeypatch: pytest.MonkeyPatch) -> None:
    cpus = _cpus(monkeypatch)
    monkeypatch.setenv("NEURONEVAL_NUM_THREADS", " 99999999999999999999999 ")
    with pytest.warns(RuntimeWarning, match=r"NEURONEVAL_NUM_THREADS=99999999999999999999999 exceeds"):
        assert neuroneval.num_threads() == cpus


@pytest.mark.parametrize("bad", ["0", "-2", "many", "2.5", "", "-99999999999999999999999"])
def test_bad_thread_count_is_a_parameter_error(bad: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURONEVAL_NUM_THREADS", bad)
    for call in (neuroneval.num_threads, lambda: neuroneval.compute(UNITS[:, :3], DENSE, ["correlation"])):
        with pytest.raises(neuroneval.errors.ParameterError, match="NEURONEVAL_NUM_THREADS") as info:
            call()
        assert isinstance(info.value, ValueError)


# Metrics that are functions of one (unit, concept) pair: the top-random ones seed each unit's
# draw by its index, so a slice of the units draws differently (evaluate passes first_unit).
PAIR_METRICS = [m for m in neuroneval.METRICS if not neuroneval.METRICS[m].uses_sampling]


@pytest.mark.parametrize("n_concepts", [1, 5, 9, 50, 70, 300])
@pytest.mark.parametrize("density", [0.01, 0.4])
def test_results_do_not_depend_on_the_block_split(
    n_concepts: int, density: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A call with few units cuts them into small blocks (about two per thread), so the same
    # unit is scored in blocks of 1 to 32 units depending on the call. Dense concepts take a
    # matrix product whose kernel gemm picks by shape: every shape must give the same bits.
    n = 700
    units = _units(n, 37, 3)
    concepts = _concepts(n, n_concepts, density, 4)
    concepts[:, 0] = concepts[:, -1]  # column 0 is empty in _concepts; keep it defined
    whole = neuroneval.compute(units, concepts, PAIR_METRICS, alpha=0.05)
    for threads in ("1", "2"):
        monkeypatch.setenv("NEURONEVAL_NUM_THREADS", threads)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a 1-CPU machine caps 2
            for start, stop in [(0, 1), (5, 6), (0, 2), (3, 8), (10, 17), (0, 33), (36, 37), (1, 37)]:
                part = neuroneval.compute(units[:, start:stop], concepts, PAIR_METRICS, alpha=0.05)
                _same(part, {m: v[start:stop] for m, v in whole.items()})


@pytest.mark.parametrize(("env", "expected"), [(None, "1000"), ("7", "7")])
def test_the_allocator_keeps_freed_pages_a_second_unless_told_otherwise(env: str | None, expected: str) -> None:
    """The extension sets mimalloc's purge delay to 1000 ms (freed buffers come back to the next
    block without the kernel zeroing them again), unless MIMALLOC_PURGE_DELAY says otherwise:
    mimalloc's own listing of its options (MIMALLOC_VERBOSE) names the option and its value."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("MIMALLOC_")}
    child_env["MIMALLOC_VERBOSE"] = "1"
    if env is not None:
        child_env["MIMALLOC_PURGE_DELAY"] = env
    code = "import numpy as np, neuroneval; neuroneval.compute(np.arange(8.0)[:, None], np.eye(8)[:, :2], ['auc'])"
    done = subprocess.run([sys.executable, "-c", code], env=child_env, capture_output=True, text=True, check=True)
    listed = [line.strip() for line in done.stderr.splitlines() if "'purge_delay'" in line]
    assert listed and all(line == f"option 'purge_delay': {expected}" for line in listed), done.stderr[-2000:]
