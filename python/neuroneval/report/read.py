"""Reading a results directory (the contract is in `neuroneval.report`'s docstring): every part
checked as it is read, an error naming the file that breaks the contract."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from neuroneval import METRICS
from neuroneval.causal.results import CAUSAL_RUN_FILE, CausalRun, read_causal_run
from neuroneval.circuits.results import CIRCUIT_RUN_FILE, CircuitRun, find_circuit_runs, read_circuit_run
from neuroneval.compare import COMPARISON_FILES, COMPARISON_FORMAT
from neuroneval.errors import EmptyInputError, ParameterError, SourceError
from neuroneval.files import inside, read_json

#: Top-activating inputs shown per unit.
INPUTS_PER_UNIT = 8
#: The crowd target RCE when neither needed.csv nor report.json's crowd_target gives one.
DEFAULT_CROWD_TARGET = 0.275

SCORES = "scores.parquet"
TOP_INPUTS = "top_inputs.parquet"
INFO = "report.json"
_ONE_LAYER = "units"
_SANITY_COLUMNS = ("missing_experimental", "missing_theoretical", "extra_experimental", "extra_theoretical")


@dataclass
class Inputs:
    """``inputs/``: the probing set's images or texts (with the token to highlight per row)."""

    kind: str
    images: npt.NDArray[Any] | None = None
    texts: list[Any] | None = None
    tokens: list[Any] | None = None

    @property
    def count(self) -> int:
        if self.images is not None:
            return int(self.images.shape[0])
        return len(self.texts or [])


@dataclass
class Crowd:
    """``crowd/``: the RCE table, the ratings each configuration needs, and the target RCE."""

    rce: pl.DataFrame
    needed: pl.DataFrame
    target: float | None
    #: With rce-sequential.csv: every configuration of both files at its best raters per input,
    #: name (", sequential" for the second's), ratings (mean ratings spent per pair), rce, rce_se;
    #: and the ratings each sequential configuration needs (sampling, aggregation, needed, and
    #: its name as in `spent`).
    spent: pl.DataFrame | None = None
    sequential_needed: pl.DataFrame | None = None


@dataclass
class Compared:
    """A comparison of explainers (``neuroneval compare --out``, `Comparison.write`): its
    settings (comparison.json), summary and differences, read from `directory`."""

    directory: Path
    metrics: list[str]
    explainers: list[str]
    baselines: dict[str, str]
    confidence: float
    n_boot: int
    n_units: int
    n_inputs: int
    dead_units: int
    summary: pl.DataFrame
    differences: pl.DataFrame


@dataclass
class Results:
    """Everything a results directory holds, each optional part None when absent (the scores
    too, in a directory that holds a comparison)."""

    directory: Path
    scores: pl.DataFrame | None  # layer, unit, concept (strings) and the metric columns (floats)
    metrics: list[str]
    info: dict[str, Any]
    sanity: pl.DataFrame | None
    crowd: Crowd | None
    inputs: Inputs | None
    tops: pl.DataFrame | None
    comparison: Compared | None = None
    circuits: list[Circuit] = field(default_factory=list)
    causal: list[Causal] = field(default_factory=list)


@dataclass
class Circuit:
    """A circuit run (``neuroneval circuits run --out``, `CircuitRun.write`) and its directory."""

    directory: Path
    run: CircuitRun


@dataclass
class Causal:
    """A causal-variable run (``neuroneval causal run --out``, `write_causal_run`) and its directory."""

    directory: Path
    run: CausalRun


def read_results(results_dir: str | os.PathLike[str]) -> Results:
    """Read and check every part of `results_dir`."""
    directory = Path(results_dir)
    if not directory.exists():
        raise SourceError(f"results directory {directory} does not exist")
    if not directory.is_dir():
        raise ParameterError(f"{directory} is a file; expected a results directory (holding {SCORES})")
    comparison = _read_comparison(directory)
    circuits = _read_circuits(directory)
    causal = _read_causal(directory)
    scores: pl.DataFrame | None = None
    metrics: list[str] = []
    if (comparison is None and not circuits and not causal) or (directory / SCORES).is_file():
        scores, metrics = _read_scores(directory)
    info = _read_info(directory)
    return Results(
        directory=directory,
        scores=scores,
        metrics=metrics,
        info=info,
        sanity=_read_sanity(directory),
        crowd=_read_crowd(directory, info.get("crowd_target")),
        inputs=_read_inputs(directory),
        tops=_read_top_inputs(directory),
        comparison=comparison,
        circuits=circuits,
        causal=causal,
    )


