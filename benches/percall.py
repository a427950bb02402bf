"""Per-call cost: one (unit, concept) pair per call, the way the NeuronEval reference is used.

    python benches/percall.py            # N = 100,000; then loops of 1,000 calls in two layouts (~5 min)
    python benches/percall.py --quick    # N = 5,000, a loop of 100 calls: a smoke run of a few seconds
    python benches/percall.py --rounds 9

Users of `neuroneval.compat.neuron_eval` call it the way the reference notebooks call the
reference's metric module: one pair at a time, `metrics.cos_sim(acts[:, i:i+1], concepts[:, j:j+1])`,
on torch float32 tensors. Each call then pays whatever a call costs besides the arithmetic
(argument checks, conversions, thread start-up, the result tensor), and that is what this
measures, for every function of the reference, against a named peer in the same run.

The peer is our own torch code (the `ref_*` functions below), written from the reference's
formulas: top-k binarisation with `torch.topk`, (N, 1).T @ (N, 1) matrix products, normalising
with the sample standard deviation, ranks by argsort twice after adding 1e-7 uniform noise,
and average precision as torcheval's `binary_auprc` computes it (sort by score, cumulative
true and false positives at each distinct score, a step integral of precision over recall;
the value of `sklearn.metrics.average_precision_score`). It makes the same tensor calls as the
reference, so it costs what the reference costs; it does not need the reference or torcheval.

Table 1: one call of each function on (N, 1) float32 tensors, the fastest of --rounds rounds
(each round repeats the call until it has run for at least --min-round seconds; rounds of the
peer and of neuroneval alternate, so a burst of load hits both). Tables 2 and 3: a loop of
--calls calls of each rank metric in each of LAYOUTS (the theoretical notebook's, and strided
columns of a wide concept tensor); the fastest of --loop-rounds loops. Ratios are the peer's time over
neuroneval's (above 1: neuroneval is faster), as everywhere in benches/.

Correctness (untimed, on the single pair): neuroneval's value equals the peer's to 1e-4 where
both are deterministic; the noise-ranked metrics (auc, inverse_auc, spearman and the
combinations with auc) and the randomly sampled top-and-random ones are only checked finite.
The script exits with status 1 after printing the tables when a check fails.
Progress goes to stderr, the tables to stdout.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

ALPHA = 0.005  # the binarising functions' alpha
TOLERANCE = 1e-4  # float32 torch against neuroneval's float64


@dataclass(frozen=True)
class PercallSize:
    name: str
    n: int  # inputs
    t: int  # concept columns the loop cycles through
    calls: int  # calls in one loop
    rounds: int  # rounds of each single-call measurement
    loop_rounds: int  # loops of each side
    min_round_s: float  # a round repeats the call until it has run this long
    positive_rate: float = 0.1
    seed: int = 0

    def describe(self) -> str:
        return (
            f"N = {self.n:,} inputs, torch float32 (N, 1) tensors: standard normal activations, binary "
            f"concepts with {self.positive_rate:.0%} positives; alpha = {ALPHA}; loops of {self.calls:,} "
            f"calls in two layouts"
        )


SMALL = PercallSize("small", n=5_000, t=100, calls=100, rounds=20, loop_rounds=3, min_round_s=0.002)
FULL = PercallSize("full", n=100_000, t=1_000, calls=1_000, rounds=7, loop_rounds=1, min_round_s=0.05)


def bench_size() -> PercallSize:
    """The size of bench_percall.py: FULL when NEURONEVAL_BENCH_FULL=1, else SMALL."""
    return FULL if os.environ.get("NEURONEVAL_BENCH_FULL") == "1" else SMALL


# ---------------------------------------------------------------------------------------------
# The peer: the reference's formulas in torch, with its shapes ((N, K) and (N, T) -> (K, T)).


def _binarize(a: torch.Tensor, alpha: float) -> torch.Tensor:
    # 1 where a unit is at least its ceil(alpha N)-th largest value (ties included)
    k = math.ceil(alpha * len(a))
    values, _ = torch.topk(a, k=k, dim=0)
    return (a >= values[-1]).float()


def _normalize(x: torch.Tensor) -> torch.Tensor:
    # the reference divides by the sample std (clamped), then the product by N: r * (N-1)/N
    centred = x - x.mean(dim=0, keepdim=True)
    return centred / torch.clamp(centred.std(dim=0, keepdim=True), min=1e-9)


def _ranks(x: torch.Tensor, noise: float = 1e-7) -> torch.Tensor:
    # ties broken at random by the noise, as in the reference (so not reproducible)
    order = torch.argsort(x + noise * torch.rand(x.shape, device=x.device), dim=0)
    return torch.argsort(order, dim=0)


def _average_precision(score: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """torcheval's binary_auprc on 1-D tensors: precision and recall at every distinct score,
    descending, and sum over thresholds of (recall step) x precision."""
    sorted_score, order = torch.sort(score, descending=True)
    last = torch.ones(len(score), dtype=torch.bool)  # the last input of each run of equal scores
    last[:-1] = sorted_score[1:] != sorted_score[:-1]
    hit = target[order] == 1
    tp = hit.cumsum(0)[last]
    fp = (~hit).cumsum(0)[last]
    precision = tp / (tp + fp)
    recall = tp / tp[-1]
    steps = torch.diff(recall, prepend=recall.new_zeros(1))
    return (steps * precision).sum()


def _harmonic(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return 2 * x * y / (x + y)


@torch.no_grad()
def ref_recall(a: torch.Tensor, c: torch.Tensor, alpha: float) -> torch.Tensor:
    b, y = _binarize(a, alpha), (c >= 0.5).float()
    return (b.T @ y) / b.sum(dim=0).unsqueeze(1)


@torch.no_grad()
def ref_precision(a: torch.Tensor, c: torch.Tensor, alpha: float) -> torch.Tensor:
    b, y = _binarize(a, alpha), (c >= 0.5).float()
    return (b.T @ y) / torch.clamp(y.sum(dim=0, keepdim=True), min=1)


@torch.no_grad()
def ref_f1_score(a: torch.Tensor, c: torch.Tensor, alpha: float) -> torch.Tensor:
    b, y = _binarize(a, alpha), (c >= 0.5).float()
    tp = b.T @ y
    fp = b.T @ (1 - y)
    fn = (1 - b.T) @ y
    return 2 * tp / (2 * tp + fp + fn)


@torch.no_grad()
def ref_iou(a: torch.Tensor, c: torch.Tensor, alpha: float) -> torch.Tensor:
    b, y = _binarize(a, alpha), (c >= 0.5).float()
    both = b.T @ y
    return both / (b.sum(dim=0, keepdim=True).T + y.sum(dim=0, keepdim=True) - both)


@torch.no_grad()
def ref_accuracy(a: torch.Tensor, c: torch.Tensor, alpha: float) -> torch.Tensor:
    y, b = (c >= 0.5).float(), _binarize(a, alpha)
    return (b.T @ y + (1 - b).T @ (1 - y)) / len(a)


@torch.no_grad()
def ref_balanced_accuracy(a: torch.Tensor, c: torch.Tensor, alpha: float) -> torch.Tensor:
    y, b = (c >= 0.5).float(), _binarize(a, alpha)
    hits = (b.T @ y) / torch.clamp(b.sum(dim=0, keepdim=True).T, min=1)
    rejections = ((1 - b).T @ (1 - y)) / torch.clamp((1 - b).sum(dim=0, keepdim=True).T, min=1)
    return (hits + rejections) / 2


@torch.no_grad()
def ref_inverse_balanced_accuracy(a: torch.Tensor, c: torch.Tensor, alpha: float) -> torch.Tensor:
    y, b = (c >= 0.5).float(), _binarize(a, alpha)
    hits = (b.T @ y) / torch.clamp(y.sum(dim=0, keepdim=True), min=1)
    rejections = ((1 - b).T @ (1 - y)) / torch.clamp((1 - y).sum(dim=0, keepdim=True), min=1)
    return (hits + rejections) / 2


def ref_auc(a: torch.Tensor, c: torch.Tensor, alpha: float) -> torch.Tensor:
    # labels: the unit's top set; scores: the concept's (noise-)ranks; one column at a time
    b = _binarize(a, alpha)
    ranks = _ranks(c)
    with torch.no_grad():
        out = torch.zeros([a.shape[1], c.shape[1]])
        for j in range(c.shape[1]):
            positive_ranks = ranks[:, j : j + 1] * (b == 1)
            n_pos = torch.sum(b == 1, dim=0)
            n_neg = torch.sum(b == 0, dim=0)
            out[:, j] = (positive_ranks.sum(dim=0) - n_pos * (n_pos - 1) / 2) / torch.clip(n_pos * n_neg, min=1)
    return out


def ref_inverse_auc(a: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    # labels: concept >= 0.5; scores: the unit's (noise-)ranks; one unit at a time
    y = (c >= 0.5).int()
    ranks = _ranks(a)
    with torch.no_grad():
        out = torch.zeros([a.shape[1], y.shape[1]])
        for i in range(a.shape[1]):
            positive_ranks = ranks[:, i : i + 1] * (y == 1)
            n_pos = torch.sum(y == 1, dim=0)
            n_neg = torch.sum(y == 0, dim=0)
            out[i] = (positive_ranks.sum(dim=0) - n_pos * (n_pos - 1) / 2) / torch.clip(n_pos * n_neg, min=1)
    return out


@torch.no_grad()
def ref_correlation(a: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return (_normalize(a).T @ _normalize(c)) / len(a)


def ref_spearman_correlation(a: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return ref_correlation(_ranks(a).float(), _ranks(c).float())


def _top_and_random(
    a: torch.Tensor, c: torch.Tensor, k: int, alpha: float, score: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    # per unit: k inputs drawn from its top ceil(alpha N), k from all N, then score that subset
    out = []
    for i in range(a.shape[1]):
        n_top = math.ceil(alpha * len(a))
        unit = a[:, i].clone()
        _, top = torch.topk(unit, dim=0, k=n_top)
        top = top[torch.randperm(n_top)[:k]]
        anywhere = torch.randperm(len(a), device=a.device)[:k]
        subset = torch.cat([top, anywhere], dim=0)
        out.append(score(unit[subset].unsqueeze(1), c[subset]))
    return torch.cat(out, dim=0)


def ref_correlation_top_and_random(a: torch.Tensor, c: torch.Tensor, k: int = 25, alpha: float = 0.002) -> torch.Tensor:
    return _top_and_random(a, c, k, alpha, ref_correlation)


def ref_spearman_correlation_top_and_random(
    a: torch.Tensor, c: torch.Tensor, k: int = 25, alpha: float = 0.002
) -> torch.Tensor:
    return _top_and_random(a, c, k, alpha, ref_spearman_correlation)


@torch.no_grad()
def ref_cos_sim(a: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    na = a / torch.clamp(torch.norm(a, dim=0, p=2, keepdim=True), min=1e-9)
    nc = c / torch.clamp(torch.norm(c, dim=0, p=2, keepdim=True), min=1e-9)
    return na.T @ nc


@torch.no_grad()
def ref_wpmi(a: torch.Tensor, c: torch.Tensor, alpha: float, lam: float = 1) -> torch.Tensor:
    b = _binarize(a, alpha)
    log_likelihood = (b.T @ torch.log(torch.clamp(c, min=1e-8))) / torch.clamp(b.sum(dim=0).unsqueeze(1), min=1)
    return log_likelihood - lam * torch.log(c.mean(dim=0, keepdim=True))


@torch.no_grad()
def ref_mad(a: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    y = (c >= 0.5).int()
    n_pos, n_neg = y.sum(dim=0), (1 - y).sum(dim=0)
    out = torch.zeros([a.shape[1], c.shape[1]])
    for j in range(c.shape[1]):
        inside = torch.sum(a * y[:, j : j + 1], dim=0) / torch.clamp(n_pos[j], min=1)
        outside = torch.sum(a * (1 - y[:, j : j + 1]), dim=0) / torch.clamp(n_neg[j], min=1)
        out[:, j] = inside - outside
    return out


@torch.no_grad()
def ref_auprc(a: torch.Tensor, c: torch.Tensor, alpha: float) -> torch.Tensor:
    # labels: the unit's top set; scores: the concept; float64 out, as the reference
    b = _binarize(a, alpha)
    out = torch.zeros([a.shape[1], c.shape[1]], dtype=torch.float64)
    for i in range(a.shape[1]):
        for j in range(c.shape[1]):
            out[i, j] = _average_precision(c[:, j], b[:, i])
    return out


@torch.no_grad()
def ref_inverse_auprc(a: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    # labels: concept >= 0.5; scores: the activation
    y = (c >= 0.5).int()
    out = torch.zeros([a.shape[1], c.shape[1]], dtype=torch.float64)
    for i in range(a.shape[1]):
        for j in range(c.shape[1]):
            out[i, j] = _average_precision(a[:, i], y[:, j])
    return out


# The combinations compute both parts in full, as the reference does.
def ref_combined_auc(a: torch.Tensor, c: torch.Tensor, alpha: float) -> torch.Tensor:
    return _harmonic(ref_auc(a, c, alpha), ref_inverse_auc(a, c))


def ref_combined_balanced_acc(a: torch.Tensor, c: torch.Tensor, alpha: float) -> torch.Tensor:
    return _harmonic(ref_balanced_accuracy(a, c, alpha), ref_inverse_balanced_accuracy(a, c, alpha))


def ref_recall_auc(a: torch.Tensor, c: torch.Tensor, alpha: float) -> torch.Tensor:
    return _harmonic(ref_recall(a, c, alpha), ref_auc(a, c, alpha))


def ref_recall_inv_auc(a: torch.Tensor, c: torch.Tensor, alpha: float) -> torch.Tensor:
    return _harmonic(ref_recall(a, c, alpha), ref_inverse_auc(a, c))


def ref_precision_bal_acc(a: torch.Tensor, c: torch.Tensor, alpha: float) -> torch.Tensor:
    return _harmonic(ref_precision(a, c, alpha), ref_balanced_accuracy(a, c, alpha))


def ref_precision_inverse_bal_acc(a: torch.Tensor, c: torch.Tensor, alpha: float) -> torch.Tensor:
    return _harmonic(ref_precision(a, c, alpha), ref_inverse_balanced_accuracy(a, c, alpha))


@dataclass(frozen=True)
class Metric:
    name: str  # the reference's (and neuroneval.compat.neuron_eval's) function name
    peer: Callable[..., torch.Tensor]
    uses_alpha: bool  # called as f(a, c, ALPHA), else f(a, c)
    exact: bool  # deterministic on both sides: checked to TOLERANCE, else only finite
    # (top-and-random: neuroneval draws its subset from seed 0, so its value is fixed for this data; NaN
    # would mean a concept constant on its 50 inputs, which this data's seed does not give)


METRICS: tuple[Metric, ...] = (
    Metric("recall", ref_recall, True, True),
    Metric("precision", ref_precision, True, True),
    Metric("f1_score", ref_f1_score, True, True),
    Metric("iou", ref_iou, True, True),
    Metric("accuracy", ref_accuracy, True, True),
    Metric("balanced_accuracy", ref_balanced_accuracy, True, True),
    Metric("inverse_balanced_accuracy", ref_inverse_balanced_accuracy, True, True),
    Metric("auc", ref_auc, True, False),
    Metric("inverse_auc", ref_inverse_auc, False, False),
    Metric("correlation", ref_correlation, False, True),
    Metric("spearman_correlation", ref_spearman_correlation, False, False),
    Metric("cos_sim", ref_cos_sim, False, True),
    Metric("wpmi", ref_wpmi, True, True),
    Metric("mad", ref_mad, False, True),
    Metric("auprc", ref_auprc, True, True),
    Metric("inverse_auprc", ref_inverse_auprc, False, True),
    Metric("correlation_top_and_random", ref_correlation_top_and_random, False, False),
    Metric("spearman_correlation_top_and_random", ref_spearman_correlation_top_and_random, False, False),
    Metric("combined_auc", ref_combined_auc, True, False),
    Metric("combined_balanced_acc", ref_combined_balanced_acc, True, True),
    Metric("recall_auc", ref_recall_auc, True, False),
    Metric("recall_inv_auc", ref_recall_inv_auc, True, False),
    Metric("precision_bal_acc", ref_precision_bal_acc, True, True),
    Metric("precision_inverse_bal_acc", ref_precision_inverse_bal_acc, True, True),
)
BY_NAME = {m.name: m for m in METRICS}
LOOP_METRICS = ("auc", "inverse_auc", "spearman_correlation", "auprc", "inverse_auprc")
#: The loops' layouts: "notebook", the reference's theoretical notebook's `fast_sims` (column i of
#: an (N, 5) unit tensor against column i of an (N, 5) concept tensor, i cycled); "strided", a
#: fixed unit against the next column of an (N, T) concept tensor, each call reading a column
#: whose elements lie a row of T floats apart (one per 4 KB page at T = 1,000), which costs
#: both sides a cache and TLB miss per element (a strided copy of one such column alone takes
#: 0.7-2.9 ms here, numpy's or torch's).
LAYOUTS = ("notebook", "strided")
NOTEBOOK_COLUMNS = 5


# ---------------------------------------------------------------------------------------------
# Workload, calls, checks and timing.


@dataclass
class Data:
    size: PercallSize
    acts: torch.Tensor  # (N, 1) float32, standard normal
    concept: torch.Tensor  # (N, 1) float32, 0/1: the single pair's concept
    concepts: torch.Tensor  # (N, T) float32, 0/1: the strided loop's columns
    units5: torch.Tensor  # (N, 5) float32, standard normal: the notebook loop's units
    concepts5: torch.Tensor  # (N, 5) float32, 0/1: the notebook loop's concepts


def make_data(size: PercallSize) -> Data:
    g = torch.Generator().manual_seed(size.seed)
    acts = torch.randn(size.n, 1, generator=g)
    concept = (torch.rand(size.n, 1, generator=g) < size.positive_rate).float()
    concepts = torch.empty(size.n, size.t)
    step = max(1, (1 << 21) // size.t)  # row blocks: no full-size float temporary besides the result
    for lo in range(0, size.n, step):
        hi = min(size.n, lo + step)
        concepts[lo:hi] = (torch.rand(hi - lo, size.t, generator=g) < size.positive_rate).float()
    units5 = torch.randn(size.n, NOTEBOOK_COLUMNS, generator=g)
    concepts5 = (torch.rand(size.n, NOTEBOOK_COLUMNS, generator=g) < size.positive_rate).float()
    torch.manual_seed(size.seed)  # the peers' noise and subsets come from torch's global generator
    return Data(size, acts, concept, concepts, units5, concepts5)


def ours_fn(name: str) -> Callable[..., Any]:
    from neuroneval.compat import neuron_eval

    fn: Callable[..., Any] = getattr(neuron_eval, name)
    return fn


def call(metric: Metric, fn: Callable[..., Any], a: torch.Tensor, c: torch.Tensor) -> Any:
    return fn(a, c, ALPHA) if metric.uses_alpha else fn(a, c)


def pair_calls(metric: Metric, data: Data) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(peer call, neuroneval call) of the single pair."""
    ours = ours_fn(metric.name)
    a, c = data.acts, data.concept
    return (lambda: call(metric, metric.peer, a, c)), (lambda: call(metric, ours, a, c))


