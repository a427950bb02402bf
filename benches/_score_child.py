"""One `neuroneval.score` call with every metric, in its own process, for its peak memory.

Run by _workload.score_in_child as `python _score_child.py '<json size>'`; prints one JSON line.
The peak is this process's high-water resident set read right after the call, so it counts
the interpreter, numpy, polars, the float32 inputs, everything the call allocates and the
returned table. It is VmHWM from /proc/self/status, not getrusage's ru_maxrss: on Linux a
child's ru_maxrss (RUSAGE_SELF, and the parent's RUSAGE_CHILDREN) starts from the parent's
resident set at fork, so a parent holding the workload would inflate it.
"""

from __future__ import annotations

import json
import resource
import sys
import time


def peak_rss_bytes() -> int:
    """This process's peak resident set: VmHWM where /proc exists, else ru_maxrss."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB elsewhere
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def main(spec_json: str) -> None:
    import neuroneval
    from _workload import Size, make_workload

    spec = json.loads(spec_json)
    size = Size("child", peer_pairs=0, rounds=1, **spec)
    w = make_workload(size)
    rss_before = peak_rss_bytes()
    t0 = time.perf_counter()
    table = neuroneval.score(w.activations, w.concepts, alpha=size.alpha)
    wall = time.perf_counter() - t0
    peak = peak_rss_bytes()
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
