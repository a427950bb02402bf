"""Judges as raters (`neuroneval.label.judged_correlations`): SmolLM2 labels only the Lee-corpus
sentences that an MG-IS plan draws from MiniLM's labels, and the estimate of each pair's
correlation with SmolLM2's labels is checked against SmolLM2's labels on every sentence."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

pytest.importorskip("sentence_transformers")
pytest.importorskip("transformers")
pytest.importorskip("gguf")

from neuroneval import crowd, label  # noqa: E402
from neuroneval.experiments import text  # noqa: E402

pytestmark = pytest.mark.slow  # SmolLM2 judges a study

N = 120
EXPLANATIONS = ["sports", "crime", "fire", "the economy", "war"]


@pytest.fixture(scope="module")
def setting() -> tuple[list[str], np.ndarray]:
    sentences = text.lee_sentences(N)
    ffn, _ = text.ffn_activations(text.load_minilm(), sentences)
    return sentences, ffn.astype(np.float64)


def test_an_llm_judge_in_the_raters_place(setting: tuple[list[str], np.ndarray], tmp_path: Path) -> None:
    sentences, ffn = setting
    cheap, expensive = label.minilm(), label.smollm2()
    cache = label.LabelCache(tmp_path / "cache.sqlite")
    model = label.label(cheap, sentences, EXPLANATIONS, cache=cache).probabilities
    # Two units per explanation: the FFN neurons closest to MiniLM's labels (an explainer's pick).
    az = (ffn - ffn.mean(0)) / np.where(ffn.std(0) > 0, ffn.std(0), 1)
    mz = (model - model.mean(0)) / model.std(0)
    r = az.T @ mz / N
    pairs = [(int(k), t) for t in range(len(EXPLANATIONS)) for k in np.argsort(-r[:, t])[:2]]
    budget = 9
    study = label.judged_correlations(
        ffn, pairs, sentences, EXPLANATIONS, cheap=cheap, expensive=expensive, budget=budget, cache=cache, verify=True
    )
    table = study.table
    assert table.height == 10
    # The estimate paid only for the drawn sentences (a fresh cache: every judgement a call) ...
    drawn = study.plan.inputs().join(study.plan.pairs.select("pair", "concept"), on="pair")
    distinct = drawn.select("concept", "input").unique().height
    assert study.expensive.pairs == study.expensive.calls == distinct
    assert distinct <= 0.15 * N * len(EXPLANATIONS)
    # ... and its value is crowd.estimate's on those labels.
    full = label.label(expensive, sentences, EXPLANATIONS, cache=cache)
    assert full.stats.calls == 0  # verify judged every sentence already
    labels = drawn.with_columns(
        pl.Series("label", [full.probabilities[i, t] for i, t in zip(drawn["input"], drawn["concept"], strict=True)])
    ).select("pair", "input", "label")
    reference = crowd.estimate(study.plan, labels, estimator="pearson", seed=0)
    np.testing.assert_allclose(table["rho"].to_numpy(), reference["rho"].to_numpy(), atol=1e-12)
    # rho_all is the correlation with SmolLM2's labels on all N sentences.
    rho_all = [np.corrcoef(ffn[:, k], full.probabilities[:, t])[0, 1] for k, t in pairs]
    np.testing.assert_allclose(table["rho_all"].to_numpy(), rho_all, atol=1e-9)
    covered = (table["ci_low"] <= table["rho_all"]) & (table["rho_all"] <= table["ci_high"])
    assert covered.to_list() == table["covered"].to_list()
    assert study.coverage() >= 0.85, table
    cache.close()
