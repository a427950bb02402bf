"""`neuroneval.evaluate`: block-by-block scoring, `keep`, parquet output, resuming.

The reference is `neuroneval.score` on the same data (all metrics, same row order): blocks
are an implementation detail, so every block size and every source must give the identical
table, the seeded top-random metrics included (each unit's draw is seeded by its global index).
`keep` is checked against a slow Python loop over the reference table. Interruption is real:
a child process is killed with SIGKILL or interrupted with SIGINT mid-run, then the run is
resumed and its file compared byte for byte with an uninterrupted run's.
"""

from __future__ import annotations

import contextlib
import io
import math
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import neuroneval
import numpy as np
import polars as pl
import pytest
import scipy.sparse as sp
from neuroneval import errors
from neuroneval._evaluate import partial_dir
from neuroneval.sources import write_shards
from polars.testing import assert_frame_equal

METRICS = list(neuroneval.METRICS)
TOP_RANDOM = ["correlation_top_random", "spearman_top_random"]

N, K, T = 1500, 12, 9


def make_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Activations with ties, a constant unit, mostly-zero units and two identical units;
    concepts with duplicated columns, an empty and a full concept, values of exactly 0.5."""
    rng = np.random.default_rng(seed)
    a = np.round(rng.normal(size=(N, K)) * 8) / 8
    a[:, 1] = 0.5  # constant: NaN correlation with every concept
    a[:, 4] = np.where(rng.random(N) < 0.95, 0.0, rng.integers(1, 9, size=N) / 4)  # SAE-like
    a[:, 8] = a[:, 2]  # identical units: only their seeds tell them apart
    a[:, 10] = np.where(rng.random(N) < 0.9, 0.0, rng.normal(size=N))
    c = np.zeros((N, T))
    c[:, 0] = rng.random(N) < 0.3
    c[:, 1] = np.round(rng.random(N) * 8) / 8
    c[:, 2] = c[:, 0]  # duplicate concept: identical scores, ties broken by index
    c[:, 3] = 0.0  # empty
    c[:, 4] = 1.0  # full
    c[:, 5] = 0.5 * (rng.random(N) < 0.4)
    c[:, 6] = (a[:, 0] > 1).astype(np.float64)  # a well-explained unit
    c[:, 7] = c[:, 1]
    c[:, 8] = rng.random(N) < 0.02
    return a, c


A64, C64 = make_data()


def assert_same_table(got: pl.DataFrame, want: pl.DataFrame) -> None:
    """Identical tables: columns, dtypes, row order and every value (NaN equal to NaN)."""
    assert got.columns == want.columns
    assert_frame_equal(got, want, check_exact=True, check_dtypes=True)


# ---------------------------------------------------------------------------------------------
# Every source and block size gives score()'s table.
# ---------------------------------------------------------------------------------------------


def _npy(tmp: Path, a: np.ndarray, name: str = "a.npy") -> Path:
    path = tmp / name
    np.save(path, a)
    return path


SOURCES: dict[str, Callable[[Path], Any]] = {
    "in-memory": lambda tmp: A64,
    "in-memory-f32-strided": lambda tmp: np.asfortranarray(np.repeat(A64.astype(np.float32), 2, axis=1))[:, ::2],
    "npy-f32": lambda tmp: _npy(tmp, A64.astype(np.float32)),
    "npy-f16": lambda tmp: _npy(tmp, A64.astype(np.float16)),
    "npy-f64-fortran": lambda tmp: _npy(tmp, np.asfortranarray(A64)),
    "shards": lambda tmp: write_shards(tmp / "s", [A64[:1], A64[1:700], A64[700:1499], A64[1499:]]),
    "sparse-csr": lambda tmp: sp.csr_matrix(A64),
}
BLOCKS = [1, 3, 7, K]


@pytest.mark.parametrize("block_units", BLOCKS)
@pytest.mark.parametrize("kind", list(SOURCES))
def test_evaluate_equals_score(tmp_path: Path, kind: str, block_units: int) -> None:
    src = SOURCES[kind](tmp_path)
    got = neuroneval.evaluate(src, C64, alpha=0.05, block_units=block_units, progress=False)
    assert isinstance(got, pl.DataFrame)
    want = neuroneval.score(src, C64, alpha=0.05)
    assert got.height == K * T
    assert_same_table(got, want)


@pytest.mark.parametrize("block_units", BLOCKS)
def test_top_random_metrics_are_seeded_by_global_unit(tmp_path: Path, block_units: int) -> None:
    """Units 2 and 8 hold the same data: their top-random draws (and scores) differ because
    each unit's seed is its global index, and no block size changes that."""
    kw: dict[str, Any] = {"k": 7, "top_alpha": 0.05, "seed": 12345}
    path = _npy(tmp_path, A64.astype(np.float32))
    got = neuroneval.evaluate(path, C64, TOP_RANDOM, block_units=block_units, progress=False, **kw)
    want = neuroneval.score(A64.astype(np.float32), C64, TOP_RANDOM, **kw)
    assert_same_table(got, want)
    scores = want["correlation_top_random"].to_numpy().reshape(K, T)
    finite = np.isfinite(scores[2]) & np.isfinite(scores[8])
    assert finite.any() and not np.array_equal(scores[2][finite], scores[8][finite])
    # And the seed matters at all.
    other = neuroneval.evaluate(path, C64, TOP_RANDOM, block_units=block_units, progress=False, k=7, top_alpha=0.05)
    assert not other.equals(got)


