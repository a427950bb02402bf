"""Helpers the digits and text demos and the reproduction share.

Both demos (`neuroneval.experiments.digits`, `neuroneval.experiments.text_demo`) and
`neuroneval.experiments.reproduce` import this module; it imports none of them, so the
experiments form no import circle.

Examples
--------
>>> spread_pairs([0.1, 0.9, 0.3, 0.5, 0.7], count=3).tolist()
[2, 3, 1]
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

import neuroneval.crowd
from neuroneval import report
from neuroneval.files import write_atomic

__all__ = [
    "CROWD_TARGET",
    "PAPER_MODEL_RCE",
    "PAPER_NEEDED",
    "crowd_summary",
    "spread_pairs",
    "write_crowd",
    "write_page",
]


def spread_pairs(rho: npt.ArrayLike, count: int = 20, min_rho: float = 0.25) -> npt.NDArray[np.int64]:
    """Indices of `count` values of `rho` >= `min_rho`, spread evenly over them in sorted order
    (all of them when fewer): the crowd simulations' "realistic correlations".

    Examples
    --------
    >>> spread_pairs([0.1, 0.9, 0.3, 0.5, 0.7], count=3).tolist()
    [2, 3, 1]
    """
    values = np.asarray(rho, dtype=np.float64)
    kept = np.flatnonzero(values >= min_rho)
    ranked = kept[np.argsort(values[kept], kind="stable")]
    return ranked[np.linspace(0, ranked.size - 1, min(count, ranked.size)).astype(np.int64)]


#: The crowd simulations' target: a relative correlation error of 27.5%, as in the paper.
CROWD_TARGET = 0.275
#: Ratings per pair the CVPR paper's simulation needed to reach RCE 27.5% (SPEC section 6).
PAPER_NEEDED: dict[tuple[str, str], int] = {
    ("uniform", "majority"): 22_560,
    ("uniform", "bragg"): 14_607,
    ("mgis", "majority"): 1_760,
    ("mgis", "bragg"): 550,
}
#: The paper's RCE of its concept model (SigLIP) alone, without a rating.
PAPER_MODEL_RCE = 0.321


def crowd_summary(simulation: neuroneval.crowd.Simulation, paper: bool = True) -> list[str]:
    """The crowd table: for each configuration its cheapest ratings per pair to reach the target,
    with the (raters per input, inputs) that achieve it and the ratio against uniform + majority
    at its own best raters; the concept model alone first; the paper's figures with `paper`.

    A configuration that never reaches the target within the grid is reported as "not within"
    the largest budget, with the lowest RCE it had there, and enters no ratio: its "saving"
    would be the end of the grid over a number, not a comparison of two costs.
    """
    cheapest = simulation.cheapest()
    largest = max(simulation.budgets)
    base = cheapest.filter(sampling="uniform", aggregation="majority")
    base_needed = base["needed"][0] if base.height else None
    head = (
        f"    {'configuration':<22} {'raters':>6} {'inputs':>7} {'ratings per pair':>17} {'vs uniform + majority':>22}"
    )
    lines = [head + (f"  {'paper':>7}" if paper else "")]
    model = f"RCE {simulation.model_rce:.3f}" if math.isfinite(simulation.model_rce) else "undefined"
    lines.append(
        f"    {'concept model alone':<22} {'-':>6} {0:>7} {0:>17} {model:>22}"
        + (f"  {'RCE ' + format(PAPER_MODEL_RCE, '.3f'):>7}" if paper else "")
    )
    never = []
    for row in cheapest.iter_rows(named=True):
        key = (row["sampling"], row["aggregation"])
        name = neuroneval.crowd.configuration_name(*key)
        published = f"  {PAPER_NEEDED[key]:>7,}" if paper and key in PAPER_NEEDED else ("  " + " " * 7 if paper else "")
        if row["needed"] is None:
            at_end = simulation.rce.filter(sampling=key[0], aggregation=key[1], budget=largest).sort("rce")
            floor = at_end.row(0, named=True)
            never.append(name)
            lines.append(
                f"    {name:<22} {floor['raters']:>6} {'-':>7} {'> ' + format(largest, ','):>17}"
                f" {'RCE ' + format(floor['rce'], '.3f') + ' at the end':>22}{published}"
            )
            continue
        ratio = f"{base_needed / row['needed']:.1f}x" if base_needed is not None else "-"
        lines.append(
            f"    {name:<22} {row['raters']:>6} {row['inputs']:>7,.0f} {row['needed']:>17,.0f} {ratio:>22}{published}"
        )
    if never:
        lines.append(
            f"{' and '.join(never)} never reach{'es' if len(never) == 1 else ''} RCE {simulation.target:g} within"
            f" {largest:,} ratings per pair at any of {', '.join(map(str, simulation.raters))} raters per input"
            f" (shown: the lowest RCE at {largest:,}), so no ratio is taken against "
            f"{'it' if len(never) == 1 else 'them'}."
        )
    return [line.rstrip() for line in lines]


def sequential_summary(sequential: neuroneval.crowd.Simulation, fixed: neuroneval.crowd.Simulation) -> list[str]:
    """The crowd table of a sequential-rating simulation: each configuration's cheapest ratings
    per pair to reach the target (at its best cap on raters per input), the ratio against the
    fixed simulation's uniform + majority at its best raters, and the bias (with its standard
    error) and interval coverage at the first grid budget at or above the ratings needed."""
    base = fixed.cheapest().filter(sampling="uniform", aggregation="majority")
    base_needed = base["needed"][0] if base.height else None
    head = f"    {'configuration':<22} {'cap':>4} {'inputs':>7} {'ratings per pair':>17} {'vs uniform + majority':>22}"
    lines = [head + f"  {'bias (se), coverage at the grid budget':>40}"]
    for row in sequential.cheapest().iter_rows(named=True):
        name = neuroneval.crowd.configuration_name(row["sampling"], row["aggregation"])
        grid = sequential.rce.filter(sampling=row["sampling"], aggregation=row["aggregation"])
        if row["needed"] is None:
            at_end = grid.filter(pl.col("budget") == grid["budget"].max()).sort("rce").row(0, named=True)
            lines.append(
                f"    {name:<22} {at_end['raters']:>4} {'-':>7} {'> ' + format(at_end['budget'], ','):>17}"
                f" {'RCE ' + format(at_end['rce'], '.3f') + ' at the end':>22}"
            )
            continue
        at = grid.filter(raters=row["raters"], budget=grid.filter(pl.col("budget") >= row["needed"])["budget"].min())
        stats = at.row(0, named=True)
        ratio = f"{base_needed / row['needed']:.1f}x" if base_needed is not None else "-"
        lines.append(
            f"    {name:<22} {row['raters']:>4} {row['inputs']:>7,.0f} {row['needed']:>17,.0f} {ratio:>22}"
            f"  {stats['bias']:>+8.3f} ({stats['bias_se']:.3f}), {stats['coverage']:.2f} at {stats['budget']:,}"
        )
    return [line.rstrip() for line in lines]


def write_crowd(simulation: neuroneval.crowd.Simulation, csv: Path, png: Path) -> tuple[Path, Any]:
    """Write a crowd simulation's RCE table to `csv`, its pairs (true and concept-model
    correlations) to ``pairs.csv`` beside it (atomically) and its curves to `png`, creating their
    directories; returns the RCE table's and the chart's paths."""
    csv.parent.mkdir(parents=True, exist_ok=True)
    png.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(
        csv.with_name("pairs.csv" if csv.name == "rce.csv" else f"{csv.stem}-pairs.csv"), simulation.pairs.write_csv
    )
    return write_atomic(csv, simulation.rce.write_csv), simulation.plot(png)


def write_page(out: Path, top_inputs: pl.DataFrame, page_meta: dict[str, Any], **inputs: Any) -> Path:
    """The report page of a demo's results directory `out`: writes the top inputs, the inputs
    themselves (`inputs`: ``images=`` or ``texts=``, as `neuroneval.report.write_inputs` takes),
    ``report.json`` with `page_meta`, then renders the page; returns its path."""
    write_atomic(out / "top_inputs.parquet", top_inputs.write_parquet)
    report.write_inputs(out, **inputs)
    write_atomic(out / "report.json", lambda p: p.write_text(json.dumps(page_meta, indent=1)))
    return report.write_report(out)
