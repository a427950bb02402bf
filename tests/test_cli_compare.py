"""`neuroneval compare`: on a small .npy + .csv fixture it prints what `neuroneval.compare` finds
(the ranking of each metric, the differences under the first) and writes its files; with
--judge it labels the explanations first (a judge that reads words, in place of a model); bad
input is one line on stderr, exit code 2, and nothing is written."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from cli_helpers import assert_one_line_error, run
from neuroneval import label
from neuroneval.compare import BASELINE_RANDOM, COMPARISON_FILES, compare, saebench_file_name
from polars.testing import assert_frame_equal

N, K = 240, 6
WORDS = ["apple", "river", "stone", "cloud", "flame", "glass"]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    rng = np.random.default_rng(0)
    present = rng.random((N, K)) < 0.3  # input i mentions word k
    acts = present + 0.7 * rng.normal(size=(N, K))
    acts[:, 5] = 2.0  # a dead unit
    texts = [" ".join(w for w, p in zip(WORDS, row, strict=True) if p) or "nothing" for row in present]
    table = pl.DataFrame(
        {
            "unit": [*range(K), 0, 1, 2, 3],
            "explainer": ["lexicon"] * K + ["llm"] * 4,
            "explanation": [*WORDS, "river", "apple", "stone", "glass"],
        }
    )
    concepts = np.column_stack(
        [np.clip(present[:, k] + 0.1 * rng.normal(size=N), 0, 1) for k in range(K)] + [rng.random((N, 4))]
    )
    paths = {
        "acts": tmp_path / "acts.npy",
        "concepts": tmp_path / "concepts.npy",
        "explanations": tmp_path / "explanations.csv",
        "inputs": tmp_path / "inputs.txt",
    }
    np.save(paths["acts"], acts)
    np.save(paths["concepts"], concepts)
    table.write_csv(paths["explanations"])
    paths["inputs"].write_text("\n".join(texts) + "\n", encoding="utf-8")
    return paths


def test_prints_the_ranking_and_writes_the_files(
    files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = ["compare", files["acts"], files["explanations"], "--concepts", files["concepts"]]
    code, stdout, err = run(
        [*argv, "--metrics", "correlation,auprc", "--alpha", 0.05, "--n-boot", 300, "--seed", 3, "--out", out], capfd
    )
    assert (code, err) == (0, "")
    expected = compare(
        files["acts"],
        files["explanations"],
        files["concepts"],
        metrics=["correlation", "auprc"],
        alpha=0.05,
        n_boot=300,
        seed=3,
    )
    assert stdout == (
        expected.ranking("correlation")
        + "\n\n"
        + expected.ranking("auprc")
        + "\n\n"
        + expected.differences_text("correlation")
        + f"\n\nwrote {', '.join(COMPARISON_FILES.values())} to {out}\n"
    )
    assert "lexicon - llm" in stdout and "1 dead unit excluded" in stdout
    assert sorted(p.name for p in out.iterdir()) == sorted(COMPARISON_FILES.values())
    assert pl.read_csv(out / COMPARISON_FILES["summary"]).equals(expected.summary)
    assert pl.read_csv(out / COMPARISON_FILES["differences"]).equals(expected.differences)
    assert pl.read_parquet(out / COMPARISON_FILES["pairs"]).equals(expected.pairs)
    # --no-baselines, --alpha, --confidence, --quiet.
    code, stdout, err = run(
        [*argv, "--no-baselines", "--alpha", 0.1, "--confidence", 0.9, "--n-boot", 50, "--quiet", "--out", out], capfd
    )
    assert (code, stdout, err) == (0, "", "")
    summary = pl.read_csv(out / COMPARISON_FILES["summary"])
    assert summary["explainer"].to_list() == ["lexicon", "llm"]
    again = compare(
        files["acts"], files["explanations"], files["concepts"], alpha=0.1, confidence=0.9, n_boot=50, baselines=False
    )
    assert summary.equals(again.summary)


def test_unit_names(files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    names = tmp_path / "units.txt"
    names.write_text("\n".join(f"latent-{k}" for k in range(K)) + "\n")
    table = pl.read_csv(files["explanations"])
    named = tmp_path / "named.csv"
    table.with_columns(pl.format("latent-{}", pl.col("unit")).alias("unit")).write_csv(named)
    out = tmp_path / "named-out"
    argv = ["compare", files["acts"], named, "--concepts", files["concepts"], "--unit-names", names, "--out", out]
    code, stdout, err = run([*argv, "--n-boot", 100, "--alpha", 0.05], capfd)
    assert (code, err) == (0, "")
    pairs = pl.read_parquet(out / COMPARISON_FILES["pairs"])
    assert pairs.filter(pl.col("explainer") == "llm")["unit_name"].to_list() == [f"latent-{k}" for k in range(4)]
    by_index = compare(files["acts"], files["explanations"], files["concepts"], alpha=0.05, n_boot=100)
    assert pl.read_csv(out / COMPARISON_FILES["summary"]).equals(by_index.summary)


class WordJudge(label.Judge):
    """Says an explanation applies to a text that contains it: score 2, else -2."""

    name = "words"

    @property
    def template(self) -> str:
        return "{explanation}"

    def judge(self, explanation: str, inputs: Sequence[Any]) -> Iterator[label.Judgement]:
        scores = np.array([2.0 if explanation in text.split() else -2.0 for text in inputs])
        yield label.Judgement(np.arange(len(inputs)), scores, np.zeros(len(inputs), dtype=np.int64))


def test_judge_labels_the_explanations(
    files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[str] = []

    def make_judge(spec: str, **_: Any) -> label.Judge:
        made.append(spec)
        return WordJudge()

    monkeypatch.setattr(label, "make_judge", make_judge)
    out = tmp_path / "judged"
    argv = ["compare", files["acts"], files["explanations"], "--judge", "words", "--inputs", files["inputs"]]
    code, stdout, err = run([*argv, "--no-cache", "--n-boot", 100, "--alpha", 0.05, "--out", out], capfd)
    assert (code, err) == (0, "")
    assert made == ["words"]
    n_distinct = len(set(pl.read_csv(files["explanations"])["explanation"]))
    assert stdout.startswith(f"words: {N * n_distinct:,} judgements: ")  # each distinct text judged once
    # The concepts: the judge's probability of each row's text, sigmoid(+-2), as a loop makes them.
    texts = files["inputs"].read_text().splitlines()
    rows = pl.read_csv(files["explanations"])["explanation"].to_list()
    yes, no = 1 / (1 + np.exp(-2.0)), 1 / (1 + np.exp(2.0))
    concepts = np.array([[yes if word in text.split() else no for word in rows] for text in texts])
    expected = compare(files["acts"], files["explanations"], concepts, alpha=0.05, n_boot=100)
    assert_frame_equal(
        pl.read_csv(out / COMPARISON_FILES["summary"]), expected.summary, check_exact=False, rel_tol=1e-9
    )
    assert expected.ranking("correlation") in stdout


@pytest.mark.parametrize(
    ("case", "fragments"),
    [
        ("no concepts", ["give the concepts (--concepts FILE) or a judge"]),
        ("both", ["--concepts and --judge exclude each other"]),
        ("judge without inputs", ["--judge needs --inputs"]),
        ("inputs without judge", ["--inputs is for --judge"]),
        ("negative n-boot", ["invalid parameter n_boot = -1: n_boot must be an integer >= 0"]),
        ("confidence 1", ["invalid parameter confidence = 1.0: confidence must be a real number with 0 < confidence"]),
        ("alpha 0", ["invalid parameter alpha = 0: alpha must be a real number with 0 < alpha <= 1"]),
        ("batch size 0", ["invalid parameter batch_size = 0: batch_size must be an integer >= 1"]),
        ("unknown metric", ["unknown metric", "nope"]),
        ("duplicate row", ["explains unit 0 twice"]),
        ("wrong columns", ["the concepts have 3 columns but the explanations table has 10 rows"]),
        ("missing explanations", ["does not exist"]),
        ("out is a file", ["is a file; expected a directory"]),
        ("sae release without id", ["--sae-release needs --sae-id"]),
        ("sae id without release", ["--sae-id needs --sae-release"]),
        ("sae config without d_sae", ["cfg.json lacks 'd_sae', which SAEBench's results reader reads"]),
        ("sae config missing", ["cannot read", "missing.json"]),
        ("sae config not json", ["is not valid JSON"]),
    ],
)
def test_errors_are_one_line(
    case: str, fragments: list[str], files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    acts, explanations, concepts = files["acts"], files["explanations"], files["concepts"]
    extra: list[Any] = ["--concepts", concepts]
    if case == "no concepts":
        extra = []
    elif case == "both":
        extra += ["--judge", "minilm", "--inputs", files["inputs"]]
    elif case == "judge without inputs":
        extra = ["--judge", "minilm"]
    elif case == "inputs without judge":
        extra += ["--inputs", files["inputs"]]
    elif case == "negative n-boot":
        extra += ["--n-boot", "-1"]
    elif case == "confidence 1":
        extra += ["--confidence", "1"]
    elif case == "alpha 0":
        extra += ["--alpha", "0"]
    elif case == "batch size 0":  # a judging option is checked even when no judge is given
        extra += ["--batch-size", "0"]
    elif case == "unknown metric":
        extra += ["--metrics", "correlation,nope"]
    elif case == "duplicate row":
        explanations = tmp_path / "dup.csv"
        pl.read_csv(files["explanations"]).with_columns(pl.lit("lexicon").alias("explainer")).write_csv(explanations)
    elif case == "wrong columns":
        concepts = tmp_path / "three.npy"
        np.save(concepts, np.zeros((N, 3)))
        extra = ["--concepts", concepts]
    elif case == "missing explanations":
        explanations = tmp_path / "missing.csv"
    elif case == "out is a file":
        out = tmp_path / "file"
        out.write_text("x")
    elif case == "sae release without id":
        extra += ["--sae-release", "gemma-scope-2b-pt-res"]
    elif case == "sae id without release":
        extra += ["--sae-id", "layer_20/width_16k/average_l0_71"]
    elif case == "sae config without d_sae":
        (tmp_path / "sae").mkdir()
        (tmp_path / "sae" / "cfg.json").write_text(json.dumps({"architecture": "topk", "d_in": 8}))
        extra += ["--sae-config", tmp_path / "sae"]
    elif case == "sae config missing":
        extra += ["--sae-config", tmp_path / "missing.json"]
    elif case == "sae config not json":
        (tmp_path / "cfg.json").write_text("{'architecture': 'topk'}")
        extra += ["--sae-config", tmp_path / "cfg.json"]
    before = sorted(tmp_path.rglob("*"))
    code, stdout, err = run(["compare", acts, explanations, *extra, "--out", out], capfd)
    assert stdout == ""
    assert_one_line_error(code, err, 2, *fragments)
    assert sorted(tmp_path.rglob("*")) == before  # nothing written


def test_listed_in_the_help(capfd: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run(["--help"], capfd)
    assert code == 0 and "compare" in stdout
    code, stdout, _ = run(["compare", "--help"], capfd)
    assert code == 0 and "--no-baselines" in stdout and "--judge" in stdout
    assert BASELINE_RANDOM.split(":")[0] in stdout  # the baselines are named in the description


def test_the_sae_for_saebench(files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """--sae-release, --sae-id and --sae-config fill the SAEBench output's SAE fields, and name it
    as SAEBench names its results (tests/test_compare_saebench.py reads it as SAEBench does)."""
    cfg = {"architecture": "jumprelu", "d_sae": 16384, "d_in": 2304, "metadata": {"sae_lens_version": "6.0.0"}}
    (tmp_path / "sae").mkdir()
    (tmp_path / "sae" / "cfg.json").write_text(json.dumps(cfg))
    out = tmp_path / "out"
    release, sae_id = "gemma-scope-2b-pt-res", "layer_20/width_16k/average_l0_71"
    argv = ["compare", files["acts"], files["explanations"], "--concepts", files["concepts"], "--alpha", 0.05]
    argv += ["--n-boot", 50, "--sae-release", release, "--sae-id", sae_id, "--sae-config", tmp_path / "sae"]
    code, stdout, err = run([*argv, "--out", out], capfd)
    assert (code, err) == (0, "")
    name = "gemma-scope-2b-pt-res_layer_20_width_16k_average_l0_71_eval_results.json"
    assert saebench_file_name(release, sae_id) == name and "wrote pairs.parquet, summary.csv" in stdout
    assert stdout.rstrip().endswith(f"comparison.json, {name} to {out}")
    assert sorted(p.name for p in out.iterdir()) == sorted([*list(COMPARISON_FILES.values())[:4], name])
    document = json.loads((out / name).read_text())
    assert (document["sae_lens_release_id"], document["sae_lens_id"], document["sae_cfg_dict"]) == (
        release,
        sae_id,
        cfg,
    )
    assert document["sae_lens_version"] is None
    # A cfg.json file itself; without the SAE options the fields are null and the name is saebench_eval.json.
    code, _, err = run([*argv[:-6], "--sae-config", tmp_path / "sae" / "cfg.json", "--out", tmp_path / "o2"], capfd)
    assert (code, err) == (0, "")
    document = json.loads((tmp_path / "o2" / COMPARISON_FILES["saebench"]).read_text())
    assert (document["sae_lens_release_id"], document["sae_lens_id"], document["sae_cfg_dict"]) == (None, None, cfg)


def test_a_small_top_set_is_one_warning_line(
    files: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """N = 240 at the default alpha: a top set of ceil(1.2) = 2 inputs."""
    argv = ["compare", files["acts"], files["explanations"], "--concepts", files["concepts"], "--n-boot", 20]
    code, stdout, err = run([*argv, "--out", tmp_path / "out"], capfd)
    assert code == 0 and "95% interval" in stdout
    assert err == (
        "neuroneval: warning: alpha = 0.005 of 240 inputs makes each unit's top set 2 inputs: the top-set metrics "
        "auprc, f1, iou rest on so few inputs that they can rank a baseline first by chance; raise alpha to at "
        "least 0.042 (a top set of 10) or probe more inputs\n"
    )
    assert math.ceil(0.042 * N) >= 10
    code, _, err = run([*argv, "--metrics", "correlation,cosine", "--out", tmp_path / "o2"], capfd)
    assert (code, err) == (0, "")  # no metric of the top set