def test_default_block_size_and_names(tmp_path: Path) -> None:
    units = [f"u{i:02d}" for i in range(K)][::-1]
    d = write_shards(tmp_path / "s", [A64[:500], A64[500:]], names=units)
    got = neuroneval.evaluate(d, C64, ["auprc", "mad"], progress=False)
    assert got["unit"].to_list() == [u for u in units for _ in range(T)]
    assert_same_table(got, neuroneval.score(d, C64, ["auprc", "mad"]))
    other = [f"n{i}" for i in range(K)]
    concepts = [f"c{j}" for j in range(T)]
    got = neuroneval.evaluate(
        d, C64, ["auprc"], block_units=5, unit_names=other, concept_names=concepts, progress=False
    )
    want = neuroneval.score(A64, C64, ["auprc"], unit_names=other, concept_names=concepts)
    assert_same_table(got, want)


def test_concept_table_source(tmp_path: Path) -> None:
    rows, cols = np.nonzero(C64)
    names = [f"concept-{j}" for j in range(T)][::-1]
    path = tmp_path / "c.parquet"
    pl.DataFrame({"input": rows, "concept": [names[j] for j in cols], "probability": C64[rows, cols]}).write_parquet(
        path
    )
    got = neuroneval.evaluate(A64, path, ["auc", "wpmi"], concept_names=names, block_units=5, progress=False)
    want = neuroneval.score(A64, C64, ["auc", "wpmi"], concept_names=names)
    assert_same_table(got, want)


# ---------------------------------------------------------------------------------------------
# keep: each unit's best concepts.
# ---------------------------------------------------------------------------------------------


def slow_keep(full: pl.DataFrame, first: str, keep: int) -> pl.DataFrame:
    """The `keep` best concepts of each unit under `first`, by a plain loop: descending, NaN
    last, equal scores in concept order; `rank` 1..keep."""
    rows = full.rows(named=True)
    by_unit: dict[Any, list[tuple[int, dict[str, Any]]]] = {}
    units: list[Any] = []
    for i, r in enumerate(rows):
        if r["unit"] not in by_unit:
            by_unit[r["unit"]] = []
            units.append(r["unit"])
        by_unit[r["unit"]].append((i, r))
    out: list[dict[str, Any]] = []
    for u in units:
        entries = by_unit[u]  # in concept order

        def key(e: tuple[int, dict[str, Any]]) -> tuple[int, float, int]:
            pos, r = e
            v = r[first]
            return (1, 0.0, pos) if math.isnan(v) else (0, -v, pos)

        best = sorted(entries, key=key)[:keep]
        for rank, (_, r) in enumerate(best, start=1):
            out.append(
                {"unit": r["unit"], "concept": r["concept"], "rank": rank, **{m: r[m] for m in full.columns[2:]}}
            )
    schema = {"unit": full.schema["unit"], "concept": full.schema["concept"], "rank": pl.Int64}
    schema.update({m: pl.Float64 for m in full.columns[2:]})
    return pl.DataFrame(out, schema=schema)


