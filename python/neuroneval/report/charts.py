"""The page's pictures: the geometry of its SVG charts (drawn by ``templates/charts.html.j2``)
and the PNG ``data:`` URIs of its input images."""

from __future__ import annotations

import base64
import math
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from neuroneval import METRICS
from neuroneval.causal.iia import layer_iia

#: Images smaller than this (in pixels, longer side) are upscaled by an integer factor, nearest neighbour.
IMAGE_MIN_SIDE = 48
#: Images larger than this are downscaled by an integer factor (block means).
IMAGE_MAX_SIDE = 64

_BINS = 24
_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


@dataclass(frozen=True)
class Line:
    x1: float
    y1: float
    x2: float
    y2: float
    cls: str = ""
    stroke: str = ""  # a colour: a 2-pixel line of it


@dataclass(frozen=True)
class Label:
    x: float
    y: float
    text: str
    anchor: str = ""  # text-anchor, none when empty


@dataclass(frozen=True)
class Bar:
    cls: str  # "all" or "best"
    x: float
    y: float
    width: float
    height: float


@dataclass(frozen=True)
class Histogram:
    """One metric's distribution over all pairs and over each unit's best score."""

    width: int
    height: int
    summary: str
    axis: Line
    bars: list[Bar]
    zero: Line | None
    ticks: list[Label]
    empty: Label | None  # "no defined values"
    median_all: str
    median_best: str
    nan: int


@dataclass(frozen=True)
class Curve:
    colour: str
    points: list[tuple[float, float]]
    legend: Line
    name: Label


@dataclass(frozen=True)
class RceChart:
    """RCE against ratings per pair (log x), one curve per configuration."""

    width: int
    height: int
    axes: list[Line]
    labels: list[Label]  # tick labels and the x-axis title
    target: Line | None
    target_label: Label | None
    curves: list[Curve] = field(default_factory=list)


@dataclass(frozen=True)
class IntervalRow:
    """One explainer: its name, its mean (a dot at x) and its interval (a bar from low to high,
    None when undefined), on the row at height y."""

    name: Label
    y: float
    x: float | None
    low: float | None
    high: float | None
    colour: str
    title: str


@dataclass(frozen=True)
class IntervalChart:
    """Each explainer's mean under one metric with its interval bar, one row per explainer."""

    width: int
    height: int
    summary: str
    axis: Line
    ticks: list[Label]
    zero: Line | None
    rows: list[IntervalRow]


def configuration(sampling: str, aggregation: str) -> str:
    """A crowd configuration's name, e.g. ``MG-IS + BRAgg`` (`neuroneval.crowd.configuration_name`)."""
    from neuroneval.crowd import configuration_name

    return configuration_name(sampling, aggregation)


