"""Files built the way delphi, automated-interpretability and Neuronpedia's exporter build them.

None of the three installs cleanly beside this project's pins (eai-delphi 0.1.3 pulls vllm and
a second torch; automated-interpretability 0.0.24 pins numpy 1.26; Neuronpedia's exporter
needs its Postgres database), so each builder here follows the peer's code step by step, in
numpy and json, citing the file and function it follows:

- eai-delphi 0.1.3 (PyPI; EleutherAI/delphi): ``delphi/__main__.py`` (``scorer_postprocess``,
  ``explainer_postprocess``: ``orjson.dumps`` into ``{latent}.txt``),
  ``delphi/scorers/classifier/{sample,classifier}.py`` (``ClassifierOutput``,
  ``Classifier._generate``), ``delphi/scorers/simulator/simulation/{oai_simulator,scoring,
  types}.py`` (``to_activation_records``, ``simulate_and_score``, ``_aggregate_group``,
  ``convert_to_legacy_format``), ``delphi/latents/samplers.py`` (``normalize_activations``),
  ``delphi/latents/cache.py`` (``save_config``);
- automated-interpretability 0.0.24 (PyPI; the same code as openai/automated-interpretability
  at 1f514c5): ``neuron_explainer/explanations/calibrated_simulator.py``
  (``CalibratedNeuronSimulator.simulate``, ``LinearCalibratedNeuronSimulator``,
  ``PercentileMatchingCalibratedNeuronSimulator``), ``neuron_explainer/explanations/scoring.py``
  (``_simulate_and_score_sequence``, ``aggregate_scored_sequence_simulations``),
  ``neuron_explainer/explanations/explanations.py`` (the dataclasses and their field order),
  ``neuron_explainer/fast_dataclasses/fast_dataclasses.py`` (``dumps``: orjson of the
  instance's attributes, so the ``dataclass_name`` tag that ``__post_init__`` sets comes last);
- Neuronpedia (hijohnnylin/neuronpedia at ebb8426): ``utils/neuronpedia-utils/neuronpedia_utils/
  export-data.py`` (``export_explanations``, ``write_batch_to_jsonl``,
  ``replace_author_and_creator_with_default_creator_id``, ``compress_files``) and
  ``batch-autointerp.py`` (``generate_embeddings_and_flush_explanations_to_file``) with
  ``db_models/explanation.py``.

orjson's output is written with ``json.dumps(..., separators=(",", ":"))``: the same JSON, the
bytes differing only where the two spell a float differently (``1e-05`` against ``1e-5``), and
NaN written as null, as orjson writes it. No third-party data is copied: every value is drawn here.
"""

from __future__ import annotations

import gzip
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


def orjson_dumps(obj: Any) -> bytes:
    """What ``orjson.dumps`` writes for plain JSON values: compact, UTF-8, NaN as null."""

    def fix(x: Any) -> Any:
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: fix(v) for k, v in x.items()}
        if isinstance(x, list):
            return [fix(v) for v in x]
        return x

    return json.dumps(fix(obj), separators=(",", ":"), ensure_ascii=False).encode("utf-8")


# --------------------------------------------------------------------------- delphi (eai-delphi 0.1.3)


@dataclass
class DelphiExample:
    """An ActivatingExample (quantile >= 0) or a NonActivatingExample (quantile -1)."""

    str_tokens: list[str]
    activations: np.ndarray  # float32, as the cache's float16 widened by torch
    quantile: int
    distance: float = -1.0  # a NonActivatingExample's distance


def delphi_examples(rng: np.random.Generator, n_quantiles: int = 3, per_quantile: int = 2, n_random: int = 3,
                    ctx: int = 8) -> tuple[list[DelphiExample], list[DelphiExample]]:  # fmt: skip
    """Activating examples per quantile (their activations decreasing with the quantile, as
    delphi's samplers split them) and non-activating ones (all zeros)."""
    test: list[DelphiExample] = []
    for q in range(n_quantiles):
        for _ in range(per_quantile):
            acts = np.zeros(ctx, np.float32)
            at = rng.choice(ctx, size=2, replace=False)
            acts[at] = rng.uniform(0.2, 1.0, size=2) * (n_quantiles - q)
            test.append(DelphiExample([f" t{i}" for i in range(ctx)], acts.astype(np.float16).astype(np.float32), q))
    not_active = [
        DelphiExample([f" n{i}" for i in range(ctx)], np.zeros(ctx, np.float32), -1, float(rng.integers(1, 9)))
        for _ in range(n_random)
    ]
    return test, not_active