@pytest.mark.parametrize("keep", [1, 2, 4, T, T + 3])
@pytest.mark.parametrize(
    "metrics",
    [["correlation", "auprc"], ["precision", "spearman", "wpmi"], ["inverse_auprc", "recall"], ["recall", "iou"]],
)
def test_keep_matches_a_slow_loop(tmp_path: Path, keep: int, metrics: list[str]) -> None:
    full = neuroneval.score(A64, C64, metrics, alpha=0.05)
    first = full[metrics[0]].to_numpy().reshape(K, T)
    # The data exercise what the ordering must handle: NaN scores and exact ties.
    assert np.isnan(first).any() or metrics[0] == "recall"  # recall is never NaN: ties only
    assert any(len(set(row[np.isfinite(row)].tolist())) < np.isfinite(row).sum() for row in first)
    want = slow_keep(full, metrics[0], keep)
    assert want.height == K * min(keep, T)
    for block_units in (1, 5, K):
        got = neuroneval.evaluate(A64, C64, metrics, alpha=0.05, keep=keep, block_units=block_units, progress=False)
        assert_same_table(got, want)
    path = _npy(tmp_path, A64)
    got = neuroneval.evaluate(path, C64, metrics, alpha=0.05, keep=keep, block_units=5, progress=False)
    assert_same_table(got, want)


def test_keep_with_names_and_file_output(tmp_path: Path) -> None:
    units = [f"n{i}" for i in range(K)]
    concepts = [f"c{j}" for j in range(T)][::-1]
    full = neuroneval.score(A64, C64, ["correlation"], unit_names=units, concept_names=concepts)
    want = slow_keep(full, "correlation", 3)
    out = tmp_path / "top.parquet"
    neuroneval.evaluate(
        A64,
        C64,
        ["correlation"],
        keep=3,
        block_units=4,
        unit_names=units,
        concept_names=concepts,
        out=out,
        progress=False,
    )
    assert_same_table(pl.read_parquet(out), want)
    # A constant unit has NaN correlation everywhere: its top 3 are concepts 0, 1, 2 in order.
    unit1 = want.filter(pl.col("unit") == "n1")
    assert unit1["concept"].to_list() == concepts[:3]
    assert unit1["correlation"].is_nan().all()


# ---------------------------------------------------------------------------------------------
# Output files.
# ---------------------------------------------------------------------------------------------


def _listing(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("kind", ["in-memory", "npy-f32", "npy-f64-fortran", "shards", "sparse-csr"])
def test_out_appears_only_when_complete(tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    src = SOURCES[kind](tmp_path)
    out = tmp_path / "scores.parquet"
    real = neuroneval._core.score_matrix
    calls = []

    def watched(*args: Any, **kwargs: Any) -> Any:
        assert not out.exists(), "the output exists before the run finished"
        assert partial_dir(out).is_dir()
        calls.append(kwargs.get("first_unit"))
        return real(*args, **kwargs)

    monkeypatch.setattr(neuroneval._core, "score_matrix", watched)
    result = neuroneval.evaluate(src, C64, alpha=0.05, block_units=5, out=out, progress=False)
    monkeypatch.undo()
    assert calls == [0, 5, 10]
    assert result == out and out.is_file()
    assert not partial_dir(out).exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("scores")) == ["scores.parquet"]
    assert_same_table(pl.read_parquet(out), neuroneval.evaluate(src, C64, alpha=0.05, progress=False))
    assert_same_table(pl.read_parquet(out), neuroneval.score(src, C64, alpha=0.05))


@pytest.mark.parametrize("to_file", [True, False])
def test_user_scratch_directory_is_not_deleted(tmp_path: Path, to_file: bool) -> None:
    """`scratch` names a directory for the scratch copy; the library must not delete what the
    user keeps there (nor the directory itself)."""
    path = _npy(tmp_path, A64.astype(np.float32))
    out = tmp_path / "o.parquet" if to_file else None
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "precious.txt").write_text("do not delete")
    result = neuroneval.evaluate(path, C64, ["auc"], block_units=4, out=out, scratch=mine, progress=False)
    assert (mine / "precious.txt").read_text() == "do not delete"
    table = pl.read_parquet(result) if to_file else result
    assert_same_table(table, neuroneval.score(path, C64, ["auc"]))


