"""The SAE study on SmolLM2, per token (`neuroneval demo --sae --model smollm2`,
neuroneval.experiments.sae_study_smollm2): the neurons it stores are the MLP's down projection
input, its token windows and top-token explainer do what they say, and a tiny run writes every
table, which `neuroneval compare` reproduces from the files it leaves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("empath")

from cli_helpers import run  # noqa: E402
from neuroneval.experiments import sae_study_smollm2 as study  # noqa: E402

pytestmark = pytest.mark.slow  # SmolLM2 runs, an SAE is trained, SmolLM2 explains and MiniLM judges


@pytest.fixture(scope="module")
def smollm2() -> tuple[Any, Any]:
    from neuroneval.torch.circuits.track import load_smollm2

    return load_smollm2()


def test_marked_windows_and_top_tokens() -> None:
    """Windows from a word-per-token vocabulary: the token in « », `context` tokens each side,
    cut at the sentence's ends (the bare token with no context); the top-token explainer counts
    the tokens of a unit's highest rows."""
    vocab = [" the", " old", " bank", " of", " a", " river", "."]

    def decode(ids: list[int]) -> str:
        return "".join(vocab[i] for i in ids)

    ids = [[0, 1, 2, 3, 4, 5, 6], [2, 6]]
    windows = study.marked_windows(ids, np.array([0, 0, 1]), np.array([2, 6, 1]), decode, context=2)
    assert windows == ["the old «bank» of a", "a river«.»", "bank«.»"]
    # with no context, the token alone (what the study's judge reads)
    assert study.marked_windows(ids, np.array([0, 0, 1]), np.array([2, 6, 1]), decode, context=0) == ["bank", ".", "."]
    tokens = [" bank", " river", " bank", ".", " bank", " river"]
    acts = np.array([[5.0, 0], [4, 1], [3, 0], [0, 9], [2, 8], [1, 7]])
    assert study.top_token_explanations(acts, tokens, top=3) == ["words like bank, river", "words like ., bank, river"]


def test_neurons_are_the_down_projection_input(smollm2: tuple[Any, Any]) -> None:
    """The module `expose_neurons` names outputs what layer 15's down_proj receives (a
    pre-hook on the projection, written here), and the model's logits do not move."""
    tokenizer, model = smollm2
    batch = tokenizer(["The river bank was flooded.", "She paid ten dollars."], return_tensors="pt", padding=True)
    with torch.inference_mode():
        before = model(**batch).logits
    name = study.expose_neurons(model, 15)
    seen: dict[str, torch.Tensor] = {}
    module = dict(model.named_modules())[name]
    down = model.model.layers[15].mlp.down_proj.down
    h1 = module.register_forward_hook(lambda m, i, o: seen.__setitem__("exposed", o))
    h2 = down.register_forward_pre_hook(lambda m, i: seen.__setitem__("input", i[0]))
    try:
        with torch.inference_mode():
            after = model(**batch).logits
    finally:
        h1.remove()
        h2.remove()
    assert seen["exposed"].shape[-1] == model.config.intermediate_size
    assert torch.equal(seen["exposed"], seen["input"])
    assert torch.equal(before, after)
    assert study.expose_neurons(model, 15) == name  # a second call changes nothing


def test_a_tiny_run_writes_every_table(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], smollm2: tuple[Any, Any]
) -> None:
    size = study.TokenStudySize(
        "tiny", train_sentences=120, explain_sentences=60, probe_sentences=60, n_units=4, epochs=1, n_boot=100
    )
    summary = study.run(tmp_path, size, log=lambda _: None, loaded=smollm2)
    explanations = pl.read_csv(tmp_path / "explanations.csv")
    assert explanations.height == 2 * 4 * len(study.EXPLAINERS)
    assert set(explanations["explainer"]) == set(study.EXPLAINERS)
    assert explanations["explanation"].str.len_chars().min() > 0
    tokens = summary["tokens"]
    for population in ("neurons", "latents"):
        acts = np.load(tmp_path / f"{population}-activations.npy")
        assert acts.shape == (tokens["probe"], 4)
        table = pl.read_csv(tmp_path / population / "summary.csv")
        assert set(table["explainer"]) == {*study.EXPLAINERS, "baseline:random", "baseline:shuffled"}
        assert set(table["units_explained"]) == {4}
        # a population's files name units by column; explanations.csv keeps the model's unit too
        mine = explanations.filter(pl.col("population") == population)
        assert sorted(set(mine["column"])) == [0, 1, 2, 3]
        assert mine["unit"].max() < 1536
    assert json.loads((tmp_path / "summary.json").read_text())["tokens"] == tokens
    populations = pl.read_csv(tmp_path / "populations.csv")
    assert populations.height == 5 and (populations["ci_low"] <= populations["ci_high"]).all()
    # `neuroneval compare` on the files the study leaves gives the study's intervals
    argv = ["compare", tmp_path / "neurons-activations.npy", tmp_path / "neurons-explanations.csv"]
    argv += ["--concepts", tmp_path / "neurons-concepts.npy", "--n-boot", "100", "--out", tmp_path / "cli"]
    code, stdout, err = run(argv, capfd)
    assert code == 0, err
    ours = pl.read_csv(tmp_path / "cli" / "summary.csv").sort("explainer")
    study_table = pl.read_csv(tmp_path / "neurons" / "summary.csv").sort("explainer")
    for column in ("correlation_mean", "correlation_ci_low", "correlation_ci_high"):
        assert ours[column].to_list() == pytest.approx(study_table[column].to_list(), rel=1e-12), column


def test_judge_context_check_measures_the_judge(smollm2: tuple[Any, Any]) -> None:
    """The judge labels tokens by their empath category well above chance when shown the token
    alone (the measurement behind the study's one-token judging window)."""
    aucs = study.judge_context_check(sentences=60, contexts=(0, 1), log=lambda _: None, tokenizer=smollm2[0])
    assert set(aucs) == {0, 1}
    assert aucs[0] > 0.75 and aucs[1] > 0.6, aucs


def test_cli_demo_sae_model_dispatches_and_needs_sae(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """`demo --sae --model smollm2` runs this study, `--sae` alone the MiniLM one, and `--model`
    without `--sae` is a usage error (exit 2) naming the rule."""
    from neuroneval import cli
    from neuroneval.experiments import sae_study

    calls: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(study, "main", lambda argv: calls.append(("smollm2", list(argv))) or 0)
    monkeypatch.setattr(sae_study, "main", lambda argv: calls.append(("minilm", list(argv))) or 0)
    assert cli.main(["demo", "--sae", "--model", "smollm2", "--out", "somewhere"]) == 0
    assert cli.main(["demo", "--sae"]) == 0
    assert calls == [("smollm2", ["--seed", "0", "--out", "somewhere"]), ("minilm", ["--seed", "0"])]
    code, _, err = run(["demo", "--model", "smollm2"], capfd)
    assert code == 2 and "--model is the SAE study's model: it goes with --sae" in err
    assert calls == [("smollm2", ["--seed", "0", "--out", "somewhere"]), ("minilm", ["--seed", "0"])]
