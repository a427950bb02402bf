"""The results of MIB's circuit track (SPEC section 7): each method's edge scores and the
faithfulness curves of the circuits they pick, a run's files, and the CPR/CMD table of runs.

- `MethodCurve`: one method's edge scores and, at each fraction, the size and the dataset-mean
  metric of its circuit by signed score (for CPR) and by absolute score (for CMD);
- `CircuitRun`: one (model, task, ablation) run: the graph's shape, m(full) and m(empty), the
  methods; `summary` (CPR, CMD, mean faithfulness, AUROC, time per method), `write`;
- `read_circuit_run` reads a run directory back; `find_circuit_runs` finds run directories;
- `write_edge_scores` and `read_edge_scores`: one method's edge scores in MIB's (EAP-IG's) graph
  JSON, checked against the graph;
- `circuit_table` and `format_circuit_table`: MIB's table, one row per method, CPR and CMD per
  (model, task); `best_marks` says which cells are best in their column.

A run directory holds ``circuit_run.json`` (every scalar and curve; it is written last, so a
directory with it is whole), ``curves.csv`` (method, criterion, fraction, edges, metric,
faithfulness) and ``scores/<method>.json``.

Faithfulness is undefined when m(full) == m(empty); a run keeps its numbers, and its
faithfulness, CPR and CMD are then NaN.

Examples
--------
>>> import numpy as np
>>> from neuroneval.circuits import FRACTIONS, transformer_graph
>>> g = transformer_graph(1, 1)
>>> curve = MethodCurve("eap", np.arange(g.n_edges, dtype=float), 0.5,
...                     signed_edges=np.full(10, 3), signed_metric=np.linspace(0.5, 2.0, 10),
...                     absolute_edges=np.full(10, 3), absolute_metric=np.full(10, 2.0))
>>> run = CircuitRun("tiny", "toy", "patching", n_layers=1, n_heads=1, n_score=8, n_eval=8, steps=5,
...                  seed=0, fractions=FRACTIONS, full=2.0, empty=0.0, methods=(curve,))
>>> run.curve("eap").absolute_faithfulness(run.full, run.empty).tolist()[:3]
[1.0, 1.0, 1.0]
>>> round(run.cmd("eap"), 6)
0.0
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from .._coerce import as_real_array, check_integer, check_real
from ..errors import InvalidInputError, OutputError, ParameterError, ShapeError, SourceError
from ..files import read_json, write_files_atomic, writing
from ..options import SCORE_OPTIONS, Option, Options
from .graph import Graph, transformer_graph
from .graph_json import edge_names, edge_scores_text, read_edge_scores, read_node_scores, shape_text, write_edge_scores
from .scores import FRACTIONS, cmd, cpr, faithfulness, mean_faithfulness

__all__ = [
    "ABLATIONS",
    "CIRCUIT_METHODS",
    "LEVELS",
    "NODE_METHODS",
    "CIRCUIT_TRACK_OPTIONS",
    "CIRCUIT_MODELS",
    "CIRCUIT_RUN_FILE",
    "CIRCUIT_RUN_FORMAT",
    "CIRCUIT_RUN_VERSION",
    "CIRCUIT_DTYPES",
    "CRITERIA",
    "CURVES_FILE",
    "SCORES_DIR",
    "CircuitRun",
    "MethodCurve",
    "best_marks",
    "circuit_table",
    "edge_names",
    "find_circuit_runs",
    "format_circuit_table",
    "read_circuit_run",
    "read_edge_scores",
    "read_node_scores",
    "run_labels",
    "write_edge_scores",
]

#: The methods, in the order tables list them (other methods follow, in the order met).
CIRCUIT_METHODS = ("random", "eap", "eap-ig-inputs", "eap-ig-activations", "nap", "ugs", "ifr", "exact")
#: The methods that score nodes rather than edges (their circuits are the top nodes with all
#: their outgoing edges, pruned: MIB's node level).
NODE_METHODS = ("nap",)
#: What a method's scores rate: edges (one score per edge) or nodes (one per node but the logits).
LEVELS = ("edge", "node")
#: The models the track runs (`neuroneval.torch.circuits.circuit_track`) and each one's tasks,
#: the first its default.
CIRCUIT_MODELS: dict[str, tuple[str, ...]] = {"smollm2": ("ioi", "arithmetic", "mcqa"), "digit-pair": ("digit-pair",)}
#: How an edge outside the circuit is ablated: the counterfactual run's activation, or the mean.
ABLATIONS = ("patching", "mean")
CIRCUIT_DTYPES = ("float32", "bfloat16")  # the precisions a circuit run computes in
#: How circuits are picked from the scores: top signed scores (CPR), top absolute scores (CMD).
CRITERIA = ("signed", "absolute")
#: The options of a circuit track run (`neuroneval.torch.circuits.circuit_track`, `neuroneval
#: circuits run`): examples, integration steps, batches, the ablation, the seed, the digit-pair
#: model's training.
CIRCUIT_TRACK_OPTIONS = Options(
    Option("n_score", "integer", 16, "examples that score the edges", low=1, metavar="N"),
    Option("n_eval", "integer", 192, "examples that evaluate circuits", low=1, metavar="N"),
    Option("steps", "integer", 5, "integration steps of EAP-IG on inputs", low=1, metavar="N"),
    Option(
        "activation_steps",
        "integer",
        5,
        "integration steps of EAP-IG on activations, (1 + 2 layers) passes each",
        low=1,
        metavar="N",
    ),
    Option("ugs_steps", "integer", 100, "UGS's mask-learning steps, 5 scoring examples each", low=1, metavar="N"),
    Option(
        "ugs_sparsity",
        "real",
        1e-3,
        "UGS's weight of the sum of the edge probabilities (MIB's runs: 0.001)",
        low=0.0,
        metavar="X",
    ),
    Option("batch_size", "integer", 32, "examples per pass", low=1, metavar="N"),
    Option(
        "dtype",
        "choice",
        "auto",
        "the model's precision: auto is bfloat16 for smollm2 (as MIB loads "
        "LLaMA-family models), float32 for digit-pair; bfloat16 runs several times slower "
        "on CPUs without AVX-512 BF16 or AMX (a warning says so)",
        choices=("auto", *CIRCUIT_DTYPES),
        metavar="DTYPE",
    ),
    Option(
        "ablation",
        "choice",
        "patching",
        "how an edge outside the circuit is ablated: patching, where it reads the counterfactual run, or mean",
        choices=ABLATIONS,
        metavar="KIND",
    ),
    SCORE_OPTIONS["seed"],
    Option(
        "train_steps",
        "integer",
        1500,
        "training steps of the digit-pair model; ignored for smollm2",
        low=1,
        metavar="N",
    ),
)
CIRCUIT_RUN_FILE = "circuit_run.json"
CURVES_FILE = "curves.csv"
SCORES_DIR = "scores"
#: The `format` tag and `version` of circuit_run.json.
CIRCUIT_RUN_FORMAT = "neuroneval-circuit-run"
CIRCUIT_RUN_VERSION = 1

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
_METHOD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


# --------------------------------------------------------------------------- one method


def _frozen(arr: npt.NDArray[Any]) -> npt.NDArray[Any]:
    out = np.array(arr, copy=True)
    out.flags.writeable = False
    return out


def _floats(x: Any, name: str) -> FloatArray:
    arr = as_real_array(x, name, ndim=1)
    if not np.isfinite(arr).all():
        raise ShapeError(f"{name} entry {int(np.flatnonzero(~np.isfinite(arr))[0])} is not finite")
    return _frozen(arr)


def _counts(x: Any, name: str) -> IntArray:
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ShapeError(f"{name} must be 1-D; got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        raise ShapeError(f"{name} must be integer edge counts; got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if (arr < 0).any():
        raise ShapeError(f"{name} holds a negative edge count ({int(arr.min())})")
    return _frozen(arr)


def _faithfulness_curve(metric: FloatArray, full: float, empty: float) -> FloatArray:
    """f at each fraction (`faithfulness` of each circuit's mean metric); NaN when undefined."""
    if full == empty:
        return np.full(metric.shape, np.nan)
    return np.array([faithfulness(float(m), full=full, empty=empty) for m in metric], dtype=np.float64)


def _area(kind: Callable[[Any, Any], float], fractions: Sequence[float], f: FloatArray) -> float:
    return kind(fractions, f) if np.isfinite(f).all() else math.nan


@dataclass(frozen=True, eq=False)
class MethodCurve:
    """One method's scores and the circuits they pick at each fraction.

    Attributes
    ----------
    method : str
        ``random``, ``eap``, ``eap-ig-inputs``, ``eap-ig-activations``, ``nap``, ``ugs``,
        ``ifr``, ``exact`` or another name (letters, digits, ``.``, ``_``, ``-``: it names the file of its scores).
    scores : numpy.ndarray of float64, shape (E,) or (N - 1,)
        One finite score per edge of the graph, or at the node `level` one per node but the
        logits (the senders, in node order).
    seconds : float
        Time spent scoring.
    signed_edges, absolute_edges : numpy.ndarray of int64, shape (F,)
        The circuit's size (edges after pruning) at each fraction, circuits by signed
        (absolute) score.
    signed_metric, absolute_metric : numpy.ndarray of float64, shape (F,)
        The dataset-mean task metric of those circuits.
    auroc : float or None
        Against a ground-truth circuit, when the model has one (edge-level methods only: MIB
        defines InterpBench's AUROC on edges).
    level : str
        ``edge`` or ``node`` (`LEVELS`): what `scores` rate.

    Equality compares every array exactly. The arrays are read-only copies.
    """

    method: str
    scores: FloatArray
    seconds: float
    signed_edges: IntArray
    signed_metric: FloatArray
    absolute_edges: IntArray
    absolute_metric: FloatArray
    auroc: float | None = None
    level: str = "edge"

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ParameterError(f"a method's level must be one of {', '.join(LEVELS)}; got {self.level!r}")
        if not isinstance(self.method, str) or not _METHOD_NAME.fullmatch(self.method):
            raise ParameterError(
                f"a method's name must be letters, digits, '.', '_' or '-' (it names its scores file); got {self.method!r}"
            )
        m = self.method
        seconds = check_real(self.seconds, f"{m}: seconds")
        if seconds < 0:
            raise ParameterError(f"{m}: seconds must be >= 0; got {seconds}")
        auroc = None if self.auroc is None else check_real(self.auroc, f"{m}: auroc")
        values = {
            "scores": _floats(self.scores, f"{m}: {self.level} scores"),
            "signed_edges": _counts(self.signed_edges, f"{m}: signed_edges"),
            "signed_metric": _floats(self.signed_metric, f"{m}: signed_metric"),
            "absolute_edges": _counts(self.absolute_edges, f"{m}: absolute_edges"),
            "absolute_metric": _floats(self.absolute_metric, f"{m}: absolute_metric"),
        }
        n = values["signed_edges"].size
        lengths = {k: v.size for k, v in values.items() if k != "scores"}
        if len(set(lengths.values())) != 1 or n < 2:
            raise ShapeError(
                f"{m}: the curves need one entry per fraction (at least 2), all the same length; got "
                + ", ".join(f"{k} {v}" for k, v in lengths.items())
            )
        for key, value in values.items():
            object.__setattr__(self, key, value)
        object.__setattr__(self, "seconds", seconds)
        object.__setattr__(self, "auroc", auroc)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MethodCurve):
            return NotImplemented
        arrays = ("scores", "signed_edges", "signed_metric", "absolute_edges", "absolute_metric")
        mine, theirs = (
            (self.method, self.seconds, self.auroc, self.level),
            (other.method, other.seconds, other.auroc, other.level),
        )
        return mine == theirs and all(np.array_equal(getattr(self, a), getattr(other, a)) for a in arrays)

    __hash__ = None  # type: ignore[assignment]

    def edges(self, criterion: str = "signed") -> IntArray:
        """The circuit sizes by `criterion` (``"signed"`` or ``"absolute"``)."""
        return self.signed_edges if _criterion(criterion) == "signed" else self.absolute_edges

    def metric(self, criterion: str = "signed") -> FloatArray:
        """The circuits' mean metric by `criterion` (``"signed"`` or ``"absolute"``)."""
        return self.signed_metric if _criterion(criterion) == "signed" else self.absolute_metric

    def faithfulness(self, full: float, empty: float, criterion: str = "signed") -> FloatArray:
        """f = (m(C) - m(empty)) / (m(full) - m(empty)) at each fraction (NaN when m(full) == m(empty))."""
        return _faithfulness_curve(self.metric(criterion), float(full), float(empty))

    def signed_faithfulness(self, full: float, empty: float) -> FloatArray:
        return self.faithfulness(full, empty, "signed")

    def absolute_faithfulness(self, full: float, empty: float) -> FloatArray:
        return self.faithfulness(full, empty, "absolute")

    def cpr(self, full: float, empty: float, fractions: Sequence[float] = FRACTIONS) -> float:
        """CPR of the signed-score circuits (higher is better; NaN when f is undefined)."""
        return _area(cpr, fractions, self.signed_faithfulness(full, empty))

    def cmd(self, full: float, empty: float, fractions: Sequence[float] = FRACTIONS) -> float:
        """CMD of the absolute-score circuits (0 is ideal; NaN when f is undefined)."""
        return _area(cmd, fractions, self.absolute_faithfulness(full, empty))

    def mean_faithfulness(self, full: float, empty: float, criterion: str = "signed") -> float:
        """The mean of f over the fractions (NaN when f is undefined)."""
        f = self.faithfulness(full, empty, criterion)
        return mean_faithfulness(f) if np.isfinite(f).all() else math.nan


