"""The `neuroneval sanity` and `neuroneval meta` commands: every table they print or write
against the library (`neuroneval.sanity`, `neuroneval.meta`) called on the same arrays, and
every bad input as one line on stderr with a non-zero exit code and no files left behind.

All but one case call `neuroneval.cli.main` in-process; one runs the installed
`neuroneval` script in a subprocess.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
import scipy.sparse as sp
from cli_helpers import assert_one_line_error, run
from neuroneval import METRICS, meta, sanity
from neuroneval.cli import common as cli_common
from neuroneval.sources import write_shards
from polars.testing import assert_frame_equal

N, K, T = 300, 20, 5
NAMES = ["sky", "dog", "cat", "tree", "fur"]
SOME = ["recall", "f1", "correlation", "wpmi", "mad", "correlation_top_random"]


def _data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unit k fires on concept k % T (more or less noisily); concept 4 has soft labels."""
    rng = np.random.default_rng(11)
    c = (rng.random((N, T)) < 0.2).astype(np.float64)
    c[:, 4] *= rng.choice([0.5, 1.0], N)
    truth = np.arange(K) % T
    noise = np.linspace(0.1, 1.5, K)
    a = c[:, truth] + noise * rng.normal(size=(N, K))
    return a, c, truth.astype(np.int64)


A, C, TRUTH = _data()


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    paths = {
        "acts": tmp_path / "acts.npy",
        "concepts": tmp_path / "concepts.npy",
        "truth": tmp_path / "truth.npy",
        "out": tmp_path / "out",
    }
    np.save(paths["acts"], A)
    np.save(paths["concepts"], C)
    np.save(paths["truth"], TRUTH)
    return paths


def read_written(directory: Path, expected: sanity.SanityResult) -> tuple[pl.DataFrame, pl.DataFrame]:
    """table.csv and records.csv of `directory`, read with the library's schemas."""
    table = pl.read_csv(directory / "table.csv", schema=expected.table().schema)
    records = pl.read_csv(directory / "records.csv", schema=expected.records.schema)
    return table, records