def _normalized(examples: list[DelphiExample]) -> list[list[float]]:
    """delphi/latents/samplers.py normalize_activations: ceil(a * 10 / max).clamp(0, 10),
    max over the record's activating examples (float32 tensors, .tolist() floats)."""
    max_activation = max(max(float(e.activations.max()) for e in examples), 1e-6)
    return [
        np.clip(np.ceil(e.activations * np.float32(10) / np.float32(max_activation)), 0, 10).astype(np.float32).tolist()
        for e in examples
    ]


def delphi_simulation_score(test: list[DelphiExample], not_active: list[DelphiExample],
                            simulate: Any) -> list[dict[str, Any]]:  # fmt: skip
    """The score delphi's simulation scorer returns for one latent, as JSON values.

    RefactoredOpenAISimulator.__call__ -> to_activation_records (activating: the normalized
    activations; non-activating: zeros; quantile -1) -> scoring.simulate_and_score (per record
    np.corrcoef(true, predicted)[0, 1]; groups by quantile in order of appearance, then the
    group -1 of all records when non-activating ones exist) -> _aggregate_group (the
    correlation of the concatenations) -> convert_to_legacy_format (NaN -> "nan"; distance 0
    for the group -1, q + 1 for quantile q; rsquared and absolute_dev scores 0; fields in the
    dataclasses' order). `simulate(tokens)` gives the simulator's expected activations.
    """
    records = [(e.str_tokens, acts, e.quantile) for e, acts in zip(test, _normalized(test), strict=True)]
    records_off = [(e.str_tokens, np.zeros_like(e.activations).tolist(), -1) for e in not_active]

    def simulate_and_score_record(tokens: list[str], true: list[float], quantile: int) -> dict[str, Any]:
        predicted = list(simulate(tokens))
        with np.errstate(invalid="ignore", divide="ignore"):
            correlation = np.corrcoef(true, predicted)[0, 1]
        return {"tokens": tokens, "predicted": predicted, "true": true, "correlation": correlation, "q": quantile}

    results = [simulate_and_score_record(*r) for r in records]
    groups: dict[int, list[dict[str, Any]]] = {}
    for result in results:
        groups.setdefault(result["q"], []).append(result)
    if records_off:
        groups[-1] = results + [simulate_and_score_record(*r) for r in records_off]
    legacy = []
    for quantile, sequences in groups.items():
        all_true = [x for s in sequences for x in s["true"]]
        all_predicted = [x for s in sequences for x in s["predicted"]]
        with np.errstate(invalid="ignore", divide="ignore"):
            correlation = np.corrcoef(all_true, all_predicted)[0, 1]
        legacy_sequences = [
            {
                "distance": s["q"],
                "simulation": {
                    "tokens": s["tokens"],
                    "expected_activations": s["predicted"],
                    "activation_scale": "simulated_normalized_activations",
                    "distribution_values": [],
                    "distribution_probabilities": [],
                    "uncalibrated_simulation": None,
                },
                "true_activations": s["true"],
                "ev_correlation_score": "nan" if np.isnan(s["correlation"]) else float(s["correlation"]),
                "rsquared_score": 0,
                "absolute_dev_explained_score": 0,
            }
            for s in sequences
        ]
        legacy.append(
            {
                "distance": 0 if quantile == -1 else quantile + 1,
                "scored_sequence_simulations": legacy_sequences,
                "ev_correlation_score": "nan" if np.isnan(correlation) else float(correlation),
                "rsquared_score": 0,
                "absolute_dev_explained_score": 0,
            }
        )
    return legacy


def delphi_classifier_score(test: list[DelphiExample], not_active: list[DelphiExample],
                            rng: np.random.Generator, *, log_prob: bool = True) -> list[dict[str, Any]]:  # fmt: skip
    """The score a classifier scorer (detection, fuzz) returns: one ClassifierOutput per
    example (sample.examples_to_samples: str_tokens, activations.tolist(), distance = the
    quantile or the non-activating distance, activating), then Classifier._generate sets
    prediction = bool(...) or None when the model's answer failed to parse, correct =
    prediction == activating or None, probability a float (log_prob) or None; shuffled."""
    out = []
    for e in [*test, *not_active]:
        activating = e.quantile >= 0
        failed = rng.random() < 0.1
        prediction = None if failed else bool(rng.random() < (0.8 if activating else 0.3))
        probability = None if failed or not log_prob else float(rng.random())
        out.append(
            {
                "str_tokens": e.str_tokens,
                "activations": e.activations.tolist(),
                "distance": e.quantile if activating else e.distance,
                "activating": activating,
                "prediction": prediction,
                "probability": probability,
                "correct": None if prediction is None else prediction == activating,
            }
        )
    rng.shuffle(out)  # type: ignore[arg-type]
    return out


