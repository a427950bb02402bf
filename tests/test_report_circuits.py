"""The report's circuits section: the page of directories that `CircuitRun.write` wrote (alone, as
subdirectories, or under ``circuits/`` of a results directory) read back: the CPR/CMD table and
each run's summary against the run's numbers, the best of each column marked, the faithfulness
curves' points mapped back through the chart's axes to the run's faithfulness, and a broken run
as an error naming the file."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from cli_helpers import assert_one_line_error, run
from html_tree import Node, parse
from neuroneval import report
from neuroneval.circuits import FRACTIONS, transformer_graph
from neuroneval.circuits.results import CIRCUIT_RUN_FILE, CircuitRun, MethodCurve, best_marks, circuit_table
from neuroneval.errors import SourceError

GRAPH = transformer_graph(2, 2)


def make_run(
    task: str, methods: tuple[str, ...], seed: int = 0, *, full: float = 2.0, empty: float = -1.0
) -> CircuitRun:
    """Random curves whose faithfulness stays within [-0.4, 1.6] (the chart's range, unclipped)."""
    rng = np.random.default_rng(seed)
    curves = []
    for j, m in enumerate(methods):
        f_signed, f_absolute = rng.uniform(-0.4, 1.6, 10), rng.uniform(-0.4, 1.6, 10)
        curves.append(
            MethodCurve(
                m,
                rng.normal(size=GRAPH.n_edges),
                0.25 * (j + 1),
                np.sort(rng.integers(0, GRAPH.n_edges, 10)),
                empty + f_signed * (full - empty),
                np.sort(rng.integers(0, GRAPH.n_edges, 10)),
                empty + f_absolute * (full - empty),
                auroc=None if m == "random" else 0.5 + 0.1 * j,
            )
        )
    return CircuitRun("digit-pair", task, "patching", 2, 2, 64, 128, 5, seed, FRACTIONS, full, empty, tuple(curves))


def number(v: float | None) -> str:
    if v is None:
        return "\u2013"
    return "NaN" if math.isnan(v) else f"{v:.3f}"


def check_table(section: Node, runs: list[CircuitRun], labels: list[str]) -> None:
    """The CPR/CMD table: its header names each run, its rows are the methods in MIB's order, its
    cells the runs' CPR and CMD, the best of each column (and only those) marked."""
    table = section.find("table", id="circuits-table")
    heads = [th.text() for th in table.find("thead").find_all("tr")[0].find_all("th")]
    assert heads == ["method", *labels]
    expected = circuit_table(runs, labels)
    marks = best_marks(expected)
    trs = table.find("tbody").find_all("tr")
    assert [tr.attrs["data-method"] for tr in trs] == expected["method"].to_list()
    for i, tr in enumerate(trs):
        cells = tr.find_all("td")
        assert [td.text() for td in cells] == [number(expected[c][i]) for c in expected.columns[1:]]
        assert ["best" in td.attrs["class"].split() for td in cells] == [marks[c][i] for c in expected.columns[1:]]


def check_run(section: Node, i: int, r: CircuitRun) -> None:
    """Run i's summary table and its two charts against the run's numbers."""
    anchor = f"circuits-run-{i}"
    summary = section.find("table", id=f"{anchor}-summary")
    trs = summary.find("tbody").find_all("tr")
    assert [tr.attrs["data-method"] for tr in trs] == r.method_names
    for tr, row in zip(trs, r.summary().iter_rows(named=True), strict=True):
        cells = [td.text() for td in tr.find_all("td")]
        assert cells == [
            number(row["cpr"]),
            number(row["cmd"]),
            number(row["mean_faithfulness_signed"]),
            number(row["mean_faithfulness_absolute"]),
            number(row["auroc"]),
            f"{row['seconds']:.2f}",
        ]
    # The charts follow the run's summary table (and precede the next run's heading).
    charts = charts_of(section, anchor)
    assert [svg.attrs["data-criterion"] for svg in charts] == ["signed", "absolute"]
    for svg in charts:
        criterion = svg.attrs["data-criterion"]
        to_f, to_fraction = axes(svg)
        groups = svg.find_all("g", class_="method")
        assert [g.attrs["data-method"] for g in groups] == r.method_names
        for g in groups:
            m = r.curve(g.attrs["data-method"])
            points = [tuple(map(float, p.split(","))) for p in g.find("polyline").attrs["points"].split()]
            assert len(points) == len(r.fractions) == 10
            f = r.faithfulness(m.method, criterion)
            np.testing.assert_allclose([to_f(y) for _, y in points], f, atol=0.01)
            np.testing.assert_allclose([to_fraction(x) for x, _ in points], r.fractions, rtol=0.02)
            titles = [c.find("title").text() for c in g.find_all("circle")]
            assert titles == [
                f"{m.method}: {100 * k:g}% of the edges ({n:,} after pruning), f = {v:.3f}"
                for k, n, v in zip(r.fractions, m.edges(criterion).tolist(), f, strict=True)
            ]


def charts_of(section: Node, anchor: str) -> list[Node]:
    """The faithfulness charts between the heading `anchor` and the next heading."""
    found, inside = [], False
    for child in walk(section):
        if child.tag == "h3":
            inside = child.attrs.get("id") == anchor
        elif inside and child.tag == "svg" and "faithfulness" in child.attrs.get("class", ""):
            found.append(child)
    return found


def walk(node: Node) -> list[Node]:
    out = []
    for c in node.children:
        if isinstance(c, Node):
            out.append(c)
            out += walk(c)
    return out


def axes(svg: Node) -> tuple:  # type: ignore[type-arg]
    """The chart's mappings back to data: f from y (the f = 0 and f = 1 lines), the fraction from x
    (the 0.1% and 100% tick labels, on a log scale)."""
    zero = float(svg.find("line", class_="zero").attrs["y1"])
    one = float(svg.find("line", class_="target").attrs["y1"])
    ticks = {t.text(): float(t.attrs["x"]) for t in svg.find_all("text")}
    x_lo, x_hi = ticks["0.1%"], ticks["100%"]

    def to_f(y: float) -> float:
        return (zero - y) / (zero - one)

    def to_fraction(x: float) -> float:
        return 10 ** (-3 + 3 * (x - x_lo) / (x_hi - x_lo))

    return to_f, to_fraction


def test_a_run_directory_alone(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    r = replace(make_run("digit-pair", ("exact", "random", "eap", "eap-ig-inputs")), activation_steps=2)
    r.write(tmp_path / "dp")
    doc = parse(report.render_report(tmp_path / "dp"))
    section = doc.find("section", id="circuits")
    assert not doc.find_all("section", class_="layer") and not doc.find_all("section", id="compare")
    assert doc.find("nav").find("a").attrs["href"] == "#circuits"
    header = " ".join(doc.find("header").text().split())
    assert "1 circuit-localization run (MIB's circuit track): digit-pair/digit-pair." in header
    check_table(section, [r], ["digit-pair/digit-pair"])
    check_run(section, 0, r)
    facts = " ".join(section.find("ul", class_="facts").text().split())
    assert f"{GRAPH.n_edges} edges (2 layers of 2 heads)" in facts and "m(full) 2, m(empty) -1" in facts
    assert "EAP-IG: 5 integration steps on inputs, 2 on activations" in facts  # the steps that ran
    assert "UGS" not in facts  # a run without UGS says nothing of it
    with_ugs = replace(r, ugs_steps=40, ugs_sparsity=0.002)
    with_ugs.write(tmp_path / "ugs")
    ugs_facts = parse(report.render_report(tmp_path / "ugs")).find("section", id="circuits").find("ul", class_="facts")
    assert "UGS: 40 steps of 5 examples, sparsity 0.002" in " ".join(ugs_facts.text().split())
    notes = " ".join(" ".join(p.text().split()) for p in section.find_all("p", class_="note"))
    assert "log axis" in notes and "CPR and CMD integrate the same points on the linear axis" in notes
    code, out, err = run(["report", tmp_path / "dp"], capfd)
    assert code == 0 and err == "" and (tmp_path / "dp" / "report.html").is_file()


def test_a_results_directory_with_circuit_runs(tmp_path: Path) -> None:
    d = tmp_path / "results"
    d.mkdir()
    pl.DataFrame({"unit": ["u0", "u1"], "concept": ["a", "b"], "correlation": [0.5, 0.2]}).write_parquet(
        d / "scores.parquet"
    )
    assert not parse(report.render_report(d)).find_all("section", id="circuits")
    ioi = make_run("ioi", ("random", "eap", "eap-ig-activations"), seed=1)
    arithmetic = make_run("arithmetic", ("eap", "random", "my-method"), seed=2)
    ioi.write(d / "circuits" / "b-ioi")
    arithmetic.write(d / "circuits" / "a-arithmetic")
    doc = parse(report.render_report(d))
    assert len(doc.find_all("section", class_="layer")) == 1
    section = doc.find("section", id="circuits")
    runs = [arithmetic, ioi]  # by directory name
    check_table(section, runs, ["digit-pair/arithmetic", "digit-pair/ioi"])
    for i, r in enumerate(runs):
        check_run(section, i, r)
    assert "circuits/a-arithmetic/" in section.text() and "circuits/b-ioi/" in section.text()
    # A method a run lacks is a dash, not a number.
    trs = {
        tr.attrs["data-method"]: tr for tr in section.find("table", id="circuits-table").find("tbody").find_all("tr")
    }
    assert [td.text() for td in trs["my-method"].find_all("td")][2:] == ["\u2013", "\u2013"]
    assert [a.attrs["href"] for a in doc.find("nav").find_all("a")][-1] == "#circuits"


def test_runs_of_one_task_are_told_apart_and_undefined_runs_have_no_curves(tmp_path: Path) -> None:
    a = make_run("ioi", ("random", "eap"), seed=3)
    b = make_run("ioi", ("random", "eap"), seed=4, full=0.5, empty=0.5)  # f undefined
    a.write(tmp_path / "seed3")
    b.write(tmp_path / "seed4")
    doc = parse(report.render_report(tmp_path))
    section = doc.find("section", id="circuits")
    check_table(section, [a, b], ["digit-pair/ioi [seed3]", "digit-pair/ioi [seed4]"])
    check_run(section, 0, a)
    assert charts_of(section, "circuits-run-1") == []
    assert "faithfulness is undefined for this run" in section.text()
    cells = [td.text() for td in section.find("table", id="circuits-run-1-summary").find("tbody").find_all("td")]
    assert cells[:4] == ["NaN"] * 4


def test_a_point_off_the_axis_sits_on_its_edge_with_its_value_in_its_title(tmp_path: Path) -> None:
    base = make_run("ioi", ("eap",), seed=5)
    m = base.methods[0]
    metric = m.signed_metric.copy()
    metric[4] = base.empty + 9.0 * (base.full - base.empty)  # f = 9
    curve = MethodCurve("eap", m.scores, m.seconds, m.signed_edges, metric, m.absolute_edges, m.absolute_metric)
    r = CircuitRun(**{**base.__dict__, "methods": (curve,)})
    r.write(tmp_path)
    section = parse(report.render_report(tmp_path)).find("section", id="circuits")
    svg = charts_of(section, "circuits-run-0")[0]
    to_f, _ = axes(svg)
    circles = svg.find("g", class_="method").find_all("circle")
    assert circles[4].find("title").text().endswith("f = 9.000")
    top = min(float(c.attrs["cy"]) for c in circles)
    assert float(circles[4].attrs["cy"]) == top and 2.5 <= to_f(top) < 9.0


def test_a_broken_run_is_an_error_naming_the_file(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    make_run("ioi", ("eap",)).write(tmp_path / "circuits")
    path = tmp_path / "circuits" / CIRCUIT_RUN_FILE
    doc = json.loads(path.read_text())
    doc["version"] = 7
    path.write_text(json.dumps(doc))
    with pytest.raises(SourceError, match=re.escape(str(path)) + " has format version 7"):
        report.render_report(tmp_path)
    code, _, err = run(["report", tmp_path], capfd)
    assert_one_line_error(code, err, 2, str(path), "format version 7")
    doc["version"] = 1
    path.write_text(json.dumps(doc))
    scores = tmp_path / "circuits" / "scores" / "eap.json"
    scores.write_text("[]")
    with pytest.raises(SourceError, match=re.escape(str(scores)) + " has no 'edges' object"):
        report.render_report(tmp_path)
