"""`neuroneval.report` and `neuroneval report`: the page of a synthetic results directory read
back (titles, layers, each unit's best explanation against a plain-Python computation, the
sanity table against its CSV, self-containment, the size bound of a 10,000-unit layer),
`top_inputs` against numpy's sort, `write_inputs`, the errors, and the page in headless Chromium.
"""

from __future__ import annotations

import base64
import csv
import json
import math
import re
import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
import scipy.sparse as sp
from html_tree import parse
from neuroneval import PASSING_METRICS, cli, crowd, report
from neuroneval.errors import NonFiniteError, ParameterError, ShapeError, SourceError
from neuroneval.sources import write_shards

N = 60
LAYERS = {"conv <1>": 6, "fc & head": 5}
CONCEPTS = ["dog", "cat & kitten", "<b>bold</b>", "sky", "tree", "car", "red"]
METRIC_COLUMNS = ["recall", "correlation", "cosine", "auprc", "f1", "iou", "wpmi"]
TITLE = "A <synthetic> results directory"
SANITY_CSV = """metric,missing_experimental,missing_theoretical,extra_experimental,extra_theoretical,passes
recall,100.0,100.0,0.0,0.0,false
f1,73.33333333333333,100.0,94.16666666666667,100.0,false
auprc,95.5,,91.25,,true
correlation,98.75,100.0,99.58333333333333,100.0,true
cosine,99.2,100.0,75.8,100.0,false
"""
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------- a results directory


@dataclass
class Results:
    directory: Path
    rows: list[dict[str, Any]]  # scores.parquet, row by row
    activations: dict[str, np.ndarray] = field(default_factory=dict)


def make_results(
    directory: Path,
    *,
    inputs: str | None = "image",
    layers: dict[str, int] | None = None,
    sanity: bool = True,
    crowd_dir: bool = True,
    seed: int = 0,
) -> Results:
    """Random scores (some NaN, one unit all NaN, one tie) for each layer, and the optional parts."""
    rng = np.random.default_rng(seed)
    layers = LAYERS if layers is None else layers
    directory.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for layer, k in layers.items():
        for j in range(k):
            for t, concept in enumerate(CONCEPTS):
                row: dict[str, Any] = {"layer": layer, "unit": f"{layer}[{j}]", "concept": concept}
                for m in METRIC_COLUMNS:
                    lo = -1.0 if m in ("correlation", "cosine") else 0.0
                    row[m] = float(np.round(rng.uniform(lo, 1.0), 4)) if rng.random() > 0.1 else math.nan
                if j == 1:
                    row["correlation"] = math.nan  # a unit with no defined correlation
                if j == 2 and t in (2, 5):
                    row["correlation"] = 0.995  # a tie: the earlier row is the best
                rows.append(row)
    table = pl.DataFrame(
        rows,
        schema={"layer": pl.String, "unit": pl.String, "concept": pl.String}
        | dict.fromkeys(METRIC_COLUMNS, pl.Float64),
    )
    table.with_columns(pl.lit(0, pl.Int64).alias("rank")).write_parquet(directory / "scores.parquet")
    activations = {}
    for layer, k in layers.items():
        a = rng.normal(size=(N, k)).astype(np.float32)
        a[:, 0] = np.round(a[:, 0])  # ties
        activations[layer] = a
    report.top_inputs(activations, k=8).write_parquet(directory / "top_inputs.parquet")
    if inputs == "image":
        report.write_inputs(directory, images=rng.random((N, 8, 8)))
    elif inputs == "text":
        texts = [f"row {i} says <hello> & the word{i} appears here" for i in range(N)]
        report.write_inputs(directory, texts=texts, highlight=[6 if i % 2 == 0 else None for i in range(N)])
    if sanity:
        (directory / "sanity").mkdir()
        (directory / "sanity" / "table.csv").write_text(SANITY_CSV)
        (directory / "sanity" / "chart.png").write_bytes(report.charts.png(np.full((20, 30), 128, np.uint8)))
    if crowd_dir:
        (directory / "crowd").mkdir()
        crowd_rows = []
        for s in ("uniform", "mgis"):
            for a_ in ("majority", "bragg"):
                for b, budget in enumerate((60, 120, 240, 480, 960)):
                    value = (0.9 if a_ == "majority" else 0.6) * (0.7 if s == "mgis" else 1.0) * 0.75**b
                    crowd_rows.append([s, a_, budget, value, 0.01, 0, budget * 0.99])
        pl.DataFrame(
            crowd_rows,
            schema=["sampling", "aggregation", "budget", "rce", "rce_se", "nan_estimates", "ratings"],
            orient="row",
        ).write_csv(directory / "crowd" / "rce.csv")
    info = {"title": TITLE, "description": "Random scores & tests.", "layers": {"conv <1>": "the first <conv>"}}
    (directory / "report.json").write_text(json.dumps(info))
    return Results(directory, rows, activations)