def _criterion(criterion: str) -> str:
    if criterion not in CRITERIA:
        raise ParameterError(f"criterion must be one of {', '.join(CRITERIA)}; got {criterion!r}")
    return criterion


# --------------------------------------------------------------------------- a run


@lru_cache(maxsize=8)
def _graph(n_layers: int, n_heads: int) -> Graph:
    return transformer_graph(n_layers, n_heads)


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value.strip() or any(c in value for c in "\r\n\t"):
        raise ParameterError(f"{name} must be a non-empty name on one line; got {value!r}")
    return value


@dataclass(frozen=True)
class CircuitRun:
    """One run of the circuit track: a model, a task, an ablation, and each method's curves.

    Attributes
    ----------
    model, task, ablation : str
        What was run (e.g. ``smollm2``, ``ioi``); ``patching`` (non-circuit edges read the
        counterfactual run) or ``mean``.
    n_layers, n_heads, n_score, n_eval : int
        The graph is ``transformer_graph(n_layers, n_heads)``; examples used to score edges and
        to evaluate circuits.
    steps, seed : int
        Integration steps of EAP-IG on inputs; the seed of the run.
    activation_steps : int, optional
        Integration steps of EAP-IG on activations (default: `steps`).
    ugs_steps : int, optional
        UGS's steps (5 scoring examples each), and ``ugs_sparsity`` its sparsity weight (None for
        a run without UGS).
    d_model : int, optional
        The model's hidden size, written into the score files' ``cfg``: MIB's (EAP-IG's)
        ``Graph.from_json`` needs it (None for a run that does not know it).
    dtype : str, optional
        The precision the model computed in (`CIRCUIT_DTYPES`; None where not recorded).
    fractions : tuple of float
        The circuit sizes, as fractions of the edges (`FRACTIONS`), increasing in (0, 1].
    full, empty : float
        The dataset-mean metric of the full and of the empty graph.
    methods : tuple of MethodCurve
        One per method, names unique.
    """

    model: str
    task: str
    ablation: str
    n_layers: int
    n_heads: int
    n_score: int
    n_eval: int
    steps: int
    seed: int
    fractions: tuple[float, ...]
    full: float
    empty: float
    methods: tuple[MethodCurve, ...]
    activation_steps: int | None = None
    d_model: int | None = None
    ugs_steps: int | None = None
    ugs_sparsity: float | None = None
    dtype: str | None = None

    def __post_init__(self) -> None:
        if self.dtype is not None and self.dtype not in CIRCUIT_DTYPES:
            raise ParameterError(f"dtype must be one of {', '.join(CIRCUIT_DTYPES)}; got {self.dtype!r}")
        if self.activation_steps is None:
            object.__setattr__(self, "activation_steps", self.steps)
        if self.d_model is not None:
            object.__setattr__(self, "d_model", check_integer(self.d_model, "d_model", minimum=1))
        if self.ugs_steps is not None:
            object.__setattr__(self, "ugs_steps", check_integer(self.ugs_steps, "ugs_steps", minimum=1))
        if self.ugs_sparsity is not None:
            object.__setattr__(self, "ugs_sparsity", check_real(self.ugs_sparsity, "ugs_sparsity"))
        _text(self.model, "model")
        _text(self.task, "task")
        if self.ablation not in ABLATIONS:
            raise ParameterError(f"ablation must be one of {', '.join(ABLATIONS)}; got {self.ablation!r}")
        for name, minimum in (
            ("n_layers", 1),
            ("n_heads", 1),
            ("n_score", 1),
            ("n_eval", 1),
            ("steps", 1),
            ("activation_steps", 1),
            ("seed", 0),
        ):
            object.__setattr__(self, name, check_integer(getattr(self, name), name, minimum=minimum))
        fractions = tuple(check_real(k, "fraction") for k in self.fractions)
        if len(fractions) < 2 or any(b <= a for a, b in zip(fractions, fractions[1:], strict=False)):
            raise ShapeError(f"fractions must be at least two increasing numbers; got {list(fractions)}")
        if not 0 < fractions[0] or fractions[-1] > 1:
            raise ShapeError(f"fractions must lie in (0, 1]; got {list(fractions)}")
        object.__setattr__(self, "fractions", fractions)
        object.__setattr__(self, "full", check_real(self.full, "full"))
        object.__setattr__(self, "empty", check_real(self.empty, "empty"))
        methods = tuple(self.methods)
        if not methods or not all(isinstance(m, MethodCurve) for m in methods):
            raise ParameterError("a circuit run needs at least one method, each a MethodCurve")
        names = [m.method for m in methods]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ParameterError(f"method {repeated[0]!r} appears more than once in the run")
        graph = self.graph()
        n_edges = graph.n_edges
        for m in methods:
            n, what = (n_edges, "edges") if m.level == "edge" else (graph.n_nodes - 1, "nodes other than the logits")
            if m.scores.size != n:
                raise ShapeError(
                    f"{m.method}: {m.scores.size:,} {m.level} scores; the graph of "
                    f"{shape_text(self.n_layers, self.n_heads)} has {n:,} {what}"
                )
            if m.signed_edges.size != len(fractions):
                raise ShapeError(
                    f"{m.method}: the curves have {m.signed_edges.size} entries; the run has {len(fractions)} fractions"
                )
            for criterion in CRITERIA:
                if (m.edges(criterion) > n_edges).any():
                    raise ShapeError(
                        f"{m.method}: a circuit by {criterion} score has {int(m.edges(criterion).max()):,} edges, "
                        f"more than the graph's {n_edges:,}"
                    )
        object.__setattr__(self, "methods", methods)

    def graph(self) -> Graph:
        """``transformer_graph(n_layers, n_heads)``."""
        return _graph(self.n_layers, self.n_heads)

    @property
    def method_names(self) -> list[str]:
        return [m.method for m in self.methods]

    @property
    def defined(self) -> bool:
        """Whether faithfulness is defined: m(full) != m(empty)."""
        return self.full != self.empty

    def curve(self, method: str) -> MethodCurve:
        """The curve of `method`; a `ParameterError` naming the run's methods otherwise."""
        for m in self.methods:
            if m.method == method:
                return m
        raise ParameterError(f"the run has no method {method!r}; it has {', '.join(self.method_names)}")

    def faithfulness(self, method: str, criterion: str = "signed") -> FloatArray:
        return self.curve(method).faithfulness(self.full, self.empty, criterion)

    def cpr(self, method: str) -> float:
        return self.curve(method).cpr(self.full, self.empty, self.fractions)

    def cmd(self, method: str) -> float:
        return self.curve(method).cmd(self.full, self.empty, self.fractions)

    def summary(self) -> pl.DataFrame:
        """One row per method, in the run's order: method, cpr, cmd, mean_faithfulness_signed,
        mean_faithfulness_absolute, auroc (null without a ground truth), seconds."""
        rows = [
            {
                "method": m.method,
                "cpr": m.cpr(self.full, self.empty, self.fractions),
                "cmd": m.cmd(self.full, self.empty, self.fractions),
                "mean_faithfulness_signed": m.mean_faithfulness(self.full, self.empty, "signed"),
                "mean_faithfulness_absolute": m.mean_faithfulness(self.full, self.empty, "absolute"),
                "auroc": m.auroc,
                "seconds": m.seconds,
            }
            for m in self.methods
        ]
        return pl.DataFrame(rows, schema=_SUMMARY_SCHEMA)

    def curves(self) -> pl.DataFrame:
        """``curves.csv``: method, criterion (signed, absolute), fraction, edges, metric, faithfulness."""
        columns: dict[str, list[Any]] = {k: [] for k in _CURVES_SCHEMA}
        for m in self.methods:
            for criterion in CRITERIA:
                f = m.faithfulness(self.full, self.empty, criterion)
                columns["method"] += [m.method] * len(self.fractions)
                columns["criterion"] += [criterion] * len(self.fractions)
                columns["fraction"] += list(self.fractions)
                columns["edges"] += m.edges(criterion).tolist()
                columns["metric"] += m.metric(criterion).tolist()
                columns["faithfulness"] += f.tolist()
        return pl.DataFrame(columns, schema=_CURVES_SCHEMA)

    def to_json(self) -> dict[str, Any]:
        """circuit_run.json's document: every scalar and, per method, its scalars and curves
        (with the faithfulness, CPR and CMD they give, for readers; these are recomputed on reading)."""
        methods = []
        for m in self.methods:
            entry: dict[str, Any] = {
                "method": m.method,
                "seconds": m.seconds,
                "auroc": m.auroc,
                "level": m.level,
                "scores_file": f"{SCORES_DIR}/{m.method}.json",
            }
            for criterion in CRITERIA:
                entry[criterion] = {
                    "edges": m.edges(criterion).tolist(),
                    "metric": m.metric(criterion).tolist(),
                    "faithfulness": _json_floats(m.faithfulness(self.full, self.empty, criterion)),
                }
            entry |= {
                "cpr": _json_float(m.cpr(self.full, self.empty, self.fractions)),
                "cmd": _json_float(m.cmd(self.full, self.empty, self.fractions)),
                "mean_faithfulness_signed": _json_float(m.mean_faithfulness(self.full, self.empty, "signed")),
                "mean_faithfulness_absolute": _json_float(m.mean_faithfulness(self.full, self.empty, "absolute")),
            }
            methods.append(entry)
        return {
            "format": CIRCUIT_RUN_FORMAT,
            "version": CIRCUIT_RUN_VERSION,
            "model": self.model,
            "task": self.task,
            "ablation": self.ablation,
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "n_edges": self.graph().n_edges,
            "n_score": self.n_score,
            "n_eval": self.n_eval,
            "steps": self.steps,
            "activation_steps": self.activation_steps,
            "ugs_steps": self.ugs_steps,
            "ugs_sparsity": self.ugs_sparsity,
            "d_model": self.d_model,
            "dtype": self.dtype,
            "seed": self.seed,
            "fractions": list(self.fractions),
            "full": self.full,
            "empty": self.empty,
            "methods": methods,
        }

    def write(self, directory: str | os.PathLike[str]) -> list[Path]:
        """Write the run into `directory` (created if needed): ``scores/<method>.json`` (MIB's
        graph JSON), then ``curves.csv`` and ``circuit_run.json``, each written aside and renamed
        into place, circuit_run.json last (a directory with it is whole; an older one is removed
        first). Returns the paths written."""
        directory = Path(directory)
        if directory.exists() and not directory.is_dir():
            raise OutputError(f"the output {directory} is a file; give a directory")
        old = directory / CIRCUIT_RUN_FILE
        with writing(old, "removing the previous run's settings"):
            old.unlink(missing_ok=True)
        graph = self.graph()
        cfg: dict[str, Any] = {"n_layers": self.n_layers, "n_heads": self.n_heads}
        if self.d_model is not None:
            cfg["d_model"] = self.d_model
        scores = {f"{m.method}.json": _scores_writer(graph, m, cfg) for m in self.methods}
        written = write_files_atomic(directory / SCORES_DIR, scores)
        document = json.dumps(self.to_json(), indent=1, allow_nan=False) + "\n"
        curves = self.curves()
        files: dict[str, Callable[[Path], object]] = {
            CURVES_FILE: lambda p: _write_csv(curves, p),
            CIRCUIT_RUN_FILE: lambda p: p.write_text(document, encoding="utf-8"),
        }
        return written + write_files_atomic(directory, files)