def _read_info(directory: Path) -> dict[str, Any]:
    path = directory / INFO
    if not path.is_file():
        return {}
    info = read_json(path)
    if not isinstance(info, dict):
        raise SourceError(f"{path} must hold a JSON object (title, description, layers, crowd_target)")
    for key in ("title", "description"):
        if key in info and not isinstance(info[key], str):
            raise SourceError(f"{path}: {key!r} must be a string")
    if "layers" in info and not (
        isinstance(info["layers"], dict) and all(isinstance(v, str) for v in info["layers"].values())
    ):
        raise SourceError(f"{path}: 'layers' must map layer names to descriptions (strings)")
    target = info.get("crowd_target")
    if target is not None and not (
        isinstance(target, (int, float)) and not isinstance(target, bool) and math.isfinite(target) and target > 0
    ):
        raise SourceError(f"{path}: 'crowd_target' must be a positive number; got {target!r}")
    return info


def _read_parquet(path: Path) -> pl.DataFrame:
    try:
        return pl.read_parquet(path)
    except Exception as e:  # polars raises many kinds; all mean the file is unreadable
        raise SourceError(f"cannot read {path}: {_one_line(e)}") from e


def _read_csv(path: Path, schema: Mapping[str, Any] | None = None) -> pl.DataFrame:
    try:
        return pl.read_csv(path, schema_overrides=schema)
    except Exception as e:  # polars raises many kinds; all mean the file is unreadable
        raise SourceError(f"cannot read {path}: {_one_line(e)}") from e


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def _read_scores(directory: Path) -> tuple[pl.DataFrame, list[str]]:
    path = directory / SCORES
    if not path.is_file():
        raise SourceError(
            f"{directory} has no {SCORES} (nor a comparison's {COMPARISON_FILES['config']}, nor a circuit run's "
            f"{CIRCUIT_RUN_FILE}, nor a causal-variable run's {CAUSAL_RUN_FILE}), so it is not a results directory "
            "(neuroneval score --out, demo --out, compare --out, circuits run --out or causal run --out writes one)"
        )
    df = _read_parquet(path)
    missing = [c for c in ("unit", "concept") if c not in df.columns]
    if missing:
        raise SourceError(f"{path} lacks the column{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    metrics = [c for c in df.columns if c in METRICS]
    if not metrics:
        raise SourceError(f"{path} has no metric column (expected some of {', '.join(METRICS)})")
    for m in metrics:
        if not df.schema[m].is_numeric():
            raise SourceError(f"{path}: metric column {m!r} has type {df.schema[m]}; expected floats")
    layer = pl.col("layer").cast(pl.String) if "layer" in df.columns else pl.lit(_ONE_LAYER)
    df = df.select(
        layer.fill_null("(none)").alias("layer"),
        pl.col("unit").cast(pl.String).fill_null("(none)"),
        pl.col("concept").cast(pl.String).fill_null("(none)"),
        *[pl.col(m).cast(pl.Float64).fill_null(float("nan")) for m in metrics],
    )
    if df.height == 0:
        raise EmptyInputError(f"{path} has no rows")
    return df, metrics


def _read_sanity(directory: Path) -> pl.DataFrame | None:
    path = directory / "sanity" / "table.csv"
    if not path.is_file():
        return None
    schema = {"metric": pl.String, **{c: pl.Float64 for c in _SANITY_COLUMNS}, "passes": pl.Boolean}
    table = _read_csv(path, schema)
    missing = [c for c in schema if c not in table.columns]
    if missing:
        raise SourceError(f"{path} lacks the columns {', '.join(missing)}")
    return table.select(list(schema))


#: How the report names a configuration of the sequential simulation.
SEQUENTIAL_SUFFIX = ", sequential"


#: The columns of crowd/rce.csv and rce-sequential.csv and their types (each file holds some).
_RCE_SCHEMA = {
    "sampling": pl.String,
    "aggregation": pl.String,
    "raters": pl.Int64,
    "budget": pl.Float64,
    "rce": pl.Float64,
    "rce_se": pl.Float64,
    "ratings": pl.Float64,
}


def _read_crowd(directory: Path, target: float | None) -> Crowd | None:
    """crowd/, or None without rce.csv; with rce-sequential.csv (a simulation of sequential
    rating), the ratings spent of both."""
    fixed_path = directory / "crowd" / "rce.csv"
    if not fixed_path.is_file():
        return None
    fixed = _read_csv(fixed_path, _RCE_SCHEMA)
    crowd = _read_fixed_crowd(directory, fixed_path, fixed, target)
    path = directory / "crowd" / "rce-sequential.csv"
    if not path.is_file():
        return crowd
    from neuroneval.crowd import best_raters, configuration_name

    goal = DEFAULT_CROWD_TARGET if crowd.target is None else crowd.target
    frames, bests = [], []

    def named(table: pl.DataFrame, suffix: str) -> pl.DataFrame:
        names = [f"{configuration_name(s, a)}{suffix}" for s, a in table.select("sampling", "aggregation").iter_rows()]
        return table.with_columns(pl.Series("name", names, dtype=pl.String))

    for table_path, table, suffix in ((fixed_path, fixed, ""), (path, _read_csv(path, _RCE_SCHEMA), SEQUENTIAL_SUFFIX)):
        missing = [c for c in _RCE_SCHEMA if c not in table.columns]
        if missing:
            raise SourceError(f"{table_path} lacks the columns {', '.join(missing)} (of crowd.Simulation.rce)")
        best = best_raters(table, goal)
        bests.append(best)
        frames.append(named(best, suffix).select("name", "ratings", "rce", "rce_se"))
    spent = pl.concat(frames)
    sequential = named(_needed(bests[1].select("sampling", "aggregation", "budget", "rce"), goal), SEQUENTIAL_SUFFIX)
    return replace(crowd, spent=spent, sequential_needed=sequential)


def _read_fixed_crowd(directory: Path, path: Path, rce: pl.DataFrame, target: float | None) -> Crowd:
    """The crowd of `rce` (crowd/rce.csv, read from `path`) and crowd/needed.csv."""
    missing = [c for c in ("sampling", "aggregation", "budget", "rce") if c not in rce.columns]
    if missing:
        raise SourceError(f"{path} lacks the columns {', '.join(missing)}")
    if "rce_se" not in rce.columns:
        rce = rce.with_columns(pl.lit(float("nan")).alias("rce_se"))
    if "raters" in rce.columns:  # several raters per input: each configuration at its best
        from neuroneval.crowd import best_raters

        goal = DEFAULT_CROWD_TARGET if target is None else target
        rce = best_raters(rce, goal).select("sampling", "aggregation", "budget", "rce", "rce_se")
        return Crowd(rce, _needed(rce, goal), goal)
    rce = rce.select("sampling", "aggregation", "budget", "rce", "rce_se")
    needed_path = directory / "crowd" / "needed.csv"
    if needed_path.is_file():
        needed = _read_csv(needed_path, {"sampling": pl.String, "aggregation": pl.String, "needed": pl.Float64})
        if any(c not in needed.columns for c in ("sampling", "aggregation", "needed")):
            raise SourceError(f"{needed_path} must have the columns sampling, aggregation, needed")
        return Crowd(rce, needed.select("sampling", "aggregation", "needed"), target)
    goal = DEFAULT_CROWD_TARGET if target is None else target
    return Crowd(rce, _needed(rce, goal), goal)


def _needed(rce: pl.DataFrame, goal: float) -> pl.DataFrame:
    """`crowd.needed_budgets`, imported late: the report does not need the crowd module otherwise."""
    from neuroneval.crowd import needed_budgets

    return needed_budgets(rce, goal)


def _read_inputs(directory: Path) -> Inputs | None:
    meta_path = directory / "inputs" / "meta.json"
    if not meta_path.is_file():
        return None
    meta = read_json(meta_path)
    if not isinstance(meta, dict) or meta.get("kind") not in ("image", "text") or not isinstance(meta.get("file"), str):
        raise SourceError(f'{meta_path} must be {{"kind": "image" or "text", "file": NAME}}')
    path = inside(directory / "inputs", meta["file"], named_in=meta_path)
    if not path.is_file():
        raise SourceError(f"{path}, named in {meta_path}, does not exist")
    if meta["kind"] == "image":
        try:
            images = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError) as e:
            raise SourceError(f"{path} is not a .npy array: {e}") from e
        if (
            not (images.ndim == 3 or (images.ndim == 4 and images.shape[-1] in (1, 3)))
            or images.dtype.kind not in "fiu"
        ):
            raise SourceError(f"{path} must hold an (N, H, W) or (N, H, W, 3) array; got {images.shape} {images.dtype}")
        return Inputs("image", images=images)
    texts = read_json(path)
    if not isinstance(texts, list) or not all(
        isinstance(t, str) or (isinstance(t, list) and all(isinstance(s, str) for s in t)) for t in texts
    ):
        raise SourceError(f"{path} must hold a JSON list of strings or of token lists")
    tokens = meta.get("tokens")
    if tokens is not None and not (
        isinstance(tokens, list)
        and len(tokens) == len(texts)
        and all(t is None or (isinstance(t, int) and not isinstance(t, bool)) for t in tokens)
    ):
        raise SourceError(f"{meta_path}: 'tokens' must be a list of {len(texts)} token indices (or nulls)")
    return Inputs("text", texts=texts, tokens=tokens)