@pytest.fixture
def results(tmp_path: Path) -> Results:
    return make_results(tmp_path / "results")


# --------------------------------------------------------------------------- reading HTML back


def best_explanations(rows: list[dict[str, Any]], metric: str = "correlation") -> dict[tuple[str, str], dict[str, Any]]:
    """Each (layer, unit)'s row with the highest non-NaN `metric`, the first on ties: plain Python."""
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        v = row[metric]
        if math.isnan(v):
            continue
        key = (row["layer"], row["unit"])
        if key not in best or v > best[key][metric]:
            best[key] = row
    return best


def png_size(uri: str) -> tuple[int, int]:
    assert uri.startswith("data:image/png;base64,")
    data = base64.b64decode(uri.split(",", 1)[1])
    assert data[:8] == PNG_MAGIC
    width, height = struct.unpack(">II", data[16:24])
    return width, height


# --------------------------------------------------------------------------- the page


def test_header_layers_and_best_explanations(results: Results) -> None:
    page = report.render_report(results.directory)
    doc = parse(page)
    assert doc.find("title").text() == TITLE
    assert doc.find("h1").text() == TITLE
    assert "Random scores & tests." in doc.find("header").text()
    # The verdict line names the metrics that pass here, and the paper's five that fail here.
    verdict = " ".join(doc.find("header").text().split())
    assert "Passing the sanity checks here" in verdict
    assert "auprc, correlation (2 of 5 tested)" in verdict
    assert "cosine, f1 fail here" in verdict
    sections = doc.find_all("section", class_="layer")
    assert [s.find("h2").children[0].strip() for s in sections] == list(LAYERS)
    assert "the first <conv>" in sections[0].text()
    expected = best_explanations(results.rows)
    for section, (layer, k) in zip(sections, LAYERS.items(), strict=True):
        header = [th.text().replace("\u2020", "").strip() for th in section.find("thead").find_all("th")]
        assert header == [
            "unit",
            "best explanation (by correlation)",
            *report.TRUSTWORTHY,
            "top-activating inputs (highest first)",
        ]
        trs = section.find("tbody").find_all("tr")
        assert [tr.attrs["data-unit"] for tr in trs] == [f"{layer}[{j}]" for j in range(k)]
        for tr in trs:
            cells = tr.find_all("td")
            row = expected.get((layer, tr.attrs["data-unit"]))
            if row is None:  # unit 1: no defined correlation
                assert tr.attrs["data-unit"].endswith("[1]")
                assert cells[0].attrs["data-best"] == "" and "no defined correlation" in cells[0].text()
                continue
            assert cells[0].attrs["data-best"] == row["concept"]
            assert cells[0].find("b").text() == row["concept"]
            shown = [c.text() for c in cells[1 : 1 + len(report.TRUSTWORTHY)]]
            assert shown == ["NaN" if math.isnan(row[m]) else f"{row[m]:.3f}" for m in report.TRUSTWORTHY]
        tie = next(tr for tr in trs if tr.attrs["data-unit"] == f"{layer}[2]")
        assert tie.find("td").attrs["data-best"] == CONCEPTS[2]  # the first of the tied rows


