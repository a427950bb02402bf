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


def test_population_shape_against_a_count_by_hand() -> None:
    tokens = [" a", " b", " a", " c", " a", " b"]
    acts = np.array([[5, 0], [4, -1], [3, 0], [-1, 2], [0, 1], [1, 3]], dtype=np.float32)
    shape = study.population_shape(acts, tokens, top=3)
    # unit 0: positive on 4 of 6, top 3 = a, b, a (2 of 3 are "a", 2 distinct); unit 1: 3 of 6, top 3 = b, c, a
    assert shape == pytest.approx({"positive": 7 / 12, "top_common": (2 / 3 + 1 / 3) / 2, "top_distinct": 2.5})


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
    tmp_path: Path, capfd: pytest.CaptureFixture[str], smollm2: tuple[Any, Any], judge_servers: Any
) -> None:
    """Every table, with SmolLM2 served on 127.0.0.1 as the endpoint explainer too: asked the same
    chats greedily with the same penalty, it writes what the in-process SmolLM2 explainer writes."""
    from neuroneval import label as lb
    from neuroneval.experiments.sae_study import ExplainerEndpoint

    server = judge_servers(lb.smollm2(), max_tokens=10)
    endpoint = ExplainerEndpoint(server.url, "smollm2", repetition_penalty=1.3)
    explainers = (*study.EXPLAINERS, "openai:smollm2")
    size = study.TokenStudySize(
        "tiny", train_sentences=120, explain_sentences=60, probe_sentences=60, n_units=4, epochs=1, n_boot=100,
        causal_train=4, causal_test=6, causal_epochs=1,
    )  # fmt: skip
    summary = study.run(tmp_path, size, log=lambda _: None, loaded=smollm2, endpoint=endpoint)
    explanations = pl.read_csv(tmp_path / "explanations.csv")
    assert explanations.height == 2 * 4 * len(explainers)
    assert set(explanations["explainer"]) == set(explainers)
    assert explanations["explanation"].str.len_chars().min() > 0
    by = {e: explanations.filter(pl.col("explainer") == e)["explanation"].to_list() for e in explainers}
    assert by["openai:smollm2"] == by["smollm2"] and server.requests == 2 * 4
    tokens = summary["tokens"]
    for population in ("neurons", "latents"):
        acts = np.load(tmp_path / f"{population}-activations.npy")
        assert acts.shape == (tokens["probe"], 4)
        table = pl.read_csv(tmp_path / population / "summary.csv")
        assert set(table["explainer"]) == {*explainers, "baseline:random", "baseline:shuffled"}
        assert set(table["units_explained"]) == {4}
        # a population's files name units by column; explanations.csv keeps the model's unit too
        mine = explanations.filter(pl.col("population") == population)
        assert sorted(set(mine["column"])) == [0, 1, 2, 3]
        assert mine["unit"].max() < 1536
    assert json.loads((tmp_path / "summary.json").read_text())["tokens"] == tokens
    populations = pl.read_csv(tmp_path / "populations.csv")
    assert populations.height == len(explainers) + 2 and (populations["ci_low"] <= populations["ci_high"]).all()
    # `neuroneval compare` on the files the study leaves gives the study's intervals
    argv = ["compare", tmp_path / "neurons-activations.npy", tmp_path / "neurons-explanations.csv"]
    argv += ["--concepts", tmp_path / "neurons-concepts.npy", "--n-boot", "100", "--out", tmp_path / "cli"]
    code, stdout, err = run(argv, capfd)
    assert code == 0, err
    ours = pl.read_csv(tmp_path / "cli" / "summary.csv").sort("explainer")
    study_table = pl.read_csv(tmp_path / "neurons" / "summary.csv").sort("explainer")
    for column in ("correlation_mean", "correlation_ci_low", "correlation_ci_high"):
        assert ours[column].to_list() == pytest.approx(study_table[column].to_list(), rel=1e-12), column
    _check_causal_lens(tmp_path, summary["causal"], capfd)


