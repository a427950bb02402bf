"""OpenAI neuron-explainer's scored simulations, rescored with every metric here.

neuron-explainer (``openai/automated-interpretability``) scores an explanation by simulating
the neuron from it and correlating the simulation with the true activations. Its files hold
dataclasses as JSON, each object tagged with ``dataclass_name``:

- ``NeuronSimulationResults``: ``neuron_id`` (``layer_index``, ``neuron_index``) and
  ``scored_explanations``, a list of ``ScoredExplanation`` (``explanation``,
  ``scored_simulation``); published one per line as ``{layer}/{neuron}.jsonl``;
- ``ScoredSimulation``: ``scored_sequence_simulations`` and the overall
  ``ev_correlation_score``, ``rsquared_score``, ``absolute_dev_explained_score``;
- ``ScoredSequenceSimulation``: ``simulation`` (a ``SequenceSimulation``: ``tokens``,
  ``expected_activations``, ``activation_scale``, ``distribution_values``,
  ``distribution_probabilities``, ``uncalibrated_simulation``) and ``true_activations``.

`read_scored_simulations` reads any of these (a file, or a directory of ``.jsonl``/``.json``
files) into `SimulationRecord`s: the true activations of all sequences, concatenated, are a
unit; the simulated ones are its concept. `simulation_scores` scores each record with any of
the library's metrics. The simulator's normalized scale (0 to 10) is divided by 10 to give
probabilities; a calibrated simulation in the neuron's units uses its uncalibrated
simulation when saved, else is min-max scaled into [0, 1]. Both maps are increasing and
affine, so correlation, AUC and AUPRC are those of the raw simulation; cosine, which is not
affine-invariant, is that of the probabilities.

Examples
--------
>>> import tempfile, numpy as np
>>> from pathlib import Path
>>> from neuroneval.interop.simulation import SimulationRecord, read_scored_simulations, simulation_scores, \\
...     write_scored_simulations
>>> record = SimulationRecord(layer=0, neuron=7, explanation="dogs",
...     true=np.array([0.0, 2.0, 0.5, 0.0]), simulated=np.array([0.0, 9.0, 3.0, 1.0]),
...     sequence=np.array([0, 0, 1, 1]), tokens=["a", "dog", "a", "cat"])
>>> path = Path(tempfile.mkdtemp()) / "7.jsonl"
>>> _ = write_scored_simulations(path, [record])
>>> [r.explanation for r in read_scored_simulations(path)]
['dogs']
>>> table = simulation_scores(read_scored_simulations(path), ["correlation"])
>>> round(table["correlation"][0], 6) == round(float(np.corrcoef(record.true, record.simulated)[0, 1]), 6)
True
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from .._registry import PASSING_METRICS
from .._score import compute
from ..errors import ShapeError, SourceError
from ..files import write_atomic

__all__ = ["SimulationRecord", "read_scored_simulations", "simulation_scores", "write_scored_simulations"]

NORMALIZED = "simulated_normalized_activations"
NEURON_UNITS = "neuron_activations"
SIMULATOR_MAX = 10.0  # the simulator's normalized scale is 0..10
_REPORTED = ("ev_correlation_score", "rsquared_score", "absolute_dev_explained_score")


@dataclass(frozen=True)
class SimulationRecord:
    """One explanation's simulation of one neuron over its scored sequences.

    `true` and `simulated` are the concatenated activations of every sequence (`sequence`
    says which token came from which), `simulated` on `activation_scale`; `normalized` is the
    uncalibrated simulation on the 0..10 scale when the file kept it. `reported` holds the
    file's overall scores (None when absent).
    """

    layer: int | None
    neuron: int | None
    explanation: str | None
    true: npt.NDArray[np.float64]
    simulated: npt.NDArray[np.float64]
    sequence: npt.NDArray[np.int64]
    tokens: list[str] = field(default_factory=list)
    activation_scale: str = NORMALIZED
    normalized: npt.NDArray[np.float64] | None = None
    reported: dict[str, float | None] = field(default_factory=dict)

    def concept(self) -> npt.NDArray[np.float64]:
        """The simulation as probabilities in [0, 1] (see the module's notes)."""
        if self.activation_scale == NORMALIZED:
            return np.clip(self.simulated / SIMULATOR_MAX, 0.0, 1.0)
        if self.normalized is not None:
            return np.clip(self.normalized / SIMULATOR_MAX, 0.0, 1.0)
        lo, hi = float(self.simulated.min()), float(self.simulated.max())
        return np.zeros_like(self.simulated) if hi == lo else (self.simulated - lo) / (hi - lo)


# --------------------------------------------------------------------------- reading


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if path.is_dir():
        found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json"))
        if found:
            return found
        raise SourceError(f"{path} holds no .jsonl or .json simulation files")
    raise SourceError(f"no scored simulations at {path}")


def _documents(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SourceError(f"cannot read {path}: {e}") from e
    stripped = text.strip()
    if not stripped:
        raise SourceError(f"{path} is empty")
    try:  # one JSON document (a .json file, or a .jsonl file of one line)
        yield str(path), json.loads(stripped)
        return
    except ValueError:
        pass
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                yield f"{path}, line {number}", json.loads(line)
            except ValueError as e:
                raise SourceError(f"{path}, line {number}: not JSON (truncated?): {e}") from e


def _float_list(x: Any, where: str, name: str) -> npt.NDArray[np.float64]:
    if not isinstance(x, list):
        raise SourceError(f"{where}: {name} must be a list of numbers")
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise SourceError(f"{where}: {name} must be a list of numbers: {e}") from e
    if arr.ndim != 1:
        raise SourceError(f"{where}: {name} must be a flat list of numbers")
    if not np.isfinite(arr).all():
        raise SourceError(f"{where}: {name} holds a non-finite value")
    return arr


def _kind(obj: Any) -> str | None:
    if not isinstance(obj, dict):
        return None
    if "dataclass_name" in obj:
        return str(obj["dataclass_name"])
    keys = set(obj)  # files written without the tag: recognised by their fields, as neuron-explainer does
    if "scored_explanations" in keys:
        return "NeuronSimulationResults"
    if "scored_simulation" in keys:
        return "ScoredExplanation"
    if "scored_sequence_simulations" in keys:
        return "ScoredSimulation"
    return None


def _record(
    sim: dict[str, Any], where: str, layer: int | None, neuron: int | None, explanation: str | None
) -> SimulationRecord:
    sequences = sim.get("scored_sequence_simulations")
    if not isinstance(sequences, list) or not sequences:
        raise SourceError(f"{where}: a ScoredSimulation needs a non-empty 'scored_sequence_simulations' list")
    true: list[npt.NDArray[np.float64]] = []
    simulated: list[npt.NDArray[np.float64]] = []
    normalized: list[npt.NDArray[np.float64] | None] = []
    seq: list[npt.NDArray[np.int64]] = []
    tokens: list[str] = []
    scales: set[str] = set()
    for i, s in enumerate(sequences):
        at = f"{where}, sequence {i}"
        if not isinstance(s, dict) or not isinstance(s.get("simulation"), dict) or "true_activations" not in s:
            raise SourceError(f"{at}: not a ScoredSequenceSimulation (simulation, true_activations)")
        simulation = s["simulation"]
        expected = _float_list(simulation.get("expected_activations"), at, "expected_activations")
        actual = _float_list(s["true_activations"], at, "true_activations")
        if len(expected) != len(actual):
            raise SourceError(f"{at}: {len(expected)} simulated and {len(actual)} true activations")
        toks = simulation.get("tokens", [])
        if not isinstance(toks, list) or (toks and len(toks) != len(actual)):
            raise SourceError(
                f"{at}: {len(toks) if isinstance(toks, list) else 'no'} tokens for {len(actual)} activations"
            )
        scales.add(str(simulation.get("activation_scale", NORMALIZED)))
        raw = simulation.get("uncalibrated_simulation")
        normalized.append(
            _float_list(raw.get("expected_activations"), at, "uncalibrated expected_activations")
            if isinstance(raw, dict)
            else None
        )
        true.append(actual)
        simulated.append(expected)
        seq.append(np.full(len(actual), i, dtype=np.int64))
        tokens.extend(str(t) for t in toks)
    if len(scales) > 1:
        raise SourceError(f"{where}: the sequences mix activation scales {sorted(scales)}")
    scale = scales.pop()
    if scale not in (NORMALIZED, NEURON_UNITS):
        raise SourceError(f"{where}: unknown activation_scale {scale!r}")
    saved = [n for n in normalized if n is not None]
    kept = np.concatenate(saved) if len(saved) == len(normalized) else None
    reported = {k: (None if sim.get(k) is None else float(sim[k])) for k in _REPORTED}
    return SimulationRecord(
        layer, neuron, explanation, np.concatenate(true), np.concatenate(simulated), np.concatenate(seq),
        tokens, scale, kept, reported,
    )  # fmt: skip


def _neuron_id(obj: dict[str, Any], where: str) -> tuple[int | None, int | None]:
    nid = obj.get("neuron_id")
    if not isinstance(nid, dict):
        raise SourceError(f"{where}: NeuronSimulationResults needs a neuron_id object")
    try:
        return int(nid["layer_index"]), int(nid["neuron_index"])
    except (KeyError, TypeError, ValueError) as e:
        raise SourceError(f"{where}: neuron_id needs integer layer_index and neuron_index") from e


def _records(obj: Any, where: str) -> Iterator[SimulationRecord]:
    kind = _kind(obj)
    if kind == "NeuronSimulationResults":
        layer, neuron = _neuron_id(obj, where)
        explained = obj.get("scored_explanations")
        if not isinstance(explained, list):
            raise SourceError(f"{where}: scored_explanations must be a list")
        for i, e in enumerate(explained):
            if _kind(e) != "ScoredExplanation":
                raise SourceError(f"{where}: scored_explanations[{i}] is not a ScoredExplanation")
            yield _record(e["scored_simulation"], f"{where}, explanation {i}", layer, neuron, e.get("explanation"))
    elif kind == "ScoredExplanation":
        yield _record(obj["scored_simulation"], where, None, None, obj.get("explanation"))
    elif kind == "ScoredSimulation":
        yield _record(obj, where, None, None, None)
    elif isinstance(obj, list):
        for i, item in enumerate(obj):
            yield from _records(item, f"{where}[{i}]")
    else:
        raise SourceError(
            f"{where}: not a neuron-explainer ScoredSimulation, ScoredExplanation or NeuronSimulationResults"
        )


def read_scored_simulations(path: str | os.PathLike[str]) -> list[SimulationRecord]:
    """Every scored simulation in a file or a directory tree (``{layer}/{neuron}.jsonl``).

    Raises
    ------
    SourceError
        A file that is not JSON, an object of none of the three kinds, sequences whose true
        and simulated lengths differ, non-finite values; each error names the file and line.
    """
    out: list[SimulationRecord] = []
    for f in _files(Path(path)):
        for where, obj in _documents(f):
            out.extend(_records(obj, where))
    return out


# --------------------------------------------------------------------------- scoring and writing


def simulation_scores(
    records: Sequence[SimulationRecord], metrics: str | Sequence[str] | None = PASSING_METRICS, **params: Any
) -> pl.DataFrame:
    """Each record scored under `metrics` (the true activations as the unit, the simulation as
    its concept), beside the scores the file reported.

    `params` go to `neuroneval.compute` (``alpha``, ``lam``, ...). Returns the columns
    `layer`, `neuron`, `explanation`, `tokens` (activations scored), the reported
    `ev_correlation_score`, `rsquared_score`, `absolute_dev_explained_score`, then one
    column per metric. A record whose true activations are constant scores NaN where the
    metric is undefined, as `neuroneval.compute` does.
    """
    if not records:
        raise ShapeError("no simulation records to score")
    rows: list[dict[str, Any]] = []
    for r in records:
        scores = compute(r.true[:, None], r.concept()[:, None], metrics, **params)
        row: dict[str, Any] = {
            "layer": r.layer,
            "neuron": r.neuron,
            "explanation": r.explanation,
            "tokens": len(r.true),
        }
        row.update({k: r.reported.get(k) for k in _REPORTED})
        row.update({m: float(v[0, 0]) for m, v in scores.items()})
        rows.append(row)
    schema: dict[str, Any] = {"layer": pl.Int64, "neuron": pl.Int64, "explanation": pl.String, "tokens": pl.Int64}
    schema.update({k: pl.Float64 for k in rows[0] if k not in schema})
    return pl.DataFrame(rows, schema=schema)


def _sequence_simulation(tokens: list[str], expected: npt.NDArray[np.float64], scale: str) -> dict[str, Any]:
    return {
        "dataclass_name": "SequenceSimulation",
        "tokens": tokens,
        "expected_activations": [float(v) for v in expected],
        "activation_scale": scale,
        "distribution_values": [[float(v)] for v in expected],
        "distribution_probabilities": [[1.0] for _ in expected],
        "uncalibrated_simulation": None,
    }


def _correlation(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> float | None:
    if len(a) < 2 or a.std() == 0 or b.std() == 0:
        return None
    return float(np.corrcoef(a, b)[0, 1])


def write_scored_simulations(path: str | os.PathLike[str], records: Sequence[SimulationRecord]) -> Path:
    """Write records as neuron-explainer ``NeuronSimulationResults`` JSON, one line per neuron
    (records of one (layer, neuron) become its scored explanations; records without a neuron
    id are written as ``ScoredExplanation`` lines), atomically.

    Each simulation's value distribution is written as a point mass at its expected value;
    scores the records do not carry are computed as neuron-explainer does (correlation of
    expected and true activations, per sequence and overall)."""
    by_neuron: dict[tuple[int | None, int | None], list[SimulationRecord]] = {}
    for r in records:
        by_neuron.setdefault((r.layer, r.neuron), []).append(r)
    lines: list[str] = []
    for (layer, neuron), group in by_neuron.items():
        explained = []
        for r in group:
            sequences = []
            for i in np.unique(r.sequence):
                at = r.sequence == i
                toks = [r.tokens[j] for j in np.flatnonzero(at)] if r.tokens else [""] * int(at.sum())
                sim = _sequence_simulation(toks, r.simulated[at], r.activation_scale)
                if r.normalized is not None:
                    sim["uncalibrated_simulation"] = _sequence_simulation(toks, r.normalized[at], NORMALIZED)
                sequences.append(
                    {
                        "dataclass_name": "ScoredSequenceSimulation",
                        "simulation": sim,
                        "true_activations": [float(v) for v in r.true[at]],
                        "ev_correlation_score": _correlation(r.simulated[at], r.true[at]),
                        "rsquared_score": None,
                        "absolute_dev_explained_score": None,
                    }
                )
            overall = dict(r.reported)
            if overall.get("ev_correlation_score") is None:
                overall["ev_correlation_score"] = _correlation(r.simulated, r.true)
            scored: dict[str, Any] = {"dataclass_name": "ScoredSimulation", "scored_sequence_simulations": sequences}
            scored.update({k: overall.get(k) for k in _REPORTED})
            explained.append(
                {"dataclass_name": "ScoredExplanation", "explanation": r.explanation, "scored_simulation": scored}
            )
        if layer is None or neuron is None:  # no neuron to name: the scored explanations alone
            lines.extend(json.dumps(e) for e in explained)
            continue
        neuron_id = {"dataclass_name": "NeuronId", "layer_index": layer, "neuron_index": neuron}
        lines.append(
            json.dumps(
                {"dataclass_name": "NeuronSimulationResults", "neuron_id": neuron_id, "scored_explanations": explained}
            )
        )
    text = "\n".join(lines) + "\n"
    return write_atomic(Path(path), lambda p: p.write_text(text, encoding="utf-8"))
