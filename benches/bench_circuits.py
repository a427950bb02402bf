"""Edge patching, `neuroneval.torch.circuits.run`, against a loop of single-edge hook patches (circuit_patching.py).

Always the small size here, even with NEURONEVAL_BENCH_FULL=1: a random-weight LLaMA (4 layers,
4 heads, 4 key/value heads, d = 64, 479 edges), B = 8 random prompts of 12 tokens, K = 12
sampled edges; `python benches/circuit_patching.py` runs SmolLM2-135M-Instruct on IOI. Both
sides run in this process on the same batch, the fastest of 2 alternating rounds each.
Saves in `extra_info`: `ratio` = our examples x edges per second over the hook loop's, each
of the K edges patched alone (like for like), and `ratio_circuit` = one `run` patching every
edge outside a 5% circuit (B x E examples x edges per second) over the same hook-loop rate.

The smoke check: each edge patched alone gives the hook patch's metric to 1e-4 (float32), and
most of the sampled edges do move the metric.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from _workload import report  # noqa: E402
from circuit_patching import SMALL, measure, random_batch, small_model  # noqa: E402


def test_edge_patching_against_a_loop_of_hook_patches(benchmark: Any) -> None:
    hf = small_model(SMALL.seed)
    batch = random_batch(hf.config.vocab_size, SMALL.batch, seed=SMALL.seed)
    result = benchmark.pedantic(lambda: measure(hf, batch, SMALL, log=lambda _: None), rounds=1, iterations=1)
    assert result["sampled_edges"] == SMALL.edges and result["examples"] == SMALL.batch
    assert result["max_difference"] < 1e-4
    assert result["edges_that_move"] >= SMALL.edges // 2  # not a comparison of two clean runs
    figures: dict[str, Any] = {
        "size": "small",
        "ratio": result["per_edge_ratio"],
        "ratio_circuit": result["circuit_ratio"],
        **{k: result[k] for k in ("ours_rate", "peer_rate", "circuit_rate", "max_difference", "threads")},
    }
    report(benchmark, "edge patching against single-edge hook patches (small)", figures)