def write_delphi_scores(run: Path, hookpoint: str, latent: int, scorer: str, score: Any) -> Path:
    """__main__.py scorer_postprocess: scores/{scorer}/{latent}.txt with "/" -> "--", orjson bytes."""
    directory = run / "scores" / scorer
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{hookpoint}_latent{latent}.txt".replace("/", "--")
    path.write_bytes(orjson_dumps(score))
    return path


def write_delphi_explanation(run: Path, hookpoint: str, latent: int, text: str) -> Path:
    """__main__.py explainer_postprocess: explanations/{latent}.txt holding orjson.dumps(text)."""
    directory = run / "explanations"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{hookpoint}_latent{latent}.txt"
    path.write_bytes(orjson_dumps(text))
    return path


def delphi_cache_config(ctx_len: int, n_splits: int, model_name: str = "EleutherAI/pythia-70m") -> dict[str, Any]:
    """latents/cache.py save_config: CacheConfig.to_dict() (delphi/config.py's fields and
    defaults) plus model_name, written by json.dump(..., indent=4)."""
    return {
        "dataset_repo": "EleutherAI/SmolLM2-135M-10B",
        "dataset_split": "train[:1%]",
        "dataset_name": "",
        "dataset_column": "text",
        "batch_size": 32,
        "cache_ctx_len": ctx_len,
        "n_tokens": 10_000_000,
        "n_splits": n_splits,
        "model_name": model_name,
    }


# --------------------------------------------------------------------------- automated-interpretability 0.0.24


def _sequence_simulation(tokens: list[str], expected: list[float], scale: str, values: list[list[float]],
                         probabilities: list[list[float]], uncalibrated: Any = None) -> dict[str, Any]:  # fmt: skip
    # explanations.py SequenceSimulation; FastDataclass.__post_init__ sets dataclass_name last
    return {
        "tokens": tokens,
        "expected_activations": expected,
        "activation_scale": scale,
        "distribution_values": values,
        "distribution_probabilities": probabilities,
        "uncalibrated_simulation": uncalibrated,
        "dataclass_name": "SequenceSimulation",
    }


def uncalibrated_simulation(tokens: list[str], rng: np.random.Generator, signal: np.ndarray) -> dict[str, Any]:
    """An ExplanationNeuronSimulator's SequenceSimulation: per token a distribution over the
    0..10 scale and its expectation (simulator.py: normalized scale)."""
    values, probabilities, expected = [], [], []
    for s in signal:
        mode = int(np.clip(round(float(s)), 0, 10))
        support = sorted({0, mode, int(rng.integers(0, 11))})
        p = 0.2 * rng.dirichlet(np.ones(len(support))) + 0.8 * (np.array(support) == mode)
        values.append([float(v) for v in support])
        probabilities.append(p.tolist())
        expected.append(float(np.dot(p, support)))
    return _sequence_simulation(tokens, expected, "simulated_normalized_activations", values, probabilities)


class LinearCalibration:
    """calibrated_simulator.py LinearCalibratedNeuronSimulator: sklearn's LinearRegression of
    the true activations on the uncalibrated expected values, then predict(...).tolist()."""

    def __init__(self, true: np.ndarray, uncalibrated: np.ndarray) -> None:
        from sklearn import linear_model

        self.regression = linear_model.LinearRegression()
        self.regression.fit(uncalibrated.reshape(-1, 1), true)

    def __call__(self, values: list[float]) -> list[float]:
        if len(values) == 0:
            return []
        return self.regression.predict(np.reshape(np.array(values), (-1, 1))).tolist()  # type: ignore[no-any-return]


class PercentileCalibration:
    """calibrated_simulator.py PercentileMatchingCalibratedNeuronSimulator: np.interp of the
    values from the sorted uncalibrated onto the sorted true activations."""

    def __init__(self, true: np.ndarray, uncalibrated: np.ndarray) -> None:
        self.uncalibrated, self.true = np.sort(uncalibrated), np.sort(true)

    def __call__(self, values: list[float]) -> list[float]:
        if len(values) == 0:
            return []
        return np.interp(np.array(values), self.uncalibrated, self.true).tolist()  # type: ignore[no-any-return]


def calibrated(simulation: dict[str, Any], apply: Any) -> dict[str, Any]:
    """CalibratedNeuronSimulator.simulate: the expected values and each distribution's values
    calibrated, the probabilities kept, the scale neuron_activations, and the uncalibrated
    simulation kept."""
    return _sequence_simulation(
        simulation["tokens"],
        apply(simulation["expected_activations"]),
        "neuron_activations",
        [apply(dv) for dv in simulation["distribution_values"]],
        simulation["distribution_probabilities"],
        simulation,
    )