def test_top_inputs_shown_as_upscaled_images(results: Results) -> None:
    doc = parse(report.render_report(results.directory, inputs_per_unit=5))
    tops = report.top_inputs(results.activations, k=5)
    for section, layer in zip(doc.find_all("section", class_="layer"), LAYERS, strict=True):
        for tr in section.find("tbody").find_all("tr"):
            images = tr.find_all("img")
            expected = tops.filter((pl.col("layer") == layer) & (pl.col("unit") == tr.attrs["data-unit"]))
            assert [img.attrs["title"] for img in images] == [
                f"input {i:,}: activation {v:.4f}" for i, v in expected.select("input", "activation").iter_rows()
            ]
            for img in images:
                assert png_size(img.attrs["src"]) == (48, 48)  # 8x8 upscaled 6x


def test_text_inputs_with_highlight(tmp_path: Path) -> None:
    res = make_results(tmp_path / "r", inputs="text")
    doc = parse(report.render_report(res.directory))
    snippets = doc.find_all("div", class_="snippet")
    assert len(snippets) == 8 * sum(LAYERS.values())
    for s in snippets:
        index = int(s.attrs["title"].split()[1].rstrip(":").replace(",", ""))
        if index % 2 == 0:
            assert s.find("mark").text() == f"word{index}"
            assert s.text() == f"row {index} says <hello> & the word{index} appears here"
        else:
            assert not s.find_all("mark")


def test_sanity_table_equals_csv(results: Results) -> None:
    doc = parse(report.render_report(results.directory))
    table = doc.find("table", id="sanity-table")
    trs = table.find("tbody").find_all("tr")
    expected = list(csv.DictReader(SANITY_CSV.splitlines()))
    assert len(trs) == len(expected)
    for tr, row in zip(trs, expected, strict=True):
        assert tr.find("th").text() == row["metric"] == tr.attrs["data-metric"]
        cells = tr.find_all("td")
        for cell, column in zip(cells, report.read._SANITY_COLUMNS, strict=False):
            if row[column] == "":
                assert cell.text() == "\u2013" and "na" in cell.attrs["class"]
            else:
                value = float(row[column])
                assert cell.text() == f"{value:.1f}"
                assert ("ok" if value >= 90 else "bad") in cell.attrs["class"].split()
        verdict = cells[4]
        assert verdict.text() == ("pass" if row["passes"] == "true" else "fail")
        assert tr.attrs["data-passes"] == row["passes"]
        assert ("ok" if row["passes"] == "true" else "bad") in verdict.attrs["class"].split()
        assert cells[5].text() == ("pass" if row["metric"] in PASSING_METRICS else "fail")
    chart = doc.find("section", id="sanity").find("img")
    assert png_size(chart.attrs["src"]) == (30, 20)


def test_crowd_needed_budgets(results: Results) -> None:
    doc = parse(report.render_report(results.directory))
    section = doc.find("section", id="crowd")
    rce = pl.read_csv(results.directory / "crowd" / "rce.csv")
    needed = crowd.Simulation(rce, pl.DataFrame(), report.DEFAULT_CROWD_TARGET, 0.23, 20).needed()
    rows = [[c.text() for c in tr.children if not isinstance(c, str)] for tr in section.find("tbody").find_all("tr")]
    names = {"uniform": "uniform", "mgis": "MG-IS", "majority": "majority", "bragg": "BRAgg"}
    assert [r[:2] for r in rows] == [
        [f"{names[s]} + {names[a]}", "never on this grid" if n is None else f"{n:,.0f}"]
        for s, a, n in needed.iter_rows()
    ]
    assert "RCE \u2264 0.275" in section.text()
    assert section.find_all("svg")  # no rce.png: the curves are drawn inline
    # needed.csv, when present, is shown as it is; rce.png replaces the drawing.
    pl.DataFrame({"sampling": ["mgis"], "aggregation": ["bragg"], "needed": [123.0]}).write_csv(
        results.directory / "crowd" / "needed.csv"
    )
    (results.directory / "crowd" / "rce.png").write_bytes(report.charts.png(np.zeros((5, 7), np.uint8)))
    section = parse(report.render_report(results.directory)).find("section", id="crowd")
    assert [tr.find("td").text() for tr in section.find("tbody").find_all("tr")] == ["123"]
    assert not section.find_all("svg") and png_size(section.find("img").attrs["src"]) == (7, 5)


