"""The page of a results directory: what each part shows, rendered with jinja2 from the
package's ``templates/`` (HTML autoescaped) with ``static/report.css`` and ``report.js`` inlined."""

from __future__ import annotations

import base64
import math
import os
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
import polars as pl
from markupsafe import Markup

from neuroneval import METRICS, PASSING_METRICS, __version__
from neuroneval.causal.results import CAUSAL_FEATURIZERS, causal_table
from neuroneval.circuits.results import CRITERIA, best_marks, circuit_table, run_labels
from neuroneval.errors import ParameterError, SourceError
from neuroneval.files import write_atomic

from .charts import (
    Histogram,
    configuration,
    faithfulness_chart,
    featurizer_colours,
    histogram,
    iia_chart,
    interval_chart,
    method_colour,
    png_uri,
    rce_chart,
)
from .read import (
    _SANITY_COLUMNS,
    INPUTS_PER_UNIT,
    SCORES,
    TOP_INPUTS,
    Causal,
    Circuit,
    Compared,
    Crowd,
    Inputs,
    Results,
    read_results,
)

#: Units listed per layer; a larger layer lists its best-explained units, with a note.
MAX_UNITS = 100
#: The metrics the page shows, in this order, when present: those the paper found trustworthy.
TRUSTWORTHY: tuple[str, ...] = tuple(
    sorted(PASSING_METRICS, key=lambda m: ("correlation", "cosine", "auprc", "f1", "iou", m).index(m))
)

_PASS_LEVEL = 90.0  # sanity.PASS_LEVEL, without importing the sanity module's dependencies
_TEXT_WINDOW = 12  # tokens shown on each side of a highlighted token
_TEXT_CHARS = 160  # characters shown of a row without a highlight
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_PACKAGE = __name__.rpartition(".")[0]  # neuroneval.report, whose templates/ and static/ the page reads


def write_report(
    results_dir: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    max_units: int = MAX_UNITS,
    inputs_per_unit: int = INPUTS_PER_UNIT,
) -> Path:
    """Write the page of `results_dir` to `out` (default ``results_dir/report.html``), atomically.

    Returns the path written. See `render_report` for the options.
    """
    page = render_report(results_dir, max_units=max_units, inputs_per_unit=inputs_per_unit)
    path = Path(results_dir) / "report.html" if out is None else Path(out)
    data = page.encode("utf-8")
    return write_atomic(path, lambda p: p.write_bytes(data))


def render_report(
    results_dir: str | os.PathLike[str], *, max_units: int = MAX_UNITS, inputs_per_unit: int = INPUTS_PER_UNIT
) -> str:
    """The HTML page of `results_dir` (see `neuroneval.report`'s docstring for what it reads), as text.

    `max_units` caps each layer's unit table (a larger layer lists its `max_units`
    best-explained units, best first, and says so); `inputs_per_unit` caps the top inputs
    shown per unit.
    """
    for value, name in ((max_units, "max_units"), (inputs_per_unit, "inputs_per_unit")):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ParameterError(f"{name} must be a positive integer; got {value!r}")
    results = read_results(results_dir)
    return _ENV.get_template("page.html.j2").render(_Page(results, max_units, inputs_per_unit).context())


# --------------------------------------------------------------------------- templates


def _template_source(name: str) -> str | None:
    """The text of ``templates/<name>``, read through importlib.resources (None: no such template)."""
    path = resources.files(_PACKAGE).joinpath("templates")
    for part in name.split("/"):
        path = path.joinpath(part)
    return path.read_text(encoding="utf-8") if path.is_file() else None


def _static(name: str) -> Markup:
    """``static/<name>`` (CSS or script), inlined into the page as it is."""
    text = resources.files(_PACKAGE).joinpath("static").joinpath(name).read_text(encoding="utf-8")
    return Markup(text.strip("\n"))


def _fmt(value: Any, spec: str) -> str:
    return format(value, spec)


