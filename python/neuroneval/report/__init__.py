"""One self-contained HTML page of a results directory: ``neuroneval report RESULTS_DIR -o report.html``.

The page needs nothing at view time: its CSS is inline, images are base64 ``data:`` URIs,
histograms are inline SVG, and its only script (a few lines) counts images that failed to
load into ``<div id="image-check" data-broken="N">``. It shows, per layer, the distribution
of each trustworthy metric and a table of units (best explanation, its scores, the unit's
top-activating inputs), then the sanity checks, the crowd simulation, the comparison of
explainers, the circuit runs and the causal-variable runs when present.

The package: `read` reads a results directory, `inputs` writes its input parts
(`top_inputs`, `write_inputs`), `charts` draws, `page` renders. The page's HTML is in
``templates/*.html.j2`` (jinja2, autoescaped), its CSS and script in ``static/``, package data
read through `importlib.resources` and inlined at render time.

The results directory
---------------------
Everything but ``scores.parquet`` is optional, and so is ``scores.parquet`` in a directory
holding a comparison, circuit runs or causal-variable runs; a part that is absent is left out of the page.
A file that is present but does not follow this contract is an error that names the file.

``scores.parquet`` (required)
    One row per scored (unit, concept) pair, as ``neuroneval.score``/``evaluate`` write it
    plus a layer column:

    - ``layer`` (string): the unit's layer. Without this column all rows form one layer
      named ``units``.
    - ``unit`` (string, or an integer index): the unit, unique within its layer.
    - ``concept`` (string, or an integer index): the explanation.
    - one float column per metric, named as in `neuroneval.METRICS` (NaN where the metric
      is undefined). Other columns (``rank`` of ``keep=k``, anything else) are ignored.

    Layers and the units of a layer appear in the order of their first row. A unit's *best
    explanation* is its concept with the highest ``correlation`` (when that column is
    present; else the first metric column), NaN ignored, ties to the earliest row; a unit
    whose scores are all NaN has none.

``sanity/table.csv``
    The sanity checks' table, as ``SanityResult.write`` and ``neuroneval sanity --out``
    write it: ``metric, missing_experimental, missing_theoretical, extra_experimental,
    extra_theoretical`` (Decrease Acc in %, empty where that test was not run) and ``passes``
    (``true``/``false``). ``sanity/chart.png`` is shown when present; ``table.md`` and
    ``records.csv`` are not read.

``crowd/rce.csv``
    The crowd simulation (``crowd.Simulation.rce``): ``sampling, aggregation, budget, rce,
    rce_se``, one row per configuration and budget (other columns ignored). With a
    ``raters`` column (several raters per input), each configuration is shown at its best
    raters per input (``crowd.best_raters``) and its ratings are interpolated from ``rce.csv``.
    ``crowd/rce.png`` is shown when present, else the curves are drawn from ``rce.csv``.
    The ratings each configuration needs come from ``crowd/needed.csv`` (``sampling,
    aggregation, needed``; empty = never; written by ``neuroneval crowd simulate --out``)
    when present, else they are interpolated from ``rce.csv`` as ``Simulation.needed`` does,
    at ``crowd_target`` of ``report.json`` (default 0.275).

``comparison.json`` (or ``compare/comparison.json``)
    A comparison of explainers as ``neuroneval.compare.Comparison.write`` and ``neuroneval
    compare --out`` write it, with its ``summary.csv``, ``differences.csv`` and
    ``pairs.parquet`` beside it: the page ranks the explainers under each metric, with their
    intervals drawn as bars, and lists the paired differences.

``circuit_run.json`` (or subdirectories holding one, or ``circuits/`` and its subdirectories)
    A circuit run as ``neuroneval.circuits.results.CircuitRun.write`` and ``neuroneval circuits
    run --out`` write it, with its ``scores/<method>.json`` beside it (read back with
    ``read_circuit_run``; ``curves.csv`` is not read): the page shows the CPR/CMD table of all
    runs, the best of each column in bold, then per run its facts, each method's CPR, CMD, mean
    faithfulness, AUROC and time, and the faithfulness curves (against the share of the edges,
    log scale) of the circuits by signed score (CPR) and by absolute score (CMD), one line per
    method. A directory that holds only circuit runs needs no ``scores.parquet``.

``causal_run.json`` (or subdirectories holding one, or ``causal/`` and its subdirectories)
    A run of the causal-variable track as ``neuroneval.causal.results.write_causal_run`` and
    ``neuroneval causal run --out`` write it (read back with ``read_causal_run``; ``hits.npz``
    is not read); each result's ``unit_iia`` must be a (layers, positions) array. The page shows
    one row per run, variable and featurizer: the average and highest IIA over the run's layers
    with their bootstrap intervals, the seconds spent fitting the featurizer and in all; then per
    run its facts and, per variable, the IIA of each featurizer at each layer (its best token
    position's, on held-out pairs), one line per featurizer. A directory that holds only
    causal-variable runs needs no ``scores.parquet``.

``top_inputs.parquet``
    Each unit's top-activating inputs, as `top_inputs` returns them: ``layer`` (string),
    ``unit`` (the unit's value in ``scores.parquet``; compared as text), ``rank`` (0 = the
    highest activation), ``input`` (the input's row in the probing set, from 0) and
    ``activation`` (float). The page shows the first `INPUTS_PER_UNIT` ranks of a unit.

``inputs/``
    How to show an input, as `write_inputs` writes it: ``inputs/meta.json`` holds

    - ``{"kind": "image", "file": "images.npy"}``: an ``(N, H, W)`` (grey) or
      ``(N, H, W, 3)`` (RGB) float array with values in [0, 1] (``uint8`` 0..255 is read
      too), row i the probing set's input i. Shown nearest-neighbour upscaled to at least
      `IMAGE_MIN_SIDE` pixels, or area-downscaled to at most `IMAGE_MAX_SIDE`.
    - ``{"kind": "text", "file": "texts.json"}``, optionally with ``"tokens": [...]``:
      ``texts.json`` is a JSON list of N items, each a string or a list of token strings
      (shown concatenated as they are, so tokens carry their own spaces). ``tokens``, when
      the rows are tokens in context, is a list of N integers (or nulls): the token of each
      row to highlight, an index into the row's token list, or for a string into its
      whitespace-separated words (``str.split()``; the row is then shown with single spaces).
      Long rows are cut to a window around the highlighted token.

``report.json``
    ``{"title": str, "description": str, "layers": {layer: description}, "crowd_target":
    float}``; every key optional.

Examples
--------
>>> import numpy as np
>>> acts = np.array([[0.5, 1.0], [2.0, 1.0], [1.0, 0.0]], dtype=np.float32)
>>> top_inputs({"fc": acts}, k=2).rows()
[('fc', 'fc[0]', 0, 1, 2.0), ('fc', 'fc[0]', 1, 2, 1.0), ('fc', 'fc[1]', 0, 0, 1.0), ('fc', 'fc[1]', 1, 1, 1.0)]
"""

from __future__ import annotations

from .charts import IMAGE_MAX_SIDE, IMAGE_MIN_SIDE
from .inputs import top_inputs, write_inputs
from .page import MAX_UNITS, TRUSTWORTHY, render_report, write_report
from .read import DEFAULT_CROWD_TARGET, INPUTS_PER_UNIT, SCORES, TOP_INPUTS

__all__ = [
    "DEFAULT_CROWD_TARGET",
    "IMAGE_MAX_SIDE",
    "IMAGE_MIN_SIDE",
    "INPUTS_PER_UNIT",
    "MAX_UNITS",
    "SCORES",
    "TOP_INPUTS",
    "TRUSTWORTHY",
    "render_report",
    "top_inputs",
    "write_inputs",
    "write_report",
]
