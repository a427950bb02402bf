"""The `neuroneval score` command line: every flag against an independent computation (the
library called in-process, or numpy), and every bad input as one line on stderr with exit code 2.

A few cases run the real command in a subprocess (`python -m neuroneval`); the rest call
`neuroneval.cli.main` in-process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import neuroneval
import numpy as np
import polars as pl
import pytest
import scipy.sparse as sp
from cli_helpers import assert_one_line_error, run
from neuroneval import _evaluate
from neuroneval.cli import score as score_command
from neuroneval.params import DEFAULT_ALPHA, DEFAULT_TOP_RANDOM_ALPHA
from neuroneval.sources import write_shards

N, K, T = 240, 12, 5


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    a = rng.normal(size=(N, K))
    a[:, 3] = rng.integers(0, 3, N)  # heavy ties
    a[:, 5] = 0.0  # a constant unit: its correlations are NaN
    sparse_unit = a[:, 8]
    sparse_unit[rng.random(N) < 0.9] = 0.0
    c = np.where(rng.random((N, T)) < 0.2, rng.choice([0.5, 1.0], (N, T)), 0.0)
    c[:, 0] = 0.0  # a constant concept: NaN correlation for every unit
    c[:, 4] = c[:, 1]  # a duplicate concept: ties, broken by concept order
    return a, c


A, C = _data()
METRICS = ["correlation", "auprc", "wpmi", "correlation_top_random"]
PARAMS: dict[str, Any] = {"alpha": 0.05, "lam": 0.5, "k": 7, "top_alpha": 0.05, "seed": 3}
PARAM_FLAGS = ["--alpha", "0.05", "--lam", "0.5", "--k", "7", "--top-alpha", "0.05", "--seed", "3"]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    paths = {"acts": tmp_path / "acts.npy", "concepts": tmp_path / "concepts.npy", "out": tmp_path / "scores.parquet"}
    np.save(paths["acts"], A)
    np.save(paths["concepts"], C)
    return paths


def run_process(argv: list[Any], **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m neuroneval <argv>` in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "neuroneval", *[str(x) for x in argv]],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


def score_args(f: dict[str, Path], *extra: Any) -> list[Any]:
    return ["score", f["acts"], f["concepts"], "--out", f["out"], *extra]


def assert_same(table: pl.DataFrame, expected: pl.DataFrame, metrics: list[str]) -> None:
    assert table.columns == ["unit", "concept", *metrics]
    assert table["unit"].to_list() == expected["unit"].to_list()
    assert table["concept"].to_list() == expected["concept"].to_list()
    for m in metrics:
        np.testing.assert_allclose(table[m].to_numpy(), expected[m].to_numpy(), rtol=0, atol=1e-12, equal_nan=True)


# --- scores --------------------------------------------------------------------------------------


def test_parameters_matter() -> None:
    """Each parameter flag changes the scores here, so the comparisons below would catch one
    that the command dropped."""
    base = neuroneval.compute(A, C, METRICS, **PARAMS)
    for name, metric in [
        ("alpha", "auprc"),
        ("lam", "wpmi"),
        ("k", "correlation_top_random"),
        ("seed", "correlation_top_random"),
        ("top_alpha", "correlation_top_random"),
    ]:
        default = {"alpha": DEFAULT_ALPHA, "lam": 1.0, "k": 25, "top_alpha": DEFAULT_TOP_RANDOM_ALPHA, "seed": 0}[name]
        other = neuroneval.compute(A, C, [metric], **{**PARAMS, name: default})[metric]
        assert not np.array_equal(base[metric], other, equal_nan=True), name


def test_subprocess_scores_equal_score(files: dict[str, Path]) -> None:
    proc = run_process(score_args(files, "--metrics", ",".join(METRICS), *PARAM_FLAGS))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == f"wrote {files['out']}: {K * T} rows ({K} units x {T} concepts), 4 metrics"
    assert "Traceback" not in proc.stderr
    expected = neuroneval.score(A, C, METRICS, **PARAMS)
    assert_same(pl.read_parquet(files["out"]), expected, METRICS)
    assert not (files["out"].parent / "scores.parquet.partial").exists()


def test_default_metrics_are_all(files: dict[str, Path], capfd: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(score_args(files), capfd)
    assert code == 0
    names = list(neuroneval.METRICS)
    assert f"{len(names)} metrics" in out.splitlines()[0]
    assert_same(pl.read_parquet(files["out"]), neuroneval.score(A, C), names)


def test_metrics_list_with_spaces(files: dict[str, Path], capfd: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(score_args(files, "--metrics", "auprc, correlation,", "--alpha", "0.1"), capfd)
    assert code == 0
    assert "2 metrics" in out.splitlines()[0]
    expected = neuroneval.score(A, C, ["auprc", "correlation"], alpha=0.1)
    assert_same(pl.read_parquet(files["out"]), expected, ["auprc", "correlation"])


@pytest.mark.parametrize("first", ["correlation", "auprc"])
def test_top(files: dict[str, Path], capfd: pytest.CaptureFixture[str], first: str) -> None:
    metrics = [first, "cosine"]
    code, out, _ = run(score_args(files, "--metrics", ",".join(metrics), "--top", 2, "--alpha", "0.05"), capfd)
    assert code == 0
    assert out.splitlines()[0] == f"wrote {files['out']}: {K * 2} rows ({K} units x top 2 of {T} concepts), 2 metrics"
    table = pl.read_parquet(files["out"])
    assert table.columns == ["unit", "concept", "rank", *metrics]
    full = neuroneval.compute(A, C, metrics, alpha=0.05)
    v = full[first]
    units, concepts = [], []
    for u in range(K):
        # Best first, NaN last, ties by concept index.
        key = [(np.isnan(v[u, t]), -v[u, t] if not np.isnan(v[u, t]) else 0.0, t) for t in range(T)]
        best = [t for _, _, t in sorted(key)[:2]]
        units += [u, u]
        concepts += best
    assert table["unit"].to_list() == units
    assert table["concept"].to_list() == concepts
    assert table["rank"].to_list() == [1, 2] * K
    for m in metrics:
        np.testing.assert_allclose(table[m].to_numpy(), full[m][units, concepts], rtol=0, atol=1e-12, equal_nan=True)


def test_top_larger_than_concepts(files: dict[str, Path], capfd: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(score_args(files, "--metrics", "correlation", "--top", 50), capfd)
    assert code == 0
    assert f"({K} units x top {T} of {T} concepts)" in out.splitlines()[0]
    assert pl.read_parquet(files["out"]).height == K * T


def test_names(files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    unit_names = [f"layer3.unit{u}" for u in range(K)]
    concept_names = ["sky", "dog", "cat", "tree", "dog again"]
    (tmp_path / "units.txt").write_text("\n".join(unit_names) + "\n", encoding="utf-8")
    (tmp_path / "concepts.txt").write_text("\n".join(concept_names) + "\n", encoding="utf-8")
    argv = score_args(files, "--metrics", "auprc,correlation", "--unit-names", tmp_path / "units.txt")
    code, out, _ = run([*argv, "--concept-names", tmp_path / "concepts.txt"], capfd)
    assert code == 0
    expected = neuroneval.score(A, C, ["auprc", "correlation"], unit_names=unit_names, concept_names=concept_names)
    table = pl.read_parquet(files["out"])
    assert table["unit"].dtype == pl.String and table["concept"].dtype == pl.String
    assert_same(table, expected, ["auprc", "correlation"])
    assert set(table["unit"]) == set(unit_names) and set(table["concept"]) == set(concept_names)
    v = neuroneval.compute(A, C, ["auprc"])["auprc"][0]
    best = int(np.nanargmax(v))
    assert out.splitlines()[1] == f"unit layer3.unit0: best {concept_names[best]} (auprc = {np.nanmax(v):.3f})"


def test_summary_lists_best_concepts(files: dict[str, Path], capfd: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(score_args(files, "--metrics", "correlation,auprc"), capfd)
    assert code == 0
    assert "Traceback" not in err
    v = neuroneval.compute(A, C, ["correlation"])["correlation"]
    lines = out.splitlines()
    assert lines[0] == f"wrote {files['out']}: {K * T:,} rows ({K} units x {T} concepts), 2 metrics"
    expected = []
    for u in range(10):
        if np.all(np.isnan(v[u])):
            expected.append(f"unit {u}: no defined correlation score")
        else:
            t = int(np.nanargmax(v[u]))  # the first of tied maxima
            expected.append(f"unit {u}: best {t} (correlation = {np.nanmax(v[u]):.3f})")
    assert lines[1:11] == expected
    assert "unit 5: no defined correlation score" in expected  # the constant unit
    assert lines[11:] == [f"... and {K - 10} more units"]


def test_summary_thousands_and_few_units(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(1)
    a = rng.normal(size=(40, 1100))
    c = (rng.random((40, 2)) < 0.5).astype(np.float64)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "c.npy", c)
    out_path = tmp_path / "s.parquet"
    code, out, _ = run(
        ["score", tmp_path / "a.npy", tmp_path / "c.npy", "--metrics", "cosine", "--out", out_path], capfd
    )
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"wrote {out_path}: 2,200 rows (1,100 units x 2 concepts), 1 metric"
    assert lines[-1] == "... and 1,090 more units"
    # Three units: no "more units" line.
    np.save(tmp_path / "a.npy", a[:, :3])
    code, out, _ = run(
        ["score", tmp_path / "a.npy", tmp_path / "c.npy", "--metrics", "cosine", "--out", out_path], capfd
    )
    assert code == 0
    v = neuroneval.compute(a[:, :3], c, ["cosine"])["cosine"]
    assert out.splitlines()[1:] == [
        f"unit {u}: best {int(np.argmax(v[u]))} (cosine = {v[u].max():.3f})" for u in range(3)
    ]


def test_quiet(files: dict[str, Path], capfd: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(score_args(files, "--metrics", "auprc", "--quiet"), capfd)
    assert (code, out, err) == (0, "", "")
    assert_same(pl.read_parquet(files["out"]), neuroneval.score(A, C, ["auprc"]), ["auprc"])


# --- pairs ---------------------------------------------------------------------------------------

PAIRS = np.array([[11, 4], [0, 0], [3, 2], [0, 0], [7, 1], [3, 4]], dtype=np.int64)


@pytest.mark.parametrize("kind", ["csv", "npy"])
def test_pairs(files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str], kind: str) -> None:
    path = tmp_path / f"pairs.{kind}"
    if kind == "csv":
        pl.DataFrame({"unit": PAIRS[:, 0], "concept": PAIRS[:, 1]}).write_csv(path)
    else:
        np.save(path, PAIRS.astype(np.int32))
    files["out"].write_bytes(b"an older file, replaced")
    code, out, _ = run(score_args(files, "--metrics", ",".join(METRICS), *PARAM_FLAGS, "--pairs", path), capfd)
    assert code == 0
    table = pl.read_parquet(files["out"])
    assert np.array_equal(np.column_stack([table["unit"].to_numpy(), table["concept"].to_numpy()]), PAIRS)
    assert_same(table, neuroneval.score(A, C, METRICS, **PARAMS, pairs=PAIRS), METRICS)
    # Independently of `score`: the full matrix at those pairs.
    full = neuroneval.compute(A, C, METRICS, **PARAMS)
    for m in METRICS:
        np.testing.assert_allclose(
            table[m].to_numpy(), full[m][PAIRS[:, 0], PAIRS[:, 1]], rtol=0, atol=1e-12, equal_nan=True
        )
    assert out.splitlines()[0] == f"wrote {files['out']}: {len(PAIRS)} rows ({len(PAIRS)} pairs), 4 metrics"
    # Units in order of first appearance: 11, 0, 3, 7.
    assert [line.split(":")[0] for line in out.splitlines()[1:]] == ["unit 11", "unit 0", "unit 3", "unit 7"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["acts.npy", "concepts.npy", "scores.parquet", path.name]
    )


def test_pairs_with_names(files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    unit_names = [f"u{u}" for u in range(K)]
    (tmp_path / "units.txt").write_text("\n".join(unit_names), encoding="utf-8")
    np.save(tmp_path / "pairs.npy", PAIRS)
    argv = score_args(
        files, "--metrics", "auprc", "--pairs", tmp_path / "pairs.npy", "--unit-names", tmp_path / "units.txt"
    )
    code, _, _ = run(argv, capfd)
    assert code == 0
    table = pl.read_parquet(files["out"])
    assert table["unit"].to_list() == [unit_names[u] for u in PAIRS[:, 0]]
    assert table["concept"].to_list() == PAIRS[:, 1].tolist()


def test_pairs_interrupted_leaves_no_file(
    files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    np.save(tmp_path / "pairs.npy", PAIRS)

    def interrupted_write(self: pl.DataFrame, path: Any, *args: Any, **kwargs: Any) -> None:
        Path(path).write_bytes(b"half a parquet file")
        raise KeyboardInterrupt

    monkeypatch.setattr(pl.DataFrame, "write_parquet", interrupted_write)
    code, out, err = run(score_args(files, "--pairs", tmp_path / "pairs.npy"), capfd)
    assert code == 130
    assert err == "neuroneval: interrupted; run the same command again to resume\n"
    assert not files["out"].exists() and not (tmp_path / "scores.parquet.tmp").exists()


# --- threads, blocks, resume -------------------------------------------------------------------


@pytest.mark.slow
def test_threads_give_identical_files(files: dict[str, Path], tmp_path: Path) -> None:
    outputs = []
    for threads in (1, 2):
        out = tmp_path / f"threads{threads}.parquet"
        argv = ["score", files["acts"], files["concepts"], "--metrics", ",".join(METRICS), *PARAM_FLAGS]
        proc = run_process([*argv, "--threads", threads, "--block-units", 5, "--out", out])
        assert proc.returncode == 0, proc.stderr
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]
    assert_same(pl.read_parquet(tmp_path / "threads1.parquet"), neuroneval.score(A, C, METRICS, **PARAMS), METRICS)


@pytest.mark.parametrize("pairs", [False, True])
def test_threads_set_for_the_call_only(
    files: dict[str, Path],
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    pairs: bool,
) -> None:
    # Both counts within the machine's CPUs (more are capped to the CPU count).
    cpus = os.cpu_count() or 1
    if cpus < 2:
        pytest.skip("needs two CPUs to tell two thread counts apart")
    monkeypatch.setenv("NEURONEVAL_NUM_THREADS", str(cpus))
    seen: list[int] = []
    name = "score" if pairs else "evaluate"
    real = getattr(score_command, name)

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(neuroneval.num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(score_command, name, spy)
    np.save(tmp_path / "pairs.npy", PAIRS)
    extra = ["--pairs", tmp_path / "pairs.npy"] if pairs else []
    code, _, _ = run(score_args(files, "--metrics", "auprc", "--threads", 1, *extra), capfd)
    assert code == 0
    code, _, _ = run(score_args(files, "--metrics", "auprc", *extra), capfd)
    assert code == 0
    assert seen == [1, cpus]
    assert os.environ["NEURONEVAL_NUM_THREADS"] == str(cpus)


def test_block_units(
    files: dict[str, Path], capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks: list[Any] = []
    real = _evaluate.unit_blocks

    def spy(*args: Any) -> list[tuple[int, int]]:
        result = real(*args)
        blocks.append(result)
        return result

    monkeypatch.setattr(_evaluate, "unit_blocks", spy)
    code, _, _ = run(score_args(files, "--metrics", ",".join(METRICS), *PARAM_FLAGS, "--block-units", 5), capfd)
    assert code == 0
    assert blocks == [[(0, 5), (5, 10), (10, 12)]]
    assert_same(pl.read_parquet(files["out"]), neuroneval.score(A, C, METRICS, **PARAMS), METRICS)


def test_interrupted_run_resumes(
    files: dict[str, Path], capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = _evaluate._table
    calls = []

    def interrupt_second_block(*args: Any) -> pl.DataFrame:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(_evaluate, "_table", interrupt_second_block)
    argv = score_args(files, "--metrics", "auprc,correlation", "--block-units", 4, "--top", 3)
    code, out, err = run(argv, capfd)
    assert code == 130
    assert out == ""
    assert err == "neuroneval: interrupted; run the same command again to resume\n"
    assert not files["out"].exists()
    monkeypatch.setattr(_evaluate, "_table", real)
    # The same command again, in a new process (the library's notices go to the real stderr).
    proc = run_process(argv)
    assert proc.returncode == 0, proc.stderr
    assert "resuming" in proc.stderr and "1 of 3 blocks already finished" in proc.stderr
    expected = neuroneval.evaluate(A, C, ["auprc", "correlation"], keep=3, progress=False)
    assert isinstance(expected, pl.DataFrame)
    assert pl.read_parquet(files["out"]).equals(expected)


def test_restart(files: dict[str, Path], capfd: pytest.CaptureFixture[str]) -> None:
    partial = _evaluate.partial_dir(files["out"])
    partial.mkdir()
    (partial / "run.json").write_text('{"version": 1, "arguments": {}}', encoding="utf-8")
    code, _, err = run(score_args(files, "--metrics", "auprc"), capfd)
    assert_one_line_error(code, err, 2, "different arguments", "--restart")
    assert not files["out"].exists()
    code, _, _ = run(score_args(files, "--metrics", "auprc", "--restart"), capfd)
    assert code == 0
    assert not partial.exists()
    assert_same(pl.read_parquet(files["out"]), neuroneval.score(A, C, ["auprc"]), ["auprc"])


# --- other inputs --------------------------------------------------------------------------------


def test_sparse_npz_inputs(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    a = A.copy()
    a[np.abs(a) < 1.0] = 0.0
    sp.save_npz(tmp_path / "acts.npz", sp.csr_matrix(a))
    sp.save_npz(tmp_path / "concepts.npz", sp.csc_matrix(C))
    out = tmp_path / "s.parquet"
    code, _, _ = run(
        [
            "score",
            tmp_path / "acts.npz",
            tmp_path / "concepts.npz",
            "--out",
            out,
            "--metrics",
            ",".join(METRICS),
            *PARAM_FLAGS,
        ],
        capfd,
    )
    assert code == 0
    assert_same(pl.read_parquet(out), neuroneval.score(a, C, METRICS, **PARAMS), METRICS)
    # Mixed: a dense .npy with sparse concepts.
    np.save(tmp_path / "acts.npy", a)
    code, _, _ = run(
        ["score", tmp_path / "acts.npy", tmp_path / "concepts.npz", "--out", out, "--metrics", "auprc"], capfd
    )
    assert code == 0
    assert_same(pl.read_parquet(out), neuroneval.score(a, C, ["auprc"]), ["auprc"])


def test_concept_table(files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    rows, cols = np.nonzero(C)
    names = np.array(["sky", "dog", "cat", "tree", "fur"])
    table = pl.DataFrame({"input": rows, "concept": names[cols], "probability": C[rows, cols]})
    table.write_csv(tmp_path / "concepts.csv")
    # No names given: the table's names, sorted. Concept 0 is all zeros, so absent from the table.
    present = sorted(set(names[cols]))
    dense = np.column_stack([C[:, list(names).index(n)] for n in present])
    argv = ["score", files["acts"], tmp_path / "concepts.csv", "--out", files["out"], "--metrics", "auprc,correlation"]
    code, out, _ = run(argv, capfd)
    assert code == 0
    assert f"({K} units x {len(present)} concepts)" in out.splitlines()[0]
    assert_same(
        pl.read_parquet(files["out"]),
        neuroneval.score(A, dense, ["auprc", "correlation"], concept_names=present),
        ["auprc", "correlation"],
    )
    # --concept-names orders the concepts and adds the absent one.
    (tmp_path / "names.txt").write_text("\n".join(names), encoding="utf-8")
    code, _, _ = run([*argv, "--concept-names", tmp_path / "names.txt"], capfd)
    assert code == 0
    expected = neuroneval.score(A, C, ["auprc", "correlation"], concept_names=list(names))
    assert_same(pl.read_parquet(files["out"]), expected, ["auprc", "correlation"])


def test_shard_directory(files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    write_shards(tmp_path / "shards", [A[:100].astype(np.float32), A[100:].astype(np.float32)])
    argv = ["score", tmp_path / "shards", files["concepts"], "--out", files["out"], "--metrics", "auprc,spearman"]
    code, _, _ = run([*argv, "--block-units", 5], capfd)
    assert code == 0
    expected = neuroneval.score(A.astype(np.float32), C, ["auprc", "spearman"])
    assert_same(pl.read_parquet(files["out"]), expected, ["auprc", "spearman"])


def test_version_and_help(capfd: pytest.CaptureFixture[str]) -> None:
    assert run(["--version"], capfd)[:2] == (0, f"neuroneval {neuroneval.__version__}\n")
    code, out, _ = run(["score", "--help"], capfd)
    assert code == 0
    for flag in ["--metrics", "--alpha", "--lam", "--k", "--top-alpha", "--seed", "--out", "--unit-names"]:
        assert flag in out
    for flag in ["--concept-names", "--top", "--pairs", "--threads", "--block-units", "--restart", "--quiet"]:
        assert flag in out


# --- errors --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_errors_in_subprocess(files: dict[str, Path], tmp_path: Path) -> None:
    missing = tmp_path / "nope.npy"
    proc = run_process(["score", missing, files["concepts"], "--out", files["out"]])
    assert_one_line_error(proc.returncode, proc.stderr, 2, str(missing), "does not exist")
    assert proc.stdout == ""
    (tmp_path / "garbage.npy").write_bytes(b"this is not a numpy file at all" * 10)
    proc = run_process(["score", tmp_path / "garbage.npy", files["concepts"], "--out", files["out"]])
    assert_one_line_error(proc.returncode, proc.stderr, 2, "garbage.npy", "not a valid .npy")
    proc = run_process(["score", files["acts"], files["concepts"], "--out", files["out"], "--metrics", "auprc,nope"])
    assert_one_line_error(proc.returncode, proc.stderr, 2, 'unknown metric "nope"')
    proc = run_process([])  # no command: an argparse usage error, told in one line
    assert_one_line_error(proc.returncode, proc.stderr, 2, "required: COMMAND", "neuroneval --help")
    proc = run_process(["nosuch"])
    assert_one_line_error(proc.returncode, proc.stderr, 2, "invalid choice: 'nosuch'")
    assert not files["out"].exists()


def _truncated(path: Path) -> Path:
    np.save(path, A)
    data = path.read_bytes()
    header = len(data) - A.nbytes
    path.write_bytes(data[: header + A.nbytes // 2])
    return path


@pytest.mark.parametrize(
    "case, fragments",
    [
        ("missing activations", ["missing.npy", "does not exist"]),
        ("missing concepts", ["missing.npy", "does not exist"]),
        ("missing npz", ["missing.npz", "does not exist"]),
        ("mismatched N", ["240", "239"]),
        ("mismatched N table", ["row index 239", "outside 0..239"]),
        ("garbage npy", ["garbage.npy", "not a valid .npy"]),
        ("truncated npy", ["truncated.npy", "truncated"]),
        ("garbage npz", ["garbage.npz", "scipy.sparse.save_npz"]),
        ("unknown metric", ['unknown metric "f2"']),
        ("no metric", ["no metric"]),
        ("alpha 0", ["alpha = 0"]),
        ("alpha 2", ["alpha = 2"]),
        ("lam -1", ["lam", "= -1", ">= 0"]),
        ("k 0", ["k = 0"]),
        ("seed -1", ["seed", "-1"]),
        ("top-alpha 0", ["top", "alpha = 0"]),
        ("top 0", ["--top", "0"]),
        ("threads 0", ["--threads", "0"]),
        ("block-units 0", ["--block-units", "0"]),
        ("unit names count", ["unit_names", "3 entries", "12 columns"]),
        ("concept names count", ["concept_names", "6 entries", "5 columns"]),
        ("missing names file", ["absent.txt", "does not exist"]),
        ("missing pairs file", ["absent.csv", "does not exist"]),
        ("pairs out of range", ["pair 1 = (12, 0)", "out of range"]),
        ("pairs bad columns", ["pairs", "unit"]),
        ("pairs not integers", ["pairs", "integer"]),
        ("pairs bad npy", ["pairs", "(M, 2)"]),
        ("output directory missing", ["does not exist"]),
        ("output is a directory", ["--out", "directory"]),
    ],
)
def test_bad_input_is_one_line(
    files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str], case: str, fragments: list[str]
) -> None:
    acts, concepts, out = files["acts"], files["concepts"], files["out"]
    extra: list[Any] = []
    if case == "missing activations":
        acts = tmp_path / "missing.npy"
    elif case == "missing concepts":
        concepts = tmp_path / "missing.npy"
    elif case == "missing npz":
        concepts = tmp_path / "missing.npz"
    elif case == "mismatched N":
        np.save(tmp_path / "short.npy", C[:239])
        concepts = tmp_path / "short.npy"
    elif case == "mismatched N table":
        np.save(tmp_path / "short.npy", A[:239])
        acts = tmp_path / "short.npy"
        pl.DataFrame({"input": [0, 239], "concept": ["a", "b"], "probability": [1.0, 1.0]}).write_csv(
            tmp_path / "t.csv"
        )
        concepts = tmp_path / "t.csv"
    elif case == "garbage npy":
        (tmp_path / "garbage.npy").write_bytes(os.urandom(2000))
        acts = tmp_path / "garbage.npy"
    elif case == "truncated npy":
        acts = _truncated(tmp_path / "truncated.npy")
    elif case == "garbage npz":
        (tmp_path / "garbage.npz").write_bytes(b"PK\x03\x04 not really a zip file")
        concepts = tmp_path / "garbage.npz"
    elif case == "unknown metric":
        extra = ["--metrics", "auprc,f2"]
    elif case == "no metric":
        extra = ["--metrics", ","]
    elif (
        case.split()[0] in ("alpha", "lam", "k", "seed", "top-alpha", "top", "threads", "block-units")
        and len(case.split()) == 2
    ):
        flag, value = case.split()
        extra = [f"--{flag}", value]
    elif case == "unit names count":
        (tmp_path / "units.txt").write_text("a\nb\nc\n", encoding="utf-8")
        extra = ["--unit-names", tmp_path / "units.txt"]
    elif case == "concept names count":
        (tmp_path / "concepts.txt").write_text("a\nb\nc\nd\ne\nf\n", encoding="utf-8")
        extra = ["--concept-names", tmp_path / "concepts.txt"]
    elif case == "missing names file":
        extra = ["--concept-names", tmp_path / "absent.txt"]
    elif case == "missing pairs file":
        extra = ["--pairs", tmp_path / "absent.csv"]
    elif case == "pairs out of range":
        np.save(tmp_path / "pairs.npy", np.array([[0, 0], [K, 0]]))
        extra = ["--pairs", tmp_path / "pairs.npy"]
    elif case == "pairs bad columns":
        pl.DataFrame({"neuron": [0], "concept": [0]}).write_csv(tmp_path / "pairs.csv")
        extra = ["--pairs", tmp_path / "pairs.csv"]
    elif case == "pairs not integers":
        pl.DataFrame({"unit": ["a"], "concept": [0]}).write_csv(tmp_path / "pairs.csv")
        extra = ["--pairs", tmp_path / "pairs.csv"]
    elif case == "pairs bad npy":
        np.save(tmp_path / "pairs.npy", np.zeros((3, 3), dtype=np.int64))
        extra = ["--pairs", tmp_path / "pairs.npy"]
    elif case == "output directory missing":
        out = tmp_path / "no" / "such" / "dir" / "s.parquet"
    elif case == "output is a directory":
        out = tmp_path
    else:  # pragma: no cover
        raise AssertionError(case)
    code, stdout, err = run(["score", acts, concepts, "--out", out, *extra], capfd)
    assert_one_line_error(code, err, 2, *fragments)
    assert stdout == ""
    assert not files["out"].exists()


def test_missing_output_directory_with_pairs(
    files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    np.save(tmp_path / "pairs.npy", PAIRS)
    argv = [
        "score",
        files["acts"],
        files["concepts"],
        "--out",
        tmp_path / "no" / "s.parquet",
        "--pairs",
        tmp_path / "pairs.npy",
    ]
    code, _, err = run(argv, capfd)
    assert_one_line_error(code, err, 2, "output directory", "does not exist")


def test_other_os_error_exits_1(
    files: dict[str, Path], capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def full_disk(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(score_command, "evaluate", full_disk)
    code, out, err = run(score_args(files, "--metrics", "auprc"), capfd)
    assert_one_line_error(code, err, 1, "no space left")
    assert out == ""


def test_multi_line_message_is_one_line(
    files: dict[str, Path], capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def fails(*args: Any, **kwargs: Any) -> None:
        raise neuroneval.errors.SourceError("cannot read the table:\n  line two\n\nline three")

    monkeypatch.setattr(score_command, "evaluate", fails)
    code, _, err = run(score_args(files, "--metrics", "auprc"), capfd)
    assert_one_line_error(code, err, 2, "cannot read the table: line two line three")


def test_usage_errors_exit_2(files: dict[str, Path], capfd: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(score_args(files, "--alpha", "abc"), capfd)
    assert code == 2 and "--alpha" in err
    code, _, err = run(["score", files["acts"], files["concepts"]], capfd)  # no --out
    assert code == 2 and "--out" in err
    code, _, err = run([], capfd)
    assert code == 2


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--top", "1"], "--top cannot be combined with --pairs"),
        (["--ray"], "--ray cannot be combined with --pairs"),
    ],
)
def test_options_that_exclude_pairs(
    files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str], extra: list[str], fragment: str
) -> None:
    np.save(tmp_path / "pairs.npy", PAIRS)
    code, out, err = run(score_args(files, "--pairs", tmp_path / "pairs.npy", *extra), capfd)
    assert out == ""
    assert_one_line_error(code, err, 2, fragment, "neuroneval score --help")
    assert not files["out"].exists()