@pytest.mark.usefixtures("whole_file_reads")
def test_a_small_row_major_file_is_read_whole_not_through_scratch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row-major file of several blocks that fits the in-memory budget is read once into
    memory: no scratch copy, the same table as the scratch path, and a NaN deep in the file
    fails the run before any block is scored."""
    from neuroneval import _evaluate

    a16 = (np.maximum(A64, 0.3) - 0.3).astype(np.float16)
    path = _npy(tmp_path, a16)
    metrics = ["auc", "inverse_auprc", "spearman", "mad"]
    monkeypatch.setattr(_evaluate, "WHOLE_FILE_BYTES", 0)
    through_scratch = neuroneval.evaluate(path, C64, metrics, block_units=3, progress=False)
    monkeypatch.setattr(_evaluate, "WHOLE_FILE_BYTES", 1 << 30)

    def no_scratch(*_: Any, **__: Any) -> None:  # pragma: no cover - reached only on a bug
        raise AssertionError("a scratch copy was made")

    monkeypatch.setattr(_evaluate._BlockReader, "_transpose", no_scratch)
    in_memory = neuroneval.evaluate(path, C64, metrics, block_units=3, progress=False)
    assert_frame_equal(in_memory, through_scratch)
    assert_same_table(in_memory, neuroneval.score(a16, C64, metrics))

    bad = a16.copy()
    bad[-1, -1] = np.nan
    out = tmp_path / "bad.parquet"
    with pytest.raises(errors.NonFiniteError, match=f"row {len(bad) - 1}, column {bad.shape[1] - 1}"):
        neuroneval.evaluate(_npy(tmp_path, bad, "bad.npy"), C64, metrics, block_units=3, out=out, progress=False)
    assert not list(partial_dir(out).glob("part-*"))


# ---------------------------------------------------------------------------------------------
# Resuming.
# ---------------------------------------------------------------------------------------------

BIG_N, BIG_K, BIG_T, BIG_BLOCK = 20000, 200, 20, 5
BIG_METRICS = ["auprc", "inverse_auprc", "spearman"]

# The child slows each block down (the numbers are untouched) so that it is reliably killed
# in the middle of the run, whatever the machine's speed. It takes Ctrl-C as a terminal's
# Python does, whatever it inherited: a shell's background job ignores SIGINT, and a Python
# started so never raises KeyboardInterrupt.
CHILD = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
import neuroneval, neuroneval._core as core
real = core.score_matrix
def slow(*args, **kwargs):
    time.sleep({delay})
    return real(*args, **kwargs)
core.score_matrix = slow
neuroneval.evaluate({acts!r}, {conc!r}, {metrics!r}, block_units={block}, out={out!r}, progress=True)
"""


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("big")
    rng = np.random.default_rng(5)
    acts = d / "acts.npy"
    conc = d / "concepts.npy"
    np.save(acts, rng.normal(size=(BIG_N, BIG_K)).astype(np.float32))
    np.save(conc, (rng.random((BIG_N, BIG_T)) < 0.1).astype(np.float64))
    reference = d / "reference.parquet"
    neuroneval.evaluate(acts, conc, BIG_METRICS, block_units=BIG_BLOCK, out=reference, progress=False)
    return {"acts": acts, "conc": conc, "reference": reference}


def _interrupt(big: dict[str, Any], out: Path, sig: int) -> tuple[int, str, list[Path]]:
    """Starts the child, waits for at least two finished blocks, sends `sig`."""
    script = CHILD.format(
        delay=0.1, acts=str(big["acts"]), conc=str(big["conc"]), metrics=BIG_METRICS, block=BIG_BLOCK, out=str(out)
    )
    child = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True)
    work = partial_dir(out)
    deadline = time.monotonic() + 120
    try:
        while len(list(work.glob("part-*.parquet"))) < 2:
            assert child.poll() is None, "the child ended before it could be interrupted"
            assert time.monotonic() < deadline, "the child wrote no parts"
            time.sleep(0.005)
        child.send_signal(sig)
        _, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    parts = sorted(work.glob("part-*.parquet"))
    return child.returncode, err, parts


