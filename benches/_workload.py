"""The workload, the peers and the timing helpers shared by the bench_*.py suites and foundation.py.

The workload is the one of the foundation issue: N inputs, K dense float32 units (standard
normal), T binary float32 concepts with 1% positives, alpha = 0.005. Everything is seeded.
The pytest suites use `SMALL` unless NEURONEVAL_BENCH_FULL=1 selects `FULL`; foundation.py
always runs `FULL` (or `SMALL` with --quick).

Ratios are always neuroneval's throughput over the peer's throughput (peer seconds per pair
over our seconds per pair): above 1 means neuroneval is faster.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
SCORE_CHILD = HERE / "_score_child.py"

RANK_METRICS = ("auc", "inverse_auc", "auprc", "inverse_auprc")
PRODUCT_METRICS = ("correlation", "cosine", "mad", "spearman")

# metric -> (name of the scikit-learn function, True when the unit's top-alpha set is the label)
RANK_PEERS: dict[str, tuple[str, bool]] = {
    "auc": ("roc_auc_score", True),
    "inverse_auc": ("roc_auc_score", False),
    "auprc": ("average_precision_score", True),
    "inverse_auprc": ("average_precision_score", False),
}


@dataclass(frozen=True)
class Size:
    name: str
    n: int  # inputs
    k: int  # units
    t: int  # concepts
    peer_pairs: int  # pairs the scikit-learn peer scores
    rounds: int  # timed rounds of each measurement (pytest suites)
    alpha: float = 0.005
    positive_rate: float = 0.01
    seed: int = 0

    @property
    def pairs(self) -> int:
        return self.k * self.t

    def describe(self) -> str:
        return (
            f"N = {self.n:,} inputs, K = {self.k:,} units, T = {self.t:,} concepts "
            f"({self.positive_rate:.0%} positives), alpha = {self.alpha}, {self.pairs:,} pairs"
        )


SMALL = Size("small", n=5_000, k=64, t=100, peer_pairs=20, rounds=20)
FULL = Size("full", n=50_000, k=1_024, t=1_000, peer_pairs=50, rounds=1)


def bench_size() -> Size:
    """The size of the pytest suites: FULL when NEURONEVAL_BENCH_FULL=1, else SMALL."""
    return FULL if os.environ.get("NEURONEVAL_BENCH_FULL") == "1" else SMALL


def with_units(size: Size, units: int) -> Size:
    return replace(size, k=units)


@dataclass
class Workload:
    size: Size
    activations: np.ndarray  # (N, K) float32, standard normal
    concepts: np.ndarray  # (N, T) float32, 0/1

    @property
    def input_bytes(self) -> int:
        return int(self.activations.nbytes + self.concepts.nbytes)


def make_workload(size: Size) -> Workload:
    """The seeded workload. Concepts are drawn in row blocks, so no full-size temporary is made
    (keeps the peak RSS of a process that builds it at about the size of the inputs)."""
    rng = np.random.default_rng(size.seed)
    acts = rng.standard_normal((size.n, size.k), dtype=np.float32)
    conc = np.empty((size.n, size.t), dtype=np.float32)
    block = max(1, (1 << 21) // size.t)
    for lo in range(0, size.n, block):
        hi = min(size.n, lo + block)
        conc[lo:hi] = rng.random((hi - lo, size.t), dtype=np.float32) < size.positive_rate
    return Workload(size, acts, conc)


def sample_pairs(w: Workload, count: int, seed: int = 1) -> np.ndarray:
    """`count` (unit, concept) pairs whose labels are all defined: concepts with at least one
    positive and one negative input (a top-alpha set always has both when alpha < 1)."""
    rng = np.random.default_rng(seed)
    positives = w.concepts.sum(axis=0, dtype=np.float64)
    usable = np.flatnonzero((positives > 0) & (positives < w.size.n))
    units = rng.integers(0, w.size.k, size=count)
    concepts = rng.choice(usable, size=count)
    return np.stack([units, concepts], axis=1).astype(np.int64)


def top_alpha_labels(a: np.ndarray, alpha: float) -> np.ndarray:
    """SPEC section 2: b_i = 1 iff a_i >= the ceil(alpha N)-th largest value (ties included)."""
    n = a.shape[0]
    n_top = max(1, math.ceil(alpha * n))
    cut = np.partition(a, n - n_top)[n - n_top]
    return a >= cut


def rank_peer_inputs(metric: str, w: Workload, pairs: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(label, score) of each pair for the scikit-learn peer, as SPEC section 3 assigns the roles:
    forward metrics label the unit's top-alpha set and score the concept; inverse metrics label
    concept >= 0.5 and score the activation. Prepared outside the timing (this favours the peer)."""
    forward = RANK_PEERS[metric][1]
    out = []
    for k, t in pairs:
        a = np.ascontiguousarray(w.activations[:, k])
        c = np.ascontiguousarray(w.concepts[:, t])
        out.append((top_alpha_labels(a, w.size.alpha), c) if forward else (c >= 0.5, a))
    return out


def sklearn_peer(metric: str) -> Callable[[np.ndarray, np.ndarray], float]:
    from sklearn import metrics as skm

    fn: Callable[[np.ndarray, np.ndarray], float] = getattr(skm, RANK_PEERS[metric][0])
    return fn


def best_time(fn: Callable[[], Any], rounds: int = 1) -> tuple[Any, float]:
    """The last result of `fn` and its fastest wall time over `rounds` calls."""
    best = math.inf
    result = None
    for _ in range(max(1, rounds)):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return result, best


