"""Neuronpedia explanation exports and neuron-explainer scored simulations (neuroneval.interop).

Fixtures are written here in the published layouts (gzip + JSON lines; dataclasses as JSON
with their `dataclass_name` tags), not by our writers; the writers are checked against them.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from neuroneval.errors import ShapeError, SourceError
from neuroneval.interop.neuronpedia import read_neuronpedia_explanations, write_neuronpedia_explanations
from neuroneval.interop.simulation import (
    SimulationRecord,
    read_scored_simulations,
    simulation_scores,
    write_scored_simulations,
)


def np_row(
    index: Any, description: str, model: str = "gpt-4o-mini", type_name: str = "oai_token-act-pair"
) -> dict[str, Any]:
    return {
        "id": f"clx{index}{model}",
        "modelId": "gpt2-small",
        "layer": "6-res-jb",
        "index": index,
        "description": description,
        "authorId": "bot",
        "typeName": type_name,
        "explanationModelName": model,
        "createdAt": "2024-05-01T00:00:00.000Z",
    }


def write_batches(directory: Path, batches: list[list[dict[str, Any]]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for n, rows in enumerate(batches):
        with gzip.open(directory / f"batch-{n}.jsonl.gz", "wt", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


def test_neuronpedia_export_reads_as_explainers(tmp_path: Path) -> None:
    rows = [np_row(str(i), f" latent {i} text") for i in range(12)]
    rows += [np_row(5, "second opinion", model="claude-3-5-haiku", type_name="np_max-act")]
    rows += [np_row("5", "asked again")]  # the same explainer twice: a second explainer
    write_batches(tmp_path / "export" / "explanations", [rows[:7], rows[7:], []])
    table = read_neuronpedia_explanations(tmp_path / "export", width=16)
    assert table.height == 14
    explainers = table.group_by("explainer").len().sort("explainer").rows()
    assert explainers == [
        ("np_max-act:claude-3-5-haiku", 1),
        ("oai_token-act-pair:gpt-4o-mini", 12),
        ("oai_token-act-pair:gpt-4o-mini#2", 1),
    ]
    five = table.filter(table["unit"] == 5).select("explainer", "explanation").rows()
    assert ("oai_token-act-pair:gpt-4o-mini#2", "asked again") in five and (
        "np_max-act:claude-3-5-haiku",
        "second opinion",
    ) in five
    assert table.filter(table["unit"] == 0)["explanation"].item() == " latent 0 text"  # kept as written
    assert set(table["model_id"].unique()) == {"gpt2-small"} and set(table["layer"].unique()) == {"6-res-jb"}
    # the writer's batches are read back identically, and a single batch file reads alone
    write_neuronpedia_explanations(tmp_path / "ours", rows, batch_size=5)
    assert sorted(p.name for p in (tmp_path / "ours").iterdir()) == [f"batch-{i}.jsonl.gz" for i in range(3)]
    assert read_neuronpedia_explanations(tmp_path / "ours", width=16).equals(table)
    assert read_neuronpedia_explanations(tmp_path / "export" / "explanations" / "batch-1.jsonl.gz").height == 7


def test_neuronpedia_checks(tmp_path: Path) -> None:
    write_batches(tmp_path / "a", [[np_row("3", "x"), np_row("20", "y")]])
    with pytest.raises(SourceError, match=r"batch-0.jsonl.gz, line 2: index 20 is outside 0..15"):
        read_neuronpedia_explanations(tmp_path / "a", width=16)
    other = dict(np_row(1, "z"), layer="7-res-jb")
    write_batches(tmp_path / "b", [[np_row(1, "x"), other]])
    with pytest.raises(SourceError, match="several SAEs"):
        read_neuronpedia_explanations(tmp_path / "b")
    assert read_neuronpedia_explanations(tmp_path / "b", layer="7-res-jb")["explanation"].to_list() == ["z"]
    with pytest.raises(SourceError, match="for that model and layer"):
        read_neuronpedia_explanations(tmp_path / "b", model_id="gemma-2-2b")
    broken = {k: v for k, v in np_row(1, "x").items() if k != "description"}
    write_batches(tmp_path / "c", [[broken]])
    with pytest.raises(SourceError, match=r"line 1: missing the field\(s\) \['description'\]"):
        read_neuronpedia_explanations(tmp_path / "c")
    write_batches(tmp_path / "d", [[np_row("-2", "x")], [np_row("1.5", "y")]])
    with pytest.raises(SourceError, match="index '-2' is not a latent index"):
        read_neuronpedia_explanations(tmp_path / "d")
    write_batches(tmp_path / "e", [[np_row(1, "   "), np_row(2, "kept")]])
    with pytest.warns(UserWarning, match=r"skipped 1 Neuronpedia explanation row\(s\) with an empty description"):
        assert read_neuronpedia_explanations(tmp_path / "e")["unit"].to_list() == [2]
    whole = (tmp_path / "a" / "batch-0.jsonl.gz").read_bytes()
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "batch-0.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(SourceError, match="batch-0.jsonl.gz is not a readable gzip file"):
        read_neuronpedia_explanations(tmp_path / "f")
    with pytest.raises(SourceError, match="no Neuronpedia explanation batches"):
        read_neuronpedia_explanations(tmp_path / "c" / "..")


# --------------------------------------------------------------------------- neuron-explainer


def sequence_simulation(
    tokens: list[str], expected: list[float], scale: str = "simulated_normalized_activations"
) -> dict[str, Any]:
    return {
        "dataclass_name": "SequenceSimulation",
        "tokens": tokens,
        "expected_activations": expected,
        "activation_scale": scale,
        "distribution_values": [[0.0, 10.0] for _ in expected],
        "distribution_probabilities": [[1 - e / 10, e / 10] for e in expected],
        "uncalibrated_simulation": None,
    }


def neuron_results(
    layer: int, neuron: int, explanations: dict[str, list[tuple[list[float], list[float]]]]
) -> dict[str, Any]:
    """A NeuronSimulationResults as neuron-explainer's `dumps` writes it, scores computed as
    its scoring.py does (np.corrcoef over all sequences, concatenated)."""
    scored = []
    for text, sequences in explanations.items():
        seqs = []
        for true, sim in sequences:
            seqs.append(
                {
                    "dataclass_name": "ScoredSequenceSimulation",
                    "simulation": sequence_simulation([f"t{i}" for i in range(len(true))], sim),
                    "true_activations": true,
                    "ev_correlation_score": float(np.corrcoef(true, sim)[0, 1]),
                    "rsquared_score": None,
                    "absolute_dev_explained_score": None,
                }
            )
        all_true = np.concatenate([t for t, _ in sequences])
        all_sim = np.concatenate([s for _, s in sequences])
        simulation = {
            "dataclass_name": "ScoredSimulation",
            "scored_sequence_simulations": seqs,
            "ev_correlation_score": float(np.corrcoef(all_true, all_sim)[0, 1]),
            "rsquared_score": 0.25,
            "absolute_dev_explained_score": 0.1,
        }
        scored.append({"dataclass_name": "ScoredExplanation", "explanation": text, "scored_simulation": simulation})
    return {
        "dataclass_name": "NeuronSimulationResults",
        "neuron_id": {"dataclass_name": "NeuronId", "layer_index": layer, "neuron_index": neuron},
        "scored_explanations": scored,
    }


def random_sequences(rng: np.random.Generator, n: int) -> list[tuple[list[float], list[float]]]:
    out = []
    for _ in range(n):
        length = int(rng.integers(3, 40))
        true = np.maximum(rng.normal(0, 1, length), 0)
        sim = np.clip(np.round(true * 3 + rng.normal(0, 2, length)), 0, 10)
        sim[0] = 10.0 if rng.random() < 0.5 else sim[0]
        out.append(([float(x) for x in true], [float(x) for x in sim]))
    return out


@pytest.fixture
def explanations_dir(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    rng = np.random.default_rng(7)
    docs = []
    for layer, neuron in ((0, 11), (0, 12), (3, 4)):
        doc = neuron_results(
            layer, neuron, {f"explanation {k} of {neuron}": random_sequences(rng, 4) for k in range(2)}
        )
        (tmp_path / str(layer)).mkdir(exist_ok=True)
        (tmp_path / str(layer) / f"{neuron}.jsonl").write_text(json.dumps(doc) + "\n")
        docs.append(doc)
    return tmp_path, docs


def test_scored_simulations_read_and_rescore(explanations_dir: tuple[Path, list[dict[str, Any]]]) -> None:
    d, docs = explanations_dir
    records = read_scored_simulations(d)
    assert [(r.layer, r.neuron) for r in records] == [(0, 11), (0, 11), (0, 12), (0, 12), (3, 4), (3, 4)]
    first = docs[0]["scored_explanations"][0]["scored_simulation"]
    np.testing.assert_array_equal(
        records[0].true, np.concatenate([s["true_activations"] for s in first["scored_sequence_simulations"]])
    )
    assert records[0].tokens[:2] == ["t0", "t1"] and records[0].reported["rsquared_score"] == 0.25
    table = simulation_scores(records, ["correlation", "cosine", "inverse_auc"])
    assert table.height == 6
    for r, row in zip(records, table.iter_rows(named=True), strict=True):
        # our correlation is neuron-explainer's overall ev_correlation_score
        assert row["correlation"] == pytest.approx(row["ev_correlation_score"], abs=1e-12)
        assert row["correlation"] == pytest.approx(np.corrcoef(r.true, r.simulated)[0, 1], abs=1e-12)
        c = r.simulated / 10
        assert row["cosine"] == pytest.approx(r.true @ c / np.linalg.norm(r.true) / np.linalg.norm(c), abs=1e-12)
        assert row["tokens"] == len(r.true)


def test_untagged_and_partial_documents(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    doc = neuron_results(1, 2, {"dogs": random_sequences(rng, 3)})

    def untag(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: untag(v) for k, v in x.items() if k != "dataclass_name"}
        return [untag(v) for v in x] if isinstance(x, list) else x

    (tmp_path / "untagged.json").write_text(json.dumps(untag(doc), indent=2))  # old files, no tags, pretty-printed
    scored_only = doc["scored_explanations"][0]["scored_simulation"]
    (tmp_path / "sim.jsonl").write_text(json.dumps(scored_only) + "\n" + json.dumps(scored_only) + "\n")
    a = read_scored_simulations(tmp_path / "untagged.json")
    b = read_scored_simulations(tmp_path / "sim.jsonl")
    assert len(a) == 1 and len(b) == 2 and b[0].explanation is None and b[0].layer is None
    np.testing.assert_array_equal(a[0].simulated, b[1].simulated)


def test_calibrated_scale() -> None:
    """A calibrated simulation is scored as neuron-explainer scores it: its saved (calibrated)
    values, min-max scaled; the uncalibrated simulation it kept is not what is scored (see
    test_interop_peers.py for both calibrators built as the package builds them)."""
    true = np.array([0.0, 1.0, 3.0, 0.5, 2.0])
    calibrated = np.array([-0.2, 0.8, 2.6, 0.2, 1.9])  # in the neuron's units
    r = SimulationRecord(0, 0, "x", true, calibrated, np.zeros(5, np.int64), activation_scale="neuron_activations")
    np.testing.assert_allclose(r.concept(), (calibrated + 0.2) / 2.8)
    raw = np.array([10.0, 7.0, 1.0, 9.0, 4.0])  # a negative slope: calibration reversed the raw simulation
    kept = SimulationRecord(
        0, 0, "x", true, calibrated, np.zeros(5, np.int64), activation_scale="neuron_activations", normalized=raw
    )
    np.testing.assert_allclose(kept.concept(), r.concept())
    scores = simulation_scores([r, kept], ["correlation"])
    assert scores["correlation"].to_list() == pytest.approx([np.corrcoef(true, calibrated)[0, 1]] * 2, abs=1e-12)
    assert np.corrcoef(true, raw)[0, 1] < 0 < scores["correlation"][1]


def test_writer_round_trip(explanations_dir: tuple[Path, list[dict[str, Any]]], tmp_path: Path) -> None:
    d, _ = explanations_dir
    records = read_scored_simulations(d)
    path = write_scored_simulations(tmp_path / "out.jsonl", records)
    back = read_scored_simulations(path)
    assert len(back) == len(records)
    for a, b in zip(records, back, strict=True):
        assert (a.layer, a.neuron, a.explanation, a.tokens) == (b.layer, b.neuron, b.explanation, b.tokens)
        for x, y in ((a.true, b.true), (a.simulated, b.simulated), (a.sequence, b.sequence)):
            np.testing.assert_array_equal(x, y)
        assert a.reported == b.reported
    assert all(
        json.loads(line)["dataclass_name"] == "NeuronSimulationResults" for line in path.read_text().splitlines()
    )


@pytest.mark.parametrize(
    "damage, message",
    [
        ("length", "5 simulated and 4 true activations"),
        ("nan", r"true_activations\[1\] is nan; the values must be finite"),
        ("kind", "not a neuron-explainer"),
        ("json", "line 2 is not valid JSON"),
        ("scale", "unknown activation_scale"),
        ("empty", "non-empty 'scored_sequence_simulations'"),
    ],
)
def test_broken_simulations_are_named(tmp_path: Path, damage: str, message: str) -> None:
    doc = neuron_results(0, 1, {"x": [([0.0, 1.0, 2.0, 3.0], [0.0, 2.0, 5.0, 9.0])]})
    seq = doc["scored_explanations"][0]["scored_simulation"]["scored_sequence_simulations"][0]
    text = None
    if damage == "length":
        seq["simulation"]["expected_activations"].append(1.0)
        seq["simulation"]["tokens"].append("t")
    elif damage == "nan":
        seq["true_activations"][1] = float("nan")
    elif damage == "kind":
        doc = {"dataclass_name": "ActivationRecord", "tokens": [], "activations": []}
    elif damage == "json":
        text = json.dumps(doc) + "\n" + json.dumps(doc)[:-20] + "\n"
    elif damage == "scale":
        seq["simulation"]["activation_scale"] = "percent"
    elif damage == "empty":
        doc["scored_explanations"][0]["scored_simulation"]["scored_sequence_simulations"] = []
    path = tmp_path / "1.jsonl"
    path.write_text(text if text is not None else json.dumps(doc) + "\n")
    with pytest.raises(SourceError, match=message) as err:
        read_scored_simulations(path)
    assert "1.jsonl" in str(err.value)
    with pytest.raises(ShapeError):
        simulation_scores([])