def _check_unfinished(out: Path, parts: list[Path]) -> None:
    n_blocks = BIG_K // BIG_BLOCK
    assert not out.exists()
    assert 2 <= len(parts) < n_blocks
    assert (partial_dir(out) / "run.json").is_file()
    for p in parts:  # every part on disk is whole: written aside, then renamed
        t = pl.read_parquet(p)
        assert t.height == BIG_BLOCK * BIG_T
        block = int(p.stem.split("-")[1])
        assert t["unit"].to_list() == [
            u for u in range(block * BIG_BLOCK, (block + 1) * BIG_BLOCK) for _ in range(BIG_T)
        ]


@pytest.mark.slow
def test_resume_after_sigkill(tmp_path: Path, big: dict[str, Any]) -> None:
    out = tmp_path / "scores.parquet"
    rc, _, parts = _interrupt(big, out, signal.SIGKILL)
    assert rc == -signal.SIGKILL
    _check_unfinished(out, parts)
    finished = {p.name: p.read_bytes() for p in parts}
    result = neuroneval.evaluate(big["acts"], big["conc"], BIG_METRICS, block_units=BIG_BLOCK, out=out, progress=True)
    assert result == out
    assert not partial_dir(out).exists()
    assert out.read_bytes() == big["reference"].read_bytes()
    # The finished blocks were reused, not recomputed: the final file holds them verbatim.
    merged = pl.read_parquet(out)
    for name in finished:
        block = int(name.split("-")[1].split(".")[0])
        rows = merged.slice(block * BIG_BLOCK * BIG_T, BIG_BLOCK * BIG_T)
        assert_same_table(rows, pl.read_parquet(io.BytesIO(finished[name])))


