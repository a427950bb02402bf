"""`neuroneval circuits`: `table` prints MIB's CPR/CMD table (text, CSV, JSON) of runs that
`CircuitRun.write` wrote; bad arguments and directories without a run are one line on stderr and
exit code 2; `run` on the small digit-pair model (trained here) writes a run that reads back and
prints its summary."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from cli_helpers import assert_one_line_error, run
from neuroneval.circuits import FRACTIONS, transformer_graph
from neuroneval.circuits.results import (
    CIRCUIT_RUN_FILE,
    CURVES_FILE,
    SCORES_DIR,
    CircuitRun,
    MethodCurve,
    circuit_table,
    edge_names,
    format_circuit_table,
    read_circuit_run,
)
from neuroneval.cli.circuits import summary_text
from polars.testing import assert_frame_equal

GRAPH = transformer_graph(2, 2)


def level_run(task: str, levels: dict[str, float], ablation: str = "patching") -> CircuitRun:
    """Every circuit of method m has metric levels[m] (full 1, empty 0), so f = levels[m]."""
    rng = np.random.default_rng(len(task))
    curves = tuple(
        MethodCurve(
            m,
            rng.normal(size=GRAPH.n_edges),
            1.0,
            np.arange(10),
            np.full(10, v),
            np.arange(10),
            np.full(10, v),
        )
        for m, v in levels.items()
    )
    return CircuitRun("smollm2", task, ablation, 2, 2, 8, 8, 5, 0, FRACTIONS, 1.0, 0.0, curves)


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, list[CircuitRun]]:
    """runs/ holding arithmetic/ and ioi/ (read in that order: by name)."""
    ioi = level_run("ioi", {"random": 0.1, "eap": 0.8, "exact": 0.97})
    arithmetic = level_run("arithmetic", {"eap-ig-inputs": 0.6, "random": 0.2, "eap": 1.6})
    ioi.write(tmp_path / "runs" / "ioi")
    arithmetic.write(tmp_path / "runs" / "arithmetic")
    return tmp_path / "runs", [arithmetic, ioi]


def test_table_as_text(runs: tuple[Path, list[CircuitRun]], capfd: pytest.CaptureFixture[str]) -> None:
    root, (arithmetic, ioi) = runs
    code, out, err = run(["circuits", "table", root / "ioi", root / "arithmetic"], capfd)
    assert (code, err) == (0, "")
    assert out == format_circuit_table([ioi, arithmetic]) + "\n"
    lines = out.splitlines()
    assert lines[1].split()[:3] == ["method", "smollm2/ioi", "CPR"]
    cells = {line.split()[0]: line.split()[1:] for line in lines[2:]}
    assert list(cells) == ["random", "eap", "eap-ig-inputs", "exact"]
    # ioi: exact is best in CPR and CMD; arithmetic: eap has the highest f (the best CPR), but eap-ig-inputs is
    # nearer to f = 1 (|1 - 0.6| < |1 - 1.6|: the best CMD).
    assert cells["exact"] == [f"{0.999 * 0.97:.3f}*", f"{0.999 * 0.03:.3f}*", "-", "-"]
    assert cells["eap"][2:] == [f"{0.999 * 1.6:.3f}*", f"{0.999 * 0.6:.3f}"]
    assert cells["eap-ig-inputs"] == ["-", "-", f"{0.999 * 0.6:.3f}", f"{0.999 * 0.4:.3f}*"]
    # A directory of runs reads each of its subdirectories holding one, by name.
    code, out, err = run(["circuits", "table", root], capfd)
    assert (code, err) == (0, "")
    assert out == format_circuit_table([arithmetic, ioi]) + "\n"


def test_table_as_csv_and_json(runs: tuple[Path, list[CircuitRun]], capfd: pytest.CaptureFixture[str]) -> None:
    root, found = runs
    expected = circuit_table(found)
    code, out, err = run(["circuits", "table", root, "--format", "csv"], capfd)
    assert (code, err) == (0, "")
    assert_frame_equal(pl.read_csv(io.StringIO(out), schema=expected.schema), expected)
    code, out, err = run(["circuits", "table", root, "--format", "json"], capfd)
    assert (code, err) == (0, "")
    rows = json.loads(out)
    assert rows == expected.to_dicts()
    assert rows[0]["method"] == "random" and rows[3]["smollm2/arithmetic CPR"] is None  # exact: not in arithmetic


def test_table_tells_two_runs_of_one_task_apart(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    level_run("ioi", {"eap": 0.5}).write(tmp_path / "seed0")
    level_run("ioi", {"eap": 0.7}).write(tmp_path / "seed1")
    code, out, err = run(["circuits", "table", tmp_path, "--format", "csv"], capfd)
    assert (code, err) == (0, "")
    assert (
        out.splitlines()[0]
        == "method,smollm2/ioi [seed0] CPR,smollm2/ioi [seed0] CMD,smollm2/ioi [seed1] CPR,smollm2/ioi [seed1] CMD"
    )


def test_table_errors(tmp_path: Path, runs: tuple[Path, list[CircuitRun]], capfd: pytest.CaptureFixture[str]) -> None:
    root, _ = runs
    (tmp_path / "empty").mkdir()
    code, _, err = run(["circuits", "table", tmp_path / "empty"], capfd)
    assert_one_line_error(code, err, 2, f"{tmp_path / 'empty'} holds no circuit run", CIRCUIT_RUN_FILE)
    code, _, err = run(["circuits", "table", tmp_path / "nowhere"], capfd)
    assert_one_line_error(code, err, 2, "does not exist")
    code, _, err = run(["circuits", "table", root / "ioi" / CURVES_FILE], capfd)
    assert_one_line_error(code, err, 2, "is a file")
    code, _, err = run(["circuits", "table", root, "--format", "xml"], capfd)
    assert_one_line_error(code, err, 2, "--format must be one of text, csv, json; got 'xml'")
    (root / "ioi" / CIRCUIT_RUN_FILE).write_text("{")
    code, _, err = run(["circuits", "table", root], capfd)
    assert_one_line_error(code, err, 2, str(root / "ioi" / CIRCUIT_RUN_FILE), "not valid JSON")
    (root / "arithmetic" / SCORES_DIR / "eap.json").write_text('{"edges": {}}')
    code, _, err = run(["circuits", "table", root / "arithmetic"], capfd)
    assert_one_line_error(code, err, 2, str(root / "arithmetic" / SCORES_DIR / "eap.json"), "does not match the graph")


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["--model", "gpt2"], ["--model must be one of smollm2, digit-pair; got 'gpt2'"]),
        (
            ["--model", "smollm2", "--task", "sst2"],
            ["--task must be one of ioi, arithmetic, mcqa, digit-pair; got 'sst2'"],
        ),
        (
            ["--model", "smollm2", "--task", "digit-pair"],
            ["--task digit-pair is not a task of --model smollm2", "ioi, arithmetic, mcqa"],
        ),
        (["--model", "digit-pair", "--task", "ioi"], ["--task ioi is not a task of --model digit-pair"]),
        (
            ["--model", "smollm2", "--method", "eap,acdc"],
            [
                "--method names the unknown method 'acdc'",
                "random, eap, eap-ig-inputs, eap-ig-activations, nap, ugs, ifr, exact",
            ],
        ),
        (["--model", "smollm2", "--method", ","], ["--method is empty"]),
        (["--model", "smollm2", "--ablation", "zero"], ["--ablation", "invalid choice: 'zero'", "patching", "mean"]),
        (["--model", "smollm2", "--n-score", "0"], ["invalid parameter n_score = 0: n_score must be an integer >= 1"]),
        (["--model", "smollm2", "--seed", "-1"], ["invalid parameter seed = -1: seed must be an integer in [0, 2^64)"]),
        (["--model", "digit-pair", "--train-steps", "2.5"], ["--train-steps", "invalid int value: '2.5'"]),
    ],
)
def test_run_argument_errors(
    tmp_path: Path, argv: list[str], fragments: list[str], capfd: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["circuits", "run", *argv, "--out", tmp_path / "out"], capfd)
    assert_one_line_error(code, err, 2, *fragments)
    assert out == "" and not (tmp_path / "out").exists()


def test_run_needs_an_output_and_a_model(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["circuits", "run", "--model", "smollm2"], capfd)
    assert_one_line_error(code, err, 2, "--out")
    code, _, err = run(["circuits", "run", "--out", tmp_path], capfd)
    assert_one_line_error(code, err, 2, "--model")
    (tmp_path / "file").write_text("x")
    code, _, err = run(["circuits", "run", "--model", "smollm2", "--out", tmp_path / "file"], capfd)
    assert_one_line_error(code, err, 2, "is a file; expected a directory")
    code, _, err = run(["circuits"], capfd)
    assert_one_line_error(code, err, 2, "STEP")


def test_run_without_torch_says_to_install_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` fails as when it is not installed
    code, out, err = run(["circuits", "run", "--model", "digit-pair", "--out", tmp_path / "out"], capfd)
    assert_one_line_error(code, err, 2, "needs PyTorch", "pip install 'neuroneval[torch]'")
    assert out == "" and not (tmp_path / "out").exists()


needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")


@needs_torch
def test_run_passes_the_options_reports_progress_and_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """`run` with the torch side replaced by a stand-in: what it is asked, what it reports, what is written."""
    import neuroneval.torch.circuits as track

    calls: list[dict[str, object]] = []
    result = level_run("arithmetic", {"random": 0.2, "eap": 0.9})

    def stand_in(**kwargs: object) -> CircuitRun:
        calls.append(kwargs)
        progress = kwargs["progress"]
        for done in (0, 5, 10):
            progress("scoring eap", done, 10)  # type: ignore[operator]
        progress("evaluating eap", 3, 8)  # type: ignore[operator]
        return result

    monkeypatch.setattr(track, "circuit_track", stand_in)
    out = tmp_path / "deep" / "run"
    argv = ["circuits", "run", "--model", "smollm2", "--task", "arithmetic", "--steps", 3, "--ablation", "mean"]
    code, stdout, err = run([*argv, "--batch-size", 4, "--seed", 7, "--out", out], capfd)
    assert code == 0, err
    (kwargs,) = calls
    kwargs.pop("progress")
    assert kwargs == {
        "model": "smollm2",
        "task": "arithmetic",
        "methods": ("random", "eap", "eap-ig-inputs", "eap-ig-activations", "nap", "ugs", "ifr"),  # all but exact
        "n_score": 16,
        "n_eval": 192,
        "steps": 3,
        "activation_steps": 5,
        "batch_size": 4,
        "dtype": "auto",
        "ablation": "mean",
        "seed": 7,
        "train_steps": 1500,
        "ugs_steps": 100,
        "ugs_sparsity": 0.001,
    }
    assert err == "neuroneval: scoring eap (10)\nneuroneval: evaluating eap (8)\n"  # one line per stage off a terminal
    assert read_circuit_run(out) == result
    assert stdout.startswith(summary_text(result) + "\n")
    # --method keeps the order given, without repeats; --task defaults to the model's first; --quiet prints nothing.
    calls.clear()
    code, stdout, err = run(
        ["circuits", "run", "--model", "digit-pair", "--method", "exact,eap,exact", "--quiet", "--out", out], capfd
    )
    assert (code, stdout, err) == (0, "", "")
    assert (calls[0]["task"], calls[0]["methods"]) == ("digit-pair", ("exact", "eap"))

    def missing(**kwargs: object) -> CircuitRun:
        raise ModuleNotFoundError("No module named 'transformers'", name="transformers")

    monkeypatch.setattr(track, "circuit_track", missing)
    code, stdout, err = run(["circuits", "run", "--model", "smollm2", "--out", tmp_path / "other"], capfd)
    assert_one_line_error(code, err, 2, "needs the transformers package: pip install 'neuroneval[label]'")


@pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None,
    reason="needs torch and transformers",
)
@pytest.mark.slow
def test_run_on_the_digit_pair_model(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "dp"
    argv = ["circuits", "run", "--model", "digit-pair", "--task", "digit-pair", "--method", "random,eap,exact"]
    code, stdout, err = run([*argv, "--n-score", 64, "--n-eval", 64, "--train-steps", 200, "--out", out], capfd)
    assert code == 0, err
    result = read_circuit_run(out)
    assert (result.model, result.task, result.ablation) == ("digit-pair", "digit-pair", "patching")
    assert result.method_names == ["random", "eap", "exact"]
    assert (result.n_score, result.n_eval, result.steps, result.seed) == (64, 64, 5, 0)
    assert result.fractions == FRACTIONS and result.defined
    graph = result.graph()
    for m in result.methods:
        assert m.scores.shape == (graph.n_edges,) and np.isfinite(m.scores).all()
        assert m.auroc is not None and 0.0 <= m.auroc <= 1.0  # the digit-pair model has a ground truth
        assert m.signed_edges[-1] <= graph.n_edges
    assert stdout == (
        summary_text(result)
        + f"\n\nwrote {CIRCUIT_RUN_FILE}, {CURVES_FILE} and 3 score files ({SCORES_DIR}/) to {out}\n"
    )
    assert [line.split()[0] for line in stdout.splitlines()[2:5]] == ["random", "eap", "exact"]
    assert sorted(p.name for p in (out / SCORES_DIR).iterdir()) == ["eap.json", "exact.json", "random.json"]
    # MIB's loader (EAP-IG's Graph.from_json, tests/mib_graph.py) reads each file, scores by name
    from mib_graph import mib_from_json

    assert result.d_model is not None
    for m in result.methods:
        loaded = mib_from_json(out / SCORES_DIR / f"{m.method}.json")
        assert loaded.cfg["d_model"] == result.d_model
        assert np.array_equal([loaded.edge_scores[n] for n in edge_names(graph)], m.scores)
    # The run is a table's input too.
    code, table, err = run(["circuits", "table", out], capfd)
    assert (code, err) == (0, "") and table == format_circuit_table([result]) + "\n"
