"""The scale issue's figures: an out-of-core `.npy` file and sparse SAE latents, once, as one markdown table.

    python benches/scale.py                          # both workloads at full size (see the disk note below)
    python benches/scale.py --which sparse           # one workload
    python benches/scale.py --quick                  # the small smoke size (N = 20,000), a few seconds
    python benches/scale.py --rows 200000 --units 2048 --which out-of-core

Out-of-core: N = 1,000,000 rows x K = 8,192 float16 units in one row-major `.npy` file
(16.4 GB) against T = 100 binary concepts (1% positives), every metric but the two
top-random ones, by `neuroneval.evaluate(path, concepts, metrics, out=parquet)`. The figure
that does not depend on the disk is the evaluate run's CPU time (user + system, all threads)
per activation value (target <= 15 ns), beside the same machine's floor: one pass that reads
the file and sums its values, timed in the same run. The named peer for the wall time is
reading the file once (64 MiB plain `readinto` calls into one reusable buffer), timed right
before; also reported: the peak resident set of the evaluate run (target < 3 GB).

Sparse: N = 1,000,000 tokens x K = 16,384 SAE latents with 64 nonzeros per row (a
CSC matrix), T = 100 sparse concepts, all metrics, by `neuroneval.evaluate(csc, concepts,
out=parquet)`. The peer is scikit-learn's `roc_auc_score` on a sample of pairs (densified
columns), as a pairs/s ratio; targets: under 60 s wall, peak resident set under 4 GB.

Each evaluate call runs in a child process (_scale_child.py) that reads its own peak
resident set (VmHWM, reset right before the call, so building the inputs is not counted).
Every run checks the result on a few pairs against an independent computation (scikit-learn,
scipy, numpy on the dense columns). Generated data are kept in --data-dir (default
benches/.data/, made git-ignored) and reused when a file of the same shape is there; the
full out-of-core run needs about 2 x 16.4 GB free there (the file, plus evaluate's one-pass
transposition scratch of the same size next to the output). Progress goes to stderr, the
table to stdout. This module also holds the workloads, peers and checks of bench_scale.py.
"""

from __future__ import annotations

import argparse
import json
import math
import mmap
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from statistics import NormalDist
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from _workload import product_reference, sklearn_peer, threads_line, top_alpha_labels  # noqa: E402

HERE = Path(__file__).resolve().parent
SCALE_CHILD = HERE / "_scale_child.py"
DEFAULT_DATA_DIR = HERE / ".data"
GENERATOR_VERSION = 1  # part of the data files' names: bump when the generators change
READ_CHUNK_BYTES = 64 << 20  # the peer's read size
GEN_ROWS = 1024  # rows per seeded generation chunk (the data do not depend on the write size)
TOP_RANDOM = ("correlation_top_random", "spearman_top_random")
# Metrics checked against an independent computation on a few pairs (scikit-learn, scipy, numpy).
CHECKED_METRICS = ("auc", "auprc", "inverse_auc", "inverse_auprc", "correlation", "cosine", "mad", "spearman")
TOLERANCE = 1e-9
GB = 1e9


def all_metrics() -> list[str]:
    import neuroneval

    return list(neuroneval.METRICS)


def out_of_core_metrics() -> list[str]:
    """Every metric but the top-random variants (the issue's out-of-core set)."""
    return [m for m in all_metrics() if m not in TOP_RANDOM]


# ---------------------------------------------------------------------------------------------
# Sizes


@dataclass(frozen=True)
class OutOfCoreSize:
    """N rows x K float16 units in a row-major .npy file, T binary concepts."""

    name: str
    n: int
    k: int
    t: int = 100
    positive_rate: float = 0.01
    alpha: float = 0.005
    seed: int = 0
    block_units: int | None = None  # None: evaluate's default (256 MiB of activations per block)
    peak_target: float = 3 * GB
    ratio_target: float = 3.0  # neuroneval's wall time over the peer's
    ns_target: float = 15.0  # CPU nanoseconds per activation value

    @property
    def pairs(self) -> int:
        return self.k * self.t

    @property
    def file_bytes(self) -> int:
        return self.n * self.k * 2

    def describe(self) -> str:
        return (
            f"out-of-core: N = {self.n:,} rows x K = {self.k:,} float16 units in one .npy file "
            f"({self.file_bytes / GB:.2f} GB), T = {self.t} binary concepts ({self.positive_rate:.0%} positives), "
            f"alpha = {self.alpha}, {self.pairs:,} pairs"
        )


@dataclass(frozen=True)
class SparseSize:
    """N tokens x K SAE latents with `nnz` nonzeros per row (Zipf-like latent frequencies), T sparse concepts."""

    name: str
    n: int
    k: int
    t: int = 100
    nnz: int = 64
    positive_rate: float = 0.01
    alpha: float = 0.005
    seed: int = 0
    zipf_exponent: float = 1.0  # latent of frequency rank r is drawn with weight (r + shift)^-exponent
    zipf_shift: float = 30.0
    correlated: float = 0.5  # share of the concepts that follow a latent
    wall_target: float = 60.0
    peak_target: float = 4 * GB

    @property
    def pairs(self) -> int:
        return self.k * self.t

    def describe(self) -> str:
        return (
            f"sparse: N = {self.n:,} tokens x K = {self.k:,} SAE latents, {self.nnz} nonzeros per row "
            f"({self.n * self.nnz:,} in all, CSC), T = {self.t} sparse concepts ({self.positive_rate:.0%} positives), "
            f"alpha = {self.alpha}, {self.pairs:,} pairs"
        )


