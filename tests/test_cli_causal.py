"""`neuroneval causal`: `run` on the planted model (trained here) writes a run that reads back and
whose table `causal table` prints (text, CSV, JSON) with the library's numbers; bad arguments are
one line on stderr with exit code 2, a missing run or SAE directory exit code 1 or 2 as its kind
says."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import assert_one_line_error, run
from neuroneval.causal.results import (
    CAUSAL_RUN_FILE,
    CausalRun,
    FeaturizerResult,
    causal_table,
    format_causal_table,
    read_causal_run,
    write_causal_run,
)


def _run(task: str, iia: dict[str, float]) -> CausalRun:
    results = tuple(
        FeaturizerResult(f, "v", np.full((2, 2), v), v, v, (v - 0.1, v + 0.05), (v - 0.05, v + 0.1), 1.5, 0.5)
        for f, v in iia.items()
    )
    return CausalRun("smollm2", task, (0, 1), ("io", "last"), ({"name": "v/x", "variable": "v"},), results, {"seed": 0})


def test_table_prints_the_library_rows_in_every_format(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    a, b = _run("ioi", {"das": 0.9, "full": 0.5}), _run("arithmetic", {"neurons": 0.25})
    write_causal_run(a, tmp_path / "a")
    write_causal_run(b, tmp_path / "b")
    rows = causal_table([read_causal_run(tmp_path / "a"), read_causal_run(tmp_path / "b")])
    code, out, _ = run(["causal", "table", tmp_path / "a", tmp_path / "b"], capfd)
    assert code == 0 and out.strip() == format_causal_table(rows)
    code, out, _ = run(["causal", "table", tmp_path / "a", tmp_path / "b", "--format", "json"], capfd)
    assert code == 0 and json.loads(out) == rows
    assert [r["featurizer"] for r in rows] == ["full", "das", "neurons"]  # the declared featurizer order
    code, out, _ = run(["causal", "table", tmp_path / "a", "--format", "csv"], capfd)
    parsed = list(csv.DictReader(io.StringIO(out)))
    assert [float(r["average"]) for r in parsed] == [0.5, 0.9]


def test_bad_arguments_and_directories_are_named(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["causal", "table", tmp_path], capfd)
    assert_one_line_error(code, err, 2, CAUSAL_RUN_FILE)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / CAUSAL_RUN_FILE).write_text('{"format": "something else"}')
    code, _, err = run(["causal", "table", tmp_path / "bad"], capfd)
    assert_one_line_error(code, err, 2, "not a neuroneval causal run")
    base = ["causal", "run", "--out", tmp_path / "out"]
    code, _, err = run([*base, "--model", "planted", "--featurizers", "full,magic"], capfd)
    assert_one_line_error(code, err, 2, "unknown featurizer 'magic'")
    code, _, err = run([*base, "--model", "planted", "--task", "ioi"], capfd)
    assert_one_line_error(code, err, 2, "not a task of --model planted")
    code, _, err = run([*base, "--model", "planted", "--layers", "0-x"], capfd)
    assert_one_line_error(code, err, 2, "--layers")
    code, _, err = run([*base, "--model", "planted", "--n-test", "0"], capfd)
    assert_one_line_error(code, err, 2, "n_test")
    code, _, err = run([*base, "--model", "planted", "--dtype", "float16"], capfd)
    assert_one_line_error(code, err, 2, "--dtype", "float16")
    code, _, err = run([*base, "--model", "planted", "--sae", tmp_path / "nowhere"], capfd)
    assert_one_line_error(code, err, 2, "--sae", "nowhere")
    assert not (tmp_path / "out").exists()


pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.mark.slow
def test_run_on_the_planted_model_writes_a_run_that_reads_back(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "planted"
    code, printed, err = run(
        [
            "causal",
            "run",
            "--model",
            "planted",
            "--featurizers",
            "full,das,random",
            "--n-boot",
            "50",
            "--dtype",
            "bfloat16",
            "--out",
            out,
        ],  # fmt: skip
        capfd,
    )
    assert code == 0, err
    back = read_causal_run(out)
    assert printed.splitlines()[: len(back.results) + 1] == format_causal_table(causal_table([back])).splitlines()
    assert back.layers == (0, 1) and back.positions == ("a", "b", "c", "last")
    assert back.options["dtype"] == "bfloat16"  # the model ran in bfloat16, and DAS still finds the variable
    das, rand = back.result("das", "s"), back.result("random", "s")
    assert das.unit_iia[0, 3] >= 0.95 and rand.unit_iia[0, 3] <= 0.6
    assert das.swapped is not None and rand.swapped is not None and back.result("full", "s").swapped is not None
    assert (rand.swapped == 4).all() and (back.result("full", "s").swapped == 64).all() and (das.swapped >= 1).all()
    code, _, err = run(
        ["causal", "run", "--model", "planted", "--layers", "5", "--quiet", "--out", tmp_path / "x"], capfd
    )
    assert_one_line_error(code, err, 2, "layer 5 is out of range")
