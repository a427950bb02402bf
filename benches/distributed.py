"""Ray-distributed `evaluate` against single-process `evaluate` (the peer), on this machine.

    python benches/distributed.py [--data-dir DIR] [--units 256]

The workload: an N = 200,000 x K float32 `.npy` file and T = 50 binary concepts (seeded,
cached in DIR), all metrics but the two top-random ones. Each mode runs in a fresh
subprocess: `evaluate` with 1 and 2 threads, and `distributed.evaluate` on a fresh local Ray
with 1 and 2 worker processes (Ray's start-up is reported apart, not in the wall time). The
outputs are checked equal; the table gives each wall time and its ratio to 1-thread `evaluate`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

N, T = 200_000, 50

_CHILD = r"""
import json, os, shutil, sys, time
import neuroneval
from neuroneval import distributed
mode, acts, concepts, out = sys.argv[1:5]
metrics = [m for m in neuroneval.METRICS if "top_random" not in m]
if os.path.exists(out):
    os.remove(out)
shutil.rmtree(out + ".partial", ignore_errors=True)
result = {"mode": mode}
if mode.startswith("single"):
    start = time.perf_counter()
    neuroneval.evaluate(acts, concepts, metrics, out=out, progress=False)
    result["wall"] = time.perf_counter() - start
else:
    import ray
    start = time.perf_counter()
    ray.init(num_cpus=int(mode[-1]), include_dashboard=False, log_to_driver=False)
    result["ray_init"] = time.perf_counter() - start
    start = time.perf_counter()
    distributed.evaluate(acts, concepts, metrics, out=out, progress=False)
    result["wall"] = time.perf_counter() - start
    ray.shutdown()
print(json.dumps(result))
"""


def main() -> int:
    import numpy as np
    import polars as pl

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path(__file__).parent / ".data" / "distributed")
    parser.add_argument("--units", type=int, default=256)
    args = parser.parse_args()
    d: Path = args.data_dir
    d.mkdir(parents=True, exist_ok=True)
    acts, concepts = d / f"acts-{args.units}.npy", d / "concepts.npy"
    if not acts.exists() or not concepts.exists():
        rng = np.random.default_rng(0)
        np.save(acts, rng.normal(size=(N, args.units)).astype(np.float32))
        np.save(concepts, (rng.random((N, T)) < 0.1).astype(np.float64))
    rows = []
    for mode, threads in (("single1", 1), ("single2", 2), ("ray1", 1), ("ray2", 1)):
        env = dict(os.environ, NEURONEVAL_NUM_THREADS=str(threads))
        out = d / f"{mode}.parquet"
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, mode, str(acts), str(concepts), str(out)],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    reference = pl.read_parquet(d / "single1.parquet")
    for r in rows[1:]:
        if not pl.read_parquet(d / f"{r['mode']}.parquet").equals(reference):
            raise SystemExit(f"{r['mode']}: the output differs from single-process evaluate")
    peer = rows[0]["wall"]
    names = {
        "single1": "evaluate, 1 thread (peer)",
        "single2": "evaluate, 2 threads",
        "ray1": "distributed, 1 worker",
        "ray2": "distributed, 2 workers",
    }
    print(f"N = {N:,} x K = {args.units} float32 .npy, T = {T}, 22 metrics; outputs equal")
    print("| run | wall | speed vs the peer |\n|---|---:|---:|")
    for r in rows:
        extra = f" (+ Ray start {r['ray_init']:.1f} s)" if "ray_init" in r else ""
        print(f"| {names[r['mode']]} | {r['wall']:.1f} s{extra} | {peer / r['wall']:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