@pytest.mark.slow
def test_resume_after_sigint(tmp_path: Path, big: dict[str, Any]) -> None:
    out = tmp_path / "scores.parquet"
    rc, err, parts = _interrupt(big, out, signal.SIGINT)
    assert rc != 0
    assert "KeyboardInterrupt" in err
    _check_unfinished(out, parts)
    script = (
        "import neuroneval; neuroneval.evaluate("
        f"{str(big['acts'])!r}, {str(big['conc'])!r}, {BIG_METRICS!r}, block_units={BIG_BLOCK}, out={str(out)!r}, "
        "progress=True)"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "resuming" in done.stderr
    assert f"{len(parts)} of {BIG_K // BIG_BLOCK} blocks" in done.stderr
    assert not partial_dir(out).exists()
    assert out.read_bytes() == big["reference"].read_bytes()


class Crash(Exception):
    pass


def _crash_after(monkeypatch: pytest.MonkeyPatch, blocks: int) -> None:
    real = neuroneval._core.score_matrix
    calls = [0]

    def crashing(*args: Any, **kwargs: Any) -> Any:
        if calls[0] == blocks:
            raise Crash("simulated crash")
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(neuroneval._core, "score_matrix", crashing)


def _unfinished(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, acts: Any, conc: Any, **kw: Any) -> Path:
    out = tmp_path / "scores.parquet"
    _crash_after(monkeypatch, 2)
    with pytest.raises(Crash):
        neuroneval.evaluate(acts, conc, out=out, progress=False, **kw)
    monkeypatch.undo()
    assert not out.exists()
    assert len(list(partial_dir(out).glob("part-*.parquet"))) == 2
    return out


BASE: dict[str, Any] = {"metrics": ["auprc", "correlation", "spearman_top_random"], "alpha": 0.05, "block_units": 3}


def test_resume_notice_goes_to_the_current_stderr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The "resuming" notice goes to stderr as it is when evaluate runs (redirected here), as
    print(..., file=sys.stderr) would, not to the stream stderr was at import time."""
    acts = _npy(tmp_path, A64.astype(np.float32))
    out = _unfinished(tmp_path, monkeypatch, acts, C64, **BASE)
    buffer = io.StringIO()
    with contextlib.redirect_stderr(buffer):
        neuroneval.evaluate(acts, C64, out=out, progress=True, **BASE)
    assert "resuming" in buffer.getvalue()
    assert "2 of 4 blocks" in buffer.getvalue()


@pytest.mark.parametrize("kind", ["in-memory", "npy-f32", "npy-f64-fortran", "shards", "sparse-csr"])
def test_resume_in_process_gives_the_same_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    acts = SOURCES[kind](tmp_path)
    out = _unfinished(tmp_path, monkeypatch, acts, C64, **BASE)
    # Data in memory are identified by content: an equal copy resumes.
    again = acts.copy() if kind in ("in-memory", "sparse-csr") else acts
    neuroneval.evaluate(again, C64.copy(), out=out, progress=False, **BASE)
    reference = tmp_path / "reference.parquet"
    neuroneval.evaluate(acts, C64, out=reference, progress=False, **BASE)
    assert out.read_bytes() == reference.read_bytes()
    assert not partial_dir(out).exists()


def _modify_file(path: Path) -> None:
    """New values, same size (so only the contents and modification time differ)."""
    arr = np.load(path)
    size = path.stat().st_size
    arr[17, 0] += 1
    np.save(path, arr)
    assert path.stat().st_size == size


CHANGES: dict[str, Callable[[dict[str, Any], dict[str, Any]], None]] = {
    "alpha": lambda kw, data: kw.update(alpha=0.1),
    "metrics": lambda kw, data: kw.update(metrics=["auprc", "correlation"]),
    "metric-order": lambda kw, data: kw.update(metrics=["correlation", "auprc", "spearman_top_random"]),
    "seed": lambda kw, data: kw.update(seed=1),
    "block_units": lambda kw, data: kw.update(block_units=4),
    "keep": lambda kw, data: kw.update(keep=2),
    "activation-file": lambda kw, data: _modify_file(data["acts"]),
    "concept-file": lambda kw, data: _modify_file(data["conc"]),
    "concept-values-in-memory": lambda kw, data: data.update(conc_value=np.flipud(C64).copy()),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_different_run_against_unfinished_partial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    acts = _npy(tmp_path, A64.astype(np.float32))
    use_file = change == "concept-file"
    conc_path = _npy(tmp_path, C64, "c.npy")
    data: dict[str, Any] = {"acts": acts, "conc": conc_path, "conc_value": C64.copy()}
    conc_arg = conc_path if use_file else data["conc_value"]
    out = _unfinished(tmp_path, monkeypatch, acts, conc_arg, **BASE)
    before = _listing(partial_dir(out))
    kw = dict(BASE)
    CHANGES[change](kw, data)
    conc_arg = conc_path if use_file else data["conc_value"]
    with pytest.raises(errors.ResumeError, match="restart"):
        neuroneval.evaluate(acts, conc_arg, out=out, progress=False, **kw)
    assert _listing(partial_dir(out)) == before
    assert not out.exists()
    # restart=True discards the unfinished run and starts over.
    neuroneval.evaluate(acts, conc_arg, out=out, progress=False, restart=True, **kw)
    assert not partial_dir(out).exists()
    assert_same_table(pl.read_parquet(out), neuroneval.evaluate(acts, conc_arg, progress=False, **kw))


def test_partial_dir_that_is_not_a_run(tmp_path: Path) -> None:
    out = tmp_path / "scores.parquet"
    work = partial_dir(out)
    work.mkdir()
    (work / "notes.txt").write_text("mine")
    with pytest.raises(errors.ResumeError):
        neuroneval.evaluate(A64, C64, ["auc"], out=out, progress=False)
    assert _listing(work) == {"notes.txt": b"mine"}
    assert not out.exists()
    neuroneval.evaluate(A64, C64, ["auc"], out=out, progress=False, restart=True)
    assert_same_table(pl.read_parquet(out), neuroneval.score(A64, C64, ["auc"]))
    # An empty leftover directory is simply reused.
    out2 = tmp_path / "scores2.parquet"
    partial_dir(out2).mkdir()
    neuroneval.evaluate(A64, C64, ["auc"], out=out2, progress=False)
    assert out2.read_bytes() == out.read_bytes()


# ---------------------------------------------------------------------------------------------
# Errors come before any file is written.
# ---------------------------------------------------------------------------------------------

BAD_CALLS: dict[str, tuple[dict[str, Any], type[Exception], str]] = {
    "unknown-metric": ({"metrics": ["auprc", "nope"]}, errors.UnknownMetricError, "nope"),
    "no-metric": ({"metrics": []}, errors.EmptyInputError, "metric"),
    "alpha-0": ({"alpha": 0.0}, errors.ParameterError, "alpha"),
    "alpha-above-1": ({"alpha": 1.5}, errors.ParameterError, "alpha"),
    "alpha-nan": ({"alpha": float("nan")}, errors.ParameterError, "alpha"),
    "keep-0": ({"keep": 0}, errors.ParameterError, "keep"),
    "keep-some": ({"keep": "some"}, errors.ParameterError, "keep"),
    "keep-true": ({"keep": True}, errors.ParameterError, "keep"),
    "keep-float": ({"keep": 2.0}, errors.ParameterError, "keep"),
    "block_units-0": ({"block_units": 0}, errors.ParameterError, "block_units"),
    "block_units-negative": ({"block_units": -3}, errors.ParameterError, "block_units"),
    "block_units-float": ({"block_units": 2.5}, errors.ParameterError, "block_units"),
    "k-0": ({"k": 0}, errors.ParameterError, "k"),
    "lam-negative": ({"lam": -1.0}, errors.ParameterError, "lambda"),
    "unit-names-count": ({"unit_names": ["a", "b"]}, errors.ShapeError, "unit_names"),
    "concept-names-count": ({"concept_names": ["a"]}, errors.ShapeError, "concept_names"),
}


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_errors_before_any_file(tmp_path: Path, case: str) -> None:
    kw, cls, fragment = BAD_CALLS[case]
    acts = _npy(tmp_path, A64.astype(np.float32))
    out = tmp_path / "scores.parquet"
    with pytest.raises(cls, match=fragment):
        neuroneval.evaluate(acts, C64, out=out, progress=False, **kw)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npy"]


def test_mismatched_inputs_before_any_file(tmp_path: Path) -> None:
    out = tmp_path / "scores.parquet"
    with pytest.raises(errors.ShapeError, match=str(N - 1)):
        neuroneval.evaluate(A64, C64[:-1], out=out, block_units=2, progress=False)
    with pytest.raises(errors.SourceError, match="missing.npy does not exist"):
        neuroneval.evaluate(tmp_path / "missing.npy", C64, out=out, progress=False)
    with pytest.raises(errors.OutputError, match="no-such-dir does not exist"):
        neuroneval.evaluate(A64, C64, out=tmp_path / "no-such-dir" / "scores.parquet", progress=False)
    assert list(tmp_path.iterdir()) == []


def test_bad_concepts_leave_no_unfinished_run(tmp_path: Path) -> None:
    """Concepts are validated once for the whole run: a bad value fails before anything is
    written, so fixing the value and running again just works (no ResumeError)."""
    out = tmp_path / "scores.parquet"
    bad = C64.copy()
    bad[3, 5] = 1.5
    with pytest.raises(errors.ConceptRangeError, match="row 3"):
        neuroneval.evaluate(A64, bad, ["auc"], out=out, block_units=4, progress=False)
    assert list(tmp_path.iterdir()) == []
    neuroneval.evaluate(A64, C64, ["auc"], out=out, block_units=4, progress=False)
    assert_same_table(pl.read_parquet(out), neuroneval.score(A64, C64, ["auc"]))


@pytest.mark.parametrize("source", ["in-memory", "npy"])
def test_nan_in_a_later_block_names_the_global_column(tmp_path: Path, source: str) -> None:
    """SPEC section 1: the error names the column (the unit's index in the activations),
    whatever block it falls in."""
    a = A64.copy()
    a[10, 9] = np.nan
    a[700, 10] = np.inf
    src = a if source == "in-memory" else _npy(tmp_path, a)
    for block_units in (K, 4):
        with pytest.raises(errors.NonFiniteError) as info:
            neuroneval.evaluate(src, C64, ["auc"], block_units=block_units, progress=False)
        message = str(info.value)
        assert "row 10" in message and "column 9" in message, (block_units, message)