def _read_top_inputs(directory: Path) -> pl.DataFrame | None:
    path = directory / TOP_INPUTS
    if not path.is_file():
        return None
    df = _read_parquet(path)
    missing = [c for c in ("layer", "unit", "rank", "input", "activation") if c not in df.columns]
    if missing:
        raise SourceError(f"{path} lacks the columns {', '.join(missing)}")
    return df.select(
        pl.col("layer").cast(pl.String),
        pl.col("unit").cast(pl.String),
        pl.col("rank").cast(pl.Int64),
        pl.col("input").cast(pl.Int64),
        pl.col("activation").cast(pl.Float64),
    )


def _read_comparison(directory: Path) -> Compared | None:
    """The comparison in `directory` itself or in its ``compare/``: None without comparison.json."""
    where = next((d for d in (directory, directory / "compare") if (d / COMPARISON_FILES["config"]).is_file()), None)
    if where is None:
        return None
    path = where / COMPARISON_FILES["config"]
    config = read_json(path)
    if not isinstance(config, dict) or config.get("format") != COMPARISON_FORMAT:
        raise SourceError(f"{path} is not a comparison's settings (its 'format' must be {COMPARISON_FORMAT!r})")

    def field(key: str, ok: Any, expected: str) -> Any:
        value = config.get(key)
        if not ok(value):
            raise SourceError(f"{path}: {key!r} must be {expected}; it holds {value!r}")
        return value

    def strings(v: Any) -> bool:
        return isinstance(v, list) and bool(v) and all(isinstance(x, str) for x in v)

    def count(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    metrics = field("metrics", lambda v: strings(v) and all(m in METRICS for m in v), "a list of metric names")
    explainers = field("explainers", strings, "a list of explainer names")
    baselines = field(
        "baselines",
        lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
        "an object of baseline definitions",
    )
    confidence = field("confidence", lambda v: isinstance(v, float) and 0 < v < 1, "a number in (0, 1)")
    n_boot, n_units, n_inputs = (field(k, count, "a non-negative integer") for k in ("n_boot", "n_units", "n_inputs"))
    dead = field("dead_units", lambda v: isinstance(v, list) and all(count(x) for x in v), "a list of unit indices")
    per_metric = {"n": pl.Int64, "nan": pl.Int64, "rank": pl.Int64} | dict.fromkeys(
        ("mean", "median", "ci_low", "ci_high"), pl.Float64
    )
    summary_schema = {
        "explainer": pl.String,
        "baseline": pl.Boolean,
        **dict.fromkeys(
            ("units_total", "units_explained", "units_unexplained", "units_dead", "pairs_with_nan"), pl.Int64
        ),
        **{f"{m}_{k}": t for m in metrics for k, t in per_metric.items()},
    }
    difference_schema = {
        "explainer_a": pl.String,
        "explainer_b": pl.String,
        "metric": pl.String,
        "n_units": pl.Int64,
        **dict.fromkeys(("mean_difference", "ci_low", "ci_high", "win_rate", "tie_rate"), pl.Float64),
    }
    tables = []
    for name, schema in (("summary", summary_schema), ("differences", difference_schema)):
        table_path = where / COMPARISON_FILES[name]
        if not table_path.is_file():
            raise SourceError(f"{table_path} is missing (the comparison's {path.name} names it)")
        table = _read_csv(table_path, schema)
        missing = [c for c in schema if c not in table.columns]
        if missing:
            raise SourceError(f"{table_path} lacks the columns {', '.join(missing)}")
        tables.append(table.select(list(schema)))
    summary, differences = tables
    if sorted(summary["explainer"].to_list()) != sorted(explainers):
        raise SourceError(f"{where / COMPARISON_FILES['summary']} does not list the explainers of {path}")
    return Compared(
        where, metrics, explainers, baselines, confidence, n_boot, n_units, n_inputs, len(dead), summary, differences
    )


def _read_circuits(directory: Path) -> list[Circuit]:
    """The circuit runs of `directory`: itself when it holds circuit_run.json, else each of its
    subdirectories that does and, the same way, its ``circuits/`` (each checked, an error naming
    the file)."""
    found = find_circuit_runs(directory)
    if not (directory / CIRCUIT_RUN_FILE).is_file():
        found += find_circuit_runs(directory / "circuits")
    return [Circuit(d, read_circuit_run(d)) for d in dict.fromkeys(found)]


def _find_causal_runs(directory: Path) -> list[Path]:
    """`directory` when it holds causal_run.json, else its subdirectories that do, by name."""
    if (directory / CAUSAL_RUN_FILE).is_file():
        return [directory]
    if not directory.is_dir():
        return []
    return sorted(d for d in directory.iterdir() if d.is_dir() and (d / CAUSAL_RUN_FILE).is_file())


def _read_causal(directory: Path) -> list[Causal]:
    """The causal-variable runs of `directory`, found as `_read_circuits` finds circuit runs (itself,
    else its subdirectories, and the same way its ``causal/``), each checked, an error naming the file."""
    found = _find_causal_runs(directory)
    if not (directory / CAUSAL_RUN_FILE).is_file():
        found += _find_causal_runs(directory / "causal")
    return [Causal(d, _read_causal_run(d)) for d in dict.fromkeys(found)]


def _read_causal_run(directory: Path) -> CausalRun:
    """`read_causal_run`, and what the page relies on: each result's IIA a (layers, positions)
    array, each interval two numbers."""
    path = directory / CAUSAL_RUN_FILE
    try:
        run = read_causal_run(directory)
    except SourceError:
        raise
    except (ValueError, TypeError) as e:  # a ragged or non-numeric array, read by numpy
        raise SourceError(f"{path}: a number or an array of numbers is malformed ({_one_line(e)})") from e
    shape = (len(run.layers), len(run.positions))
    for r in run.results:
        where = f"{path}: the result of {r.featurizer!r} on {r.variable!r}"
        if r.unit_iia.shape != shape:
            raise SourceError(f"{where} has IIA of shape {r.unit_iia.shape}; expected (layers, positions) = {shape}")
        if len(r.average_interval) != 2 or len(r.highest_interval) != 2:
            raise SourceError(f"{where} has an interval that is not two numbers")
    return run