def _scores(true: list[float], predicted: list[float]) -> tuple[float, float, float]:
    """scoring.py correlation_score, rsquared_score_from_sequences, absolute_dev_explained_score_from_sequences."""
    t, p = np.array(true), np.array(predicted)
    with np.errstate(invalid="ignore", divide="ignore"):
        ev = np.corrcoef(true, predicted)[0, 1]
        rsq = float(1 - np.mean(np.square(t - p)) / np.mean(np.square(t)))
        absdev = float(1 - np.mean(np.abs(t - p)) / np.mean(np.abs(t)))
    return float(ev), rsq, absdev


def scored_simulation(pairs: list[tuple[list[float], dict[str, Any]]]) -> dict[str, Any]:
    """scoring.py _simulate_and_score_sequence per (true activations, simulation), then
    aggregate_scored_sequence_simulations over all of them."""
    sequences = []
    for true, simulation in pairs:
        ev, rsq, absdev = _scores(true, simulation["expected_activations"])
        sequences.append(
            {
                "simulation": simulation,
                "true_activations": true,
                "ev_correlation_score": ev,
                "rsquared_score": rsq,
                "absolute_dev_explained_score": absdev,
                "dataclass_name": "ScoredSequenceSimulation",
            }
        )
    all_true = [x for true, _ in pairs for x in true]
    all_expected = [x for _, s in pairs for x in s["expected_activations"]]
    ev, rsq, absdev = _scores(all_true, all_expected)
    return {
        "scored_sequence_simulations": sequences,
        "ev_correlation_score": ev,
        "rsquared_score": rsq,
        "absolute_dev_explained_score": absdev,
        "dataclass_name": "ScoredSimulation",
    }


def neuron_simulation_results(layer: int, neuron: int, scored: list[tuple[str, dict[str, Any]]]) -> bytes:
    """One line of {layer}/{neuron}.jsonl: NeuronSimulationResults(NeuronId, [ScoredExplanation])
    through fast_dataclasses.dumps."""
    return orjson_dumps(
        {
            "neuron_id": {"layer_index": layer, "neuron_index": neuron, "dataclass_name": "NeuronId"},
            "scored_explanations": [
                {"explanation": text, "scored_simulation": sim, "dataclass_name": "ScoredExplanation"}
                for text, sim in scored
            ],
            "dataclass_name": "NeuronSimulationResults",
        }
    )


def calibrated_neuron(rng: np.random.Generator, calibration: str, *, sign: float = 1.0, n_calibration: int = 6,
                      n_scored: int = 5, ctx: int = 16) -> dict[str, Any]:  # fmt: skip
    """A neuron scored by a calibrated simulator: calibrated on `n_calibration` activation
    records (calibrate_from_simulations: the flattened true activations against the flattened
    uncalibrated expected values), then scored on `n_scored` others. `sign` -1 makes the
    simulation anti-correlated with the neuron, so a linear calibration has a negative slope."""
    kind = {"linear": LinearCalibration, "percentile": PercentileCalibration}[calibration]

    def record() -> tuple[list[str], list[float], dict[str, Any]]:
        tokens = [f" w{int(i)}" for i in rng.integers(0, 500, size=ctx)]
        true = np.maximum(rng.normal(0, 1, ctx), 0) ** 2 * 3
        signal = 5 + sign * (true * 1.5 - 2) + rng.normal(0, 0.8, ctx)
        return tokens, true.tolist(), uncalibrated_simulation(tokens, rng, signal)

    calibration_set = [record() for _ in range(n_calibration)]
    apply = kind(
        np.array([x for _, true, _ in calibration_set for x in true]),
        np.array([x for _, _, sim in calibration_set for x in sim["expected_activations"]]),
    )
    scored_set = [record() for _ in range(n_scored)]
    return scored_simulation([(true, calibrated(sim, apply)) for _, true, sim in scored_set])


# --------------------------------------------------------------------------- Neuronpedia (hijohnnylin/neuronpedia)

#: export-data.py FEATURES_EXPLANATIONS_BATCH_SIZE
EXPORT_BATCH_SIZE = 1024
#: export-data.py export_explanations: the columns selected, in order
EXPORT_COLUMNS = ("id", "modelId", "layer", "index", "authorId", "description", "embedding", "typeName",
                  "explanationModelName", "umap_x", "umap_y", "umap_cluster", "umap_log_feature_sparsity")  # fmt: skip