def test_crowd_with_raters_per_input_shows_each_configuration_at_its_best(results: Results) -> None:
    budgets = [100, 1000, 10000]
    rows = [
        ("uniform", "majority", 3, [0.9, 0.8, 0.7]),  # never: shown at its lowest RCE at the end (9)
        ("uniform", "majority", 9, [0.6, 0.5, 0.4]),
        ("mgis", "bragg", 3, [0.5, 0.2, 0.1]),  # reaches at 562
        ("mgis", "bragg", 9, [0.3, 0.25, 0.1]),  # reaches at 316: the cheapest
    ]
    pl.DataFrame(
        [
            {"sampling": s, "aggregation": a, "raters": r, "budget": b, "rce": v, "rce_se": 0.01}
            for s, a, r, values in rows
            for b, v in zip(budgets, values, strict=True)
        ]
    ).write_csv(results.directory / "crowd" / "rce.csv")
    section = parse(report.render_report(results.directory)).find("section", id="crowd")
    cells = [[c.text() for c in tr.children if not isinstance(c, str)] for tr in section.find("tbody").find_all("tr")]
    expected = 100 * 10 ** ((0.3 - 0.275) / (0.3 - 0.25))  # 9 raters: between 100 and 1,000
    assert [r[:2] for r in cells] == [
        ["uniform + majority", "never on this grid"],
        ["MG-IS + BRAgg", f"{expected:,.0f}"],
    ]
    assert "0.400" in cells[0][2]  # the RCE at the end of the 9-rater curve, not the 3-rater one's 0.700


def test_crowd_with_a_sequential_simulation_shows_ratings_spent(results: Results) -> None:
    """With rce-sequential.csv, each configuration of both files at its best raters per input is a
    curve of RCE against the ratings it spent (not its budget), and each sequential one's needed
    ratings are a row of the table."""
    budgets = [100, 1000, 10000]

    def table(rows: list[tuple[str, str, int, list[float], list[float]]]) -> pl.DataFrame:
        return pl.DataFrame(
            [
                {"sampling": s, "aggregation": a, "raters": r, "budget": b, "rce": v, "rce_se": 0.01, "ratings": x}
                for s, a, r, values, spent in rows
                for b, v, x in zip(budgets, values, spent, strict=True)
            ]
        )

    fixed = [("uniform", "majority", 3, [0.9, 0.5, 0.2], [99.0, 999.0, 9999.0])]
    sequential = [
        ("mgis", "bragg", 5, [0.5, 0.2, 0.1], [60.0, 700.0, 8000.0]),  # reaches at 100 * 10^((0.5 - 0.275) / 0.3)
        ("mgis", "bragg", 9, [0.6, 0.3, 0.1], [80.0, 900.0, 9000.0]),
    ]
    table(fixed).write_csv(results.directory / "crowd" / "rce.csv")
    table(sequential).write_csv(results.directory / "crowd" / "rce-sequential.csv")
    section = parse(report.render_report(results.directory)).find("section", id="crowd")
    cells = [[c.text() for c in tr.children if not isinstance(c, str)] for tr in section.find("tbody").find_all("tr")]
    assert cells[-1][:2] == ["MG-IS + BRAgg, sequential", f"{100 * 10 ** ((0.5 - 0.275) / 0.3):,.0f}"]
    spent = section.find_all("svg")[-1]
    assert [t.text() for t in spent.find_all("text")][-2:] == ["uniform + majority", "MG-IS + BRAgg, sequential"]
    # x is log10 of the ratings spent, on the axis spanning the smallest to the largest of them
    lines = [[float(p.split(",")[0]) for p in line.attrs["points"].split()] for line in spent.find_all("polyline")]
    first, second = np.log10([99.0, 999.0, 9999.0]), np.log10([60.0, 700.0, 8000.0])
    scale = (lines[0][-1] - lines[0][0]) / (first[-1] - first[0])  # pixels per decade (coordinates to 0.1)
    np.testing.assert_allclose(lines[0], lines[0][0] + scale * (first - first[0]), atol=0.1)
    np.testing.assert_allclose(lines[1], lines[0][0] + scale * (second - first[0]), atol=0.1)
    assert lines[1][0] == min(lines[0] + lines[1])  # the axis starts at the fewest ratings spent, 60
    assert "ratings spent per (unit, explanation) pair" in spent.text()


