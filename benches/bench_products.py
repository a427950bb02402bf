"""Product-like metrics (correlation, cosine, mad, spearman) against numpy.matmul.

Each of these is, at heart, one (K, N) @ (N, T) product, so the named peer is numpy.matmul
(A.T @ C) of the workload's shapes, timed in this run in float64 (what neuroneval computes
in) and in float32 (the inputs' dtype); the conversion to the peer's dtype is not timed.
Reported: pairs/s of neuroneval and both ratios. The smoke check: a few pairs equal the
textbook float64 formula (scipy's midranks for spearman) to 1e-10.
"""

from __future__ import annotations

import neuroneval
import pytest
from _workload import PRODUCT_METRICS, Workload, product_reference, rate, report, run_benchmark, sample_pairs


@pytest.mark.parametrize("metric", PRODUCT_METRICS)
def test_product_metric_vs_matmul(benchmark, workload: Workload, matmul_seconds: dict[str, float], metric: str) -> None:
    size = workload.size
    benchmark.group = f"products-{size.name}"
    ours, seconds = run_benchmark(
        benchmark, lambda: neuroneval.compute(workload.activations, workload.concepts, [metric])[metric], size.rounds
    )
    ours_rate = rate(size.pairs, seconds)
    figures: dict[str, object] = {"peer": "numpy.matmul(A.T, C)", "pairs": size.pairs, "pairs_per_s": ours_rate}
    for dtype, peer_seconds in matmul_seconds.items():
        figures[f"matmul_{dtype}_pairs_per_s"] = rate(size.pairs, peer_seconds)
        figures[f"ratio_{dtype}"] = peer_seconds / seconds
    report(benchmark, f"{metric} vs numpy.matmul", figures)

    assert ours.shape == (size.k, size.t)
    for k, t in sample_pairs(workload, 5):
        expected = product_reference(metric, workload.activations[:, k], workload.concepts[:, t])
        assert abs(ours[k, t] - expected) <= 1e-10, (metric, k, t, ours[k, t], expected)