_SUMMARY_SCHEMA = {
    "method": pl.String,
    "cpr": pl.Float64,
    "cmd": pl.Float64,
    "mean_faithfulness_signed": pl.Float64,
    "mean_faithfulness_absolute": pl.Float64,
    "auroc": pl.Float64,
    "seconds": pl.Float64,
}
_CURVES_SCHEMA = {
    "method": pl.String,
    "criterion": pl.String,
    "fraction": pl.Float64,
    "edges": pl.Int64,
    "metric": pl.Float64,
    "faithfulness": pl.Float64,
}


def _json_float(v: float) -> float | None:
    return v if math.isfinite(v) else None


def _json_floats(a: FloatArray) -> list[float | None]:
    return [_json_float(float(v)) for v in a]


def _scores_writer(graph: Graph, method: MethodCurve, cfg: Mapping[str, Any]) -> Callable[[Path], object]:
    """Writes a method's scores file (a node-level method's in the nodes, its edges' zero, as
    EAP-IG writes a node-level graph); its text is made when it is written (one file in memory
    at a time)."""
    if method.level == "node":
        return lambda p: p.write_text(
            edge_scores_text(graph, np.zeros(graph.n_edges), None, cfg, method.scores), encoding="utf-8"
        )
    return lambda p: p.write_text(edge_scores_text(graph, method.scores, None, cfg), encoding="utf-8")


