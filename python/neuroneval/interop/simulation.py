"""OpenAI neuron-explainer's scored simulations (and delphi's), rescored with every metric here.

neuron-explainer (``openai/automated-interpretability``) scores an explanation by simulating
the neuron from it and correlating the simulation with the true activations. Its files hold
dataclasses as JSON (``fast_dataclasses.dumps``), each object tagged with ``dataclass_name``:

- ``NeuronSimulationResults``: ``neuron_id`` (``layer_index``, ``neuron_index``, integers) and
  ``scored_explanations``, a list of ``ScoredExplanation`` (``explanation``, a string, and
  ``scored_simulation``); published one per line as ``{layer}/{neuron}.jsonl``;
- ``ScoredSimulation``: ``scored_sequence_simulations`` and the overall
  ``ev_correlation_score``, ``rsquared_score``, ``absolute_dev_explained_score`` (numbers or
  null: orjson writes NaN as null);
- ``ScoredSequenceSimulation``: ``simulation`` (a ``SequenceSimulation``: ``tokens``,
  ``expected_activations``, ``activation_scale``, ``distribution_values``,
  ``distribution_probabilities``, ``uncalibrated_simulation``) and ``true_activations``.

delphi's simulation scorer writes the same ``ScoredSimulation`` objects without the tags, one
list per latent, in ``scores/simulation/{module}_latent{i}.txt``: one ScoredSimulation per
quantile of the activating examples (``distance`` q + 1) and, when non-activating examples
were scored, one over all of them (``distance`` 0); a correlation that is NaN is written as the
string ``"nan"``.

`read_scored_simulations` reads any of these (a file, a directory of ``.jsonl``/``.json``
files, a folder of delphi's ``.txt`` files, or a delphi run's folder) into
`SimulationRecord`s: the true activations of all sequences, concatenated, are a unit; the
simulation is its concept. `simulation_scores` scores each record with any of the library's
metrics. Each value is checked against the JSON type its writer writes (integers for neuron
ids, numbers for activations, a string for the explanation): anything else is a
`SourceError` naming the file, the line and the field.

The concept is what neuron-explainer scores, the saved ``expected_activations``, mapped into
[0, 1] by an increasing affine map: on the simulator's normalized scale (0 to 10) divided by
10; a calibrated simulation (``neuron_activations``, from its ``LinearCalibratedNeuronSimulator``
or ``PercentileMatchingCalibratedNeuronSimulator``) min-max scaled. So correlation equals the
file's ``ev_correlation_score`` and AUC and AUPRC are those of the saved simulation; cosine,
which is not affine-invariant, is that of the [0, 1] values. The uncalibrated simulation a
calibrated one keeps is read (`SimulationRecord.normalized`) but not scored: a linear
calibration with a negative slope reverses it, and percentile matching is not affine.

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
import math
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from .._registry import PASSING_METRICS
from .._score import compute
from ..errors import ParameterError, ShapeError, SourceError
from ..files import parse_json, read_bytes, read_json, write_atomic
from ._fields import json_float_list, json_int, json_lines, json_string, json_string_list

__all__ = ["SimulationRecord", "read_scored_simulations", "simulation_scores", "write_scored_simulations"]

NORMALIZED = "simulated_normalized_activations"
NEURON_UNITS = "neuron_activations"
SIMULATOR_MAX = 10.0  # the simulator's normalized scale is 0..10
_REPORTED = ("ev_correlation_score", "rsquared_score", "absolute_dev_explained_score")
_KINDS = ("NeuronSimulationResults", "ScoredExplanation", "ScoredSimulation")
#: A normalized simulation is an expectation over 0..10: it may exceed the ends by rounding only.
_SCALE_SLACK = 1e-9
_DELPHI_FILE = re.compile(r"^(?P<module>.+)_latent(?P<latent>\d+)\.txt$")  # delphi's {module}_latent{i}.txt
_DELPHI_SCORER = "simulation"  # delphi's scores/{scorer} folder of its simulation scorer


@dataclass(frozen=True)
class SimulationRecord:
    """One explanation's simulation of one neuron over its scored sequences.

    `true` and `simulated` are the concatenated activations of every sequence (`sequence`
    says which token came from which), `simulated` being the saved ``expected_activations`` on
    `activation_scale` (the scale neuron-explainer scores); `normalized` is the uncalibrated
    simulation on the 0..10 scale that a calibrated one kept, when the file kept it.
    `reported` holds the file's overall scores (None when absent, NaN when the file says
    "nan"). `module` and `distance` are a delphi file's hookpoint and its ScoredSimulation's
    ``distance`` (0: every example; q + 1: activation quantile q); `neuron` is then the latent.

    Raises
    ------
    ParameterError
        An unknown `activation_scale`, or a normalized simulation outside 0..10.
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
    module: str | None = None
    distance: int | None = None

    def __post_init__(self) -> None:
        if self.activation_scale not in (NORMALIZED, NEURON_UNITS):
            raise ParameterError(
                f"activation_scale must be {NORMALIZED!r} or {NEURON_UNITS!r}; got {self.activation_scale!r}"
            )
        if self.activation_scale == NORMALIZED and _outside_scale(np.asarray(self.simulated, dtype=np.float64)):
            raise ParameterError(f"a {NORMALIZED} simulation lies in 0..{SIMULATOR_MAX:g}")

    def concept(self) -> npt.NDArray[np.float64]:
        """The simulation as probabilities in [0, 1]: the saved simulation divided by 10 on the
        normalized scale, min-max scaled in the neuron's units (a calibrated simulation), so
        that correlation, AUC and AUPRC are those of what neuron-explainer scores."""
        simulated = np.asarray(self.simulated, dtype=np.float64)
        if self.activation_scale == NORMALIZED:
            return np.clip(simulated / SIMULATOR_MAX, 0.0, 1.0)
        lo, hi = float(simulated.min()), float(simulated.max())
        return np.zeros_like(simulated) if hi == lo else (simulated - lo) / (hi - lo)