def neuronpedia_row(model: str, source: str, index: int, description: str, type_name: str, explainer: str,
                    n: int) -> dict[str, Any]:  # fmt: skip
    """An Explanation row as psycopg2's RealDictCursor returns it: the index is text (the
    column's type), the embedding a list or null, the umap columns null."""
    values = [f"clx{n:08d}", model, source, str(index), "clsxqq2xd0000vvp2k5itlhqj", description,
              None, type_name, explainer, None, None, None, None]  # fmt: skip
    return dict(zip(EXPORT_COLUMNS, values, strict=True))


def neuronpedia_export(exports: Path, model: str, source: str, rows: list[dict[str, Any]],
                       creator: str = "default-creator") -> Path:  # fmt: skip
    """export-data.py process_source_sync for one source: model.jsonl, source.jsonl and
    sourceset.jsonl at the top; explanations/batch-{b}.jsonl with the rows ORDER BY index (as
    text: "10" < "2"), 1,024 a batch ("\\n".join(json.dumps(row)) + "\\n"), authorId replaced by
    the default creator (json.loads then json.dumps + "\\n" per line); features/ and
    activations/ batches; then compress_files: every .jsonl below a subfolder gzipped
    (compresslevel 5) and removed. Returns exports/{model}/{source}."""
    base = exports / model / source
    (base / "explanations").mkdir(parents=True, exist_ok=True)
    for name, row in (("model.jsonl", {"id": model}), ("source.jsonl", {"id": source, "modelId": model}),
                      ("sourceset.jsonl", {"name": source.split("-", 1)[-1], "modelId": model})):  # fmt: skip
        (base / name).write_text(json.dumps(row) + "\n")
    ordered = sorted(rows, key=lambda r: r["index"])  # ORDER BY index on a text column
    for b in range(0, max(1, math.ceil(len(ordered) / EXPORT_BATCH_SIZE))):
        batch = ordered[b * EXPORT_BATCH_SIZE : (b + 1) * EXPORT_BATCH_SIZE]
        path = base / "explanations" / f"batch-{b}.jsonl"
        text = "\n".join(json.dumps(r) for r in batch) + ("\n" if batch else "")
        lines = []
        for line in text.splitlines(keepends=True):  # replace_author_and_creator_with_default_creator_id
            data = json.loads(line)
            if "authorId" in data:
                data["authorId"] = creator
            lines.append(json.dumps(data) + "\n")
        path.write_text("".join(lines))
    for folder in ("features", "activations"):
        (base / folder).mkdir(exist_ok=True)
        (base / folder / "batch-0.jsonl").write_text(
            json.dumps({"modelId": model, "layer": source, "index": "0"}) + "\n"
        )
    for path in sorted(base.rglob("*.jsonl")):  # compress_files: not the top-level files
        if path.parent != base:
            path.with_name(path.name + ".gz").write_bytes(gzip.compress(path.read_bytes(), compresslevel=5))
            path.unlink()
    return base


def autointerp_rows(
    model: str, source: str, texts: dict[int, str], type_name: str, explainer: str
) -> list[dict[str, Any]]:
    """batch-autointerp.py: Explanation(id, modelId, layer, index=str(i), description,
    typeName, explanationModelName, authorId) as asdict (db_models/explanation.py's field
    order), createdAt isoformat, the embedding removed when embeddings were not generated; rows
    with a blank description dropped, sorted by index (the int)."""
    rows = []
    for n, (index, text) in enumerate(sorted(texts.items())):
        if text.strip() == "":
            continue
        rows.append(
            {
                "id": f"cla{n:08d}",
                "modelId": model,
                "layer": source,
                "index": str(index),
                "description": text,
                "authorId": "",
                "triggeredById": None,
                "typeName": type_name,
                "explanationModelName": explainer.split("/")[-1],
                "notes": None,
                "createdAt": "2026-01-02T03:04:05.000006",
            }
        )
    return rows


def write_autointerp_output(directory: Path, rows: list[dict[str, Any]], *, gzip_output: bool) -> list[Path]:
    """batch-autointerp.py's output folder: config.json, then batch-{n}.jsonl per flush
    (json.dump + "\\n" per row), gzipped by gzip.open when --gzip-output (the .jsonl removed)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({"gzip_output": gzip_output}, indent=2))
    (directory / "failed_explanation_indexes.txt").write_text("")
    paths = []
    for n, start in enumerate(range(0, len(rows), 3)):
        path = directory / f"batch-{n}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows[start : start + 3]))
        if gzip_output:
            with gzip.open(str(path) + ".gz", "wb") as f:
                f.write(path.read_bytes())
            path.unlink()
            path = path.with_name(path.name + ".gz")
        paths.append(path)
    return paths
