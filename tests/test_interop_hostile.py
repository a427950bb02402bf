"""Hostile and mistyped files for every interop reader (issue 37): each is refused with the exact
error class, and the message names the file (and the field), never a traceback of another
kind nor a silently different number.

- deeply nested JSON (100,000 `[`) in every JSON the readers open, and a safetensors header
  whose length or JSON is hostile;
- values of another JSON type than the peer writes (`"false"` for false, `3.7` or `"2"` for an
  integer, strings or bools for activations, `42` for an explanation), which Python's own
  conversions would have turned into a wrong number;
- values that used to escape as KeyError, AttributeError, TypeError, OverflowError or
  UnicodeDecodeError.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from interop_fixtures import (
    delphi_classifier_score,
    delphi_examples,
    delphi_simulation_score,
    neuron_simulation_results,
    orjson_dumps,
    scored_simulation,
    uncalibrated_simulation,
)
from neuroneval.errors import ParameterError, SourceError
from neuroneval.interop import (
    SimulationRecord,
    read_delphi_cache,
    read_delphi_explanations,
    read_delphi_scores,
    read_neuronpedia_explanations,
    read_saelens,
    read_scored_simulations,
    read_sparsify,
    write_delphi_cache,
    write_saelens,
    write_scored_simulations,
    write_sparsify,
)
from neuroneval.interop.sae import SparseAutoencoder, _read_bfloat16, _safetensors_header
from safetensors.numpy import save_file

DEEP = "[" * 100_000


def classifier_examples() -> list[dict[str, Any]]:
    rng = np.random.default_rng(31)
    test, off = delphi_examples(rng, n_quantiles=1, per_quantile=2, n_random=1)
    return delphi_classifier_score(test, off, rng)


def write_scores(root: Path, examples: Any, *, raw: bytes | None = None) -> Path:
    (root / "scores" / "detection").mkdir(parents=True)
    path = root / "scores" / "detection" / "h_latent0.txt"
    path.write_bytes(raw if raw is not None else orjson_dumps(examples))
    return root / "scores"


def neuron_document() -> dict[str, Any]:
    rng = np.random.default_rng(32)
    tokens = [" a", " b", " c", " d"]
    sim = uncalibrated_simulation(tokens, rng, np.array([0.0, 8.0, 2.0, 0.0]))
    return json.loads(neuron_simulation_results(1, 3, [("dogs", scored_simulation([([0.0, 2.0, 0.5, 0.0], sim)]))]))


def write_neuron(root: Path, change: Callable[[dict[str, Any]], Any] | None = None) -> Path:
    doc = neuron_document()
    if change is not None:
        change(doc)
    path = root / "1" / "3.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc) + "\n")
    return path


def scored(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["scored_explanations"][0]["scored_simulation"]  # type: ignore[no-any-return]


def np_row(**change: Any) -> dict[str, Any]:
    row = {"id": "clx1", "modelId": "gpt2-small", "layer": "6-res-jb", "index": "3", "authorId": "a",
           "description": " dogs", "embedding": None, "typeName": "oai_token-act-pair",
           "explanationModelName": "gpt-4o-mini"}  # fmt: skip
    return {**row, **change}


def write_batch(root: Path, lines: list[bytes]) -> Path:
    (root / "explanations").mkdir(parents=True)
    (root / "explanations" / "batch-0.jsonl.gz").write_bytes(gzip.compress(b"".join(line + b"\n" for line in lines)))
    return root


def delphi_cache(root: Path, **config: Any) -> Path:
    acts = np.zeros((2 * 3, 4), np.float32)
    acts[1, 1], acts[4, 3] = 1.0, 2.0
    d = root / "latents" / "h"
    write_delphi_cache(d, acts, tokens=np.arange(6).reshape(2, 3), n_splits=2)
    if config:
        cfg = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**cfg, **config}))
    return d


def sae_dir(root: Path, kind: str) -> Path:
    rng = np.random.default_rng(33)
    W = rng.normal(size=(3, 4)).astype(np.float32)
    sae = SparseAutoencoder("topk", 3, 4, W, np.zeros(4, np.float32), W.T.copy(), np.zeros(3, np.float32), k=2,
                            source=kind)  # fmt: skip
    d = root / kind
    (write_saelens if kind == "saelens" else write_sparsify)(sae, d)
    return d


def safetensors_with_header(path: Path, header: bytes, declared: int | None = None) -> Path:
    n = len(header) if declared is None else declared
    path.write_bytes(n.to_bytes(8, "little") + header + b"\0" * 16)
    return path


# --------------------------------------------------------------------------- A: nested too deep


def deep_cases() -> dict[str, Callable[[Path], Callable[[], Any]]]:
    def delphi_config(t: Path) -> Callable[[], Any]:
        d = delphi_cache(t)
        (d / "config.json").write_text(DEEP)
        return lambda: read_delphi_cache(d)

    def explanation(t: Path) -> Callable[[], Any]:
        (t / "h_latent0.txt").write_text(DEEP)
        return lambda: read_delphi_explanations(t)

    def scores(t: Path) -> Callable[[], Any]:
        return lambda: read_delphi_scores(write_scores(t, None, raw=DEEP.encode()))

    def delphi_simulation(t: Path) -> Callable[[], Any]:
        (t / "simulation").mkdir()
        (t / "simulation" / "h_latent0.txt").write_text(DEEP)
        return lambda: read_scored_simulations(t)

    def jsonl_line(t: Path) -> Callable[[], Any]:
        path = write_neuron(t)
        path.write_text(path.read_text() + DEEP + "\n")
        return lambda: read_scored_simulations(path)

    def json_file(t: Path) -> Callable[[], Any]:
        (t / "sim.json").write_text(DEEP)
        return lambda: read_scored_simulations(t)

    def neuronpedia(t: Path) -> Callable[[], Any]:
        return lambda: read_neuronpedia_explanations(write_batch(t, [json.dumps(np_row()).encode(), DEEP.encode()]))

    def saelens_cfg(t: Path) -> Callable[[], Any]:
        d = sae_dir(t, "saelens")
        (d / "cfg.json").write_text(DEEP)
        return lambda: read_saelens(d)

    def sparsify_cfg(t: Path) -> Callable[[], Any]:
        d = sae_dir(t, "sparsify")
        (d / "cfg.json").write_text(DEEP)
        return lambda: read_sparsify(d)

    def safetensors_header(t: Path) -> Callable[[], Any]:
        path = safetensors_with_header(t / "w.safetensors", DEEP.encode())
        return lambda: _safetensors_header(path)

    return {k: v for k, v in locals().items() if callable(v)}


DEEP_CASES = deep_cases()


@pytest.mark.parametrize("case", list(DEEP_CASES))
def test_deeply_nested_json_is_a_source_error_naming_the_file(tmp_path: Path, case: str) -> None:
    call = DEEP_CASES[case](tmp_path)
    with pytest.raises(SourceError, match="nests deeper than") as err:
        call()
    assert type(err.value) is SourceError and str(tmp_path) in str(err.value)


def test_hostile_safetensors_headers_are_source_errors(tmp_path: Path) -> None:
    d = sae_dir(tmp_path, "saelens")
    weights = d / "sae_weights.safetensors"
    for declared, header in ((2**62, b"{}"), (2**64 - 1, b"{}"), (0, b""), (None, DEEP.encode()), (None, b"[1, 2]")):
        safetensors_with_header(weights, header, declared)
        with pytest.raises(SourceError) as err:
            read_saelens(d)
        assert type(err.value) is SourceError and "sae_weights.safetensors" in str(err.value)
        with pytest.raises(SourceError) as err:
            _safetensors_header(weights)
        assert type(err.value) is SourceError and "sae_weights.safetensors" in str(err.value)
    # the bfloat16 reader checks the offsets the header gives against the file
    for entry in ({"dtype": "BF16", "shape": [4], "data_offsets": [0, 2**40]},
                  {"dtype": "BF16", "shape": [2**40], "data_offsets": [0, 8]},
                  {"dtype": "BF16", "shape": "x", "data_offsets": [0, 8]},
                  {"dtype": "BF16", "shape": [4], "data_offsets": [True, 8]}):  # fmt: skip
        safetensors_with_header(weights, json.dumps({"w": entry}).encode())
        with pytest.raises(SourceError, match="'w'") as err:
            _read_bfloat16(weights, ["w"])
        assert type(err.value) is SourceError
    save_file({"w": np.zeros(4, np.float32)}, str(weights))
    with pytest.raises(SourceError, match="'v'"):
        _read_bfloat16(weights, ["v"])


# --------------------------------------------------------------------------- B and C: the peers' types


def delphi_score_case(field: str, value: Any) -> Callable[[Path], Callable[[], Any]]:
    def build(t: Path) -> Callable[[], Any]:
        examples = classifier_examples()
        examples[1][field] = value
        return lambda: read_delphi_scores(write_scores(t, examples))

    return build


def neuron_case(change: Callable[[dict[str, Any]], Any]) -> Callable[[Path], Callable[[], Any]]:
    def build(t: Path) -> Callable[[], Any]:
        path = write_neuron(t, change)
        return lambda: read_scored_simulations(path)

    return build


def first_sequence(doc: dict[str, Any]) -> dict[str, Any]:
    return scored(doc)["scored_sequence_simulations"][0]  # type: ignore[no-any-return]


def neuronpedia_case(**change: Any) -> Callable[[Path], Callable[[], Any]]:
    def build(t: Path) -> Callable[[], Any]:
        return lambda: read_neuronpedia_explanations(write_batch(t, [json.dumps(np_row(**change)).encode()]))

    return build


def bad_utf8(t: Path) -> Callable[[], Any]:
    line = json.dumps(np_row(description="caf\u00e9")).encode().replace(b"\\u00e9", b"\xe9")
    return lambda: read_neuronpedia_explanations(write_batch(t, [json.dumps(np_row()).encode(), line]))


def huge_integer_index(t: Path) -> Callable[[], Any]:
    line = json.dumps(np_row(index=0)).replace('"index": 0', f'"index": {10**30}').encode()
    return lambda: read_neuronpedia_explanations(write_batch(t, [line]))


def cache_case(**config: Any) -> Callable[[Path], Callable[[], Any]]:
    def build(t: Path) -> Callable[[], Any]:
        d = delphi_cache(t, **config)
        return lambda: read_delphi_cache(d)

    return build


def missing_split(t: Path) -> Callable[[], Any]:
    d = delphi_cache(t)
    (d / "2_3.safetensors").unlink()  # the other split tiles 0..1 alone: half the width
    return lambda: read_delphi_cache(d)


def simulation_in_a_classifier_folder(t: Path) -> Callable[[], Any]:
    rng = np.random.default_rng(34)
    test, off = delphi_examples(rng, n_quantiles=1, per_quantile=1, n_random=1)
    score = delphi_simulation_score(test, off, lambda tokens: [1.0] * len(tokens))
    return lambda: read_delphi_scores(write_scores(t, score))


FILE_CASES: list[tuple[str, Callable[[Path], Callable[[], Any]], str]] = [
    # delphi's classifier examples: ClassifierOutput's types
    ("activating 'false'", delphi_score_case("activating", "false"), r"example 1: activating must be true or false"),
    ("prediction 'no'", delphi_score_case("prediction", "no"), r"example 1: prediction must be true, false or null"),
    ("correct 1", delphi_score_case("correct", 1), r"example 1: correct must be true, false or null; got 1"),
    ("activations strings", delphi_score_case("activations", ["0.5", "x"]), r"activations\[0\] must be a number"),
    ("activations null", delphi_score_case("activations", [0.5, None]), r"activations\[1\] must be a number"),
    ("activations a dict", delphi_score_case("activations", {"a": 1}), r"activations must be a list of numbers"),
    ("distance 'x'", delphi_score_case("distance", "x"), r"example 1: distance must be a number"),
    ("distance true", delphi_score_case("distance", True), r"example 1: distance must be a number"),
    ("probability 'p'", delphi_score_case("probability", "p"), r"probability must be a number or null"),
    ("str_tokens ints", delphi_score_case("str_tokens", [1, 2]), r"str_tokens\[0\] must be a string"),
    ("simulation output", simulation_in_a_classifier_folder, r"example 0 is a simulation scorer's output"),
    # neuron-explainer's dataclasses
    ("neuron_index 3.7", neuron_case(lambda d: d["neuron_id"].update(neuron_index=3.7)),
     r"neuron_id.neuron_index must be a JSON integer; got 3.7"),
    ("layer_index '2'", neuron_case(lambda d: d["neuron_id"].update(layer_index="2")),
     r"neuron_id.layer_index must be a JSON integer; got '2'"),
    ("layer_index true", neuron_case(lambda d: d["neuron_id"].update(layer_index=True)),
     r"neuron_id.layer_index must be a JSON integer; got True"),
    ("true_activations strings", neuron_case(lambda d: first_sequence(d).update(true_activations=["0", "1", "2", "3"])),
     r"sequence 0: true_activations\[0\] must be a number; got '0'"),
    ("expected_activations bools", neuron_case(
        lambda d: first_sequence(d)["simulation"].update(expected_activations=[True, False, True, False])),
     r"sequence 0: expected_activations\[0\] must be a number; got True"),
    ("explanation 42", neuron_case(lambda d: d["scored_explanations"][0].update(explanation=42)),
     r"explanation 0: explanation must be a string; got 42"),
    ("scored_simulation missing", neuron_case(lambda d: d["scored_explanations"][0].pop("scored_simulation")),
     r"explanation 0: scored_simulation must be a ScoredSimulation object; got None"),
    ("scored_simulation null", neuron_case(lambda d: d["scored_explanations"][0].update(scored_simulation=None)),
     r"explanation 0: scored_simulation must be a ScoredSimulation object; got None"),
    ("ev_correlation_score 'abc'", neuron_case(lambda d: scored(d).update(ev_correlation_score="abc")),
     r'ev_correlation_score must be a number, null or "nan"; got \'abc\''),
    ("normalized above 10", neuron_case(
        lambda d: first_sequence(d)["simulation"].update(expected_activations=[0.0, 12.0, 1.0, 0.0])),
     r"sequence 0: expected_activations leave the simulator's 0..10 scale"),
    ("tokens ints", neuron_case(lambda d: first_sequence(d)["simulation"].update(tokens=[1, 2, 3, 4])),
     r"sequence 0: tokens\[0\] must be a string"),
    # Neuronpedia's rows
    ("invalid UTF-8 in the gzip", bad_utf8, r"batch-0.jsonl.gz, line 2 is not UTF-8"),
    ("index 10**30", huge_integer_index, r"line 1: index 10{30} is not a latent index"),
    ("index '10**30'", neuronpedia_case(index=str(10**30)), r"line 1: index 10{30} is too large"),
    ("index '²'", neuronpedia_case(index="\u00b2"), r"line 1: index '²' is not a latent index"),
    ("index 3.0", neuronpedia_case(index=3.0), r"line 1: index 3.0 is not a latent index"),
    ("description 42", neuronpedia_case(description=42), r"line 1: description must be a string; got 42"),
    ("modelId null", neuronpedia_case(modelId=None), r"line 1: modelId must be a string"),
    ("typeName 7", neuronpedia_case(typeName=7), r"line 1: typeName must be a string or null"),
    # delphi's cache configuration
    ("n_splits says 2, one file", missing_split, r"config.json: n_splits is 2, but .* holds 1 split files"),
    ("n_splits '2'", cache_case(n_splits="2"), r"config.json: n_splits must be a JSON integer; got '2'"),
    ("cache_ctx_len '4'", cache_case(cache_ctx_len="4"), r"config.json: cache_ctx_len must be a JSON integer"),
    ("cache_ctx_len 2.0", cache_case(cache_ctx_len=2.0), r"config.json: cache_ctx_len must be a JSON integer"),
    ("cache_ctx_len disagrees", cache_case(cache_ctx_len=4), r"config.json: cache_ctx_len is 4, but the cache's tokens"),
]  # fmt: skip


@pytest.mark.parametrize("build, match", [c[1:] for c in FILE_CASES], ids=[c[0] for c in FILE_CASES])
def test_values_of_another_type_than_the_peer_writes_are_source_errors(
    tmp_path: Path, build: Callable[[Path], Callable[[], Any]], match: str
) -> None:
    call = build(tmp_path)
    with pytest.raises(SourceError, match=match) as err:
        call()
    assert type(err.value) is SourceError and str(tmp_path) in str(err.value)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n_sequences": 2.5}, "n_sequences must be an integer; got 2.5"),
        ({"n_sequences": True}, "n_sequences must be an integer; got True"),
        ({"ctx_len": "4"}, "ctx_len must be an integer; got '4'"),
        ({"width": 4.0}, "width must be an integer; got 4.0"),
        ({"n_sequences": 0}, "n_sequences must be an integer >= 1"),
    ],
)
def test_read_delphi_cache_refuses_arguments_that_are_not_positive_integers(
    tmp_path: Path, kwargs: dict[str, Any], match: str
) -> None:
    d = delphi_cache(tmp_path)
    with pytest.raises(ParameterError, match=match) as err:
        read_delphi_cache(d, **kwargs)
    assert type(err.value) is ParameterError


def test_records_and_the_writer_refuse_what_neuron_explainer_cannot_hold(tmp_path: Path) -> None:
    true, seq = np.array([0.0, 1.0]), np.zeros(2, np.int64)
    with pytest.raises(ParameterError, match="activation_scale must be") as err:
        SimulationRecord(0, 1, "x", true, true, seq, activation_scale="percent")
    assert type(err.value) is ParameterError
    with pytest.raises(ParameterError, match="lies in 0..10") as err:
        SimulationRecord(0, 1, "x", true, np.array([0.0, 11.0]), seq)
    assert type(err.value) is ParameterError
    record = SimulationRecord(0, 1, None, true, np.array([0.0, 9.0]), seq)
    with pytest.raises(ParameterError, match="layer 0, neuron 1 has no explanation") as err:
        write_scored_simulations(tmp_path / "x.jsonl", [record])
    assert type(err.value) is ParameterError
    # without a neuron id and an explanation it is a bare ScoredSimulation line, read back
    bare = SimulationRecord(
        None, None, None, true, np.array([0.0, 9.0]), seq, reported={"ev_correlation_score": np.nan}
    )
    path = write_scored_simulations(tmp_path / "bare.jsonl", [bare])
    line = json.loads(path.read_text())
    assert line["dataclass_name"] == "ScoredSimulation" and line["ev_correlation_score"] == 1.0  # NaN recomputed
    (back,) = read_scored_simulations(path)
    np.testing.assert_array_equal(back.simulated, bare.simulated)
