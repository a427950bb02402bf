"""What the peers write, read as they write it: a delphi run's folder (classifier and simulation
scores), neuron-explainer's calibrated simulations (both calibrators), Neuronpedia's export
folders, and a delphi cache that delphi's LatentDataset accepts.

The files are built by tests/interop_fixtures.py, which follows each peer's code step by step
(the files and functions are cited there). Its builders were checked once against the peers'
own code, run from their PyPI wheels (eai-delphi 0.1.3, automated-interpretability 0.0.24)
with orjson: the JSON they write is the same, value for value.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from interop_fixtures import (
    EXPORT_BATCH_SIZE,
    autointerp_rows,
    calibrated_neuron,
    delphi_cache_config,
    delphi_classifier_score,
    delphi_examples,
    delphi_simulation_score,
    neuron_simulation_results,
    neuronpedia_export,
    neuronpedia_row,
    write_autointerp_output,
    write_delphi_explanation,
    write_delphi_scores,
)
from neuroneval import compute
from neuroneval.errors import ParameterError, SourceError
from neuroneval.interop import (
    delphi_score_summary,
    is_neuronpedia_export,
    read_delphi_cache,
    read_delphi_scores,
    read_neuronpedia_explanations,
    read_scored_simulations,
    simulation_scores,
    write_delphi_cache,
)

HOOK = "layers.3.mlp"
LATENTS = (4, 11)

# --------------------------------------------------------------------------- a delphi run


@pytest.fixture
def delphi_run(tmp_path: Path) -> tuple[Path, dict[tuple[str, int], Any]]:
    """run/explanations, run/scores/{detection,fuzz,simulation} for two latents of one hookpoint."""
    rng = np.random.default_rng(21)
    run = tmp_path / "run"
    written: dict[tuple[str, int], Any] = {}
    for latent in LATENTS:
        test, not_active = delphi_examples(rng)
        predicted: dict[tuple[str, ...], list[float]] = {}

        def simulate(tokens: list[str], predicted: dict[tuple[str, ...], list[float]] = predicted) -> list[float]:
            return predicted.setdefault(tuple(tokens), np.clip(rng.normal(3, 3, len(tokens)), 0, 10).tolist())

        write_delphi_explanation(run, HOOK, latent, f'latent {latent}: ünïcode and "quotes"')
        for scorer in ("detection", "fuzz"):
            written[(scorer, latent)] = delphi_classifier_score(test, not_active, rng)
            write_delphi_scores(run, HOOK, latent, scorer, written[(scorer, latent)])
        written[("simulation", latent)] = delphi_simulation_score(test, not_active, simulate)
        write_delphi_scores(run, HOOK, latent, "simulation", written[("simulation", latent)])
    return run, written


def test_delphi_classifier_scores_are_read_from_a_run_with_a_simulation_folder(
    delphi_run: tuple[Path, dict[tuple[str, int], Any]],
) -> None:
    run, written = delphi_run
    table = read_delphi_scores(run)
    assert table.equals(read_delphi_scores(run / "scores"))
    assert set(table["scorer"]) == {"detection", "fuzz"}  # the simulation scorer is read elsewhere
    for (scorer, latent), examples in written.items():
        if scorer == "simulation":
            continue
        rows = table.filter((pl.col("scorer") == scorer) & (pl.col("unit") == latent)).sort("example")
        assert rows["module"].unique().to_list() == [HOOK]
        assert rows["activating"].to_list() == [e["activating"] for e in examples]
        assert rows["prediction"].to_list() == [e["prediction"] for e in examples]
        assert rows["correct"].to_list() == [e["correct"] for e in examples]
        assert rows["probability"].to_list() == [e["probability"] for e in examples]
        assert rows["distance"].to_list() == [float(e["distance"]) for e in examples]
        assert rows["max_activation"].to_list() == pytest.approx([max(e["activations"]) for e in examples])
    assert delphi_score_summary(table).height == 4


def test_delphi_simulation_scores_are_read_from_the_run_and_equal_delphis(
    delphi_run: tuple[Path, dict[tuple[str, int], Any]],
) -> None:
    run, written = delphi_run
    records = read_scored_simulations(run)
    for other in (run / "scores", run / "scores" / "simulation"):
        assert [(r.neuron, r.distance) for r in read_scored_simulations(other)] == [
            (r.neuron, r.distance) for r in records
        ]
    single = read_scored_simulations(run / "scores" / "simulation" / f"{HOOK}_latent4.txt")
    assert len(single) == len(written[("simulation", 4)])
    table = simulation_scores(records, ["correlation", "inverse_auc"])
    for latent in LATENTS:
        score = written[("simulation", latent)]
        rows = table.filter(pl.col("neuron") == latent)
        # one ScoredSimulation per quantile (distance q + 1), then all examples (distance 0)
        assert rows["distance"].to_list() == [s["distance"] for s in score] == [1, 2, 3, 0]
        assert set(rows["module"]) == {HOOK} and rows["layer"].null_count() == rows.height
        assert set(rows["explanation"]) == {f'latent {latent}: ünïcode and "quotes"'}
        for row, s in zip(rows.iter_rows(named=True), score, strict=True):
            assert row["correlation"] == pytest.approx(s["ev_correlation_score"], abs=2e-15)
            assert row["ev_correlation_score"] == s["ev_correlation_score"]
            assert row["tokens"] == sum(len(q["true_activations"]) for q in s["scored_sequence_simulations"])
    overall = next(r for r in records if r.neuron == 4 and r.distance == 0)
    assert overall.true.max() == 10.0 and (overall.true[-8:] == 0).all()  # normalized activations, then zeros


def test_a_delphi_simulation_whose_correlation_is_nan(tmp_path: Path) -> None:
    rng = np.random.default_rng(22)
    test, not_active = delphi_examples(rng)
    score = delphi_simulation_score(test, not_active, lambda tokens: [0.0] * len(tokens))  # the simulator failed
    assert {s["ev_correlation_score"] for s in score} == {"nan"}
    write_delphi_scores(tmp_path, "h", 0, "simulation", score)
    table = simulation_scores(read_scored_simulations(tmp_path), ["correlation"])
    assert table["ev_correlation_score"].is_nan().all() and table["correlation"].is_nan().all()


# --------------------------------------------------------------------------- calibrated simulations


@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["positive", "negative"])
@pytest.mark.parametrize("calibration", ["linear", "percentile"])
def test_calibrated_simulations_score_what_neuron_explainer_scores(
    tmp_path: Path, calibration: str, sign: float
) -> None:
    rng = np.random.default_rng(23)
    simulation = calibrated_neuron(rng, calibration, sign=sign)
    path = tmp_path / "2" / "7.jsonl"
    path.parent.mkdir()
    path.write_bytes(neuron_simulation_results(2, 7, [("words about dogs", simulation)]) + b"\n")
    (record,) = read_scored_simulations(tmp_path)
    assert (record.layer, record.neuron, record.activation_scale) == (2, 7, "neuron_activations")
    assert record.normalized is not None
    calibrated = np.concatenate(
        [s["simulation"]["expected_activations"] for s in simulation["scored_sequence_simulations"]]
    )
    np.testing.assert_array_equal(record.simulated, calibrated)
    row = simulation_scores([record], ["correlation", "cosine", "inverse_auc"]).row(0, named=True)
    # the package's ev_correlation_score: np.corrcoef(true, calibrated expected values)
    assert row["correlation"] == pytest.approx(simulation["ev_correlation_score"], abs=1e-14)
    assert row["correlation"] == pytest.approx(np.corrcoef(record.true, calibrated)[0, 1], abs=1e-14)
    uncalibrated = np.corrcoef(record.true, record.normalized)[0, 1]
    if calibration == "linear" and sign < 0:  # the regression's slope is negative: it reverses the simulation
        assert uncalibrated < -0.5 and row["correlation"] > 0.5
    if calibration == "percentile":  # not affine: the calibrated correlation is another number
        assert abs(row["correlation"] - uncalibrated) > 1e-3
    # rank metrics are those of the calibrated values; cosine that of their [0, 1] image
    from sklearn.metrics import roc_auc_score

    labels = record.true > np.median(record.true)
    expected_auc = roc_auc_score(labels, calibrated)
    got_auc = compute(record.concept()[:, None], labels[:, None].astype(float), ["inverse_auc"])["inverse_auc"][0, 0]
    assert got_auc == pytest.approx(expected_auc, abs=1e-12)
    c = (calibrated - calibrated.min()) / (calibrated.max() - calibrated.min())
    assert row["cosine"] == pytest.approx(record.true @ c / np.linalg.norm(record.true) / np.linalg.norm(c), abs=1e-12)


# --------------------------------------------------------------------------- Neuronpedia's export folders


def test_a_neuronpedia_export_folder_as_the_exporter_and_autointerp_lay_it_out(tmp_path: Path) -> None:
    model, source = "gpt2-small", "6-res-jb"
    texts = {i: f" feature {i}" for i in range(1100)}  # two of the exporter's 1,024-row batches
    rows = [neuronpedia_row(model, source, i, t, "oai_token-act-pair", "gpt-4o-mini", i) for i, t in texts.items()]
    rows.append(neuronpedia_row(model, source, 3, "", "oai_token-act-pair", "claude-3-haiku", 5000))  # empty
    rows.append(neuronpedia_row(model, source, 5, "  ", "np_max-act-logits", "gpt-4o", 5001))  # blank
    base = neuronpedia_export(tmp_path / "exports", model, source, rows)
    assert sorted(p.name for p in (base / "explanations").iterdir()) == ["batch-0.jsonl.gz", "batch-1.jsonl.gz"]
    first = gzip.decompress((base / "explanations" / "batch-0.jsonl.gz").read_bytes()).decode().splitlines()
    assert len(first) == EXPORT_BATCH_SIZE and json.loads(first[0])["index"] == "0"
    assert json.loads(first[2])["index"] == "10"  # ORDER BY a text column
    # an auto-interp run written beside the export, gzipped and not
    more = {i: f"auto {i}" for i in (1, 2, 3, 4)} | {9: " "}
    write_autointerp_output(base / "explanations-gpt-4.1-nano", autointerp_rows(model, source, more, "oai_token-act-pair",
                            "openai/gpt-4.1-nano"), gzip_output=True)  # fmt: skip
    write_autointerp_output(base / "explanations-plain", autointerp_rows(model, source, {7: "plain"}, "np_acts-logits",
                            "gemini-2.0-flash"), gzip_output=False)  # fmt: skip
    assert is_neuronpedia_export(base) and is_neuronpedia_export(base / "explanations-plain")
    with pytest.warns(UserWarning, match=r"skipped 2 Neuronpedia explanation row\(s\) with an empty description"):
        table = read_neuronpedia_explanations(base, width=2048)
    assert table.height == 1100 + 4 + 1
    counts = dict(table.group_by("explainer").len().iter_rows())
    assert counts == {"oai_token-act-pair:gpt-4o-mini": 1100, "oai_token-act-pair:gpt-4.1-nano": 4,
                      "np_acts-logits:gemini-2.0-flash": 1}  # fmt: skip
    assert table.filter(pl.col("unit") == 10)["explanation"].to_list() == [" feature 10"]
    alone = read_neuronpedia_explanations(base / "explanations-plain")
    assert alone.rows() == [(7, "np_acts-logits:gemini-2.0-flash", "plain", model, source, "gemini-2.0-flash",
                             "np_acts-logits", "cla00000000")]  # fmt: skip


def test_an_export_of_empty_descriptions_only_is_refused(tmp_path: Path) -> None:
    base = neuronpedia_export(tmp_path, "m", "0-res", [neuronpedia_row("m", "0-res", 0, "", "t", "x", 0)])
    with pytest.warns(UserWarning, match="skipped 1"), pytest.raises(SourceError) as err:
        read_neuronpedia_explanations(base)
    assert type(err.value) is SourceError and "1 rows with an empty description were skipped" in str(err.value)
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "explanations-x").mkdir()
    with pytest.raises(SourceError, match=r"explanations-x'\] hold no Neuronpedia explanation batches"):
        read_neuronpedia_explanations(tmp_path / "bare")
    assert not is_neuronpedia_export(tmp_path / "bare")


# --------------------------------------------------------------------------- a cache delphi accepts


def test_write_delphi_cache_always_writes_the_config_delphi_needs(tmp_path: Path) -> None:
    acts = np.zeros((3 * 4, 6), np.float32)
    acts[1, 2], acts[9, 5] = 1.5, 0.25
    d = tmp_path / "latents" / HOOK
    write_delphi_cache(d, acts, ctx_len=4, n_splits=2)
    # delphi/latents/loader.py LatentDataset: every module folder must hold config.json (json.load),
    # whose model_name loads the tokenizer when none is given
    config = json.loads((d / "config.json").read_text())
    assert config == {"cache_ctx_len": 4, "n_tokens": 12, "n_splits": 2, "model_name": None}
    assert read_delphi_cache(d, n_sequences=3).activations.shape == (12, 6)  # cache_ctx_len from the config
    full = delphi_cache_config(4, 2)
    write_delphi_cache(tmp_path / "b", acts, ctx_len=4, n_splits=2, config=full)
    assert json.loads((tmp_path / "b" / "config.json").read_text()) == full  # its n_tokens kept
    for bad in ({"cache_ctx_len": 8}, {"n_splits": 5}):
        with pytest.raises(ParameterError) as err:
            write_delphi_cache(tmp_path / "c", acts, ctx_len=4, n_splits=2, config=bad)
        assert type(err.value) is ParameterError
    assert not (tmp_path / "c").exists()