def test_self_contained(results: Results) -> None:
    page = report.render_report(results.directory)
    doc = parse(page)
    assert "http://" not in page and "https://" not in page
    assert "@import" not in page and "url(" not in page
    assert not doc.find_all("link")
    scripts = doc.find_all("script")
    assert len(scripts) == 1 and "src" not in scripts[0].attrs
    for tag in ("img", "a", "script", "iframe", "source", "video", "audio", "object", "embed"):
        for node in doc.find_all(tag):
            for attr in ("src", "href", "data"):
                if attr in node.attrs:
                    assert node.attrs[attr].startswith(("data:", "#")), node.attrs
    anchors = {a.attrs["href"][1:] for a in doc.find("nav").find_all("a")}
    ids = {n.attrs["id"] for tag in ("section",) for n in doc.find_all(tag)}
    assert anchors <= ids and len(anchors) == len(LAYERS) + 2
    assert doc.find("div", id="image-check").attrs["data-broken"] == "unchecked"


def test_large_layer_is_capped(tmp_path: Path) -> None:
    """A 10,000-unit layer lists its 100 best-explained units; the page stays small."""
    rng = np.random.default_rng(3)
    k, t = 10_000, 12
    d = tmp_path / "big"
    d.mkdir()
    corr = rng.uniform(-1, 1, (k, t))
    corr[rng.random((k, t)) < 0.05] = np.nan
    pl.DataFrame(
        {
            "layer": ["big"] * (k * t),
            "unit": [f"big[{j}]" for j in range(k) for _ in range(t)],
            "concept": [f"concept {i}" for _ in range(k) for i in range(t)],
            **{m: corr.reshape(-1) if m == "correlation" else rng.random(k * t) for m in report.TRUSTWORTHY},
        }
    ).write_parquet(d / "scores.parquet")
    acts = rng.normal(size=(200, k)).astype(np.float32)
    report.top_inputs({"big": acts}).write_parquet(d / "top_inputs.parquet")
    report.write_inputs(d, images=rng.random((200, 8, 8)))
    path = report.write_report(d)
    assert path == d / "report.html"
    size = path.stat().st_size
    assert size < 1_500_000, size
    doc = parse(path.read_text())
    trs = doc.find("tbody").find_all("tr")
    assert len(trs) == report.MAX_UNITS
    assert "Showing the 100 best-explained of 10,000 units" in " ".join(doc.find("section").text().split())
    best = np.nanmax(corr, axis=1)
    expected = [f"big[{j}]" for j in np.lexsort((np.arange(k), -best))[: report.MAX_UNITS]]
    assert [tr.attrs["data-unit"] for tr in trs] == expected
    assert len(doc.find_all("img")) == 8 * report.MAX_UNITS
    assert sorted(p.name for p in d.iterdir()) == ["inputs", "report.html", "scores.parquet", "top_inputs.parquet"]


