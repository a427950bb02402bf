"""One `neuroneval.score` call with every metric, in its own process, for its peak memory.

Run by _workload.score_in_child as `python _score_child.py '<json size>'`; prints one JSON line.
The peak is this process's ru_maxrss read right after the call, so it counts the interpreter,
numpy, polars, the float32 inputs, everything the call allocates and the returned table.
"""

from __future__ import annotations

import json
import resource
import sys
import time


def main(spec_json: str) -> None:
    import neuroneval
    from _workload import Size, make_workload

    spec = json.loads(spec_json)
    size = Size("child", peer_pairs=0, rounds=1, **spec)
    w = make_workload(size)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0 = time.perf_counter()
    table = neuroneval.score(w.activations, w.concepts, alpha=size.alpha)
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    figures = {
        "wall_s": wall,
        "peak_rss_bytes": peak,
        "rss_before_bytes": rss_before,
        "input_bytes": w.input_bytes,
        "output_bytes": int(table.estimated_size()),
        "rows": table.height,
        "columns": table.width,
        "metrics": len(neuroneval.METRICS),
        "threads": neuroneval.num_threads(),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main(sys.argv[1])