def _coord(value: Any) -> str:
    """An SVG coordinate: an int as it is, a float with one decimal."""
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def _counted(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


_ENV = jinja2.Environment(
    loader=jinja2.FunctionLoader(_template_source),
    autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2",), default_for_string=True, default=True),
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)
_ENV.filters.update(fmt=_fmt, coord=_coord, counted=_counted)
_ENV.tests["missing"] = _missing


def _snippet(row: str | list[str], mark: int | None) -> str:
    """A text row's markup, the `mark`-th token highlighted (see `_snippet_parts`)."""
    return str(_ENV.get_template("macros.html.j2").module.snippet(_snippet_parts(row, mark)))  # type: ignore[attr-defined]


def _snippet_parts(row: str | list[str], mark: int | None) -> tuple[str, str | None, str]:
    """(text before, highlighted token, text after) of a row of text: a string (its
    whitespace-separated words the tokens) or a list of tokens carrying their own spaces. Long
    rows are cut to _TEXT_WINDOW tokens around the mark, or to _TEXT_CHARS without one."""
    if isinstance(row, str):
        if mark is None:
            return (row if len(row) <= _TEXT_CHARS else row[: _TEXT_CHARS - 1] + "\u2026"), None, ""
        words = row.split()
        tokens = [w + " " for w in words[:-1]] + words[-1:]
    else:
        tokens = list(row)
        if mark is None:
            text = "".join(tokens)
            return (text if len(text) <= _TEXT_CHARS else text[: _TEXT_CHARS - 1] + "\u2026"), None, ""
    if not 0 <= mark < len(tokens):
        return "".join(tokens)[:_TEXT_CHARS], None, ""
    lo, hi = max(0, mark - _TEXT_WINDOW), min(len(tokens), mark + _TEXT_WINDOW + 1)
    before = ("\u2026" if lo > 0 else "") + "".join(tokens[lo:mark])
    after = "".join(tokens[mark + 1 : hi]) + ("\u2026" if hi < len(tokens) else "")
    token = tokens[mark]
    word = token.strip()  # a token's own spaces stay outside the mark
    lead = token[: len(token) - len(token.lstrip())]
    trail = token[len(token.rstrip()) :]
    return before + lead, word, trail + after


# --------------------------------------------------------------------------- what the page shows


def _metric_label(m: str) -> str:
    return {"auprc": "AUPRC", "f1": "F1", "iou": "IoU"}.get(m, m)


def _range(m: str) -> str:
    r = METRICS[m].value_range
    return "data-dependent" if r is None else f"[{r[0]:g}, {r[1]:g}]"


def _score(m: str, v: float | None) -> tuple[float, float | None] | None:
    """A score cell: the value and, for a bounded metric, the share of its range's positive
    part under the number as a bar; None when undefined."""
    if v is None or math.isnan(v):
        return None
    r = METRICS[m].value_range
    return (v, None) if r is None else (v, min(1.0, max(0.0, v / r[1])))


def _number_text(v: Any, digits: int) -> str:
    return "NaN" if _missing(v) else f"{v:.{digits}f}"


@dataclass
class _InputItem:
    kind: str  # "image", "text" or "chip" (the index only)
    index: int
    label: str
    uri: str = ""
    snippet: tuple[str, str | None, str] = ("", None, "")


@dataclass
class _UnitRow:
    unit: str
    best: str | None  # the best explanation's concept
    runner: tuple[str, float] | None  # the next best concept and its score
    cells: list[tuple[float, float | None] | None]
    inputs: list[_InputItem]


@dataclass
class _LayerView:
    name: str
    anchor: str
    n_units: int
    n_concepts: int
    description: str | None
    histograms: list[tuple[str, Histogram]]
    undefined: int  # units without a defined best metric
    capped: bool
    rows: list[_UnitRow]
    with_inputs: bool
    tops_missing: bool


@dataclass
class _FileImage:
    uri: str
    alt: str
    name: str


class _Page:
    def __init__(self, results: Results, max_units: int, inputs_per_unit: int) -> None:
        self.results = results
        self.directory = results.directory
        self.scores = results.scores
        self.metrics = results.metrics
        self.info = results.info
        self.sanity = results.sanity
        self.inputs = results.inputs
        tops = results.tops
        self.tops = None if tops is None else tops.filter(pl.col("rank") < inputs_per_unit)
        self.max_units = max_units
        self.shown = [m for m in TRUSTWORTHY if m in self.metrics] or list(self.metrics)
        self.best_metric = "correlation" if "correlation" in self.metrics or not self.metrics else self.metrics[0]
        sanity = self.sanity
        self.passing_here: set[str] = (
            set() if sanity is None else set(sanity.filter(pl.col("passes").fill_null(False))["metric"].to_list())
        )
        self.tested: set[str] = set() if sanity is None else set(sanity["metric"].to_list())

    def context(self) -> dict[str, Any]:
        """The template's values, each part built (and checked) in page order."""
        name = self.directory.resolve().name
        title = self.info.get("title") or f"neuroneval report: {name}"
        compared = self.results.comparison
        scores = self.scores
        if scores is None:  # a comparison's directory: no scores.parquet
            scores = pl.DataFrame(schema={"layer": pl.String, "unit": pl.String, "concept": pl.String})
        n_units = scores.select(pl.struct("layer", "unit").n_unique()).item() if scores.height else 0
        parts = scores.partition_by("layer", maintain_order=True) if scores.height else []
        circuits = self.results.circuits
        causal = self.results.causal
        if self.scores is None and compared is not None:
            default = (
                f"A comparison of {_counted(len(compared.explainers), 'explainer')} of {compared.n_units:,} units "
                f"over {compared.n_inputs:,} inputs."
            )
        elif self.scores is None and (circuits or causal):
            tracks: list[tuple[list[tuple[str, str]], str, str]] = [
                ([(c.run.model, c.run.task) for c in circuits], "circuit-localization run", "MIB's circuit track"),
                ([(c.run.model, c.run.task) for c in causal], "causal-variable run", "MIB's causal-variable track"),
            ]
            default = " ".join(
                f"{_counted(len(runs), noun)} ({track}): "
                + ", ".join(dict.fromkeys(f"{model}/{task}" for model, task in runs))
                + "."
                for runs, noun, track in tracks
                if runs
            )
        else:
            default = f"Scores of explanations (concepts) of {n_units:,} units in {_counted(len(parts), 'layer')}."
        description = self.info.get("description") or default
        layers = [self._layer(i, str(part["layer"][0]), part.with_row_index("_row")) for i, part in enumerate(parts)]
        return {
            "title": title,
            "description": description,
            "css": _static("report.css"),
            "script": _static("report.js"),
            "n_metrics_known": len(METRICS),
            "trustworthy": [_metric_label(m) for m in TRUSTWORTHY],
            "trusted": [_metric_label(m) for m in TRUSTWORTHY if m in self.metrics],
            "has_scores": self.scores is not None,
            "n_units": n_units,
            "n_concepts": scores["concept"].n_unique(),
            "n_pairs": scores.height,
            "n_metrics": len(self.metrics),
            "n_nan": sum(int(scores[m].is_nan().sum()) for m in self.metrics),
            "definitions": [
                {"metric": m, "description": METRICS[m].description, "range": _range(m)} for m in self.shown
            ],
            "layers": layers,
            "shown": self.shown,
            "best_metric": self.best_metric,
            "failing": self.tested - self.passing_here,
            "sanity": self._sanity(),
            "crowd": None if self.results.crowd is None else self._crowd(self.results.crowd),
            "comparison": None if compared is None else self._comparison(compared),
            "circuits": _circuits(circuits, self.directory) if circuits else None,
            "causal": _causal(causal, self.directory) if causal else None,
            "pass_level": _PASS_LEVEL,
            "scores_file": SCORES,
            "tops_file": TOP_INPUTS,
            "version": __version__,
            "directory_name": name,
        }

    def _anchor(self, i: int, name: str) -> str:
        return f"layer-{i}-" + (re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-")[:40] or "x")

    # -- a layer

    def _layer(self, i: int, name: str, df: pl.DataFrame) -> _LayerView:
        """One layer (its rows with a _row column, the row order within the layer)."""
        units = df["unit"].unique(maintain_order=True)
        n_units = units.len()
        best_m = self.best_metric
        ranked = (
            df.filter(pl.col(best_m).is_not_nan())
            .sort([best_m, "_row"], descending=[True, False])
            .with_columns(pl.int_range(pl.len()).over("unit").alias("_k"))
            .filter(pl.col("_k") < 2)
        )
        best = ranked.filter(pl.col("_k") == 0)
        second = {r["unit"]: r for r in ranked.filter(pl.col("_k") == 1).iter_rows(named=True)}
        capped = n_units > self.max_units
        shown_units = best["unit"].head(self.max_units).to_list() if capped else units.to_list()
        best_rows = {r["unit"]: r for r in best.filter(pl.col("unit").is_in(shown_units)).iter_rows(named=True)}
        histograms = self._histograms(df)
        tops = self._tops_for(name, shown_units) if self.tops is not None else {}
        rows = []
        for u in shown_units:
            row = best_rows.get(u)
            nxt = second.get(u)
            rows.append(
                _UnitRow(
                    unit=u,
                    best=None if row is None else row["concept"],
                    runner=None if row is None or nxt is None else (nxt["concept"], nxt[best_m]),
                    cells=[] if row is None else [_score(m, row[m]) for m in self.shown],
                    inputs=tops.get(u, []),
                )
            )
        return _LayerView(
            name=name,
            anchor=self._anchor(i, name),
            n_units=n_units,
            n_concepts=df["concept"].n_unique(),
            description=(self.info.get("layers") or {}).get(name),
            histograms=histograms,
            undefined=n_units - best.height,
            capped=capped,
            rows=rows,
            with_inputs=bool(tops),
            tops_missing=self.tops is not None and not tops,
        )

    def _histograms(self, df: pl.DataFrame) -> list[tuple[str, Histogram]]:
        per_unit = df.group_by("unit").agg([pl.col(m).fill_nan(None).max() for m in self.shown])
        out = []
        for m in self.shown:
            col = df[m].to_numpy()
            values = col[~np.isnan(col)]
            unit_best = per_unit[m].drop_nulls().to_numpy().astype(np.float64)
            out.append((m, histogram(m, values, unit_best, int(col.size - values.size))))
        return out

    def _tops_for(self, layer: str, units: list[str]) -> dict[str, list[_InputItem]]:
        assert self.tops is not None
        rows = self.tops.filter((pl.col("layer") == layer) & pl.col("unit").is_in(units)).sort("unit", "rank")
        if self.inputs is not None and rows.height:
            highest = int(rows["input"].max())  # type: ignore[arg-type]
            lowest = int(rows["input"].min())  # type: ignore[arg-type]
            if lowest < 0 or highest >= self.inputs.count:
                bad = lowest if lowest < 0 else highest
                raise SourceError(
                    f"{self.directory / TOP_INPUTS} names input {bad} of layer {layer!r}, but inputs/ holds "
                    f"{self.inputs.count:,} inputs (0..{self.inputs.count - 1})"
                )
        out: dict[str, list[_InputItem]] = {}
        for unit, index, activation in rows.select("unit", "input", "activation").iter_rows():
            label = f"input {index:,}: activation {_number_text(activation, 4)}"
            out.setdefault(unit, []).append(_input(self.inputs, index, label))
        return out

    # -- sanity checks and crowd simulation

    def _sanity(self) -> dict[str, Any] | None:
        if self.sanity is None:
            return None
        tested = self.sanity["metric"].to_list()
        rows = [
            {
                "metric": r["metric"],
                "cells": [r[c] for c in _SANITY_COLUMNS],
                "passes": bool(r["passes"]),
                "paper": ""
                if r["metric"] not in METRICS
                else ("pass" if METRICS[r["metric"]].passes_sanity else "fail"),
            }
            for r in self.sanity.iter_rows(named=True)
        ]
        return {
            "tested": tested,
            "passing": [m for m in tested if m in self.passing_here],
            "failing_paper": [m for m in TRUSTWORTHY if m in tested and m not in self.passing_here],
            "columns": [c.replace("_", " ") for c in _SANITY_COLUMNS],
            "rows": rows,
            "chart": _file_image(self.directory / "sanity" / "chart.png", "the sanity checks' Decrease Acc per metric"),
        }

    def _crowd(self, crowd: Crowd) -> dict[str, Any]:
        last = crowd.rce.sort("budget").group_by("sampling", "aggregation", maintain_order=True).last()
        at_last = {(r["sampling"], r["aggregation"]): r for r in last.iter_rows(named=True)}
        rows = []
        for r in crowd.needed.iter_rows(named=True):
            key = (r["sampling"], r["aggregation"])
            n = r["needed"]
            rows.append(
                {
                    "name": configuration(*key),
                    "needed": n if n is not None and math.isfinite(n) else None,
                    "end": at_last.get(key),
                }
            )
        png = self.directory / "crowd" / "rce.png"
        image = _file_image(png, "relative correlation error against ratings per pair") if png.is_file() else None
        sequential = []
        for r in [] if crowd.sequential_needed is None else crowd.sequential_needed.iter_rows(named=True):
            n = r["needed"]
            sequential.append({"name": r["name"], "needed": n if n is not None and math.isfinite(n) else None})
        spent = None
        if crowd.spent is not None:
            spent = rce_chart(
                crowd.spent, crowd.target, x_column="ratings", x_label="ratings spent per (unit, explanation) pair"
            )
        return {
            "target": crowd.target,
            "rows": rows,
            "sequential": sequential,
            "image": image,
            "chart": None if image is not None else rce_chart(crowd.rce, crowd.target),
            "spent": spent,
        }

    def _comparison(self, c: Compared) -> dict[str, Any]:
        """Per metric: the chart and the ranking (best mean first), and the paired differences."""
        coverage = c.summary.select(
            "explainer", "baseline", "units_explained", "units_unexplained", "units_dead", "pairs_with_nan"
        ).to_dicts()
        blocks = []
        for m in c.metrics:
            ordered = c.summary.sort(f"{m}_rank")
            rows = [
                {
                    "rank": r[f"{m}_rank"],
                    "explainer": r["explainer"],
                    "baseline": r["baseline"],
                    "n": r[f"{m}_n"],
                    "nan": r[f"{m}_nan"],
                    "mean": r[f"{m}_mean"],
                    "median": r[f"{m}_median"],
                    "low": r[f"{m}_ci_low"],
                    "high": r[f"{m}_ci_high"],
                }
                for r in ordered.iter_rows(named=True)
            ]
            chart_rows = [(r["explainer"], r["mean"], r["low"], r["high"], r["baseline"]) for r in rows]
            blocks.append(
                {
                    "metric": m,
                    "label": _metric_label(m),
                    "anchor": "compare-" + re.sub(r"[^A-Za-z0-9_-]+", "-", m),
                    "rows": rows,
                    "chart": interval_chart(m, chart_rows, c.confidence),
                    "differences": c.differences.filter(pl.col("metric") == m).to_dicts(),
                }
            )
        return {
            "explainers": c.explainers,
            "baselines": [{"name": k, "definition": v} for k, v in c.baselines.items()],
            "level": f"{100 * c.confidence:g}%",
            "n_boot": c.n_boot,
            "n_units": c.n_units,
            "n_inputs": c.n_inputs,
            "dead_units": c.dead_units,
            "coverage": coverage,
            "blocks": blocks,
            "location": "" if c.directory == self.directory else c.directory.name + "/",
        }


def _circuits(circuits: list[Circuit], directory: Path) -> dict[str, Any]:
    """The CPR/CMD table of every run (best per column marked), then per run its facts, its
    summary table and its two faithfulness charts (signed, absolute)."""
    runs = [c.run for c in circuits]
    labels = run_labels(runs, [c.directory.name for c in circuits])
    table = circuit_table(runs, labels)
    marks = best_marks(table)
    rows = [
        {
            "method": method,
            "cells": [{"value": table[col][i], "best": marks[col][i]} for col in table.columns[1:]],
        }
        for i, method in enumerate(table["method"].to_list())
    ]
    blocks = []
    for i, (c, label) in enumerate(zip(circuits, labels, strict=True)):
        run = c.run
        charts = []
        for criterion in CRITERIA:
            curves = [
                (m.method, m.faithfulness(run.full, run.empty, criterion), m.edges(criterion)) for m in run.methods
            ]
            charts.append(faithfulness_chart(criterion, run.fractions, curves))
        blocks.append(
            {
                "label": label,
                "anchor": f"circuits-run-{i}",
                "run": run,
                "n_edges": run.graph().n_edges,
                "location": "" if c.directory == directory else str(c.directory.relative_to(directory)) + "/",
                "summary": run.summary().to_dicts(),
                "colours": {m: method_colour(m, j) for j, m in enumerate(run.method_names)},
                "charts": charts,
            }
        )
    return {"labels": labels, "rows": rows, "blocks": blocks}


def _causal(causal: list[Causal], directory: Path) -> dict[str, Any]:
    """The table of every run's (variable, featurizer) results, then per run its facts and one
    IIA-per-layer chart per variable (featurizers in `CAUSAL_FEATURIZERS` order)."""
    labels = [f"{c.run.model}/{c.run.task}" for c in causal]
    labels = [f"{x} [{c.directory.name}]" if labels.count(x) > 1 else x for x, c in zip(labels, causal, strict=True)]
    order = {f: i for i, f in enumerate(CAUSAL_FEATURIZERS)}
    rows, blocks = [], []
    for i, (c, label) in enumerate(zip(causal, labels, strict=True)):
        run = c.run
        anchor = f"causal-run-{i}"
        featurizers = sorted(dict.fromkeys(r.featurizer for r in run.results), key=lambda f: order.get(f, len(order)))
        colours = featurizer_colours(featurizers)
        table = causal_table([run])
        rows += [{**r, "label": label, "anchor": anchor, "colour": colours[r["featurizer"]]} for r in table]
        charts = []
        for variable in dict.fromkeys(r["variable"] for r in table):
            curves = [
                (f, run.result(f, variable).unit_iia)
                for f in featurizers
                if any(r.featurizer == f and r.variable == variable for r in run.results)
            ]
            charts.append({"variable": variable, "chart": iia_chart(variable, run.layers, run.positions, curves)})
        level = run.options.get("level")
        blocks.append(
            {
                "label": label,
                "anchor": anchor,
                "run": run,
                "location": "" if c.directory == directory else str(c.directory.relative_to(directory)) + "/",
                "featurizers": featurizers,
                "variables": [ch["variable"] for ch in charts],
                "colours": colours,
                "options": [(k, v) for k, v in run.options.items() if not isinstance(v, (dict, list))],
                "datasets": [_dataset_text(d) for d in run.datasets],
                "level": f"{100 * level:g}%"
                if isinstance(level, (int, float)) and not isinstance(level, bool)
                else None,
                "charts": charts,
            }
        )
    levels = {b["level"] for b in blocks}
    return {
        "labels": labels,
        "rows": rows,
        "level": levels.pop() if len(levels) == 1 else None,
        "blocks": blocks,
    }


def _dataset_text(d: Any) -> str:
    """A counterfactual dataset of a causal run as the run describes it: its name, then its other facts."""
    if not isinstance(d, dict):
        return str(d)
    facts = ", ".join(f"{k} {v}" for k, v in d.items() if k != "name")
    return f"{d.get('name', '?')} ({facts})" if facts else str(d.get("name", "?"))


def _input(inputs: Inputs | None, index: int, label: str) -> _InputItem:
    """How the page shows input `index`: its image, its text, or (without inputs/) its index."""
    if inputs is None:
        return _InputItem("chip", index, label)
    if inputs.images is not None:
        return _InputItem("image", index, label, uri=png_uri(np.asarray(inputs.images[index])))
    texts, tokens = inputs.texts or [], inputs.tokens
    mark = None if tokens is None else tokens[index]
    return _InputItem("text", index, label, snippet=_snippet_parts(texts[index], mark))


def _file_image(path: Path, alt: str) -> _FileImage | None:
    """A PNG file of the results directory as a data URI; None when absent."""
    if not path.is_file():
        return None
    data = path.read_bytes()
    if not data.startswith(_PNG_MAGIC):
        raise SourceError(f"{path} is not a PNG image")
    return _FileImage("data:image/png;base64," + base64.b64encode(data).decode("ascii"), alt, path.name)