def test_nan_scores_and_minimal_directory(tmp_path: Path) -> None:
    """Only scores.parquet, no layer column, integer units and concepts, a metric all NaN."""
    d = tmp_path / "minimal"
    d.mkdir()
    pl.DataFrame(
        {
            "unit": [0, 0, 1, 1],
            "concept": [0, 1, 0, 1],
            "auprc": [0.2, 0.7, float("nan"), float("nan")],
            "iou": [float("nan")] * 4,
            "mad": [1.0, 2.0, 3.0, 4.0],
        }
    ).write_parquet(d / "scores.parquet")
    doc = parse(report.render_report(d))
    sections = doc.find_all("section")
    assert len(sections) == 1 and sections[0].find("h2").children[0].strip() == "units"
    trs = sections[0].find("tbody").find_all("tr")
    assert [tr.find("td").attrs["data-best"] for tr in trs] == ["1", ""]  # by auprc, the first metric
    assert [c.text() for c in trs[0].find_all("td")[1:]] == ["0.700", "NaN"]
    assert "no defined values" in sections[0].find_all("figure")[1].text()
    header = " ".join(doc.find("header").text().split())
    assert "No sanity checks in this directory" in header
    assert "this page shows those in scores.parquet: AUPRC, IoU." in header
    assert not doc.find_all("img")


# --------------------------------------------------------------------------- errors


def test_errors(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="does not exist"):
        report.render_report(tmp_path / "nope")
    with pytest.raises(SourceError, match=r"has no scores\.parquet"):
        report.render_report(tmp_path)
    (tmp_path / "f").write_text("x")
    with pytest.raises(ParameterError, match="is a file"):
        report.render_report(tmp_path / "f")
    pl.DataFrame({"unit": [0], "concept": [0], "score": [1.0]}).write_parquet(tmp_path / "scores.parquet")
    with pytest.raises(SourceError, match="no metric column"):
        report.render_report(tmp_path)
    res = make_results(tmp_path / "r")
    with pytest.raises(ParameterError, match="max_units"):
        report.render_report(res.directory, max_units=0)
    np.save(res.directory / "inputs" / "images.npy", np.zeros((10, 8, 8), np.float32))  # fewer than the top inputs
    with pytest.raises(SourceError, match=r"names input \d+ of layer 'conv <1>', but inputs/ holds 10 inputs"):
        report.render_report(res.directory)
    (res.directory / "inputs" / "meta.json").write_text("{")
    with pytest.raises(SourceError, match="not valid JSON"):
        report.render_report(res.directory)