def loop_calls(
    metric: Metric, data: Data, layout: str = "notebook"
) -> tuple[Callable[[], list[Any]], Callable[[], list[Any]]]:
    """(peer loop, neuroneval loop): `calls` single-pair calls in one of LAYOUTS."""
    ours = ours_fn(metric.name)
    if layout == "notebook":
        units, concepts = data.units5, data.concepts5
        pairs = [(j % NOTEBOOK_COLUMNS, j % NOTEBOOK_COLUMNS) for j in range(data.size.calls)]
    else:
        units, concepts = data.acts, data.concepts
        pairs = [(0, j % data.size.t) for j in range(data.size.calls)]

    def run(fn: Callable[..., Any]) -> list[Any]:
        return [call(metric, fn, units[:, i : i + 1], concepts[:, j : j + 1]) for i, j in pairs]

    return (lambda: run(metric.peer)), (lambda: run(ours))


def value(x: Any) -> float:
    return float(x.reshape(-1)[0]) if isinstance(x, torch.Tensor) else float(x)


def check(metric: Metric, peer: Any, ours: Any) -> float:
    """The difference between the two values (0 when only finiteness is checked); raises when
    a check fails."""
    p, o = value(peer), value(ours)
    if not (math.isfinite(p) and math.isfinite(o)):
        raise AssertionError(f"{metric.name}: peer {p}, neuroneval {o}: not finite")
    if not metric.exact:
        return 0.0
    diff = abs(p - o)
    if diff > TOLERANCE:
        raise AssertionError(f"{metric.name}: peer {p}, neuroneval {o}: differ by {diff:.2e} > {TOLERANCE}")
    return diff