def _outside_scale(values: npt.NDArray[np.float64]) -> bool:
    return bool(values.size and (values.min() < -_SCALE_SLACK or values.max() > SIMULATOR_MAX + _SCALE_SLACK))


# --------------------------------------------------------------------------- reading


def _files(path: Path) -> list[Path]:
    """The simulation files at `path`: the file itself; in a folder, delphi's
    ``{module}_latent{i}.txt`` files (a run's folder and its ``scores`` folder lead to
    ``scores/simulation``) or else every ``.jsonl`` and ``.json`` file below it."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise SourceError(f"no scored simulations at {path}")
    for inner in (path / "scores" / _DELPHI_SCORER, path / _DELPHI_SCORER):
        if inner.is_dir():
            path = inner
            break
    delphi = sorted(p for p in path.iterdir() if p.is_file() and _DELPHI_FILE.match(p.name))
    if delphi:
        return delphi
    found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json"))
    if found:
        return found
    raise SourceError(
        f"{path} holds no simulation files (neuron-explainer's .jsonl or .json, or delphi's {{module}}_latent{{i}}.txt)"
    )


def _documents(path: Path) -> Iterator[tuple[str, Any]]:
    """(where, value) of each JSON document: one per line of a ``.jsonl`` file of several
    lines, else the whole file."""
    data = read_bytes(path)
    stripped = data.strip()
    if not stripped:
        raise SourceError(f"{path} is empty")
    if path.suffix == ".jsonl" and b"\n" in stripped:
        yield from json_lines(data, path)
    else:
        yield str(path), parse_json(data, str(path))


def _reported(value: Any, where: str, name: str) -> float | None:
    """An overall score as its writers write it: a number, null (orjson's NaN) or delphi's "nan"."""
    if value is None:
        return None
    if value == "nan":
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SourceError(f'{where}: {name} must be a number, null or "nan"; got {value!r} ({type(value).__name__})')
    return float(value)


def _kind(obj: Any, where: str) -> str | None:
    if not isinstance(obj, dict):
        return None
    if "dataclass_name" in obj:
        return json_string(obj["dataclass_name"], where, "dataclass_name")
    keys = set(obj)  # files written without the tag: recognised by their fields, as neuron-explainer does
    if "scored_explanations" in keys:
        return "NeuronSimulationResults"
    if "scored_simulation" in keys:
        return "ScoredExplanation"
    if "scored_sequence_simulations" in keys:
        return "ScoredSimulation"
    return None


def _record(sim: dict[str, Any], where: str, ids: dict[str, Any]) -> SimulationRecord:
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
        expected = json_float_list(simulation.get("expected_activations"), at, "expected_activations")
        actual = json_float_list(s["true_activations"], at, "true_activations")
        if len(expected) != len(actual):
            raise SourceError(f"{at}: {len(expected)} simulated and {len(actual)} true activations")
        toks = json_string_list(simulation.get("tokens", []), at, "tokens")
        if toks and len(toks) != len(actual):
            raise SourceError(f"{at}: {len(toks)} tokens for {len(actual)} activations")
        scale = simulation.get("activation_scale")
        scale = NORMALIZED if scale is None else scale
        if scale not in (NORMALIZED, NEURON_UNITS):
            raise SourceError(f"{at}: unknown activation_scale {scale!r}; read are {NORMALIZED!r} and {NEURON_UNITS!r}")
        if scale == NORMALIZED and _outside_scale(expected):
            raise SourceError(f"{at}: expected_activations leave the simulator's 0..10 scale ({NORMALIZED})")
        scales.add(scale)
        raw = simulation.get("uncalibrated_simulation")
        if raw is not None and not isinstance(raw, dict):
            raise SourceError(f"{at}: uncalibrated_simulation must be a SequenceSimulation or null")
        kept = None
        if raw is not None:
            kept = json_float_list(raw.get("expected_activations"), at, "uncalibrated_simulation.expected_activations")
            if len(kept) != len(actual):
                raise SourceError(f"{at}: {len(kept)} uncalibrated and {len(actual)} true activations")
        normalized.append(kept)
        true.append(actual)
        simulated.append(expected)
        seq.append(np.full(len(actual), i, dtype=np.int64))
        tokens.extend(toks)
    if len(scales) > 1:
        raise SourceError(f"{where}: the sequences mix activation scales {sorted(scales)}")
    saved = [n for n in normalized if n is not None]
    reported = {k: _reported(sim.get(k), where, k) for k in _REPORTED}
    distance = json_int(sim["distance"], where, "distance") if "distance" in sim else None
    return SimulationRecord(
        ids.get("layer"), ids.get("neuron"), ids.get("explanation"), np.concatenate(true), np.concatenate(simulated),
        np.concatenate(seq), tokens, scales.pop(), np.concatenate(saved) if len(saved) == len(normalized) else None,
        reported, ids.get("module"), distance,
    )  # fmt: skip


def _neuron_id(obj: dict[str, Any], where: str) -> tuple[int, int]:
    nid = obj.get("neuron_id")
    if not isinstance(nid, dict):
        raise SourceError(f"{where}: NeuronSimulationResults needs a neuron_id object")
    return (
        json_int(nid.get("layer_index"), where, "neuron_id.layer_index", minimum=0),
        json_int(nid.get("neuron_index"), where, "neuron_id.neuron_index", minimum=0),
    )


def _scored_explanation(obj: dict[str, Any], where: str, ids: dict[str, Any]) -> SimulationRecord:
    explanation = json_string(obj.get("explanation"), where, "explanation")
    sim = obj.get("scored_simulation")
    if not isinstance(sim, dict):
        raise SourceError(f"{where}: scored_simulation must be a ScoredSimulation object; got {sim!r:.60}")
    return _record(sim, where, {**ids, "explanation": explanation})


def _records(obj: Any, where: str, ids: dict[str, Any]) -> Iterator[SimulationRecord]:
    kind = _kind(obj, where)
    if kind == "NeuronSimulationResults":
        layer, neuron = _neuron_id(obj, where)
        explained = obj.get("scored_explanations")
        if not isinstance(explained, list):
            raise SourceError(f"{where}: scored_explanations must be a list")
        for i, e in enumerate(explained):
            at = f"{where}, explanation {i}"
            if _kind(e, at) != "ScoredExplanation":
                raise SourceError(f"{at}: scored_explanations[{i}] is not a ScoredExplanation")
            yield _scored_explanation(e, at, {**ids, "layer": layer, "neuron": neuron})
    elif kind == "ScoredExplanation":
        yield _scored_explanation(obj, where, ids)
    elif kind == "ScoredSimulation":
        yield _record(obj, where, ids)
    elif isinstance(obj, list):
        for i, item in enumerate(obj):
            yield from _records(item, f"{where}[{i}]", ids)
    else:
        found = f" ({kind})" if kind is not None and kind not in _KINDS else ""
        raise SourceError(
            f"{where}: not a neuron-explainer ScoredSimulation, ScoredExplanation or NeuronSimulationResults{found}"
        )


def _delphi_ids(path: Path) -> dict[str, Any]:
    """A delphi simulation file's hookpoint and latent (from its name) and, from the run's
    ``explanations`` folder beside ``scores``, the explanation it scored when that is there."""
    m = _DELPHI_FILE.match(path.name)
    if m is None or path.suffix != ".txt":
        return {}
    ids: dict[str, Any] = {"module": m.group("module"), "neuron": int(m.group("latent"))}
    if path.parent.parent.name == "scores":
        explained = path.parent.parent.parent / "explanations" / path.name
        if explained.is_file():
            ids["explanation"] = json_string(read_json(explained), str(explained), "the explanation")
    return ids


def read_scored_simulations(path: str | os.PathLike[str]) -> list[SimulationRecord]:
    """Every scored simulation in a file, a directory tree (``{layer}/{neuron}.jsonl``), a
    folder of delphi's simulation files, or a delphi run's folder (or its ``scores`` folder).

    Raises
    ------
    SourceError
        A file that is not JSON, an object of none of the three kinds, sequences whose true
        and simulated lengths differ, a value of another JSON type than its writer writes
        (a neuron index that is not an integer, an activation that is not a number, an
        explanation that is not a string, a score that is not a number, null or "nan"), a
        missing or null ``scored_simulation``, non-finite activations, a normalized
        simulation outside 0..10; each error names the file and line.
    """
    out: list[SimulationRecord] = []
    for f in _files(Path(path)):
        ids = _delphi_ids(f)
        for where, obj in _documents(f):
            out.extend(_records(obj, where, ids))
    return out


# --------------------------------------------------------------------------- scoring and writing


def simulation_scores(
    records: Sequence[SimulationRecord], metrics: str | Sequence[str] | None = PASSING_METRICS, **params: Any
) -> pl.DataFrame:
    """Each record scored under `metrics` (the true activations as the unit, the simulation as
    its concept), beside the scores the file reported.

    `params` go to `neuroneval.compute` (``alpha``, ``lam``, ...). Returns the columns
    `layer`, `neuron`, `module`, `distance` (delphi's hookpoint and ScoredSimulation distance;
    null for neuron-explainer's files), `explanation`, `tokens` (activations scored), the
    reported `ev_correlation_score`, `rsquared_score`, `absolute_dev_explained_score`, then
    one column per metric. A record whose true activations are constant scores NaN where the
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
            "module": r.module,
            "distance": r.distance,
            "explanation": r.explanation,
            "tokens": len(r.true),
        }
        row.update({k: r.reported.get(k) for k in _REPORTED})
        row.update({m: float(v[0, 0]) for m, v in scores.items()})
        rows.append(row)
    schema: dict[str, Any] = {
        "layer": pl.Int64, "neuron": pl.Int64, "module": pl.String, "distance": pl.Int64, "explanation": pl.String,
        "tokens": pl.Int64,
    }  # fmt: skip
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


def _finite_or_none(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)  # orjson writes NaN as null


def write_scored_simulations(path: str | os.PathLike[str], records: Sequence[SimulationRecord]) -> Path:
    """Write records as neuron-explainer ``NeuronSimulationResults`` JSON, one line per neuron
    (records of one (layer, neuron) become its scored explanations), atomically. A record
    without a (layer, neuron) is written as a ``ScoredExplanation`` line, or a bare
    ``ScoredSimulation`` line when it has no explanation either.

    Each simulation's value distribution is written as a point mass at its expected value;
    scores the records do not carry are computed as neuron-explainer does (correlation of
    expected and true activations, per sequence and overall); NaN scores are written as null,
    as orjson writes them.

    Raises
    ------
    ParameterError
        A record with a (layer, neuron) but no explanation: neuron-explainer's
        ``ScoredExplanation`` needs its text.
    """
    by_neuron: dict[tuple[int | None, int | None], list[SimulationRecord]] = {}
    for r in records:
        key = (r.layer, r.neuron) if r.layer is not None and r.neuron is not None else (None, None)
        by_neuron.setdefault(key, []).append(r)
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
            overall = {k: _finite_or_none(r.reported.get(k)) for k in _REPORTED}
            if overall["ev_correlation_score"] is None:
                overall["ev_correlation_score"] = _correlation(r.simulated, r.true)
            scored: dict[str, Any] = {"dataclass_name": "ScoredSimulation", "scored_sequence_simulations": sequences}
            scored.update(overall)
            if r.explanation is None:
                if layer is not None:
                    raise ParameterError(
                        f"the record of layer {layer}, neuron {neuron} has no explanation; a neuron-explainer "
                        "ScoredExplanation needs its text"
                    )
                explained.append(scored)
                continue
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
