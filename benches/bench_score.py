"""One neuroneval.score call with all 24 metrics: wall time and peak memory.

The wall time is measured here (pytest-benchmark) and the peak resident memory in a fresh
child process (_score_child.py, VmHWM right after the call). Reported: the peak over
input bytes (the float32 workload) plus output bytes (the returned table), and the call's
time against the named peer, one numpy.matmul(A.T, C) in float64 of the same shapes
(timed in this run), as a throughput ratio and as "costs this many matmuls".
"""

from __future__ import annotations

import neuroneval
from _workload import Workload, rate, report, run_benchmark, score_in_child


def test_score_all_metrics(benchmark, workload: Workload, matmul_seconds: dict[str, float]) -> None:
    size = workload.size
    benchmark.group = f"score-{size.name}"
    table, seconds = run_benchmark(
        benchmark, lambda: neuroneval.score(workload.activations, workload.concepts, alpha=size.alpha), size.rounds
    )
    child = score_in_child(size)
    in_out = child["input_bytes"] + child["output_bytes"]
    matmul = matmul_seconds["float64"]
    report(
        benchmark,
        f"score, {len(neuroneval.METRICS)} metrics",
        {
            "peer": "numpy.matmul(A.T, C) float64",
            "metrics": len(neuroneval.METRICS),
            "pairs": size.pairs,
            "wall_s": seconds,
            "pairs_per_s": rate(size.pairs, seconds),
            "matmul_float64_s": matmul,
            "ratio": matmul / seconds,
            "matmuls": seconds / matmul,
            "child_wall_s": child["wall_s"],
            "peak_rss_bytes": child["peak_rss_bytes"],
            "rss_before_call_bytes": child["rss_before_bytes"],
            "input_bytes": child["input_bytes"],
            "output_bytes": child["output_bytes"],
            "peak_over_in_out": child["peak_rss_bytes"] / in_out,
        },
    )
    assert len(neuroneval.METRICS) == 24
    assert table.shape == (size.pairs, 2 + len(neuroneval.METRICS))
    assert (child["rows"], child["columns"]) == table.shape