def time_rank_peer(metric: str, w: Workload, pairs: np.ndarray, rounds: int = 1) -> tuple[np.ndarray, float]:
    """The scikit-learn value of each pair and the fastest time to score all of them."""
    fn = sklearn_peer(metric)
    inputs = rank_peer_inputs(metric, w, pairs)
    values, seconds = best_time(lambda: np.array([fn(y, s) for y, s in inputs], dtype=np.float64), rounds)
    return values, seconds


def matmul_inputs(w: Workload, dtype: type) -> tuple[np.ndarray, np.ndarray]:
    """A.T and C in `dtype`, laid out for A.T @ C (converted outside the timing)."""
    return w.activations.astype(dtype), w.concepts.astype(dtype)


def time_matmul(w: Workload, dtypes: Sequence[type] = (np.float64, np.float32), rounds: int = 1) -> dict[str, float]:
    """Fastest wall time of numpy.matmul(A.T, C), (K, N) @ (N, T), in each dtype."""
    times = {}
    for dtype in dtypes:
        warm = np.ones((8, 8), dtype=dtype)
        np.matmul(warm, warm)  # BLAS start-up (threads, dispatch) is not the peer's per-call cost
        a, c = matmul_inputs(w, dtype)
        _, seconds = best_time(lambda a=a, c=c: np.matmul(a.T, c), rounds)
        times[np.dtype(dtype).name] = seconds
        del a, c
    return times


def product_reference(metric: str, a: np.ndarray, c: np.ndarray) -> float:
    """The textbook float64 value of a product metric for one pair (correctness check)."""
    a = a.astype(np.float64)
    c = c.astype(np.float64)
    if metric == "cosine":
        return float(a @ c / (np.linalg.norm(a) * np.linalg.norm(c)))
    if metric == "mad":
        y = c >= 0.5
        return float(a[y].mean() - a[~y].mean())
    if metric == "spearman":
        from scipy.stats import rankdata

        a, c = rankdata(a), rankdata(c)
    elif metric != "correlation":
        raise ValueError(metric)
    da, dc = a - a.mean(), c - c.mean()
    return float(da @ dc / math.sqrt((da @ da) * (dc @ dc)))


def score_in_child(size: Size, timeout: float = 900.0) -> dict[str, Any]:
    """Run one `neuroneval.score` call with every metric in a fresh process (_score_child.py)
    and return its figures: wall_s, peak_rss_bytes (the process's peak right after the call),
    rss_before_bytes (its peak once the inputs exist), input_bytes, output_bytes, rows, columns."""
    spec = {
        "n": size.n,
        "k": size.k,
        "t": size.t,
        "alpha": size.alpha,
        "positive_rate": size.positive_rate,
        "seed": size.seed,
    }
    env = dict(os.environ)
    proc = subprocess.run(
        [sys.executable, str(SCORE_CHILD), json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"score child failed ({proc.returncode}):\n{proc.stderr}")
    figures: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return figures


def warm_up() -> None:
    """One tiny neuroneval call, so that thread-pool start-up is not charged to the first metric."""
    import neuroneval

    a = np.arange(40, dtype=np.float64).reshape(20, 2)
    neuroneval.compute(a, (a[:, :1] % 3 == 0).astype(np.float64), ["auc", "correlation"], alpha=0.1)


def rate(pairs: float, seconds: float) -> float:
    return pairs / seconds if seconds > 0 else math.inf


def fmt_rate(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.2f} M"
    if x >= 1e3:
        return f"{x / 1e3:.1f} k"
    return f"{x:.0f}"


def fmt_ratio(x: float) -> str:
    return f"{x:,.0f}x" if x >= 100 else f"{x:.2f}x" if x < 10 else f"{x:.1f}x"


def fmt_bytes(b: float) -> str:
    return f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.0f} MiB"


def host_line() -> str:
    """The CPU model and its caches, as Linux reports them (`lscpu`): ratios to BLAS differ by host."""
    import subprocess

    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return "CPU model unknown (no lscpu)"
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    caches = ", ".join(
        f"{k.strip().removesuffix(' cache')} {fields[k].strip()}" for k in fields if k.strip().endswith("cache")
    )
    return f"{fields.get('Model name', 'CPU model unknown').strip()} ({caches})"


def threads_line() -> str:
    import neuroneval
    import sklearn

    return (
        f"neuroneval {neuroneval.__version__} on {neuroneval.num_threads()} threads, "
        f"numpy {np.__version__}, scikit-learn {sklearn.__version__}, {os.cpu_count()} CPUs: {host_line()}"
    )


def run_benchmark(benchmark: Any, fn: Callable[[], Any], rounds: int) -> tuple[Any, float]:
    """Time `fn` with pytest-benchmark (`rounds` rounds of one call) and also return its fastest
    wall time, which exists under --benchmark-disable too (then `fn` runs once)."""
    times: list[float] = []

    def timed() -> Any:
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
        return out

    result = benchmark.pedantic(timed, rounds=rounds, iterations=1, warmup_rounds=1 if rounds > 1 else 0)
    return result, min(times)


def report(benchmark: Any, title: str, figures: dict[str, Any]) -> None:
    """Put the figures in the benchmark's extra_info (saved with --benchmark-autosave) and print them."""
    benchmark.extra_info.update(figures)
    shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items())
    print(f"\n{title}: {shown}")