def _write_csv(table: pl.DataFrame, path: Path) -> None:
    """CSV with floats written as Python's repr (shortest round-trip), NaN as NaN."""
    buffer = io.StringIO()
    w = csv.writer(buffer, lineterminator="\n")
    w.writerow(table.columns)
    for row in table.iter_rows():
        w.writerow(["NaN" if isinstance(v, float) and math.isnan(v) else v for v in row])
    path.write_text(buffer.getvalue(), encoding="utf-8")


# --------------------------------------------------------------------------- reading a run


class _Reader:
    """The fields of circuit_run.json, each checked; an error names the file and the field."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, message: str) -> SourceError:
        return SourceError(f"{self.path}: {message}")

    def get(self, document: Mapping[str, Any], key: str, where: str = "") -> Any:
        if key not in document:
            raise self.fail(f"{where}{key!r} is missing")
        return document[key]

    def text(self, document: Mapping[str, Any], key: str) -> str:
        v = self.get(document, key)
        if not isinstance(v, str):
            raise self.fail(f"{key!r} must be a string; it holds {v!r}")
        return v

    def integer(self, document: Mapping[str, Any], key: str, minimum: int) -> int:
        v = self.get(document, key)
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise self.fail(f"{key!r} must be an integer >= {minimum}; it holds {v!r}")
        return v

    def number(self, v: Any, what: str) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise self.fail(f"{what} must be a finite number; it holds {v!r}")
        return float(v)

    def curve(self, block: Any, key: str, what: str, n: int) -> npt.NDArray[Any]:
        """A list of `n` numbers (edge counts for ``edges``)."""
        if not isinstance(block, dict):
            raise self.fail(f"{what} must be an object (edges, metric)")
        v = self.get(block, key, f"{what} ")
        if not isinstance(v, list):
            raise self.fail(f"{what} {key} must be a list of numbers; it holds {type(v).__name__}")
        if len(v) != n:
            raise self.fail(f"{what} {key} has {len(v)} entries; the run has {n} fractions")
        if key == "edges":
            if not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
                raise self.fail(f"{what} edges must be integer edge counts")
            return np.asarray(v, dtype=np.int64)
        return np.asarray([self.number(x, f"{what} {key}") for x in v], dtype=np.float64)


def read_circuit_run(directory: str | os.PathLike[str]) -> CircuitRun:
    """The run `CircuitRun.write` wrote into `directory`: circuit_run.json and each method's
    ``scores/<method>.json``, checked (curves.csv is not read: it is derived).

    Raises
    ------
    SourceError
        A directory without circuit_run.json, a file that is not JSON or not a circuit run, an
        unknown format version, a missing field or a curve of the wrong length, a scores file
        that does not match the run's graph (each message names the file).
    """
    directory = Path(directory)
    if not directory.is_dir():
        what = "is a file" if directory.exists() else "does not exist"
        raise SourceError(f"circuit run directory {directory} {what}")
    path = directory / CIRCUIT_RUN_FILE
    if not path.is_file():
        raise SourceError(
            f"{directory} holds no circuit run (no {CIRCUIT_RUN_FILE}; `neuroneval circuits run --out DIR` writes one)"
        )
    doc = read_json(path)
    if not isinstance(doc, dict) or doc.get("format") != CIRCUIT_RUN_FORMAT:
        raise SourceError(f"{path} is not a circuit run (its 'format' must be {CIRCUIT_RUN_FORMAT!r})")
    if doc.get("version") != CIRCUIT_RUN_VERSION:
        raise SourceError(
            f"{path} has format version {doc.get('version')!r}; this neuroneval reads version "
            f"{CIRCUIT_RUN_VERSION} (write the run again, or read it with the neuroneval that wrote it)"
        )
    r = _Reader(path)
    n_layers, n_heads = r.integer(doc, "n_layers", 1), r.integer(doc, "n_heads", 1)
    raw_fractions = r.get(doc, "fractions")
    if not isinstance(raw_fractions, list):
        raise r.fail("'fractions' must be a list of numbers")
    fractions = tuple(r.number(k, "'fractions'") for k in raw_fractions)
    raw_methods = r.get(doc, "methods")
    if not isinstance(raw_methods, list) or not raw_methods:
        raise r.fail("'methods' must be a non-empty list")
    try:
        graph = _graph(n_layers, n_heads)
    except ParameterError as e:
        raise r.fail(str(e)) from e
    if "n_edges" in doc and doc["n_edges"] != graph.n_edges:
        raise r.fail(
            f"'n_edges' is {doc['n_edges']!r}, but the graph of {shape_text(n_layers, n_heads)} has "
            f"{graph.n_edges:,} edges"
        )
    methods = []
    for j, entry in enumerate(raw_methods):
        if not isinstance(entry, dict):
            raise r.fail(f"methods[{j}] must be an object")
        name = r.get(entry, "method", f"methods[{j}] ")
        if not isinstance(name, str) or not _METHOD_NAME.fullmatch(name):
            raise r.fail(f"methods[{j}] has the method name {name!r}")
        what = f"method {name!r}:"
        curves = {
            f"{c}_{key}": r.curve(r.get(entry, c, f"{what} "), key, f"{what} {c}", len(fractions))
            for c in CRITERIA
            for key in ("edges", "metric")
        }
        seconds = r.number(r.get(entry, "seconds", f"{what} "), f"{what} 'seconds'")
        auroc = entry.get("auroc")
        auroc = None if auroc is None else r.number(auroc, f"{what} 'auroc'")
        level = entry.get("level", "edge")
        if level not in LEVELS:
            raise r.fail(f"{what} 'level' must be one of {', '.join(LEVELS)}; it holds {level!r}")
        read = read_node_scores if level == "node" else read_edge_scores
        scores = read(directory / SCORES_DIR / f"{name}.json", graph)  # its errors name its file
        try:
            methods.append(MethodCurve(name, scores, seconds, auroc=auroc, level=level, **curves))
        except InvalidInputError as e:
            raise r.fail(str(e)) from e
    fields: dict[str, Any] = {
        "model": r.text(doc, "model"),
        "task": r.text(doc, "task"),
        "ablation": r.text(doc, "ablation"),
        "n_score": r.integer(doc, "n_score", 1),
        "n_eval": r.integer(doc, "n_eval", 1),
        "steps": r.integer(doc, "steps", 1),
        "activation_steps": r.integer(doc, "activation_steps", 1) if "activation_steps" in doc else None,
        "ugs_steps": None if doc.get("ugs_steps") is None else r.integer(doc, "ugs_steps", 1),
        "ugs_sparsity": None if doc.get("ugs_sparsity") is None else r.number(doc["ugs_sparsity"], "'ugs_sparsity'"),
        "d_model": None if doc.get("d_model") is None else r.integer(doc, "d_model", 1),
        "dtype": None if doc.get("dtype") is None else r.text(doc, "dtype"),
        "seed": r.integer(doc, "seed", 0),
        "full": r.number(r.get(doc, "full"), "'full'"),
        "empty": r.number(r.get(doc, "empty"), "'empty'"),
    }
    try:
        return CircuitRun(n_layers=n_layers, n_heads=n_heads, fractions=fractions, methods=tuple(methods), **fields)
    except InvalidInputError as e:
        raise r.fail(str(e)) from e


def find_circuit_runs(directory: str | os.PathLike[str]) -> list[Path]:
    """The run directories at `directory`: itself when it holds circuit_run.json, else its
    subdirectories that do, by name. Empty when there are none."""
    directory = Path(directory)
    if (directory / CIRCUIT_RUN_FILE).is_file():
        return [directory]
    if not directory.is_dir():
        return []
    return sorted(d for d in directory.iterdir() if d.is_dir() and (d / CIRCUIT_RUN_FILE).is_file())


# --------------------------------------------------------------------------- the table of runs


def run_labels(runs: Sequence[CircuitRun], names: Sequence[str] | None = None) -> list[str]:
    """Each run's name in a table: ``model/task``, with `` (mean)`` for mean ablation; where two
    runs would share a name, `names` (e.g. their directories' names) is added in brackets."""
    labels = [f"{r.model}/{r.task}" + ("" if r.ablation == "patching" else f" ({r.ablation})") for r in runs]
    if names is not None:
        if len(names) != len(labels):
            raise ParameterError(f"{len(names)} names for {len(labels)} runs")
        labels = [f"{x} [{n}]" if labels.count(x) > 1 else x for x, n in zip(labels, names, strict=True)]
    return labels


def _ordered_methods(runs: Sequence[CircuitRun]) -> list[str]:
    seen = list(dict.fromkeys(m for run in runs for m in run.method_names))
    return [m for m in CIRCUIT_METHODS if m in seen] + [m for m in seen if m not in CIRCUIT_METHODS]


def circuit_table(runs: Sequence[CircuitRun], labels: Sequence[str] | None = None) -> pl.DataFrame:
    """MIB's table: one row per method (random, eap, eap-ig-inputs, eap-ig-activations, nap, ugs, ifr, exact,
    then others in the order met), and for each run the columns ``<label> CPR`` and ``<label>
    CMD``; null where a run lacks the method, NaN where faithfulness is undefined. A run's label
    is its `run_labels` name unless `labels` gives them.

    Raises
    ------
    ParameterError
        No run, or two runs with one label (two runs of the same model, task and ablation).
    """
    runs = list(runs)
    if not runs or not all(isinstance(r, CircuitRun) for r in runs):
        raise ParameterError("circuit_table needs at least one CircuitRun")
    labels = run_labels(runs) if labels is None else [str(x) for x in labels]
    if len(labels) != len(runs):
        raise ParameterError(f"{len(labels)} labels for {len(runs)} runs")
    repeated = sorted({x for x in labels if labels.count(x) > 1})
    if repeated:
        raise ParameterError(f"two runs of {repeated[0]}; give each model, task and ablation once (or label them)")
    methods = _ordered_methods(runs)
    columns: dict[str, list[Any]] = {"method": methods}
    schema: dict[str, Any] = {"method": pl.String}
    for label, run in zip(labels, runs, strict=True):
        summary = {r["method"]: r for r in run.summary().iter_rows(named=True)}
        for key, title in (("cpr", "CPR"), ("cmd", "CMD")):
            columns[f"{label} {title}"] = [summary[m][key] if m in summary else None for m in methods]
            schema[f"{label} {title}"] = pl.Float64
    return pl.DataFrame(columns, schema=schema)


def _best(values: list[float | None], higher: bool) -> float | None:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return None
    return max(finite) if higher else min(finite)


def best_marks(table: pl.DataFrame) -> dict[str, list[bool]]:
    """Per CPR/CMD column of a `circuit_table`, which rows hold its best value (the highest
    CPR, the lowest CMD; ties all marked)."""
    marks = {}
    for column in table.columns[1:]:
        values = table[column].to_list()
        best = _best(values, column.endswith(" CPR"))
        marks[column] = [best is not None and v == best for v in values]
    return marks


def format_circuit_table(runs: Sequence[CircuitRun], labels: Sequence[str] | None = None) -> str:
    """`circuit_table` as aligned plain text: CPR is higher-is-better, CMD lower-is-better; ``*``
    marks each column's best value, ``-`` a method a run lacks.

    Examples
    --------
    >>> import numpy as np
    >>> from neuroneval.circuits import FRACTIONS, transformer_graph
    >>> g = transformer_graph(1, 1)
    >>> def curve(name, level):
    ...     return MethodCurve(name, np.zeros(g.n_edges), 1.0, np.full(10, 2), np.full(10, level),
    ...                        np.full(10, 2), np.full(10, level))
    >>> run = CircuitRun("tiny", "toy", "patching", 1, 1, 8, 8, 5, 0, FRACTIONS, 1.0, 0.0,
    ...                  (curve("eap", 0.9), curve("random", 0.2)))
    >>> print(format_circuit_table([run]))
    CPR: area under the faithfulness curve (higher is better); CMD: area between it and 1 (lower is better); * best in its column
    method  tiny/toy CPR   tiny/toy CMD
    random         0.200          0.799
    eap            0.899*         0.100*
    """
    table = circuit_table(runs, labels)
    marks = best_marks(table)
    head = [table.columns[0], *(f"{c} " for c in table.columns[1:])]
    rows = []
    for i, method in enumerate(table["method"].to_list()):
        row = [method]
        for column in table.columns[1:]:
            v = table[column][i]
            text = "- " if v is None else ("NaN " if math.isnan(v) else f"{v:.3f}" + ("*" if marks[column][i] else " "))
            row.append(text)
        rows.append(row)
    widths = [max(len(r[j]) for r in [head, *rows]) for j in range(len(head))]
    lines = [
        "  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip()
        for r in [head, *rows]
    ]
    note = (
        "CPR: area under the faithfulness curve (higher is better); CMD: area between it and 1 (lower is better); "
        "* best in its column"
    )
    return note + "\n" + "\n".join(lines)