def per_call_seconds(fn: Callable[[], Any], min_round_s: float) -> tuple[int, Callable[[], float]]:
    """How many calls make one round, and a function timing one round (seconds per call)."""
    t0 = time.perf_counter()
    fn()
    once = time.perf_counter() - t0
    reps = max(1, math.ceil(min_round_s / once)) if once > 0 else 1

    def round_() -> float:
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - t0) / reps

    return reps, round_


def fastest_alternating(peer: Callable[[], float], ours: Callable[[], float], rounds: int) -> tuple[float, float]:
    """The fastest of `rounds` timings of each side, rounds alternating between them."""
    best_peer = best_ours = math.inf
    for _ in range(max(1, rounds)):
        best_peer = min(best_peer, peer())
        best_ours = min(best_ours, ours())
    return best_peer, best_ours


def time_pair(metric: Metric, data: Data) -> tuple[float, float, float]:
    """(peer s/call, neuroneval s/call, |difference|) of one pair."""
    peer, ours = pair_calls(metric, data)
    diff = check(metric, peer(), ours())
    _, peer_round = per_call_seconds(peer, data.size.min_round_s)
    _, ours_round = per_call_seconds(ours, data.size.min_round_s)
    peer_s, ours_s = fastest_alternating(peer_round, ours_round, data.size.rounds)
    return peer_s, ours_s, diff


