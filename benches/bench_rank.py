"""Rank metrics (auc, inverse_auc, auprc, inverse_auprc) against scikit-learn, pair by pair.

neuroneval scores all K x T pairs in one call; the peer, sklearn.metrics.roc_auc_score or
average_precision_score, scores a random sample of pairs one call each (labels prepared
beforehand, untimed). Reported: pairs/s of both and their ratio. The smoke check: on the
sampled pairs our value equals scikit-learn's to 1e-10.
"""

from __future__ import annotations

import neuroneval
import numpy as np
import pytest
from _workload import RANK_METRICS, RANK_PEERS, Workload, rate, report, run_benchmark, sample_pairs, time_rank_peer


@pytest.mark.parametrize("metric", RANK_METRICS)
def test_rank_metric_vs_sklearn(benchmark, workload: Workload, metric: str) -> None:
    size = workload.size
    benchmark.group = f"rank-{size.name}"
    ours, seconds = run_benchmark(
        benchmark,
        lambda: neuroneval.compute(workload.activations, workload.concepts, [metric], alpha=size.alpha)[metric],
        size.rounds,
    )
    pairs = sample_pairs(workload, size.peer_pairs)
    peer_values, peer_seconds = time_rank_peer(metric, workload, pairs, rounds=min(size.rounds, 3))

    ours_rate = rate(size.pairs, seconds)
    peer_rate = rate(len(pairs), peer_seconds)
    report(
        benchmark,
        f"{metric} vs sklearn.metrics.{RANK_PEERS[metric][0]}",
        {
            "peer": f"sklearn.metrics.{RANK_PEERS[metric][0]}",
            "pairs": size.pairs,
            "pairs_per_s": ours_rate,
            "peer_pairs": len(pairs),
            "peer_pairs_per_s": peer_rate,
            "ratio": ours_rate / peer_rate,
        },
    )
    assert ours.shape == (size.k, size.t)
    np.testing.assert_allclose(ours[pairs[:, 0], pairs[:, 1]], peer_values, rtol=0, atol=1e-10)