def histogram(m: str, values: npt.NDArray[np.float64], unit_best: npt.NDArray[np.float64], nan: int) -> Histogram:
    """The histogram of metric `m`: all defined `values`, each unit's best (`unit_best`), on
    the metric's range (else the data's), `nan` undefined scores."""
    w, h, left, right, top, bottom = 232, 96, 6, 6, 4, 16
    pw, ph = w - left - right, h - top - bottom
    r = METRICS[m].value_range
    if r is not None:
        lo, hi = r
    else:
        both = np.concatenate([values, unit_best])
        lo, hi = (float(both.min()), float(both.max())) if both.size else (0.0, 1.0)
        if hi <= lo:
            lo, hi = lo - 0.5, hi + 0.5
    edges = np.linspace(lo, hi, _BINS + 1)

    def shares(v: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        if v.size == 0:
            return np.zeros(_BINS)
        counts, _ = np.histogram(np.clip(v, lo, hi), bins=edges)
        return counts / v.size

    all_share, best_share = shares(values), shares(unit_best)
    top_share = max(float(all_share.max()), float(best_share.max())) or 1.0
    bw = pw / _BINS
    bars = []
    for share, cls, inset in ((all_share, "all", 0.5), (best_share, "best", bw * 0.28)):
        for j, s in enumerate(share):
            if s <= 0:
                continue
            bh = max(0.8, ph * s / top_share)
            bars.append(Bar(cls, left + j * bw + inset, top + ph - bh, bw - 2 * inset, bh))
    ticks = [
        Label(left + pw * (t - lo) / (hi - lo), h - 3, f"{t:.3g}", anchor)
        for t, anchor in ((lo, "start"), ((lo + hi) / 2, "middle"), (hi, "end"))
    ]
    zero = None
    if lo < 0 < hi:
        x0 = left + pw * (0 - lo) / (hi - lo)
        zero = Line(x0, top, x0, top + ph, "zero")
    med_all = f"{float(np.median(values)):.3f}" if values.size else "NaN"
    med_best = f"{float(np.median(unit_best)):.3f}" if unit_best.size else "NaN"
    return Histogram(
        width=w,
        height=h,
        summary=f"{m}: median {med_all} over {values.size:,} pairs, median best {med_best} over {unit_best.size:,} units",
        axis=Line(left, top + ph + 0.5, w - right, top + ph + 0.5, "axis"),
        bars=bars,
        zero=zero,
        ticks=ticks,
        empty=Label(w / 2, top + ph / 2, "no defined values", "middle") if values.size == 0 else None,
        median_all=med_all,
        median_best=med_best,
        nan=nan,
    )


def rce_chart(
    rce: pl.DataFrame,
    target: float | None,
    x_column: str = "budget",
    x_label: str = "ratings per (unit, explanation) pair",
) -> RceChart | None:
    """The curves of an RCE table (the page's chart without rce.png) against its column
    `x_column` (log scale), one per configuration, or per `name` where the table has that
    column; None without a positive `x_column`."""
    data = rce.filter(pl.col(x_column) > 0).with_columns(pl.col(x_column).alias("budget"))
    if data.height == 0:
        return None
    w, h, left, right, top, bottom = 640, 300, 52, 190, 12, 40
    pw, ph = w - left - right, h - top - bottom
    x_lo, x_hi = math.log10(float(data["budget"].min())), math.log10(float(data["budget"].max()))  # type: ignore[arg-type]
    if x_hi <= x_lo:
        x_lo, x_hi = x_lo - 0.5, x_hi + 0.5
    finite = data["rce"].fill_nan(None).drop_nulls()
    y_hi = max([float(finite.max()) if finite.len() else 1.0, target or 0.0]) * 1.05  # type: ignore[arg-type]
    y_hi = y_hi or 1.0

    def xy(budget: float, value: float) -> tuple[float, float]:
        return (
            left + pw * (math.log10(budget) - x_lo) / (x_hi - x_lo),
            top + ph - ph * min(max(value, 0.0), y_hi) / y_hi,
        )

    labels = []
    for e in range(math.floor(x_lo), math.ceil(x_hi) + 1):
        if x_lo - 1e-9 <= e <= x_hi + 1e-9:
            x, _ = xy(10.0**e, 0)
            labels.append(Label(x, top + ph + 14, f"{10**e:,}", "middle"))
    for frac in (0.0, 0.25, 0.5, 0.75, 1.0):
        _, y = xy(10**x_lo, y_hi * frac)
        labels.append(Label(left - 4, y + 3, f"{y_hi * frac:.2f}", "end"))
    labels.append(Label(left + pw / 2, h - 6, x_label, "middle"))
    target_line = target_label = None
    if target is not None:
        _, y = xy(10**x_lo, target)
        target_line = Line(left, y, left + pw, y, "target")
        target_label = Label(left + pw + 8, y + 3, f"target {target:g}")
    curves = []
    if "name" not in data.columns:
        data = data.with_columns(
            pl.struct("sampling", "aggregation")
            .map_elements(lambda r: configuration(r["sampling"], r["aggregation"]), return_dtype=pl.String)
            .alias("name")
        )
    for j, ((name,), group) in enumerate(data.group_by("name", maintain_order=True)):
        colour = _COLOURS[j % len(_COLOURS)]
        group = group.sort("budget").filter(pl.col("rce").is_not_nan())
        ly = top + 14 + 18 * j
        curves.append(
            Curve(
                colour=colour,
                points=[xy(b, v) for b, v in group.select("budget", "rce").iter_rows()],
                legend=Line(left + pw + 8, ly, left + pw + 26, ly, stroke=colour),
                name=Label(left + pw + 30, ly + 4, str(name)),
            )
        )
    axes = [Line(left, top + ph, left + pw, top + ph, "axis"), Line(left, top, left, top + ph, "axis")]
    return RceChart(w, h, axes, labels, target_line, target_label, curves)


def interval_chart(
    metric: str, rows: list[tuple[str, float, float, float, bool]], confidence: float
) -> IntervalChart | None:
    """The means of `rows` (name, mean, interval low, interval high, is a baseline), in their
    order, with interval bars on an axis spanning the data (padded; within the metric's range
    when it has one); baselines grey. None when no mean is defined."""
    defined = [r for r in rows if math.isfinite(r[1])]
    if not defined:
        return None
    row_h, left, right, top, bottom = 22, 150, 24, 8, 22
    w = 640
    h = top + bottom + row_h * len(rows)
    pw = w - left - right
    ends = [v for r in defined for v in r[1:4] if math.isfinite(v)]
    lo, hi = min(ends), max(ends)
    pad = 0.08 * (hi - lo) or 0.05 * max(abs(lo), 1.0)
    lo, hi = lo - pad, hi + pad
    r = METRICS[metric].value_range
    if r is not None:
        lo, hi = max(lo, r[0]), min(hi, r[1])
        if hi <= lo:
            lo, hi = r

    def x(v: float) -> float:
        return left + pw * (min(max(v, lo), hi) - lo) / (hi - lo)

    shown = []
    level = f"{100 * confidence:g}%"
    for j, (name, mean, low, high, baseline) in enumerate(rows):
        y = top + row_h * j + row_h / 2
        colour = "#9aa3b2" if baseline else _COLOURS[0]
        interval = math.isfinite(low) and math.isfinite(high)
        text = f"{name}: mean {mean:.3f}" + (f", {level} interval [{low:.3f}, {high:.3f}]" if interval else "")
        if not math.isfinite(mean):
            text = f"{name}: no defined value"
        shown.append(
            IntervalRow(
                name=Label(left - 8, y + 3.5, name if len(name) <= 24 else name[:23] + "\u2026", "end"),
                y=y,
                x=x(mean) if math.isfinite(mean) else None,
                low=x(low) if interval else None,
                high=x(high) if interval else None,
                colour=colour,
                title=text,
            )
        )
    base = top + row_h * len(rows)
    ticks = [
        Label(x(t), base + 15, f"{t:.3g}", anchor)
        for t, anchor in ((lo, "start"), ((lo + hi) / 2, "middle"), (hi, "end"))
    ]
    zero = Line(x(0.0), top, x(0.0), base, "zero") if lo < 0 < hi else None
    return IntervalChart(
        width=w,
        height=h,
        summary=f"{metric}: each explainer's mean over units with its {level} bootstrap interval",
        axis=Line(left, base + 0.5, w - right, base + 0.5, "axis"),
        ticks=ticks,
        zero=zero,
        rows=shown,
    )


def png_uri(image: npt.NDArray[Any]) -> str:
    """A small PNG of one image ((H, W) or (H, W, 1|3), floats in [0, 1] or uint8), resized
    by integer factors: nearest-neighbour up to IMAGE_MIN_SIDE, block means down to IMAGE_MAX_SIDE."""
    a = np.asarray(image)
    if a.ndim == 3 and a.shape[-1] == 1:
        a = a[..., 0]
    if a.dtype.kind in "ui" and a.dtype.itemsize == 1:
        a = a.astype(np.float64) / 255.0
    a = np.nan_to_num(np.asarray(a, dtype=np.float64), nan=0.0, posinf=1.0, neginf=0.0)
    side = max(a.shape[0], a.shape[1])
    if side > IMAGE_MAX_SIDE:
        f = math.ceil(side / IMAGE_MAX_SIDE)
        h, w = (a.shape[0] // f) * f, (a.shape[1] // f) * f
        a = a[:h, :w].reshape(h // f, f, w // f, f, *a.shape[2:]).mean(axis=(1, 3))
    elif side < IMAGE_MIN_SIDE:
        f = math.ceil(IMAGE_MIN_SIDE / side)
        a = np.repeat(np.repeat(a, f, axis=0), f, axis=1)
    pixels = np.round(np.clip(a, 0.0, 1.0) * 255.0).astype(np.uint8)
    return "data:image/png;base64," + base64.b64encode(png(pixels)).decode("ascii")


def png(pixels: npt.NDArray[np.uint8]) -> bytes:
    """An 8-bit grey (H, W) or RGB (H, W, 3) PNG."""
    h, w = pixels.shape[:2]
    colour = 0 if pixels.ndim == 2 else 2
    raw = np.zeros((h, 1 + w * (1 if colour == 0 else 3)), dtype=np.uint8)  # filter byte 0 per row
    raw[:, 1:] = pixels.reshape(h, -1)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", w, h, 8, colour, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw.tobytes(), 9))
        + chunk(b"IEND", b"")
    )


# --------------------------------------------------------------------------- circuits

#: The circuit methods' colours, the same in every chart (others cycle through _COLOURS).
_METHOD_COLOURS = {
    "random": "#7f7f7f",
    "eap": "#1f77b4",
    "eap-ig-inputs": "#ff7f0e",
    "eap-ig-activations": "#2ca02c",
    "exact": "#d62728",
}
#: The faithfulness axis spans the data, 0 and 1, but no more than this (points beyond sit on its edge).
_F_LIMITS = (-1.5, 2.5)


@dataclass(frozen=True)
class Marker:
    """One point of a curve, its exact values in its title."""

    x: float
    y: float
    title: str


@dataclass(frozen=True)
class MethodLine:
    method: str
    colour: str
    points: list[tuple[float, float]]
    markers: list[Marker]
    legend: Line
    name: Label


@dataclass(frozen=True)
class FaithfulnessChart:
    """Faithfulness against the share of edges in the circuit (log x), one line per method; the
    lines f = 0 (class ``zero``) and f = 1 (class ``target``) drawn across."""

    width: int
    height: int
    criterion: str
    summary: str
    axes: list[Line]
    labels: list[Label]
    references: list[Line]
    lines: list[MethodLine]

    @property
    def title(self) -> str:
        return "circuits by signed score: CPR" if self.criterion == "signed" else "circuits by absolute score: CMD"


def method_colour(method: str, j: int) -> str:
    return _METHOD_COLOURS.get(method, _COLOURS[j % len(_COLOURS)])


def legend_series(
    name: str,
    colour: str,
    j: int,
    points: list[tuple[float, float]],
    markers: list[Marker],
    *,
    right: float,
    top: float,
) -> MethodLine:
    """The `j`-th line of a chart with its legend entry to the right of the plot (`right`)."""
    ly = top + 14 + 18 * j
    return MethodLine(
        method=name,
        colour=colour,
        points=points,
        markers=markers,
        legend=Line(right + 10, ly, right + 28, ly, stroke=colour),
        name=Label(right + 32, ly + 4, name),
    )


def faithfulness_chart(
    criterion: str,
    fractions: tuple[float, ...],
    curves: list[tuple[str, npt.NDArray[np.float64], npt.NDArray[np.int64]]],
) -> FaithfulnessChart | None:
    """The faithfulness curves of (method, f at each fraction, circuit edges at each fraction)
    under `criterion` ("signed" or "absolute"); None when no curve is defined (m(full) == m(empty))."""
    defined = [(m, f, e) for m, f, e in curves if np.isfinite(f).all()]
    if not defined or not fractions:
        return None
    w, h, left, right, top, bottom = 560, 270, 46, 150, 12, 40
    pw, ph = w - left - right, h - top - bottom
    x_lo, x_hi = math.log10(fractions[0]), math.log10(fractions[-1])
    if x_hi <= x_lo:
        x_lo, x_hi = x_lo - 0.5, x_hi + 0.5
    values = np.concatenate([f for _, f, _ in defined])
    y_lo = max(_F_LIMITS[0], min(0.0, float(values.min())))
    y_hi = min(_F_LIMITS[1], max(1.0, float(values.max())))
    pad = 0.05 * (y_hi - y_lo)
    y_lo, y_hi = y_lo - pad, y_hi + pad

    def xy(fraction: float, f: float) -> tuple[float, float]:
        y = min(max(f, y_lo), y_hi)
        return (
            left + pw * (math.log10(fraction) - x_lo) / (x_hi - x_lo),
            top + ph - ph * (y - y_lo) / (y_hi - y_lo),
        )

    labels = []
    for e in range(math.floor(x_lo), math.ceil(x_hi) + 1):
        if x_lo - 1e-9 <= e <= x_hi + 1e-9:
            x, _ = xy(10.0**e, 0.0)
            labels.append(Label(x, top + ph + 14, f"{100 * 10.0**e:g}%", "middle"))
    ticks = [0.0, 0.5, 1.0]
    for end in (math.ceil(y_lo * 2) / 2, math.floor(y_hi * 2) / 2):  # the outermost half-steps, when apart
        if all(abs(end - t) >= 0.25 for t in ticks):
            ticks.append(end)
    for v in sorted(ticks):
        _, y = xy(fractions[0], v)
        labels.append(Label(left - 4, y + 3, f"{v:.1f}", "end"))
    labels.append(Label(left + pw / 2, h - 6, "share of the edges in the circuit (log scale)", "middle"))
    references = [
        Line(left, xy(fractions[0], 0.0)[1], left + pw, xy(fractions[0], 0.0)[1], "zero"),
        Line(left, xy(fractions[0], 1.0)[1], left + pw, xy(fractions[0], 1.0)[1], "target"),
    ]
    lines = []
    for j, (method, f, edges) in enumerate(defined):
        colour = method_colour(method, j)
        points = [xy(k, float(v)) for k, v in zip(fractions, f, strict=True)]
        markers = [
            Marker(x, y, f"{method}: {100 * k:g}% of the edges ({int(n):,} after pruning), f = {float(v):.3f}")
            for (x, y), k, v, n in zip(points, fractions, f, edges, strict=True)
        ]
        lines.append(legend_series(method, colour, j, points, markers, right=left + pw, top=top))
    by = "signed score (CPR)" if criterion == "signed" else "absolute score (CMD)"
    axes = [Line(left, top + ph, left + pw, top + ph, "axis"), Line(left, top, left, top + ph, "axis")]
    return FaithfulnessChart(
        width=w,
        height=h,
        criterion=criterion,
        summary=f"faithfulness of the circuits of the top edges by {by} against their share of the edges",
        axes=axes,
        labels=labels,
        references=references,
        lines=lines,
    )


# --------------------------------------------------------------------------- causal variables

#: The featurizers' colours, the same in every chart (others cycle through _COLOURS).
_FEATURIZER_COLOURS = {
    "full": "#222222",
    "neurons": "#1f77b4",
    "pca": "#ff7f0e",
    "sae": "#2ca02c",
    "das": "#d62728",
    "random": "#7f7f7f",
    "dbm-neurons": "#9467bd",
    "dbm-pca": "#8c564b",
    "dbm-sae": "#e377c2",
}
#: The colours of other featurizers, in turn.
_OTHER_COLOURS = ("#17becf", "#bcbd22", "#393b79", "#637939", "#8c6d31", "#843c39")


@dataclass(frozen=True)
class IiaChart:
    """IIA against the layer (linear x, the run's layers), one line per featurizer (a `MethodLine`
    whose ``method`` is the featurizer); IIA 1 drawn across (class ``target``), quarters as grid."""

    width: int
    height: int
    variable: str
    summary: str
    axes: list[Line]
    labels: list[Label]
    references: list[Line]
    lines: list[MethodLine]

    @property
    def title(self) -> str:
        return f"IIA per layer: {self.variable}"


def featurizer_colours(featurizers: list[str]) -> dict[str, str]:
    """Each featurizer's colour: fixed for those of `CAUSAL_FEATURIZERS`, others' in turn from a set of their own."""
    others = [f for f in dict.fromkeys(featurizers) if f not in _FEATURIZER_COLOURS]
    return {f: _FEATURIZER_COLOURS.get(f) or _OTHER_COLOURS[others.index(f) % len(_OTHER_COLOURS)] for f in featurizers}


def iia_chart(
    variable: str,
    layers: tuple[int, ...],
    positions: tuple[str, ...],
    curves: list[tuple[str, npt.NDArray[np.float64]]],
) -> IiaChart | None:
    """The IIA of each (featurizer, unit IIA of shape (layers, positions)) on `variable` at each
    layer, the best position's (`neuroneval.causal.iia.layer_iia`), in `curves`' order; a point
    whose IIA is undefined (NaN) is left out. None without layers or positions."""
    if not layers or not positions or not curves:
        return None
    w, h, left, right, top, bottom = 560, 270, 46, 150, 12, 40
    pw, ph = w - left - right, h - top - bottom
    x_lo, x_hi = float(min(layers)), float(max(layers))
    if x_hi <= x_lo:
        x_lo, x_hi = x_lo - 0.5, x_hi + 0.5
    inset = 0.04 * (x_hi - x_lo)  # the first and last points off the y axis and the legend
    x_lo, x_hi = x_lo - inset, x_hi + inset

    def xy(layer: float, iia: float) -> tuple[float, float]:
        return (
            left + pw * (layer - x_lo) / (x_hi - x_lo),
            top + ph - ph * min(max(iia, 0.0), 1.0),
        )

    order = sorted(range(len(layers)), key=lambda i: layers[i])
    step = math.ceil(len(order) / 12)  # at most 12 layer labels
    labels = [Label(xy(layers[i], 0.0)[0], top + ph + 14, str(layers[i]), "middle") for i in order[::step]]
    for v in (0.0, 0.25, 0.5, 0.75, 1.0):
        labels.append(Label(left - 4, xy(x_lo, v)[1] + 3, f"{v:.2f}", "end"))
    labels.append(Label(left + pw / 2, h - 6, "layer", "middle"))
    references = [Line(left, xy(x_lo, v)[1], left + pw, xy(x_lo, v)[1], "grid") for v in (0.25, 0.5, 0.75)]
    references.append(Line(left, xy(x_lo, 1.0)[1], left + pw, xy(x_lo, 1.0)[1], "target"))
    lines = []
    colours = featurizer_colours([f for f, _ in curves])
    for j, (featurizer, unit) in enumerate(curves):
        colour = colours[featurizer]
        unit = np.asarray(unit, dtype=np.float64)
        per_layer = layer_iia(unit)
        points, markers = [], []
        for i in order:
            if not math.isfinite(per_layer[i]):
                continue
            best = positions[int(np.argmax(unit[i]))]
            x, y = xy(layers[i], float(per_layer[i]))
            points.append((x, y))
            markers.append(Marker(x, y, f"{featurizer}: layer {layers[i]}, IIA {per_layer[i]:.3f} at position {best}"))
        lines.append(legend_series(featurizer, colour, j, points, markers, right=left + pw, top=top))
    axes = [Line(left, top + ph, left + pw, top + ph, "axis"), Line(left, top, left, top + ph, "axis")]
    return IiaChart(
        width=w,
        height=h,
        variable=variable,
        summary=f"IIA on {variable} of each featurizer at the best token position of each layer, on held-out pairs",
        axes=axes,
        labels=labels,
        references=references,
        lines=lines,
    )