def _check_causal_lens(out: Path, lens: dict[str, Any], capfd: pytest.CaptureFixture[str]) -> None:
    """The causal lens's table is `neuroneval causal table` on the runs it wrote; its latents -
    neurons differences are paired bootstraps of the hits in their ``hits.npz``; and `neuroneval
    causal run` on the study's SAE directory gives the study's IIA for the SAE's latents."""
    from neuroneval.causal.iia import bootstrap_difference

    dirs = [out / "causal" / site for site in study.CAUSAL_LENS]
    code, stdout, err = run(["causal", "table", *dirs, "--format", "json"], capfd)
    assert code == 0, err
    assert json.loads(stdout) == lens["iia"]
    assert {(r["site"], r["featurizer"]) for r in lens["iia"]} == {
        (site, f) for site, names in study.CAUSAL_LENS.items() for f in names
    }
    hits = {site: np.load(d / "hits.npz") for site, d in zip(study.CAUSAL_LENS, dirs, strict=True)}

    def of(site: str, featurizer: str, variable: str) -> dict[str, np.ndarray]:
        prefix = f"{featurizer}|{variable}|"
        return {k.removeprefix(prefix): hits[site][k] for k in hits[site].files if k.startswith(prefix)}

    assert len(lens["differences"]) == 2 * len(study.LATENTS_AGAINST_NEURONS)
    for row in lens["differences"]:
        a, b = of("mlp-input", row["latents"], row["variable"]), of("mlp-neurons", row["neurons"], row["variable"])
        keep = {name: np.ones(h.shape[2], bool) for name, h in a.items()}
        (delta, interval), _ = bootstrap_difference(a, b, keep, n_boot=100, seed=0)
        assert (row["difference"], row["low"], row["high"]) == pytest.approx((delta, *interval))
    # the whole MLP input swapped by the lens's own measurement hits what the run's "full" hits
    whole = [r for r in lens["whole_vector"] if r["site"] == "mlp-input"]
    positions = ["io", "s2", "last"]
    assert len(whole) == 4 * len(positions) and {r["site"] for r in lens["whole_vector"]} == {"residual", "mlp-input"}
    for r in whole:
        hit = hits["mlp-input"][f"full|{r['variable']}|{r['dataset']}"][0, positions.index(r["position"])]
        assert r["iia"] == pytest.approx(hit.mean()), r
    argv = ["causal", "run", "--model", "smollm2", "--site", "mlp-input", "--layers", "15", "--sae", out / "saes",
            "--featurizers", "sae", "--n-train", "4", "--n-test", "6", "--size", "16", "--epochs", "1",
            "--n-boot", "100", "--quiet", "--out", out / "cli-causal"]  # fmt: skip
    code, _, err = run(argv, capfd)
    assert code == 0, err
    again = json.loads((out / "cli-causal" / "causal_run.json").read_text())
    lens_run = json.loads((dirs[0] / "causal_run.json").read_text())
    for variable in ("output_token", "output_position"):
        mine = next(r for r in again["results"] if r["featurizer"] == "sae" and r["variable"] == variable)
        theirs = next(r for r in lens_run["results"] if r["featurizer"] == "sae" and r["variable"] == variable)
        assert mine["unit_iia"] == theirs["unit_iia"], variable


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
    url = "http://127.0.0.1:9/v1"
    assert cli.main(["demo", "--sae", "--model", "smollm2", "--endpoint", url, "--endpoint-model", "m"]) == 0
    assert calls[-1] == ("smollm2", ["--seed", "0", "--endpoint", url, "--endpoint-model", "m"])
    for argv, message in (
        (["--sae", "--endpoint", url, "--endpoint-model", "m"], "it goes with --sae --model smollm2"),
        (["--sae", "--model", "smollm2", "--endpoint", url], "--endpoint needs --endpoint-model"),
        (["--sae", "--model", "smollm2", "--endpoint-model", "m"], "--endpoint-model needs --endpoint"),
    ):
        code, _, err = run(["demo", *argv], capfd)
        assert code == 2 and message in err, err
    assert len(calls) == 3


def test_an_endpoint_that_does_not_answer_is_named() -> None:
    from judge_helpers import free_port
    from neuroneval.errors import SourceError
    from neuroneval.experiments.sae_study import ExplainerEndpoint, endpoint_explanations

    url = f"http://127.0.0.1:{free_port()}/v1"
    endpoint = ExplainerEndpoint(url, "m", max_retries=0)
    with pytest.raises(SourceError, match=f"the explainer endpoint {url} .m. failed: Connection error"):
        endpoint_explanations(
            np.ones((3, 1)), ["a", "b", "c"], 2, print, endpoint=endpoint, messages=study.llm_messages
        )
