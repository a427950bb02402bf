"""Per-call cost of neuroneval.compat.neuron_eval: one (unit, concept) pair per call.

The workload and the peer are percall.py's: torch float32 (N, 1) tensors, and our own torch
code of the reference's formulas (`percall.ref_*`), timed in this run. Two suites:

- one call of each of the reference's 24 functions on one pair;
- a loop of single-pair calls of each rank metric, in each of percall.LAYOUTS.

Each saves `ratio` = the peer's time / neuroneval's (higher is better) in `extra_info`, for
compare.py. Small (N = 5,000, loops of 100 calls) unless NEURONEVAL_BENCH_FULL=1 (N = 100,000,
loops of 1,000). The smoke checks: neuroneval's value equals the peer's to 1e-4 where both are
deterministic, and is finite where the reference ranks with noise or samples at random.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("torch")

from _workload import best_time, report, run_benchmark  # noqa: E402
from percall import (  # noqa: E402
    BY_NAME,
    LAYOUTS,
    LOOP_METRICS,
    METRICS,
    Data,
    PercallSize,
    bench_size,
    check,
    loop_calls,
    make_data,
    pair_calls,
)

SIZE = bench_size()


@pytest.fixture(scope="module", params=[SIZE], ids=[SIZE.name])
def data(request: pytest.FixtureRequest) -> Data:
    size: PercallSize = request.param
    return make_data(size)


@pytest.mark.parametrize("name", [m.name for m in METRICS])
def test_single_pair(benchmark: Any, data: Data, name: str) -> None:
    size, metric = data.size, BY_NAME[name]
    benchmark.group = f"percall-{size.name}"
    peer, ours = pair_calls(metric, data)
    check(metric, peer(), ours())  # also the untimed first call of each side
    _, seconds = run_benchmark(benchmark, ours, size.rounds)
    _, peer_seconds = best_time(peer, size.rounds)
    report(
        benchmark,
        f"{name}, one pair",
        {
            "peer": f"percall.ref_{name} (torch)",
            "n": size.n,
            "ms": seconds * 1e3,
            "peer_ms": peer_seconds * 1e3,
            "ratio": peer_seconds / seconds,
        },
    )


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", LOOP_METRICS)
def test_loop_of_calls(benchmark: Any, data: Data, name: str, layout: str) -> None:
    size, metric = data.size, BY_NAME[name]
    benchmark.group = f"percall-loop-{layout}-{size.name}"
    peer, ours = loop_calls(metric, data, layout)
    pair_calls(metric, data)[1]()  # one untimed call: first-call costs are not the loop's
    values, seconds = run_benchmark(benchmark, ours, size.loop_rounds)
    peer_values, peer_seconds = best_time(peer, size.loop_rounds)
    report(
        benchmark,
        f"{name}, a loop of {size.calls} single-pair calls ({layout})",
        {
            "peer": f"percall.ref_{name} (torch), same loop",
            "n": size.n,
            "calls": size.calls,
            "s": seconds,
            "peer_s": peer_seconds,
            "ratio": peer_seconds / seconds,
        },
    )
    assert len(values) == len(peer_values) == size.calls
    for p, o in zip(peer_values, values, strict=True):
        check(metric, p, o)
