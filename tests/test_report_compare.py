"""The report's comparison section: the page of a directory that `Comparison.write` wrote (alone,
or as ``compare/`` of a results directory) read back: the coverage, ranking and differences
tables against the comparison's tables, the SVG chart's dots and bars against the means and
intervals, and a comparison that breaks the contract as an error naming the file."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from cli_helpers import run
from html_tree import Node, parse
from neuroneval import report
from neuroneval.compare import COMPARISON_FILES, Comparison, compare
from neuroneval.errors import SourceError

METRICS = ["correlation", "auprc"]


def make_comparison(seed: int = 0) -> Comparison:
    rng = np.random.default_rng(seed)
    n, k = 200, 8
    truth = (rng.random((n, k)) < 0.3).astype(float)
    acts = truth + 0.8 * rng.normal(size=(n, k))
    acts[:, 7] = 0.0  # dead
    table = pl.DataFrame(
        {
            "unit": [*range(k), 0, 1, 2, 3, 4],
            "explainer": ["lexicon <b>"] * k + ["llm & co"] * 5,  # names that need escaping
            "explanation": [f"c{j}" for j in range(k + 5)],
        }
    )
    concepts = np.hstack([np.clip(truth + 0.2 * rng.normal(size=truth.shape), 0, 1), rng.random((n, 5))])
    return compare(acts, table, concepts, metrics=METRICS, alpha=0.05, n_boot=100)


def number(v: float) -> str:
    return "NaN" if np.isnan(v) else f"{v:.3f}"


def check_section(doc: Node, c: Comparison) -> None:
    section = doc.find("section", id="compare")
    assert section.find("h2").text() == "Comparison of explainers"
    text = " ".join(section.text().split())
    assert "1 dead unit (constant over the inputs) is left out" in text
    assert "baseline:random" in text and "derangement" in text
    coverage = section.find("table", id="compare-coverage")
    rows = coverage.find("tbody").find_all("tr")
    assert [tr.attrs["data-explainer"] for tr in rows] == c.explainers
    for tr, r in zip(rows, c.summary.iter_rows(named=True), strict=True):
        cells = [td.text() for td in tr.find_all("td")]
        assert cells == [str(r[x]) for x in ("units_explained", "units_unexplained", "units_dead", "pairs_with_nan")]
    for m in c.metrics:
        ranking = section.find("table", id=f"compare-{m}-ranking")
        expected = c.summary.sort(f"{m}_rank")
        trs = ranking.find("tbody").find_all("tr")
        assert [tr.attrs["data-explainer"] for tr in trs] == expected["explainer"].to_list()
        for tr, r in zip(trs, expected.iter_rows(named=True), strict=True):
            cells = [td.text() for td in tr.find_all("td")]
            interval = f"[{number(r[f'{m}_ci_low'])}, {number(r[f'{m}_ci_high'])}]"
            assert cells == [
                str(r[f"{m}_rank"]),
                str(r[f"{m}_n"]),
                number(r[f"{m}_mean"]),
                interval,
                number(r[f"{m}_median"]),
                str(r[f"{m}_nan"]),
            ]
            assert tr.find("th").text() == r["explainer"]
        # The chart: one row per explainer in rank order; the dot inside its bar; dots ordered as the means.
        svg = [s for s in section.find_all("svg") if m in s.attrs["aria-label"]][0]
        groups = svg.find_all("g", class_="explainer")
        assert [g.find("text").text() for g in groups] == expected["explainer"].to_list()
        xs = []
        for g, r in zip(groups, expected.iter_rows(named=True), strict=True):
            dot = float(g.find("circle").attrs["cx"])
            bar = g.find("line", class_="interval")
            low, high = float(bar.attrs["x1"]), float(bar.attrs["x2"])
            assert low - 0.11 <= dot <= high + 0.11
            assert g.find("title").text().startswith(f"{r['explainer']}: mean {r[f'{m}_mean']:.3f}")
            xs.append(dot)
        assert xs == sorted(xs, reverse=True)
        diffs = section.find("table", id=f"compare-{m}-differences")
        expected_d = c.differences.filter(pl.col("metric") == m)
        trs = diffs.find("tbody").find_all("tr")
        assert [(tr.attrs["data-a"], tr.attrs["data-b"]) for tr in trs] == list(
            zip(expected_d["explainer_a"], expected_d["explainer_b"], strict=True)
        )
        for tr, d in zip(trs, expected_d.iter_rows(named=True), strict=True):
            cells = [td.text() for td in tr.find_all("td")]
            assert cells == [
                str(d["n_units"]),
                number(d["mean_difference"]),
                f"[{number(d['ci_low'])}, {number(d['ci_high'])}]",
                number(d["win_rate"]),
                number(d["tie_rate"]),
            ]


def test_a_comparison_directory_alone(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    c = make_comparison()
    c.write(tmp_path / "cmp")
    page = report.render_report(tmp_path / "cmp")
    doc = parse(page)
    check_section(doc, c)
    assert not doc.find_all("section", class_="layer")
    header = " ".join(doc.find("header").text().split())
    assert "A comparison of 4 explainers of 8 units over 200 inputs." in header
    assert "scored pairs" not in header
    assert doc.find("nav").find("a").attrs["href"] == "#compare"
    assert "lexicon &lt;b&gt;" in page and "llm &amp; co" in page  # escaped
    code, stdout, err = run(["report", tmp_path / "cmp"], capfd)
    assert code == 0 and err == "" and (tmp_path / "cmp" / "report.html").is_file()


def test_a_results_directory_with_a_comparison(tmp_path: Path) -> None:
    d = tmp_path / "results"
    d.mkdir()
    pl.DataFrame(
        {"unit": ["u0", "u0", "u1"], "concept": ["a", "b", "a"], "correlation": [0.5, 0.2, np.nan]}
    ).write_parquet(d / "scores.parquet")
    without = parse(report.render_report(d))
    assert not without.find_all("section", id="compare")
    c = make_comparison(1)
    c.write(d / "compare")
    doc = parse(report.render_report(d))
    assert len(doc.find_all("section", class_="layer")) == 1
    check_section(doc, c)
    assert "compare/" in doc.find("section", id="compare").text()
    assert [a.attrs["href"] for a in doc.find("nav").find_all("a")][-1] == "#compare"


def test_a_broken_comparison_is_an_error_naming_the_file(tmp_path: Path) -> None:
    d = tmp_path / "cmp"
    make_comparison().write(d)
    config = d / COMPARISON_FILES["config"]
    good = config.read_text()
    for text, message in [
        ("{", "not valid JSON"),
        (json.dumps({"format": "other"}), "is not a comparison's settings"),
        (good.replace('"confidence": 0.95', '"confidence": 2'), "'confidence' must be a number in"),
        (good.replace('"correlation",', '"nope",', 1), "'metrics' must be a list of metric names"),
    ]:
        config.write_text(text)
        with pytest.raises(SourceError, match=re.escape(str(config)) + ".*" + message):
            report.render_report(d)
    config.write_text(good)
    summary = d / COMPARISON_FILES["summary"]
    pl.read_csv(summary).drop("auprc_ci_low").write_csv(summary)
    with pytest.raises(SourceError, match=re.escape(str(summary)) + " lacks the columns auprc_ci_low"):
        report.render_report(d)
    summary.unlink()
    with pytest.raises(SourceError, match=re.escape(str(summary)) + " is missing"):
        report.render_report(d)