OOC_FULL = OutOfCoreSize("full", n=1_000_000, k=8_192)
# Small: several blocks, so that the one-pass transposition into scratch files is exercised.
OOC_SMALL = OutOfCoreSize("small", n=20_000, k=256, block_units=64)
SPARSE_FULL = SparseSize("full", n=1_000_000, k=16_384)
SPARSE_SMALL = SparseSize("small", n=20_000, k=1_024)


# ---------------------------------------------------------------------------------------------
# Memory and page cache


def _status_bytes(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def current_rss_bytes() -> int | None:
    return _status_bytes("VmRSS")


def reset_peak_rss() -> bool:
    """Reset this process's VmHWM to its current resident set (Linux >= 4.0); False if not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def evict(path: Path) -> None:
    """Ask the kernel to drop the file's clean pages from the page cache (no root needed)."""
    if not hasattr(os, "posix_fadvise"):  # pragma: no cover - not Linux
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # dirty pages cannot be dropped
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def ignore_data_dir(data_dir: Path) -> None:
    """Create the data directory; inside the repository, make it git-ignored by itself (a `*`
    .gitignore inside, as venv does), so that gigabytes of data are never committed."""
    data_dir.mkdir(parents=True, exist_ok=True)
    marker = data_dir / ".gitignore"
    if data_dir.resolve().is_relative_to(HERE.parent) and not marker.exists():
        marker.write_text("# generated benchmark data (benches/scale.py)\n*\n", encoding="utf-8")


def check_free_space(directory: Path, needed: int, what: str) -> None:
    free = shutil.disk_usage(directory).free
    if free < needed:
        raise SystemExit(f"{what} needs about {needed / GB:.1f} GB free in {directory}; only {free / GB:.1f} GB are")


# ---------------------------------------------------------------------------------------------
# Out-of-core workload: generated straight to disk, never N x K in memory


def out_of_core_paths(size: OutOfCoreSize, data_dir: Path) -> tuple[Path, Path]:
    """The activation file and its concepts (positive (row, column) pairs in an .npz)."""
    stem = f"ooc-n{size.n}-k{size.k}-t{size.t}-s{size.seed}-v{GENERATOR_VERSION}"
    return data_dir / f"{stem}.npy", data_dir / f"{stem}-concepts.npz"


def _unit_parameters(size: OutOfCoreSize) -> tuple[np.ndarray, np.ndarray]:
    """Per-unit offset and scale: activation = scale * max(0, z + offset), z standard normal,
    so units are active on 7% to 84% of inputs, with different magnitudes."""
    rng = np.random.default_rng([size.seed, 0])
    offset = np.clip(rng.normal(-0.5, 0.5, size.k), -1.5, 1.0).astype(np.float32)
    scale = rng.lognormal(0.0, 0.5, size.k).astype(np.float32)
    return offset, scale


def _npy_matches(path: Path, shape: tuple[int, int], dtype: np.dtype[Any]) -> bool:
    try:
        arr = np.load(path, mmap_mode="r")
    except (OSError, ValueError):
        return False
    ok = (
        arr.shape == shape
        and arr.dtype == dtype
        and arr.flags.c_contiguous
        and path.stat().st_size == arr.offset + arr.nbytes
    )
    del arr
    return bool(ok)


def ensure_out_of_core(size: OutOfCoreSize, data_dir: Path, log: Callable[[str], None] = lambda _: None) -> Path:
    """The activation file of `size` in `data_dir`, generated (streaming) unless a complete file
    of the same shape is there already. Returns its path; the concepts lie next to it.

    Unit t's activations are scale_t * max(0, z + offset_t) (float16); concept t (of T) is
    positive where unit t (mod K) is in its top `positive_rate` (z above the normal quantile),
    each such positive dropped with probability t / T and as many random positives added: so
    concept 0 is unit 0's top 1% exactly and the last concepts are nearly noise."""
    ignore_data_dir(data_dir)
    path, concepts_path = out_of_core_paths(size, data_dir)
    if concepts_path.is_file() and _npy_matches(path, (size.n, size.k), np.dtype("<f2")):
        log(f"reusing {path}")
        return path
    check_free_space(data_dir, size.file_bytes + (64 << 20), f"generating {path.name}")
    log(f"generating {path} ({size.file_bytes / GB:.2f} GB), in {GEN_ROWS}-row chunks")
    offset, scale = _unit_parameters(size)
    tied = np.arange(size.t) % size.k  # the unit each concept follows
    drop = np.arange(size.t, dtype=np.float32) / size.t
    cut = NormalDist().inv_cdf(1.0 - size.positive_rate)
    rows_out: list[np.ndarray] = []
    cols_out: list[np.ndarray] = []
    tmp = path.with_name(path.name + ".tmp")
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype("<f2")), "fortran_order": False, "shape": (size.n, size.k)}
    started, shown = time.perf_counter(), 0
    with open(tmp, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        for chunk, lo in enumerate(range(0, size.n, GEN_ROWS)):
            hi = min(size.n, lo + GEN_ROWS)
            rng = np.random.default_rng([size.seed, 1, chunk])
            z = rng.standard_normal((hi - lo, size.k), dtype=np.float32)
            top = z[:, tied] > cut
            keep = top & (rng.random(top.shape, dtype=np.float32) >= drop)
            extra = rng.random(top.shape, dtype=np.float32) < size.positive_rate * drop
            r, c = np.nonzero(keep | extra)
            rows_out.append((r + lo).astype(np.int64))
            cols_out.append(c.astype(np.int64))
            z += offset
            np.maximum(z, 0.0, out=z)
            z *= scale
            f.write(z.astype("<f2").data)
            if hi * 10 // size.n > shown:
                shown = hi * 10 // size.n
                log(f"  {hi:,} of {size.n:,} rows ({time.perf_counter() - started:.0f} s)")
        f.flush()
        os.fsync(f.fileno())
    np.savez(concepts_path, rows=np.concatenate(rows_out), columns=np.concatenate(cols_out), shape=[size.n, size.t])
    os.replace(tmp, path)  # the .npy appears under its name only when complete
    return path


def out_of_core_concepts(concepts_path: Path, columns: Sequence[int] | None = None) -> np.ndarray:
    """The (N, T) float32 0/1 concepts, or only `columns` of them."""
    with np.load(concepts_path) as z:
        rows, cols, (n, t) = z["rows"], z["columns"], z["shape"]
    if columns is None:
        out = np.zeros((int(n), int(t)), dtype=np.float32)
        out[rows, cols] = 1.0
        return out
    out = np.zeros((int(n), len(columns)), dtype=np.float32)
    for j, col in enumerate(columns):
        out[rows[cols == col], j] = 1.0
    return out


def _chunk_reading(path: Path) -> tuple[tuple[int, int], np.dtype[Any], int, int, int, bytearray]:
    """What the peers need to read the `.npy` file in 64 MiB row chunks: its shape, dtype and
    data offset, the bytes of one row, the rows of one chunk, and one reusable chunk buffer."""
    arr = np.load(path, mmap_mode="r")
    (n, k), dtype, offset = arr.shape, arr.dtype, int(arr.offset)
    del arr
    row_bytes = k * dtype.itemsize
    chunk_rows = max(1, READ_CHUNK_BYTES // row_bytes)
    return (n, k), dtype, offset, row_bytes, chunk_rows, bytearray(chunk_rows * row_bytes)


def read_file_peer(path: Path, columns: Sequence[int] = ()) -> tuple[float, np.ndarray]:
    """The named peer: read the whole file once, 64 MiB at a time, with plain `readinto` calls
    into one reusable buffer. Returns the seconds spent in the reads and, as a by-product
    (copied out between reads, not timed), the values of `columns` for the correctness check."""
    (n, k), dtype, offset, row_bytes, chunk_rows, buf = _chunk_reading(path)
    view = memoryview(buf)
    picked = np.empty((n, len(columns)), dtype=dtype)
    cols = np.asarray(columns, dtype=np.int64)
    seconds = 0.0
    with open(path, "rb", buffering=0) as f:
        t0 = time.perf_counter()
        head = f.read(offset)
        seconds += time.perf_counter() - t0
        if len(head) != offset:
            raise OSError(f"{path} ended in its header")
        row = 0
        while row < n:
            rows = min(chunk_rows, n - row)
            want = rows * row_bytes
            got = 0
            t0 = time.perf_counter()
            while got < want:
                r = f.readinto(view[got:want])
                if not r:
                    raise OSError(f"{path} ended early, at row {row + got // row_bytes} of {n}")
                got += r
            seconds += time.perf_counter() - t0
            if len(cols):
                picked[row : row + rows] = np.frombuffer(buf, dtype=dtype, count=rows * k).reshape(rows, k)[:, cols]
            row += rows
    return seconds, picked


def sum_pass_peer(path: Path) -> tuple[float, float, float]:
    """The floor of any exact method that reads every value: one pass that reads the file
    (64 MiB `readinto` calls into one buffer, as `read_file_peer`) and sums each chunk's
    values (float64 accumulation: numpy's fastest sum of float16 here). Returns its CPU
    seconds (user + system), its wall seconds and the sum."""
    (n, k), dtype, offset, row_bytes, chunk_rows, buf = _chunk_reading(path)
    view = memoryview(buf)
    total = 0.0
    c0, t0 = time.process_time(), time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        f.seek(offset)
        row = 0
        while row < n:
            rows = min(chunk_rows, n - row)
            want, got = rows * row_bytes, 0
            while got < want:
                r = f.readinto(view[got:want])
                if not r:
                    raise OSError(f"{path} ended early, at row {row + got // row_bytes} of {n}")
                got += r
            total += float(np.frombuffer(buf, dtype=dtype, count=rows * k).sum(dtype=np.float64))
            row += rows
    return time.process_time() - c0, time.perf_counter() - t0, total


def direct_sum_pass_peer(path: Path) -> tuple[float, float, float]:
    """`sum_pass_peer` with reads past the page cache (`O_DIRECT`, 64 MiB aligned reads into
    one page-aligned buffer), as `evaluate` reads a large file: the kernel's cache costs CPU
    that a file read once does not need. Returns the same three figures."""
    (n, k), dtype, offset, _, _, _ = _chunk_reading(path)
    end = offset + n * k * dtype.itemsize
    buf = mmap.mmap(-1, READ_CHUNK_BYTES)  # page-aligned, as O_DIRECT needs
    total = 0.0
    c0, t0 = time.process_time(), time.perf_counter()
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        at = 0  # aligned file offsets; the chunks' bounds fall between values (even bytes)
        while at < end:
            got = os.preadv(fd, [buf], at)
            if not got:
                raise OSError(f"{path} ended early, at byte {at} of {end}")
            lo, hi = max(offset, at) - at, min(end, at + got) - at
            total += float(
                np.frombuffer(buf, dtype=dtype, count=(hi - lo) // dtype.itemsize, offset=lo).sum(dtype=np.float64)
            )
            at += got
    finally:
        os.close(fd)
    return time.process_time() - c0, time.perf_counter() - t0, total


def out_of_core_check_pairs(size: OutOfCoreSize, seed: int = 1) -> np.ndarray:
    """Pairs checked against the independent computation: three concepts with the unit they
    follow (strong, medium, weak) and three random pairs."""
    rng = np.random.default_rng(seed)
    tied = [(c % size.k, c) for c in (0, 1, size.t // 2)]
    rand = [(int(rng.integers(size.k)), int(rng.integers(size.t))) for _ in range(3)]
    return np.array(tied + rand, dtype=np.int64)


# ---------------------------------------------------------------------------------------------
# Sparse workload: CSC from (row, column, value) arrays, never dense


@dataclass
class SparseWorkload:
    size: SparseSize
    activations: Any  # scipy.sparse.csc_matrix (N, K) float32, nonnegative
    concepts: Any  # scipy.sparse.csc_matrix (N, T) float32, 0/1
    followed: np.ndarray  # (T,) the latent each concept follows, -1 for a random concept

    @property
    def input_bytes(self) -> int:
        a, c = self.activations, self.concepts
        return int(sum(x.nbytes for x in (a.data, a.indices, a.indptr, c.data, c.indices, c.indptr)))


def latent_weights(size: SparseSize) -> np.ndarray:
    """Zipf-like weights over the latents (shuffled ids): a few frequent latents, many rare."""
    rank = np.arange(size.k, dtype=np.float64)
    w = (rank + size.zipf_shift) ** -size.zipf_exponent
    out = np.empty(size.k)
    out[np.random.default_rng([size.seed, 2]).permutation(size.k)] = w / w.sum()
    return out


def _draw_distinct(rng: np.random.Generator, cdf: np.ndarray, rows: int, m: int) -> np.ndarray:
    """`m` distinct latents per row, each drawn by weight (duplicates redrawn), sorted."""
    k = len(cdf)
    idx = np.minimum(np.searchsorted(cdf, rng.random((rows, m)), side="right"), k - 1).astype(np.int32)
    idx.sort(axis=1)
    while True:
        dup = np.zeros(idx.shape, dtype=bool)
        dup[:, 1:] = idx[:, 1:] == idx[:, :-1]
        bad = np.flatnonzero(dup.any(axis=1))
        if not len(bad):
            return idx
        sub, d = idx[bad], dup[bad]
        sub[d] = np.minimum(np.searchsorted(cdf, rng.random(int(d.sum())), side="right"), k - 1)
        sub.sort(axis=1)
        idx[bad] = sub


def make_sparse(size: SparseSize, log: Callable[[str], None] = lambda _: None) -> SparseWorkload:
    """The seeded sparse workload. Each token has `nnz` active latents, drawn without
    replacement by the Zipf-like weights, with lognormal values times a per-latent scale. Built
    as (row, column, value) arrays in row chunks (rows implicit: `nnz` per row, i.e. CSR), then
    converted to CSC by scipy: the matrix is never dense. Concepts: a share `correlated`
    follow a latent of about 1% density (its active tokens, each kept with a probability that
    leaves room for random positives), the rest are random; 1% positives each."""
    import scipy.sparse as sp

    if size.nnz > size.k:
        raise ValueError(f"{size.nnz} nonzeros per row need at least as many latents; K = {size.k}")
    n, k, m = size.n, size.k, size.nnz
    cdf = np.cumsum(latent_weights(size))
    scale = np.random.default_rng([size.seed, 3]).lognormal(0.0, 0.5, k).astype(np.float32)
    indices = np.empty(n * m, dtype=np.int32)
    data = np.empty(n * m, dtype=np.float32)
    chunk_rows = 1 << 15
    for chunk, lo in enumerate(range(0, n, chunk_rows)):
        hi = min(n, lo + chunk_rows)
        rng = np.random.default_rng([size.seed, 4, chunk])
        idx = _draw_distinct(rng, cdf, hi - lo, m)
        indices[lo * m : hi * m] = idx.reshape(-1)
        data[lo * m : hi * m] = (rng.lognormal(0.0, 0.75, idx.shape).astype(np.float32) * scale[idx]).reshape(-1)
    indptr = np.arange(0, (n + 1) * m, m, dtype=np.int64)
    csr = sp.csr_matrix((data, indices, indptr), shape=(n, k))
    del data, indices
    acts = csr.tocsc()
    del csr
    log(f"  {acts.nnz:,} nonzeros, {_density_line(acts)}")

    rng = np.random.default_rng([size.seed, 5])
    counts = np.diff(acts.indptr)
    density = counts / n
    n_tied = int(round(size.correlated * size.t))
    near = np.flatnonzero((density >= size.positive_rate / 2) & (density <= size.positive_rate * 5))
    if len(near) < n_tied:
        near = np.argsort(np.abs(np.log((density + 1e-12) / size.positive_rate)))[: max(n_tied, 1)]
    followed = np.full(size.t, -1, dtype=np.int64)
    followed[:n_tied] = rng.choice(near, size=n_tied, replace=False)
    columns: list[np.ndarray] = []
    for t in range(size.t):
        rate = size.positive_rate
        positives = np.empty(0, dtype=np.int64)
        if followed[t] >= 0:
            lat = int(followed[t])
            active = acts.indices[acts.indptr[lat] : acts.indptr[lat + 1]].astype(np.int64)
            keep = min(0.9, 0.8 * size.positive_rate / max(density[lat], 1e-12))
            positives = active[rng.random(len(active)) < keep]
            rate = max(0.0, size.positive_rate - density[lat] * keep)
        columns.append(np.union1d(positives, np.flatnonzero(rng.random(n) < rate)))
    c_indptr = np.zeros(size.t + 1, dtype=np.int64)
    np.cumsum([len(c) for c in columns], out=c_indptr[1:])
    c_indices = np.concatenate(columns).astype(np.int32)
    concepts = sp.csc_matrix((np.ones(len(c_indices), dtype=np.float32), c_indices, c_indptr), shape=(n, size.t))
    return SparseWorkload(size, acts, concepts, followed)


def _density_line(acts: Any) -> str:
    d = np.sort(np.diff(acts.indptr) / acts.shape[0])[::-1]
    return (
        f"latent density: max {d[0]:.1%}, median {np.median(d):.3%}, min {d[-1]:.4%}; "
        f"{np.mean(d == 0):.1%} never active"
    )


def sparse_pairs(w: SparseWorkload, count: int, seed: int = 1) -> np.ndarray:
    """`count` pairs for the peer and the check: up to three concepts with the latent they
    follow, the rest random (unit, concept) pairs. Every concept has both classes."""
    rng = np.random.default_rng(seed)
    tied = [(int(w.followed[t]), t) for t in np.flatnonzero(w.followed >= 0)[:3]][:count]
    rand = [(int(rng.integers(w.size.k)), int(rng.integers(w.size.t))) for _ in range(count - len(tied))]
    return np.array(tied + rand, dtype=np.int64).reshape(-1, 2)


def dense_column(m: Any, j: int) -> np.ndarray:
    """Column j of a CSC matrix as a dense float64 vector."""
    out = np.zeros(m.shape[0], dtype=np.float64)
    lo, hi = m.indptr[j], m.indptr[j + 1]
    out[m.indices[lo:hi]] = m.data[lo:hi]
    return out


def time_sparse_peer(w: SparseWorkload, pairs: np.ndarray, rounds: int = 1) -> tuple[np.ndarray, float]:
    """The peer: sklearn.metrics.roc_auc_score(concept >= 0.5, latent activation) on each pair,
    on columns densified beforehand (untimed). Its values (= our inverse_auc) and the fastest time."""
    fn = sklearn_peer("inverse_auc")
    inputs = [(dense_column(w.concepts, t) >= 0.5, dense_column(w.activations, u)) for u, t in pairs]
    best, values = math.inf, np.empty(0)
    for _ in range(max(1, rounds)):
        t0 = time.perf_counter()
        values = np.array([fn(y, s) for y, s in inputs], dtype=np.float64)
        best = min(best, time.perf_counter() - t0)
    return values, best


# ---------------------------------------------------------------------------------------------
# Correctness: our values on a few pairs against an independent computation


def reference(metric: str, a: np.ndarray, c: np.ndarray, alpha: float) -> float:
    """The value of `metric` for one pair computed without neuroneval (NaN when undefined)."""
    a = a.astype(np.float64)
    c = c.astype(np.float64)
    if metric in ("auc", "auprc"):  # label: the unit's top-alpha set; score: the concept
        y, s = top_alpha_labels(a, alpha), c
    elif metric in ("inverse_auc", "inverse_auprc"):  # label: concept >= 0.5; score: the activation
        y, s = c >= 0.5, a
    else:
        if np.ptp(a) == 0 or np.ptp(c) == 0:
            return math.nan
        return product_reference(metric, a, c)
    if not y.any() or (y.all() and metric.endswith("auc")):  # average precision needs no negatives
        return math.nan
    return float(sklearn_peer(metric)(y, s))


def table_rows(out: Path, pairs: np.ndarray, n_concepts: int, metrics: Sequence[str]) -> dict[str, np.ndarray]:
    """The result rows of `pairs` from the parquet file `evaluate` wrote (row = unit * T + concept)."""
    import polars as pl

    wanted = (pairs[:, 0] * n_concepts + pairs[:, 1]).tolist()
    got = (
        pl.scan_parquet(out)
        .with_row_index("row")
        .filter(pl.col("row").is_in(wanted))
        .select("row", "unit", "concept", *metrics)
        .collect()
    )
    by_row = {r: i for i, r in enumerate(got["row"].to_list())}
    order = [by_row[r] for r in wanted]
    cols = {name: got[name].to_numpy()[order] for name in ("unit", "concept", *metrics)}
    if not (np.array_equal(cols["unit"], pairs[:, 0]) and np.array_equal(cols["concept"], pairs[:, 1])):
        raise AssertionError("the parquet rows are not in (unit, concept) order")
    return cols


def worst_difference(
    ours: dict[str, np.ndarray],
    columns: Callable[[int], tuple[np.ndarray, np.ndarray]],
    n_pairs: int,
    alpha: float,
    metrics: Sequence[str] = CHECKED_METRICS,
) -> tuple[float, int]:
    """The largest |ours - reference| over the pairs and metrics (columns(i) gives pair i's
    activation and concept columns), and how many values were compared. A NaN on one side
    only counts as an infinite difference."""
    worst, compared = 0.0, 0
    for i in range(n_pairs):
        a, c = columns(i)
        for metric in metrics:
            expected, got = reference(metric, a, c, alpha), float(ours[metric][i])
            if math.isnan(expected) and math.isnan(got):
                continue
            diff = abs(got - expected) if not (math.isnan(expected) or math.isnan(got)) else math.inf
            worst, compared = max(worst, diff), compared + 1
    return worst, compared


def parquet_shape(out: Path) -> tuple[int, int]:
    import polars as pl

    lf = pl.scan_parquet(out)
    return int(lf.select(pl.len()).collect().item()), len(lf.collect_schema())


# ---------------------------------------------------------------------------------------------
# The child process (peak memory) and the two runs


def run_child(spec: dict[str, Any], progress: bool, timeout: float = 7200.0) -> dict[str, Any]:
    """Run _scale_child.py with `spec` and return its figures (its last stdout line, JSON).
    With `progress`, the child's stderr (evaluate's notices, its bar on a terminal) is shown."""
    proc = subprocess.run(
        [sys.executable, str(SCALE_CHILD), json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=None if progress else subprocess.PIPE,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"scale child failed ({proc.returncode}):\n{proc.stderr or '(its stderr is above)'}")
    figures: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return figures


def _fresh_output(out: Path) -> None:
    """No leftover result or unfinished run: evaluate would resume it instead of computing."""
    from neuroneval._evaluate import partial_dir

    out.unlink(missing_ok=True)
    shutil.rmtree(partial_dir(out), ignore_errors=True)


def run_out_of_core(
    size: OutOfCoreSize, data_dir: Path, cold: bool = True, log: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    """Generate (or reuse) the file, time the peer, run evaluate in a child, check a few pairs."""
    path = ensure_out_of_core(size, data_dir, log)
    _, concepts_path = out_of_core_paths(size, data_dir)
    out = data_dir / f"{path.stem}-scores.parquet"
    _fresh_output(out)
    blocks = math.ceil(size.k / size.block_units) if size.block_units else None
    if blocks != 1:  # several blocks (the default at full size): a scratch copy next to the output
        check_free_space(data_dir, size.file_bytes + (256 << 20), "evaluate's scratch copy")
    pairs = out_of_core_check_pairs(size)
    units = sorted(set(pairs[:, 0].tolist()))
    if cold:
        evict(path)
    log(f"peer: reading {path.name} once ({READ_CHUNK_BYTES >> 20} MiB readinto, {'cold' if cold else 'warm'} cache)")
    peer_s, picked = read_file_peer(path, units)
    if cold:
        evict(path)
    log("floor: one pass that reads and sums every value (buffered reads, then direct)")
    sum_cpu_s, sum_wall_s, total = sum_pass_peer(path)
    if cold:
        evict(path)
    direct_cpu_s, direct_wall_s, direct_total = direct_sum_pass_peer(path)
    if not math.isclose(direct_total, total, rel_tol=1e-9):  # the same values, summed in other chunks
        raise RuntimeError(f"the two sum passes disagree: {total!r} against {direct_total!r}")
    if cold:
        evict(path)
    metrics = out_of_core_metrics()
    log(f"neuroneval.evaluate with {len(metrics)} metrics, in a child process")
    spec = {
        "workload": "out-of-core",
        "path": str(path),
        "concepts": str(concepts_path),
        "out": str(out),
        "metrics": metrics,
        "alpha": size.alpha,
        "block_units": size.block_units,
        "cold": cold,
    }
    child = run_child(spec, progress=True)
    log("checking a few pairs against scikit-learn / scipy / numpy")
    rows, columns = parquet_shape(out)
    ours = table_rows(out, pairs, size.t, metrics)
    concept_cols = out_of_core_concepts(concepts_path, sorted(set(pairs[:, 1].tolist())))
    cpos = {c: j for j, c in enumerate(sorted(set(pairs[:, 1].tolist())))}
    worst, compared = worst_difference(
        ours,
        lambda i: (picked[:, units.index(int(pairs[i, 0]))], concept_cols[:, cpos[int(pairs[i, 1])]]),
        len(pairs),
        size.alpha,
    )
    _fresh_output(out)
    return {
        **child,
        "peer_s": peer_s,
        "ratio": child["wall_s"] / peer_s,  # neuroneval's wall time over one read of the file
        # CPU nanoseconds per activation value, ours and the sum pass's (the disk-free figure)
        "ns_per_value": child["cpu_s"] / (size.n * size.k) * 1e9,
        "sum_ns_per_value": sum_cpu_s / (size.n * size.k) * 1e9,
        "sum_wall_s": sum_wall_s,
        "direct_sum_ns_per_value": direct_cpu_s / (size.n * size.k) * 1e9,
        "direct_sum_wall_s": direct_wall_s,
        "rows": rows,
        "columns": columns,
        "metrics": len(metrics),
        "worst_difference": worst,
        "compared": compared,
        "tied_inverse_auc": float(ours["inverse_auc"][0]),
        "cold": cold,
    }


def run_sparse(size: SparseSize, data_dir: Path, peer_pairs: int) -> dict[str, Any]:
    """Build, evaluate, time the peer and check, all in a child process (the inputs exist once)."""
    ignore_data_dir(data_dir)
    out = data_dir / f"sparse-n{size.n}-k{size.k}-scores.parquet"
    _fresh_output(out)
    spec = {"workload": "sparse", "size": asdict(size), "out": str(out), "peer_pairs": peer_pairs}
    try:
        return run_child(spec, progress=True)
    finally:
        _fresh_output(out)


# ---------------------------------------------------------------------------------------------
# The table


def fmt_gb(b: float) -> str:
    return f"{b / GB:.2f} GB"


def fmt_rate(x: float) -> str:
    return f"{x / 1e6:.2f} M" if x >= 1e6 else f"{x / 1e3:.1f} k" if x >= 1e3 else f"{x:.1f}"


def met(ok: bool, full: bool) -> str:
    return ("yes" if ok else "**no**") if full else "n/a (targets are for the full size)"


def out_of_core_row(size: OutOfCoreSize, r: dict[str, Any]) -> str:
    full = replace(size, block_units=None) == OOC_FULL
    ok = r["ns_per_value"] <= size.ns_target and r["peak_rss_bytes"] < size.peak_target
    speed = size.file_bytes / r["peer_s"] / GB
    return (
        f"| out-of-core `.npy`, {r['metrics']} metrics | {r['wall_s']:.1f} s ({r['ns_per_value']:.1f} ns of CPU "
        f"per value) | read the file once ({READ_CHUNK_BYTES >> 20} MiB `readinto`, "
        f"{'cold' if r['cold'] else 'warm'} cache): {r['peer_s']:.2f} s ({speed:.2f} GB/s) "
        f"| {r['ratio']:.2f}x the peer's time | {fmt_gb(r['peak_rss_bytes'])} "
        f"| CPU <= {size.ns_target:g} ns per value, peak < {fmt_gb(size.peak_target)} | {met(ok, full)} |"
    )


def per_value_note(size: OutOfCoreSize, r: dict[str, Any]) -> str:
    """The figure that does not depend on the disk: CPU time per activation value, against the
    same machine's pass that only reads and sums the file, measured in the same run."""
    full = replace(size, block_units=None) == OOC_FULL
    target = f"target <= {size.ns_target:g} ns: {met(r['ns_per_value'] <= size.ns_target, full)}"
    return (
        f"out-of-core CPU time per activation value ({r['metrics']} metrics x {size.t} concepts): "
        f"{r['ns_per_value']:.2f} ns ({r['cpu_s']:.1f} s of CPU on {r['threads']} threads; {target}); "
        f"one pass that reads and sums every value: {r['sum_ns_per_value']:.2f} ns ({r['sum_wall_s']:.1f} s wall) "
        f"by buffered reads, {r['direct_sum_ns_per_value']:.2f} ns ({r['direct_sum_wall_s']:.1f} s wall) by direct "
        f"reads, so {r['ns_per_value'] / r['direct_sum_ns_per_value']:.1f}x the direct floor; wall time {r['wall_s']:.1f} s = "
        f"{r['ratio']:.2f}x one read of the file"
    )


def sparse_row(size: SparseSize, r: dict[str, Any]) -> str:
    full = size == SPARSE_FULL
    ok = r["wall_s"] < size.wall_target and r["peak_rss_bytes"] < size.peak_target
    ours_rate = size.pairs / r["wall_s"]
    peer_rate = r["peer_pairs"] / r["peer_s"]
    return (
        f"| sparse CSC, {r['metrics']} metrics | {r['wall_s']:.1f} s ({fmt_rate(ours_rate)} pairs/s) "
        f"| sklearn `roc_auc_score`, {r['peer_pairs']} pairs (densified): {fmt_rate(peer_rate)} pairs/s "
        f"| {ours_rate / peer_rate:,.0f}x the peer's pairs/s | {fmt_gb(r['peak_rss_bytes'])} "
        f"| wall < {size.wall_target:g} s, peak < {fmt_gb(size.peak_target)} | {met(ok, full)} |"
    )


def check_failures(name: str, pairs: int, r: dict[str, Any]) -> list[str]:
    """What is wrong with a run's result: its shape, or its values on the checked pairs."""
    wrong = []
    if r["rows"] != pairs or r["columns"] != 2 + r["metrics"]:
        wrong.append(f"{name}: the table is {r['rows']} x {r['columns']}, not {pairs} x {2 + r['metrics']}")
    if not r["worst_difference"] <= TOLERANCE:
        wrong.append(f"{name}: a checked value differs by {r['worst_difference']:.3g} (over {TOLERANCE:g})")
    return wrong


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--which", choices=("out-of-core", "sparse", "all"), default="all")
    parser.add_argument("--rows", type=int, default=None, help="N (default 1,000,000; 20,000 with --quick)")
    parser.add_argument("--units", type=int, default=None, help="K (default 8,192 out-of-core, 16,384 sparse)")
    parser.add_argument("--quick", action="store_true", help="the small smoke size (N = 20,000)")
    parser.add_argument(
        "--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="generated data (default benches/.data)"
    )
    parser.add_argument("--block-units", type=int, default=None, help="evaluate's block_units (out-of-core)")
    parser.add_argument("--peer-pairs", type=int, default=30, help="pairs scikit-learn scores (default 30)")
    parser.add_argument("--warm", action="store_true", help="leave the file in the page cache (default: evict it)")
    args = parser.parse_args(argv)

    ooc = OOC_SMALL if args.quick else OOC_FULL
    sparse = SPARSE_SMALL if args.quick else SPARSE_FULL
    for name, value in (("n", args.rows), ("k", args.units)):
        if value is not None:
            ooc, sparse = replace(ooc, **{name: value}), replace(sparse, **{name: value})
    if args.block_units is not None:
        ooc = replace(ooc, block_units=args.block_units)
    data_dir = args.data_dir.resolve()
    started = time.perf_counter()
    rows, notes, failed = [], [], []
    if args.which in ("out-of-core", "all"):
        log(ooc.describe())
        r = run_out_of_core(ooc, data_dir, cold=not args.warm, log=log)
        rows.append(out_of_core_row(ooc, r))
        failed += check_failures("out-of-core", ooc.pairs, r)
        notes.append(per_value_note(ooc, r))
        notes.append(
            f"out-of-core: {r['rows']:,} rows x {r['columns']} columns written; peak RSS {fmt_gb(r['peak_rss_bytes'])}, "
            f"{fmt_gb(r['rss_before_bytes'])} before the call (interpreter + dense concepts); "
            f"{r['compared']} values on {len(out_of_core_check_pairs(ooc))} pairs checked, largest difference "
            f"{r['worst_difference']:.1e}; inverse_auc of concept 0 with the unit it follows: {r['tied_inverse_auc']:.4f}"
        )
    if args.which in ("sparse", "all"):
        log(sparse.describe())
        r = run_sparse(sparse, data_dir, args.peer_pairs)
        rows.append(sparse_row(sparse, r))
        failed += check_failures("sparse", sparse.pairs, r)
        notes.append(
            f"sparse: {r['rows']:,} rows x {r['columns']} columns written; peak RSS {fmt_gb(r['peak_rss_bytes'])}, "
            f"{fmt_gb(r['rss_before_bytes'])} before the call (interpreter + inputs of {fmt_gb(r['input_bytes'])}); "
            f"built in {r['build_s']:.1f} s; {r['density']}; {r['compared']} values checked, largest difference "
            f"{r['worst_difference']:.1e}; inverse_auc of a concept with the latent it follows: {r['tied_inverse_auc']:.4f}"
        )
    sizes = [s for s, on in ((ooc, args.which != "sparse"), (sparse, args.which != "out-of-core")) if on]
    print("**Workloads**: " + "; ".join(s.describe() for s in sizes) + ".  ")
    print(f"**Machine**: {threads_line()}.\n")
    print("| workload | neuroneval wall | peer | ratio | peak RSS | target | met? |")
    print("|---|---:|---|---:|---:|---|---|")
    print("\n".join(rows))
    print()
    for note in notes:
        print(f"- {note}.")
    print(f"\nTotal run time {time.perf_counter() - started:.0f} s (data in {data_dir}).")
    if failed:
        print(f"check failed: {'; '.join(failed)}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