def run(argv: list[Any], capfd: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capfd.readouterr()
    code = cli.main([str(x) for x in argv])
    out, err = capfd.readouterr()
    return code, out, err


def test_cli(results: Results, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "page.html"
    code, stdout, stderr = run(["report", results.directory, "-o", out], capfd)
    assert (code, stderr) == (0, "")
    assert re.fullmatch(rf"wrote {re.escape(str(out))} \(\d+\.\d kB\)\n", stdout)
    assert out.read_text() == report.render_report(results.directory)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page.html", "results"]  # no temporary file left
    code, stdout, _ = run(["report", results.directory], capfd)
    assert code == 0 and (results.directory / "report.html").is_file()
    for argv, message in [
        (["report", tmp_path / "missing"], f"results directory {tmp_path / 'missing'} does not exist"),
        (["report", tmp_path], f"{tmp_path} has no scores.parquet"),
        (["report", out], "is a file; expected a directory"),
        (["report", results.directory, "-o", tmp_path / "no" / "x.html"], "does not exist"),
        (["report", results.directory, "-o", tmp_path / "x.txt"], "expected a file name ending in .html"),
        (["report", results.directory, "--max-units", "0"], "--max-units must be a positive integer"),
    ]:
        code, stdout, stderr = run(argv, capfd)
        assert code == 2 and stdout == ""
        assert stderr.startswith("neuroneval: error: ") and stderr.count("\n") == 1 and message in stderr, stderr


# --------------------------------------------------------------------------- top_inputs and write_inputs


def expected_top(a: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per column: numpy's sort by (activation descending, input ascending)."""
    a = np.asarray(a, dtype=np.float64)
    index = np.stack([np.lexsort((np.arange(a.shape[0]), -a[:, j]))[:k] for j in range(a.shape[1])])
    return index, np.take_along_axis(a.T, index, axis=1)


@pytest.mark.parametrize("k", [1, 3, 8, 70])
def test_top_inputs_against_argsort(tmp_path: Path, k: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(k)
    a = rng.normal(size=(50, 7))
    a[:, 1] = rng.integers(0, 3, 50)  # heavy ties
    a[:, 2] = 0.0  # all tied
    a[:, 3] = np.where(rng.random(50) < 0.8, 0.0, rng.normal(size=50))  # sparse-like
    a[:, 4] = -np.abs(a[:, 4])
    half = a.astype(np.float16)
    np.save(tmp_path / "a.npy", half)
    sources: dict[str, Any] = {
        "array": a,
        "float32 strided": np.asfortranarray(a.astype(np.float32)),
        "npy": tmp_path / "a.npy",
        "shards": write_shards(tmp_path / "shards", [half[:17], half[17:40], half[40:]]),
        "sparse": sp.csr_matrix(a),
    }
    monkeypatch.setattr(
        report.inputs, "_CHUNK_BYTES", 8 * 7 * 6
    )  # six rows a chunk, one column a sparse block of 50 rows
    for name, src in sources.items():
        table = report.top_inputs({name: src}, k=k)
        data = half if name in ("npy", "shards") else a.astype(np.float32) if name == "float32 strided" else a
        index, values = expected_top(data, k)
        kk = min(k, 50)
        assert table.columns == ["layer", "unit", "rank", "input", "activation"]
        assert table.height == 7 * kk
        assert table["layer"].to_list() == [name] * (7 * kk)
        assert table["unit"].to_list() == [f"{name}[{j}]" for j in range(7) for _ in range(kk)]
        assert table["rank"].to_list() == list(range(kk)) * 7
        np.testing.assert_array_equal(table["input"].to_numpy().reshape(7, kk), index, err_msg=name)
        np.testing.assert_array_equal(table["activation"].to_numpy().reshape(7, kk), values, err_msg=name)


def test_top_inputs_names_and_errors() -> None:
    a = np.arange(12, dtype=np.float64).reshape(4, 3)
    table = report.top_inputs({"x": a, "y": a[:, :1]}, k=2, unit_names={"x": ["p", "q", "r"]})
    assert table["unit"].unique(maintain_order=True).to_list() == ["p", "q", "r", "y[0]"]
    assert table.filter(pl.col("unit") == "q")["input"].to_list() == [3, 2]
    assert report.top_inputs({}).height == 0
    with pytest.raises(ParameterError, match=r"invalid parameter k = 0: k must be an integer with 1 <= k < 2\^64"):
        report.top_inputs({"x": a}, k=0)
    with pytest.raises(ShapeError, match=r"unit_names\['x'\] has 2 names for 3 units"):
        report.top_inputs({"x": a}, unit_names={"x": ["p", "q"]})
    a[2, 1] = np.nan
    with pytest.raises(NonFiniteError, match="layer 'x' hold nan at row 2, column 1"):
        report.top_inputs({"x": a})


def test_write_inputs(tmp_path: Path) -> None:
    rgb = np.random.default_rng(0).random((4, 5, 6, 3))
    d = report.write_inputs(tmp_path, images=rgb)
    assert json.loads((d / "meta.json").read_text()) == {"kind": "image", "file": "images.npy"}
    np.testing.assert_array_equal(np.load(d / "images.npy"), rgb.astype(np.float32))
    tokens = [["The", " cat", " sat"], ["A", " dog"]]
    report.write_inputs(tmp_path, texts=tokens, highlight=[1, 0])
    assert json.loads((d / "texts.json").read_text()) == tokens
    assert json.loads((d / "meta.json").read_text())["tokens"] == [1, 0]
    assert report.page._snippet(tokens[0], 1) == "The <mark>cat</mark> sat"
    for kwargs, error, message in [
        ({}, ParameterError, "either images= or texts="),
        ({"images": rgb, "texts": ["a"]}, ParameterError, "either images= or texts="),
        ({"images": rgb[..., :2]}, ShapeError, r"\(N, H, W\) or \(N, H, W, 3\)"),
        ({"images": rgb * 2}, ParameterError, r"values in \[0, 1\]; image 0"),
        ({"images": rgb, "highlight": [0]}, ParameterError, "highlight= goes with texts="),
        ({"texts": ["a b", "c"], "highlight": [0]}, ShapeError, "1 entries for 2 texts"),
        ({"texts": ["a b", "c"], "highlight": [2, None]}, ParameterError, r"highlight\[0\] = 2 is outside"),
        ({"texts": ["a", 3]}, ParameterError, r"texts\[1\] must be a string"),
    ]:
        with pytest.raises(error, match=message):
            report.write_inputs(tmp_path / "bad", **kwargs)
        assert not (tmp_path / "bad" / "inputs" / "meta.json").exists()


def test_trustworthy_are_the_passing_metrics() -> None:
    assert report.TRUSTWORTHY == ("correlation", "cosine", "auprc", "f1", "iou")
    assert set(report.TRUSTWORTHY) == set(PASSING_METRICS)


# --------------------------------------------------------------------------- in a browser


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _browse(page: Path, profile: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    argv = [
        str(_chromium()),
        "--headless",
        "--disable-gpu",
        "--no-sandbox",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=5000",
        f"--user-data-dir={profile}",
        *flags,
        page.as_uri(),
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def _console_errors(log: str) -> list[str]:
    # Headless Chromium logs every console message as "...:CONSOLE:<line>]" (older builds
    # "CONSOLE(<line>)") without its level; the page logs nothing, so any one is an error.
    return [line for line in log.splitlines() if "CONSOLE" in line or "Uncaught" in line]


def _image_check(dom: str) -> dict[str, str]:
    match = re.search(r'<div id="image-check"([^>]*)>', dom)
    assert match, "no #image-check in the dumped DOM"
    return dict(re.findall(r'([\w-]+)="([^"]*)"', match.group(1)))


@pytest.mark.skipif(
    _chromium() is None, reason="Chromium is not installed (apt-get install chromium; the Makefile installs it)"
)
@pytest.mark.slow
def test_page_in_headless_chromium(results: Results, tmp_path: Path) -> None:
    page = report.write_report(results.directory, tmp_path / "report.html")
    shot = tmp_path / "screenshot.png"
    run1 = _browse(page, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1400,2000")
    assert run1.returncode == 0, run1.stderr[-2000:]
    assert not _console_errors(run1.stderr)
    assert shot.read_bytes()[:8] == PNG_MAGIC and shot.stat().st_size > 10_000
    run2 = _browse(page, tmp_path / "profile", "--dump-dom")
    assert run2.returncode == 0, run2.stderr[-2000:]
    assert not _console_errors(run2.stderr)
    n_images = 8 * sum(LAYERS.values()) + 1  # top inputs and the sanity chart
    assert _image_check(run2.stdout) == {"data-broken": "0", "hidden": "", "data-images": str(n_images)}
    # The check sees a broken image.
    broken = tmp_path / "broken.html"
    broken.write_text(page.read_text().replace("<footer>", '<img src="data:image/png;base64,AAAA" alt="x"><footer>'))
    run3 = _browse(broken, tmp_path / "profile", "--dump-dom")
    check = _image_check(run3.stdout)
    assert (check["data-broken"], check["data-images"]) == ("1", str(n_images + 1))
    assert "hidden" not in check