def assert_written(directory: Path, expected: sanity.SanityResult, *, chart: bool) -> None:
    table, records = read_written(directory, expected)
    assert_frame_equal(table, expected.table())
    assert_frame_equal(records, expected.records)
    assert (directory / "table.md").read_text() == expected.to_markdown()
    assert (directory / "chart.png").exists() == chart
    if chart:
        assert (directory / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Nothing else: no temporary directory or file left behind.
    expected_files = {"table.csv", "table.md", "records.csv"} | ({"chart.png"} if chart else set())
    assert {p.name for p in directory.iterdir()} == expected_files


def verdict_line(result: sanity.SanityResult) -> str:
    table = result.table()
    passing = table.filter(pl.col("passes"))["metric"].to_list()
    rule = "Decrease Acc >= 90% in every test"
    if not passing:
        return f"verdict: no metric passes ({rule}); {table.height} tested"
    return f"verdict: {len(passing)} of {table.height} metrics pass ({rule}): {', '.join(passing)}"


# --- sanity ----------------------------------------------------------------------------------------


def test_experimental_equals_library(files: dict[str, Path], capfd: pytest.CaptureFixture[str]) -> None:
    argv = ["sanity", files["acts"], files["concepts"], "--truth", files["truth"], "--metrics", ",".join(SOME)]
    code, out, err = run([*argv, "--seed", 3, "--out", files["out"], "--no-chart"], capfd)
    assert code == 0, err
    assert err == ""
    expected = sanity.experimental(A, C, TRUTH, SOME, seed=3)
    assert_written(files["out"], expected, chart=False)
    assert expected.to_markdown() in out
    lines = out.splitlines()
    assert lines[-2] == verdict_line(expected)
    assert lines[-1] == f"wrote table.csv, table.md, records.csv to {files['out']}"
    val, test = meta.split_units(K, 0.05, 3)
    assert lines[0] == (
        f"experimental test: {N} inputs, {T} concepts, {K} units (tuned on {len(val)}, Decrease Acc on {len(test)}); "
        f"correct concepts from {files['truth']}"
    )
    # The data make the verdict non-trivial: some metrics pass, recall fails (extra labels).
    table = expected.table()
    assert table.filter(pl.col("passes")).height > 0
    assert not table.filter(pl.col("metric") == "recall")["passes"][0]


def test_experimental_with_theoretical_and_parameters(
    files: dict[str, Path], capfd: pytest.CaptureFixture[str]
) -> None:
    flags = ["--alpha", "0.05", "--lam", "0.4", "--keep", "0.7", "--rate", "3", "--validation", "0.2", "--seed", "5"]
    argv = ["sanity", files["acts"], files["concepts"], "--truth", files["truth"], "--metrics", ",".join(SOME)]
    argv += [*flags, "--theoretical", "--n", 20_000, "--seeds", 40, "--setting", "toy units", "--out", files["out"]]
    code, out, err = run(argv, capfd)
    assert code == 0, err
    params: dict[str, Any] = {"keep": 0.7, "rate": 3.0, "seed": 5}
    experimental = sanity.experimental(
        A, C, TRUTH, SOME, alpha=0.05, lam=0.4, validation=0.2, setting="toy units", **params
    )
    theoretical = sanity.theoretical(SOME, n=20_000, seeds=40, lam=0.4, **params)
    expected = sanity.SanityResult.concat([experimental, theoretical])
    assert_written(files["out"], expected, chart=True)
    assert expected.to_markdown() in out
    assert verdict_line(expected) in out.splitlines()
    assert out.splitlines()[0].startswith("experimental test 'toy units': ")
    assert "n = 20,000" in out and "40 seeds each" in out
    # Every flag changed the result here, so a dropped flag would have failed the comparison.
    records = expected.records
    assert set(records.filter(kind="experimental")["alpha"].drop_nulls()) == {0.05}
    assert set(records.filter(metric="wpmi")["lam"]) == {0.4}
    for changed in (
        sanity.experimental(A, C, TRUTH, SOME, alpha=0.05, lam=0.4, validation=0.2, seed=5),
        sanity.experimental(A, C, TRUTH, SOME, alpha=0.05, lam=0.4, validation=0.2, keep=0.7, seed=5),
        sanity.theoretical(SOME, n=20_000, seeds=40, lam=0.4),
    ):
        kind = changed.records["kind"][0]
        assert not changed.records["decrease_acc"].equals(records.filter(kind=kind)["decrease_acc"])


def test_default_truth_is_argmax_iou(files: dict[str, Path], capfd: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["sanity", files["acts"], files["concepts"], "--metrics", "f1,cosine"], capfd)
    assert code == 0
    expected = sanity.experimental(A, C, None, ["f1", "cosine"])
    assert expected.to_markdown() in out
    assert "correct concepts each unit's argmax-IoU concept" in out.splitlines()[0]
    assert out.splitlines()[-1] == verdict_line(expected)


def test_default_metrics_are_all(files: dict[str, Path], capfd: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["sanity", files["acts"], files["concepts"], "--truth", files["truth"]], capfd)
    assert code == 0
    expected = sanity.experimental(A, C, TRUTH)
    assert expected.table()["metric"].to_list() == list(METRICS)
    assert expected.to_markdown() in out


def test_truth_as_names_and_indices(files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    expected = sanity.experimental(A, C, TRUTH, ["f1", "correlation"], seed=1).to_markdown()
    (tmp_path / "names.txt").write_text("\n".join(NAMES) + "\n", encoding="utf-8")
    # Names and indices mixed, surrounding spaces and trailing blank lines tolerated.
    lines = [NAMES[t] if k % 2 else f" {t} " for k, t in enumerate(TRUTH)]
    (tmp_path / "truth.txt").write_text("\n".join(lines) + "\n\n", encoding="utf-8")
    argv = ["sanity", files["acts"], files["concepts"], "--metrics", "f1,correlation", "--seed", 1]
    code, out, err = run([*argv, "--truth", tmp_path / "truth.txt", "--concept-names", tmp_path / "names.txt"], capfd)
    assert code == 0, err
    assert expected in out
    # Names come from a concept table too (sorted there, so the indices differ from NAMES').
    rows, cols = np.nonzero(C)
    pl.DataFrame({"input": rows, "concept": np.array(NAMES)[cols], "probability": C[rows, cols]}).write_csv(
        tmp_path / "concepts.csv"
    )
    (tmp_path / "truth_names.txt").write_text("\n".join(NAMES[t] for t in TRUTH), encoding="utf-8")
    argv = ["sanity", files["acts"], tmp_path / "concepts.csv", "--truth", tmp_path / "truth_names.txt"]
    code, out, err = run([*argv, "--metrics", "f1,correlation", "--seed", 1], capfd)
    assert code == 0, err
    order = sorted(NAMES)
    permuted = C[:, [NAMES.index(n) for n in order]]
    truth = np.array([order.index(NAMES[t]) for t in TRUTH])
    assert sanity.experimental(A, permuted, truth, ["f1", "correlation"], seed=1).to_markdown() in out


def test_other_sources(files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    a = A.astype(np.float32)
    a[a < 0.3] = 0.0
    sp.save_npz(tmp_path / "acts.npz", sp.csr_matrix(a))
    write_shards(tmp_path / "shards", [C[:100], C[100:]])
    argv = ["sanity", tmp_path / "acts.npz", tmp_path / "shards", "--truth", files["truth"], "--metrics", "iou,mad"]
    code, out, err = run([*argv, "--out", files["out"], "--no-chart"], capfd)
    assert code == 0, err
    assert_written(files["out"], sanity.experimental(a, C, TRUTH, ["iou", "mad"]), chart=False)
    write_shards(tmp_path / "ashards", [a[:150], a[150:]])
    argv = ["meta", tmp_path / "ashards", tmp_path / "shards", "--truth", files["truth"], "--metrics", "iou,mad,cosine"]
    code, out, err = run([*argv, "--out", tmp_path / "meta.parquet"], capfd)
    assert code == 0, err
    expected = meta.meta_evaluate(a, C, TRUTH, ["iou", "mad", "cosine"])
    expected = expected.sort("meta_auprc", descending=True, maintain_order=True)
    assert_frame_equal(pl.read_parquet(tmp_path / "meta.parquet"), expected)


def test_theoretical_only_subprocess(tmp_path: Path) -> None:
    out = tmp_path / "new" / "dir"
    script = Path(sys.executable).parent / "neuroneval"
    argv = [str(script), "sanity", "--theoretical", "--n", "20000", "--seeds", "50", "--out", str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    expected = sanity.theoretical(n=20_000, seeds=50)
    assert_written(out, expected, chart=True)
    assert expected.to_markdown() in proc.stdout
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("theoretical test: a perfect binary unit, n = 20,000")
    assert lines[-2] == verdict_line(expected)
    assert lines[-1] == f"wrote table.csv, table.md, records.csv, chart.png to {out}"
    # Per-gamma rows are in records.csv, not in the table.
    _, records = read_written(out, expected)
    assert records.filter(pl.col("gamma").is_not_null()).height == len(METRICS) * 2 * len(sanity.GAMMAS)


# --- meta ------------------------------------------------------------------------------------------


def table_rows(out: str) -> list[list[str]]:
    """The printed meta table's rows (after the title and header lines, before the footnote)."""
    lines = out.splitlines()
    assert lines[1].split() == [
        "metric",
        "alpha",
        "lambda",
        "validation",
        "meta-AUPRC",
        "test",
        "meta-AUPRC",
        "NaN",
        "scores",
    ]
    end = next(i for i, line in enumerate(lines) if line.startswith("* passes the paper's sanity checks"))
    return [line.split() for line in lines[2:end]]


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_meta_tuned(files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str], suffix: str) -> None:
    out = tmp_path / f"meta{suffix}"
    argv = ["meta", files["acts"], files["concepts"], "--truth", files["truth"], "--metrics", ",".join(SOME)]
    code, stdout, err = run([*argv, "--validation", 0.25, "--seed", 2, "--out", out], capfd)
    assert code == 0, err
    expected = meta.meta_evaluate(A, C, TRUTH, SOME, validation=0.25, seed=2)
    expected = expected.sort("meta_auprc", descending=True, maintain_order=True)
    written = pl.read_csv(out, schema=expected.schema) if suffix == ".csv" else pl.read_parquet(out)
    assert_frame_equal(written, expected)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("meta")] == [out.name]
    val, test = meta.split_units(K, 0.25, 2)
    assert stdout.splitlines()[0] == (
        f"meta-AUPRC on {len(test)} test units x {T} concepts; alpha and lambda tuned on {len(val)} validation units; seed 2"
    )
    rows = table_rows(stdout)
    assert stdout.splitlines()[-1] == f"wrote {out}"
    assert len(rows) == len(SOME)
    for row, r in zip(rows, expected.iter_rows(named=True), strict=True):
        star = METRICS[r["metric"]].passes_sanity
        assert row[0] == ("*" if star else r["metric"])
        cells = row[1:] if star else row
        assert cells[0] == r["metric"]
        assert cells[1] == ("-" if r["alpha"] is None else f"{r['alpha']:g}")
        assert cells[2] == ("-" if r["lam"] is None else f"{r['lam']:g}")
        assert cells[3] == f"{r['validation_meta_auprc']:.4f}"
        assert cells[4] == f"{r['meta_auprc']:.4f}"
        assert cells[5] == str(r["nan_scores"])
    values = expected["meta_auprc"].to_list()
    assert values == sorted(values, reverse=True) and len(set(values)) > 1


def test_meta_fixed_alpha(files: dict[str, Path], capfd: pytest.CaptureFixture[str]) -> None:
    argv = ["meta", files["acts"], files["concepts"], "--truth", files["truth"], "--metrics", "wpmi,recall,spearman"]
    code, stdout, err = run([*argv, "--alpha", 0.1, "--lam", 0.3], capfd)
    assert code == 0, err
    expected = meta.meta_evaluate(A, C, TRUTH, ["wpmi", "recall", "spearman"], alpha=0.1, lam=0.3)
    expected = expected.sort("meta_auprc", descending=True, maintain_order=True)
    rows = {row[0]: row for row in table_rows(stdout)}
    for r in expected.iter_rows(named=True):
        assert rows[r["metric"]][3:5] == ["-", f"{r['meta_auprc']:.4f}"]
    assert rows["wpmi"][1:3] == ["0.1", "0.3"]
    assert rows["spearman"][1:3] == ["-", "-"]
    assert "alpha = 0.1 (wpmi's lambda = 0.3) for every metric, not tuned" in stdout.splitlines()[0]
    # --alpha without --lam: wpmi's lambda is 1 and says so (not null).
    code, stdout, _ = run([*argv, "--alpha", 0.1], capfd)
    assert code == 0
    assert {row[0]: row for row in table_rows(stdout)}["wpmi"][1:3] == ["0.1", "1"]


# --- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case, fragments",
    [
        ("unknown metric", ['unknown metric "f2"']),
        ("missing activations", ["nope.npy", "does not exist"]),
        ("missing truth", ["absent.npy", "does not exist"]),
        ("mismatched N", ["300", "299"]),
        ("truth npy length", ["19 entries for 20 units"]),
        ("truth text length", ["21 lines for 20 units"]),
        ("truth index out of range", ["entry 3", "concept index 5 is out of range 0..4"]),
        ("truth line out of range", ["line 2", "concept index -1 is out of range 0..4"]),
        ("truth unknown name", ["line 20", "unknown concept name 'dgo'"]),
        ("truth name without names", ["line 1", "'sky'", "--concept-names"]),
        ("truth floats", ["float64", "integer concept indices"]),
        ("alpha 0", ["alpha = 0", "0 < alpha <= 1"]),
        ("alpha 1.5", ["alpha = 1.5"]),
        ("keep 1.5", ["keep = 1.5", "0 <= keep <= 1"]),
        ("keep -0.1", ["keep = -0.1", "0 <= keep <= 1"]),
        ("rate 0.5", ["rate = 0.5", ">= 1"]),
        ("rate inf", ["rate = inf", "finite"]),
        ("lam -1", ["lam", "= -1", ">= 0"]),
        ("validation 1", ["validation = 1", "0 < validation < 1"]),
        ("seed -2", ["seed", "-2"]),
        ("threads 0", ["--threads", "0"]),
        ("n too small", ["n = 5000", "n must be at least 10,000", "gamma 0.0001"]),
        ("seeds 0", ["seeds = 0", "seeds must be an integer >= 1"]),
        ("out is a file", ["--out", "is a file"]),
        ("nan activations", ["nan", "row 7"]),
        ("concepts outside [0, 1]", ["concepts", "2.0"]),
    ],
)
def test_sanity_bad_input_is_one_line(
    files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str], case: str, fragments: list[str]
) -> None:
    acts, concepts, truth, out = files["acts"], files["concepts"], files["truth"], files["out"]
    extra: list[Any] = []
    name, _, value = case.partition(" ")
    if case == "unknown metric":
        extra = ["--metrics", "f1,f2"]
    elif case == "missing activations":
        acts = tmp_path / "nope.npy"
    elif case == "missing truth":
        truth = tmp_path / "absent.npy"
    elif case == "mismatched N":
        np.save(tmp_path / "short.npy", C[:299])
        concepts = tmp_path / "short.npy"
    elif case == "truth npy length":
        np.save(truth, TRUTH[:19])
    elif case.startswith("truth"):
        truth = tmp_path / "truth.txt"
        lines = [str(t) for t in TRUTH]
        if case == "truth text length":
            lines.append("0")
        elif case == "truth index out of range":
            truth = tmp_path / "bad.npy"
            np.save(truth, np.where(np.arange(K) == 3, T, TRUTH))
        elif case == "truth line out of range":
            lines[1] = "-1"
        elif case == "truth unknown name":
            (tmp_path / "names.txt").write_text("\n".join(NAMES), encoding="utf-8")
            extra = ["--concept-names", tmp_path / "names.txt"]
            lines = [NAMES[t] for t in TRUTH]
            lines[19] = "dgo"
        elif case == "truth name without names":
            lines = [NAMES[t] for t in TRUTH]
        elif case == "truth floats":
            truth = tmp_path / "floats.npy"
            np.save(truth, TRUTH.astype(np.float64))
        truth.with_suffix(".txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    elif name in ("alpha", "keep", "rate", "validation", "seed", "threads"):
        extra = [f"--{name}", value]
    elif case == "lam -1":
        extra = ["--alpha", "0.1", "--lam", "-1"]
    elif case == "n too small":
        extra = ["--theoretical", "--n", "5000"]
    elif case == "seeds 0":
        extra = ["--theoretical", "--seeds", "0"]
    elif case == "out is a file":
        out.write_text("not a directory")
    elif case == "nan activations":
        a = A.copy()
        a[7, 2] = np.nan
        np.save(acts, a)
    elif case == "concepts outside [0, 1]":
        c = C.copy()
        c[4, 1] = 2.0
        np.save(concepts, c)
    else:  # pragma: no cover
        raise AssertionError(case)
    argv = ["sanity", acts, concepts, "--truth", truth, "--metrics", "f1,correlation", *extra]
    code, stdout, err = run([*argv, "--out", out], capfd)
    assert_one_line_error(code, err, 2, *fragments)
    assert stdout == ""
    assert out.is_file() if case == "out is a file" else not out.exists()


@pytest.mark.parametrize(
    "case, fragments",
    [
        ("unknown metric", ['unknown metric "nope"']),
        ("missing concepts", ["gone.npy", "does not exist"]),
        ("mismatched N", ["300", "299"]),
        ("truth length", ["21 entries for 20 units"]),
        ("alpha 2", ["alpha = 2"]),
        ("validation 0", ["validation = 0", "0 < validation < 1"]),
        ("out suffix", [".csv or .parquet"]),
        ("out directory missing", ["output directory", "does not exist"]),
        ("out is a directory", ["is a directory"]),
    ],
)
def test_meta_bad_input_is_one_line(
    files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str], case: str, fragments: list[str]
) -> None:
    concepts, out = files["concepts"], tmp_path / "meta.csv"
    extra: list[Any] = []
    if case == "unknown metric":
        extra = ["--metrics", "nope"]
    elif case == "missing concepts":
        concepts = tmp_path / "gone.npy"
    elif case == "mismatched N":
        np.save(tmp_path / "short.npy", C[:299])
        concepts = tmp_path / "short.npy"
    elif case == "truth length":
        np.save(files["truth"], np.arange(21) % T)
    elif case == "alpha 2":
        extra = ["--alpha", "2"]
    elif case == "validation 0":
        extra = ["--validation", "0"]
    elif case == "out suffix":
        out = tmp_path / "meta.txt"
    elif case == "out directory missing":
        out = tmp_path / "no" / "meta.csv"
    elif case == "out is a directory":
        out = tmp_path
    else:  # pragma: no cover
        raise AssertionError(case)
    before = sorted(tmp_path.rglob("*"))
    code, stdout, err = run(["meta", files["acts"], concepts, "--truth", files["truth"], "--out", out, *extra], capfd)
    assert_one_line_error(code, err, 2, *fragments)
    assert stdout == ""
    assert sorted(tmp_path.rglob("*")) == before  # no output, no temporary file


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["sanity"], "--theoretical, or both"),
        (["sanity", "ACTS"], "CONCEPTS is missing"),
        (["sanity", "--theoretical", "--truth", "t.npy"], "--truth: only for the experimental test"),
        (["sanity", "--theoretical", "--alpha", "0.1", "--validation", "0.1"], "--alpha, --validation: only"),
        (["sanity", "ACTS", "CONCEPTS", "--seeds", "10"], "--seeds: only for the theoretical test"),
        (["sanity", "ACTS", "CONCEPTS", "--lam", "0.5"], "--lam needs --alpha"),
        (["sanity", "--theoretical", "--n", "many"], "--n"),
        (["meta", "ACTS", "CONCEPTS"], "--truth"),
        (["meta", "ACTS", "CONCEPTS", "--truth", "t.npy", "--lam", "0.5"], "--lam needs --alpha"),
    ],
)
def test_usage_errors(
    files: dict[str, Path], capfd: pytest.CaptureFixture[str], argv: list[str], fragment: str
) -> None:
    argv = [str(files["acts"]) if a == "ACTS" else str(files["concepts"]) if a == "CONCEPTS" else a for a in argv]
    code, out, err = run(argv, capfd)
    assert out == ""
    assert_one_line_error(code, err, 2, fragment, "--help")