def time_loop(metric: Metric, data: Data, layout: str) -> tuple[float, float, float]:
    """(peer s/loop, neuroneval s/loop, largest |difference|) of the loop."""
    peer, ours = loop_calls(metric, data, layout)

    def timed(fn: Callable[[], list[Any]], keep: list[list[Any]]) -> Callable[[], float]:
        def round_() -> float:
            t0 = time.perf_counter()
            keep.append(fn())
            return time.perf_counter() - t0

        return round_

    peer_values: list[list[Any]] = []
    ours_values: list[list[Any]] = []
    pair_calls(metric, data)[1]()  # one untimed call: first-call costs are not the loop's
    peer_s, ours_s = fastest_alternating(timed(peer, peer_values), timed(ours, ours_values), data.size.loop_rounds)
    diff = max(check(metric, p, o) for p, o in zip(peer_values[-1], ours_values[-1], strict=True))
    return peer_s, ours_s, diff


def fmt_ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.3g}" if ms < 100 else f"{ms:,.0f}"


def fmt_ratio(x: float) -> str:
    return f"{x:,.0f}x" if x >= 100 else f"{x:.2f}x" if x < 10 else f"{x:.1f}x"


def header(size: PercallSize) -> str:
    import neuroneval

    return (
        f"{size.describe()}. neuroneval {neuroneval.__version__} on {neuroneval.num_threads()} threads, "
        f"torch {torch.__version__} on {torch.get_num_threads()} threads, {os.cpu_count()} CPUs."
    )


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the small size (N = 5,000), a few seconds")
    parser.add_argument("--rounds", type=int, help="rounds of each single-call measurement")
    parser.add_argument("--loop-rounds", type=int, help="loops of each side")
    parser.add_argument("--calls", type=int, help="calls in one loop")
    parser.add_argument("--min-round", type=float, help="seconds a single-call round runs at least")
    parser.add_argument("--only", nargs="+", choices=[m.name for m in METRICS], help="these functions only")
    args = parser.parse_args()
    base = SMALL if args.quick else FULL
    size = PercallSize(
        base.name,
        n=base.n,
        t=base.t,
        calls=args.calls or base.calls,
        rounds=args.rounds or base.rounds,
        loop_rounds=args.loop_rounds or base.loop_rounds,
        min_round_s=base.min_round_s if args.min_round is None else args.min_round,
    )
    chosen = [m for m in METRICS if not args.only or m.name in args.only]
    started = time.perf_counter()
    log(f"building the data: {size.describe()}")
    data = make_data(size)
    failures: list[str] = []
    worst = 0.0

    rows = []
    for metric in chosen:
        log(f"single pair: {metric.name}")
        try:
            peer_s, ours_s, diff = time_pair(metric, data)
        except AssertionError as e:
            failures.append(str(e))
            continue
        worst = max(worst, diff)
        rows.append(f"| `{metric.name}` | {fmt_ms(peer_s)} | {fmt_ms(ours_s)} | {fmt_ratio(peer_s / ours_s)} |")

    print(f"**Per-call cost**, {header(size)}")
    print()
    print("| metric | reference-equivalent torch (ms) | neuroneval (ms) | ratio |")
    print("|---|---:|---:|---:|")
    print("\n".join(rows))
    print()
    print(
        f"Fastest of {size.rounds} rounds of each side (a round repeats the call for at least "
        f"{size.min_round_s:g} s); ratio = reference-equivalent time / neuroneval time (higher is better)."
    )
    sys.stdout.flush()  # table 1 before the loops, which take minutes at full size

    for layout in LAYOUTS:
        loop_rows = []
        for name in LOOP_METRICS:
            metric = BY_NAME[name]
            if metric not in chosen:
                continue
            log(f"loop of {size.calls:,} calls ({layout}): {name}")
            try:
                peer_s, ours_s, diff = time_loop(metric, data, layout)
            except AssertionError as e:
                failures.append(f"loop ({layout}): {e}")
                continue
            worst = max(worst, diff)
            loop_rows.append(
                f"| `{name}` | {peer_s:.3g} ({fmt_ms(peer_s / size.calls)}) | {ours_s:.3g} "
                f"({fmt_ms(ours_s / size.calls)}) | {fmt_ratio(peer_s / ours_s)} |"
            )
        if not loop_rows:
            continue
        where = (
            f"column i of (N, {NOTEBOOK_COLUMNS}) units against column i of (N, {NOTEBOOK_COLUMNS}) concepts, "
            "i cycled, as the reference's theoretical notebook loops"
            if layout == "notebook"
            else f"one unit against the next column of an (N, {size.t:,}) concept tensor (strided columns)"
        )
        print()
        print(f"**A loop of {size.calls:,} single-pair calls**, {where}:")
        print()
        print("| metric | reference-equivalent loop, s (ms/call) | neuroneval loop, s (ms/call) | ratio |")
        print("|---|---:|---:|---:|")
        print("\n".join(loop_rows))
        print()
        print(f"Fastest of {size.loop_rounds} loops of each side.")
        sys.stdout.flush()
    print()
    print(
        f"Largest difference on the deterministic functions: {worst:.1e} (tolerance {TOLERANCE:g}). "
        f"Total run time {time.perf_counter() - started:.0f} s."
    )
    if failures:
        print("\nFAILED checks:\n" + "\n".join(f"- {f}" for f in failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
