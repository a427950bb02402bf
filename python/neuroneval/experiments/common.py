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
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

import neuroneval.crowd
from neuroneval import report
from neuroneval.files import write_atomic

__all__ = ["crowd_summary", "spread_pairs", "write_crowd", "write_page"]


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


def _configuration_name(sampling: str, aggregation: str) -> str:
    return f"{'MG-IS' if sampling == 'mgis' else 'uniform'} + {'BRAgg' if aggregation == 'bragg' else aggregation}"


def crowd_summary(simulation: neuroneval.crowd.Simulation) -> list[str]:
    """Lines that report the ratings each configuration needs, and how many fewer MG-IS + BRAgg
    needs than each configuration that also reaches the target. A configuration that never
    reaches it within the grid enters no ratio: its "saving" would be the end of the grid
    over a number, not a comparison."""
    needed = simulation.needed()
    largest = max(simulation.budgets)
    floors = simulation.rce.filter(pl.col("budget") == largest)
    lines = [f"    {'configuration':<22} {'ratings per pair':>17}  RCE at {largest:,}"]
    values = {}
    for row in needed.iter_rows(named=True):
        name = _configuration_name(row["sampling"], row["aggregation"])
        floor = floors.filter(sampling=row["sampling"], aggregation=row["aggregation"])["rce"][0]
        value = row["needed"]
        values[(row["sampling"], row["aggregation"])] = value
        shown = f"{value:>17,.0f}" if value is not None else f"{'> ' + format(largest, ','):>17}"
        lines.append(f"    {name:<22} {shown}  {floor:.3f}")
    best = values.get(("mgis", "bragg"))
    others = [key for key in values if key != ("mgis", "bragg")]
    if best is not None:
        savings = [
            f"{values[key] / best:.1f}x fewer than {_configuration_name(*key)}"
            for key in others
            if values[key] is not None
        ]
        if savings:
            lines.append(f"MG-IS + BRAgg needs {', '.join(savings)}.")
    never = [_configuration_name(*key) for key in values if values[key] is None]
    if never:
        lines.append(
            f"{' and '.join(never)} never reach{'es' if len(never) == 1 else ''} the target within {largest:,} "
            "ratings per pair (the last column is the RCE at the end of the grid), so no ratio is taken against "
            f"{'it' if len(never) == 1 else 'them'}."
        )
    return lines


def write_crowd(simulation: neuroneval.crowd.Simulation, csv: Path, png: Path) -> tuple[Path, Any]:
    """Write a crowd simulation's RCE table to `csv` (atomically) and its curves to `png`,
    creating their directories; returns the two paths."""
    csv.parent.mkdir(parents=True, exist_ok=True)
    png.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(csv, simulation.rce.write_csv), simulation.plot(png)


def write_page(out: Path, top_inputs: pl.DataFrame, page_meta: dict[str, Any], **inputs: Any) -> Path:
    """The report page of a demo's results directory `out`: writes the top inputs, the inputs
    themselves (`inputs`: ``images=`` or ``texts=``, as `neuroneval.report.write_inputs` takes),
    ``report.json`` with `page_meta`, then renders the page; returns its path."""
    write_atomic(out / "top_inputs.parquet", top_inputs.write_parquet)
    report.write_inputs(out, **inputs)
    write_atomic(out / "report.json", lambda p: p.write_text(json.dumps(page_meta, indent=1)))
    return report.write_report(out)