def test_failed_write_leaves_no_files(
    files: dict[str, Path], capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def full_disk(self: sanity.SanityResult, path: Any) -> None:
        Path(path).write_bytes(b"half a png")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sanity.SanityResult, "_draw", full_disk)
    argv = ["sanity", "--theoretical", "--n", 20_000, "--seeds", 10, "--metrics", "f1", "--out", files["out"]]
    code, _, err = run(argv, capfd)
    assert_one_line_error(code, err, 1, "no space left")
    assert not files["out"].exists()
    # Directories it would have created are gone too.
    nested = files["out"] / "a" / "b"
    code, _, _ = run([*argv[:-1], nested], capfd)
    assert code == 1
    assert not files["out"].exists()
    # An existing directory keeps what it had, and gains nothing.
    files["out"].mkdir()
    (files["out"] / "notes.txt").write_text("mine")
    code, _, err = run(argv, capfd)
    assert code == 1
    assert [p.name for p in files["out"].iterdir()] == ["notes.txt"]


def test_too_big_for_memory(
    files: dict[str, Path], capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_common, "memory_bytes", lambda: 100_000)
    code, out, err = run(["sanity", files["acts"], files["concepts"], "--metrics", "f1"], capfd)
    assert_one_line_error(code, err, 2, "reads the matrices into memory", "GiB")
    code, out, err = run(["meta", files["acts"], files["concepts"], "--truth", files["truth"]], capfd)
    assert_one_line_error(code, err, 2, "reads the matrices into memory")
    monkeypatch.setattr(cli_common, "memory_bytes", lambda: None)  # unknown: no check
    code, _, _ = run(["sanity", files["acts"], files["concepts"], "--metrics", "f1"], capfd)
    assert code == 0


def test_interrupted(
    files: dict[str, Path], capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(sanity, "theoretical", interrupted)
    code, out, err = run(["sanity", "--theoretical", "--out", files["out"]], capfd)
    assert (code, out, err) == (130, "", "neuroneval: interrupted\n")
    assert not files["out"].exists()


def test_help(capfd: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["sanity", "--help"], capfd)
    assert code == 0
    for flag in ["--truth", "--metrics", "--theoretical", "--alpha", "--lam", "--seed", "--validation", "--keep"]:
        assert flag in out
    for flag in ["--rate", "--n", "--seeds", "--setting", "--out", "--no-chart", "--threads", "--concept-names"]:
        assert flag in out
    code, out, _ = run(["meta", "--help"], capfd)
    assert code == 0
    for flag in ["--truth", "--metrics", "--alpha", "--lam", "--validation", "--seed", "--out", "--threads"]:
        assert flag in out
    code, out, _ = run(["--help"], capfd)
    assert "sanity" in out and "meta" in out
