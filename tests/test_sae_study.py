"""The SAE study (`neuroneval demo --sae`, neuroneval.experiments.sae_study): its TopK SAE
encodes as the SAELens reader does, its explainers do what they say on planted data, and a
tiny run writes every table with the sizes it was given."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("empath")

from cli_helpers import run  # noqa: E402
from neuroneval.experiments import sae_study  # noqa: E402
from neuroneval.interop import read_saelens, write_saelens  # noqa: E402

pytestmark = pytest.mark.slow  # an SAE trained, SmolLM2 explains and judges


@pytest.fixture(autouse=True)
def one_thread() -> None:
    torch.set_num_threads(1)


def test_trained_sae_encodes_as_saelens_reads_it(tmp_path: Path) -> None:
    """Data from a planted 4-sparse dictionary: training lowers the reconstruction error well
    below the data's variance, and the saved SAE's `encode` (SAELens's TopK) is the code the
    training optimised (recomputed here in numpy with the training's own formula)."""
    rng = np.random.default_rng(0)
    atoms = rng.normal(size=(64, 16))
    codes = np.zeros((3000, 64))
    for row in codes:
        row[rng.choice(64, 4, replace=False)] = rng.exponential(1.0, 4)
    x = (codes @ atoms + 0.01 * rng.normal(size=(3000, 16))).astype(np.float32)
    from neuroneval.torch import train_topk_sae

    sae = train_topk_sae(x, d_sae=64, k=4, epochs=30, batch_size=256, seed=0)
    write_saelens(sae, tmp_path / "sae")
    back = read_saelens(tmp_path / "sae")
    z = back.encode(x)
    pre = np.maximum((x - back.b_dec) @ back.W_enc + back.b_enc, 0)
    kept = np.argsort(-pre, axis=1, kind="stable")[:, :4]
    expected = np.zeros_like(pre)
    np.put_along_axis(expected, kept, np.take_along_axis(pre, kept, axis=1), axis=1)
    np.testing.assert_allclose(z, expected, rtol=1e-5, atol=1e-6)
    fvu = ((z @ back.W_dec + back.b_dec - x) ** 2).sum() / ((x - x.mean(axis=0)) ** 2).sum()
    assert fvu < 0.3, fvu
    assert ((z > 0).sum(axis=1) <= 4).all()


def test_explainers_on_planted_units() -> None:
    """A unit that fires on exactly its top 5%, the sentences about dogs and cats: the lexicon
    explainer names the one empath category holding both words."""
    words = ["dog"] * 10 + ["cat"] * 10 + ["car", "bus", "train", "ship"] * 95
    sentences = [f"The {w} was seen near the old bank today." for w in words]
    rng = np.random.default_rng(1)
    pets = np.array([w in ("dog", "cat") for w in words], dtype=float)
    maxima = np.column_stack([pets + 0.1 * rng.random(len(words)), rng.random(len(words))])
    assert sae_study.lexicon_explanations(maxima, sentences)[0] == "pet"
    # a sparse unit, 0 on 97.5% of the inputs: its top set is where it fires, not every input
    # tied at 0 (which would name the commonest category)
    words = ["dog"] * 10 + ["cat"] * 10 + ["car", "bus", "train", "ship"] * 195
    sentences = [f"The {w} was seen near the old bank today." for w in words]
    sparse = np.array([w in ("dog", "cat") for w in words], dtype=float)[:, None]
    assert sae_study.lexicon_explanations(sparse, sentences)[0] == "pet"


def test_a_tiny_run_writes_every_table(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    size = sae_study.StudySize(
        "tiny", train_sentences=240, explain_sentences=120, probe_sentences=120, n_units=5, epochs=2, n_boot=100
    )
    summary = sae_study.run(tmp_path, size, log=lambda _: None)
    explanations = pl.read_csv(tmp_path / "explanations.csv")
    assert explanations.height == 2 * 5 * len(sae_study.EXPLAINERS)
    assert set(explanations["explainer"]) == set(sae_study.EXPLAINERS)
    assert explanations["explanation"].str.len_chars().min() > 0
    for population in ("neurons", "latents"):
        table = pl.read_csv(tmp_path / population / "summary.csv")
        assert set(table["explainer"]) == {*sae_study.EXPLAINERS, "baseline:random", "baseline:shuffled"}
        assert set(table["units_explained"]) == {5}
    populations = pl.read_csv(tmp_path / "populations.csv")
    assert populations.height == 5 and (populations["ci_low"] <= populations["ci_high"]).all()
    assert read_saelens(tmp_path / "sae").architecture == "topk"
    assert json.loads((tmp_path / "summary.json").read_text())["size"]["n_units"] == 5 == summary["size"]["n_units"]
    # `neuroneval compare` on the files the study leaves prints its ranking, with the same intervals
    argv = ["compare", tmp_path / "latents-activations.npy", tmp_path / "latents-explanations.csv"]
    argv += ["--concepts", tmp_path / "latents-concepts.npy", "--n-boot", "100", "--out", tmp_path / "cli"]
    code, stdout, err = run(argv, capfd)
    assert code == 0, err
    assert "95% interval" in stdout and "smollm2" in stdout
    ours = pl.read_csv(tmp_path / "cli" / "summary.csv").sort("explainer")
    study = pl.read_csv(tmp_path / "latents" / "summary.csv").sort("explainer")
    assert ours["correlation_ci_low"].to_list() == pytest.approx(study["correlation_ci_low"].to_list(), rel=1e-12)
