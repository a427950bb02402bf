"""One `neuroneval.evaluate` call of scale.py in its own process, for its wall time and peak memory.

Run by scale.run_child as `python _scale_child.py '<json spec>'`; prints one JSON line.
The inputs are built (or loaded) first; then the high-water mark is reset to the current
resident set (writing 5 to /proc/self/clear_refs, Linux >= 4.0), so the peak read right
after the call (VmHWM in /proc/self/status, as in _score_child.py) counts the interpreter,
the inputs that exist before the call and everything the call allocates, but not the
temporaries of building the inputs. Where the reset is not possible the peak is the
process's whole life, and `peak_reset` says so.

The sparse workload also runs its peer (scikit-learn on a sample of pairs) and the
correctness check here, after the peak is read, so that its inputs are built once.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _score_child import peak_rss_bytes
from scale import (
    CHECKED_METRICS,
    SparseSize,
    _density_line,
    all_metrics,
    current_rss_bytes,
    dense_column,
    evict,
    make_sparse,
    out_of_core_concepts,
    parquet_shape,
    reset_peak_rss,
    sparse_pairs,
    table_rows,
    time_sparse_peer,
    worst_difference,
)


def measured(call: Callable[[], Any]) -> dict[str, Any]:
    """Wall time, CPU time (user + system, every thread of the process) and peak resident
    set of `call`, with the resident set right before it."""
    reset = reset_peak_rss()
    before = (current_rss_bytes() if reset else None) or peak_rss_bytes()
    t0, c0 = time.perf_counter(), time.process_time()
    call()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_rss_bytes": peak_rss_bytes(),
        "rss_before_bytes": before,
        "peak_reset": reset,
    }


def out_of_core(spec: dict[str, Any]) -> dict[str, Any]:
    import neuroneval

    path = Path(spec["path"])
    concepts = out_of_core_concepts(Path(spec["concepts"]))  # dense (N, T) float32 in memory
    if spec["cold"]:
        evict(path)  # the peer has just read it: start evaluate from the same cold cache
    figures = measured(
        lambda: neuroneval.evaluate(
            path,
            concepts,
            spec["metrics"],
            alpha=spec["alpha"],
            out=spec["out"],
            block_units=spec["block_units"],
            progress=True,
        )
    )
    return {**figures, "input_bytes": int(concepts.nbytes), "threads": neuroneval.num_threads()}


def sparse(spec: dict[str, Any]) -> dict[str, Any]:
    import neuroneval

    size = SparseSize(**spec["size"])
    out = Path(spec["out"])
    t0 = time.perf_counter()
    w = make_sparse(size, log=lambda m: print(m, file=sys.stderr, flush=True))
    build_s = time.perf_counter() - t0
    metrics = all_metrics()
    figures = measured(
        lambda: neuroneval.evaluate(w.activations, w.concepts, metrics, alpha=size.alpha, out=out, progress=True)
    )
    # The peer and the check, after the peak was read.
    pairs = sparse_pairs(w, spec["peer_pairs"])
    peer_values, peer_s = time_sparse_peer(w, pairs)
    ours = table_rows(out, pairs, size.t, metrics)
    peer_worst = float(abs(ours["inverse_auc"] - peer_values).max())
    checked = pairs[:6]
    worst, compared = worst_difference(
        ours,
        lambda i: (dense_column(w.activations, int(checked[i, 0])), dense_column(w.concepts, int(checked[i, 1]))),
        len(checked),
        size.alpha,
        CHECKED_METRICS,
    )
    rows, columns = parquet_shape(out)
    return {
        **figures,
        "build_s": build_s,
        "input_bytes": w.input_bytes,
        "density": _density_line(w.activations),
        "metrics": len(metrics),
        "rows": rows,
        "columns": columns,
        "peer_pairs": len(pairs),
        "peer_s": peer_s,
        "worst_difference": max(worst, peer_worst),
        "compared": compared + len(pairs),
        "tied_inverse_auc": float(ours["inverse_auc"][0]),
        "threads": neuroneval.num_threads(),
    }


def main(spec_json: str) -> None:
    spec = json.loads(spec_json)
    figures = out_of_core(spec) if spec["workload"] == "out-of-core" else sparse(spec)
    print(json.dumps(figures))


if __name__ == "__main__":
    main(sys.argv[1])
