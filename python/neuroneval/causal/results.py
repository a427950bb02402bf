"""A run of the causal-variable track: its setup, IIA per featurizer and variable, and its files.

`CausalRun` is written as ``causal_run.json`` (the setup, every dataset's sizes, and per
featurizer and variable the IIA of each (layer, position), the average and highest over layers
with their bootstrap intervals, and the seconds spent) beside ``hits.npz`` (each test example's
hit, so the intervals can be recomputed). `causal_table` lines up runs: one row per task,
variable and featurizer.
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import SourceError
from ..files import read_json, write_files_atomic
from ..options import Option, Options
from .iia import IIA_BOOTSTRAP_OPTIONS

__all__ = [
    "CAUSAL_FEATURIZERS",
    "CAUSAL_MODELS",
    "CAUSAL_MODEL_OPTIONS",
    "CAUSAL_OPTIONS",
    "CAUSAL_SAE_OPTIONS",
    "CAUSAL_SITES",
    "CAUSAL_SITE_HOOKS",
    "CAUSAL_RUN_FILE",
    "CausalRun",
    "FeaturizerResult",
    "causal_table",
    "format_causal_table",
    "read_causal_run",
    "write_causal_run",
]

#: The featurizers a run may evaluate, in the table's order.
CAUSAL_FEATURIZERS = ("full", "neurons", "pca", "sae", "das", "random", "dbm-neurons", "dbm-pca", "dbm-sae")
#: Where in a layer an interchange acts: the residual stream after the block (MIB's track), the
#: MLP's input (after its norm) or the MLP's hidden units (its output projection's input).
CAUSAL_SITES = ("residual", "mlp-input", "mlp-neurons")
#: TransformerLens's hook name of each site after ``blocks.<l>.`` (SAELens's files give it).
CAUSAL_SITE_HOOKS = {"residual": "hook_resid_post", "mlp-input": "ln2.hook_normalized", "mlp-neurons": "mlp.hook_post"}
CAUSAL_RUN_FILE = "causal_run.json"
HITS_FILE = "hits.npz"
CAUSAL_RUN_FORMAT = "neuroneval-causal-run"

#: The options of a causal-variable run.
CAUSAL_OPTIONS = (
    Options(
        Option(
            "n_train",
            "integer",
            128,
            "pairs per counterfactual dataset that fit or train featurizers",
            low=1,
            metavar="N",
        ),
        Option("n_test", "integer", 64, "pairs per counterfactual dataset that IIA is reported on", low=1, metavar="N"),
        Option(
            "size",
            "integer",
            4,
            "features swapped by the neurons, pca and sae selections and the random subspace",
            low=1,
            metavar="K",
        ),
        Option(
            "site",
            "choice",
            "residual",
            "where in each layer the interchanges act: the residual stream after it, or its MLP's input "
            "(after the norm) or hidden units; an SAE read or trained for the run reads the same site",
            choices=CAUSAL_SITES,
        ),
        Option("epochs", "integer", 4, "passes over the training pairs that train DAS and DBM", low=1, metavar="N"),
        Option(
            "das_lr",
            "real",
            0.01,
            "DAS's learning rate (its size learns 10 times faster); a run of few steps needs more: "
            "about 0.04 for SmolLM2 at 8 steps",
            low=0.0,
            low_open=True,
            metavar="LR",
        ),
        Option(
            "batch_size",
            "integer",
            32,
            "pairs per plain pass and per training step (a dataset's test pairs run in one pass)",
            low=1,
            metavar="N",
        ),
    )
    + IIA_BOOTSTRAP_OPTIONS
)


#: The options of the SAEs a run trains when none is given (one per layer run, TopK, on the
#: residual stream at every position of prompts of the task drawn apart from the pairs).
CAUSAL_SAE_OPTIONS = Options(
    Option("sae_expansion", "integer", 4, "SAE latents per hidden value", low=1, metavar="N"),
    Option("sae_k", "integer", 32, "latents a TopK SAE keeps per vector", low=1, metavar="K"),
    Option("sae_prompts", "integer", 512, "task prompts whose hidden vectors train the SAEs", low=2, metavar="N"),
    Option("sae_epochs", "integer", 5, "passes over them", low=1, metavar="N"),
)
#: The options of the named models a run loads (`causal_track`; a model handed to
#: `evaluate_featurizers` runs as it is).
CAUSAL_MODEL_OPTIONS = Options(
    Option(
        "dtype",
        "choice",
        "float32",
        "the model's precision; bfloat16 runs about twice as fast on CPUs with AMX or AVX-512 BF16, "
        "several times slower on CPUs without them (a warning says so) "
        "(the featurizers compute in float32 either way)",
        choices=("float32", "bfloat16"),
    ),
)
#: The models a run knows and the tasks each runs (the first is the default).
CAUSAL_MODELS = {"smollm2": ("ioi", "arithmetic"), "planted": ("planted",)}


@dataclass(frozen=True)
class FeaturizerResult:
    """One featurizer on one variable: IIA per (layer, position) and its summaries."""

    featurizer: str
    variable: str
    unit_iia: np.ndarray
    average: float
    highest: float
    average_interval: tuple[float, float]
    highest_interval: tuple[float, float]
    #: Its share of the run's time: featurizers trained together (DAS, the DBMs) share their
    #: training equally, and all share their stacked tests (the sums are the run's totals).
    seconds: float
    #: The part of `seconds` spent fitting or training it.
    fit_seconds: float = 0.0
    #: Features each unit's interchange swaps (DAS's learned size, DBM's mask), [L, P].
    swapped: np.ndarray | None = None
    hits: dict[str, np.ndarray] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class CausalRun:
    """A run: model, task, the units it intervened on, the datasets and the results."""

    model: str
    task: str
    layers: tuple[int, ...]
    positions: tuple[str, ...]
    datasets: tuple[dict[str, Any], ...]
    results: tuple[FeaturizerResult, ...]
    options: dict[str, Any]

    def result(self, featurizer: str, variable: str) -> FeaturizerResult:
        for r in self.results:
            if r.featurizer == featurizer and r.variable == variable:
                return r
        raise KeyError(f"the run has no result for {featurizer!r} on {variable!r}")

    def to_json(self) -> dict[str, Any]:
        return {
            "format": CAUSAL_RUN_FORMAT,
            "version": 1,
            "model": self.model,
            "task": self.task,
            "layers": list(self.layers),
            "positions": list(self.positions),
            "datasets": list(self.datasets),
            "options": self.options,
            "results": [
                {
                    **{k: v for k, v in asdict(r).items() if k not in ("hits", "unit_iia", "swapped")},
                    "unit_iia": np.asarray(r.unit_iia).tolist(),
                    "swapped": None if r.swapped is None else np.asarray(r.swapped).tolist(),
                    "average_interval": list(r.average_interval),
                    "highest_interval": list(r.highest_interval),
                }
                for r in self.results
            ],
        }


def write_causal_run(run: CausalRun, out: str | os.PathLike[str]) -> list[Path]:
    """Write ``causal_run.json`` and ``hits.npz`` into `out` (created), atomically."""
    hits = {f"{r.featurizer}|{r.variable}|{name}": h for r in run.results for name, h in r.hits.items()}

    def write_hits(path: Path) -> None:
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **hits)  # type: ignore[arg-type]
        path.write_bytes(buffer.getvalue())

    text = json.dumps(run.to_json(), indent=1)
    return write_files_atomic(out, {CAUSAL_RUN_FILE: lambda p: p.write_text(text), HITS_FILE: write_hits})


def _field(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], where: Path) -> Any:
    value = obj.get(key)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise SourceError(f"{where}: {key!r} is missing or not a {getattr(kind, '__name__', kind)}")
    return value


def read_causal_run(directory: str | os.PathLike[str]) -> CausalRun:
    """The run written by `write_causal_run` in `directory` (hits are not read back).

    Raises
    ------
    SourceError
        No ``causal_run.json``, another format, or a field of the wrong type (named).
    """
    path = Path(directory) / CAUSAL_RUN_FILE
    obj = read_json(path)
    if not isinstance(obj, dict) or obj.get("format") != CAUSAL_RUN_FORMAT:
        raise SourceError(f"{path} is not a neuroneval causal run (format {CAUSAL_RUN_FORMAT!r})")
    results = []
    for r in _field(obj, "results", list, path):
        if not isinstance(r, dict):
            raise SourceError(f"{path}: a result is not an object")
        unit = np.asarray(_field(r, "unit_iia", list, path), dtype=np.float64)
        results.append(
            FeaturizerResult(
                _field(r, "featurizer", str, path),
                _field(r, "variable", str, path),
                unit,
                float(_field(r, "average", (int, float), path)),
                float(_field(r, "highest", (int, float), path)),
                tuple(float(v) for v in _field(r, "average_interval", list, path)),  # type: ignore[arg-type]
                tuple(float(v) for v in _field(r, "highest_interval", list, path)),  # type: ignore[arg-type]
                float(_field(r, "seconds", (int, float), path)),
                float(_field(r, "fit_seconds", (int, float), path)),
                None if r.get("swapped") is None else np.asarray(_field(r, "swapped", list, path), dtype=np.float64),
            )
        )
    return CausalRun(
        _field(obj, "model", str, path),
        _field(obj, "task", str, path),
        tuple(int(v) for v in _field(obj, "layers", list, path)),
        tuple(str(v) for v in _field(obj, "positions", list, path)),
        tuple(_field(obj, "datasets", list, path)),
        tuple(results),
        _field(obj, "options", dict, path),
    )


def causal_table(runs: list[CausalRun]) -> list[dict[str, Any]]:
    """One row per run, variable and featurizer (featurizers in `CAUSAL_FEATURIZERS` order),
    with the run's site."""
    rows = []
    for run in runs:
        order = {f: i for i, f in enumerate(CAUSAL_FEATURIZERS)}
        for r in sorted(run.results, key=lambda r: (r.variable, order.get(r.featurizer, len(order)))):
            rows.append(
                {
                    "model": run.model,
                    "task": run.task,
                    "site": run.options.get("site", "residual"),  # runs written before sites were named
                    "variable": r.variable,
                    "featurizer": r.featurizer,
                    "average": r.average,
                    "average_low": r.average_interval[0],
                    "average_high": r.average_interval[1],
                    "highest": r.highest,
                    "highest_low": r.highest_interval[0],
                    "highest_high": r.highest_interval[1],
                    "seconds": r.seconds,
                    "fit_seconds": r.fit_seconds,
                }
            )
    return rows


def format_causal_table(rows: list[dict[str, Any]]) -> str:
    """`causal_table`'s rows as aligned text."""
    head = (
        "model", "task", "site", "variable", "featurizer", "average IIA [interval]", "highest IIA [interval]", "seconds"
    )  # fmt: skip
    lines = [head]
    for r in rows:
        lines.append(
            (
                r["model"],
                r["task"],
                r["site"],
                r["variable"],
                r["featurizer"],
                f"{r['average']:.3f} [{r['average_low']:.3f}, {r['average_high']:.3f}]",
                f"{r['highest']:.3f} [{r['highest_low']:.3f}, {r['highest_high']:.3f}]",
                f"{r['seconds']:.1f}",
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines)
