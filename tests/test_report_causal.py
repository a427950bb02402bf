"""The report's causal-variables section: the page of directories that `write_causal_run` wrote (alone,
as subdirectories, under ``causal/`` of a results directory, beside circuit runs) read back: the
table against the runs' numbers, one IIA-per-layer chart per (run, variable) whose points map back
through the chart's axes to `layer_iia`, the featurizers' fixed colours, and a broken run as an error
naming the file."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from cli_helpers import assert_one_line_error, run
from html_tree import Node, parse
from neuroneval import report
from neuroneval.causal.iia import layer_iia, summarize
from neuroneval.causal.results import (
    CAUSAL_FEATURIZERS,
    CAUSAL_RUN_FILE,
    CausalRun,
    FeaturizerResult,
    causal_table,
    write_causal_run,
)
from neuroneval.errors import SourceError
from neuroneval.report.charts import featurizer_colours, iia_chart

POSITIONS = ("name", "last")


def make_run(
    task: str,
    variables: tuple[str, ...],
    featurizers: tuple[str, ...],
    layers: tuple[int, ...] = (0, 2, 5),
    seed: int = 0,
    *,
    model: str = "planted",
) -> CausalRun:
    """IIA drawn per (layer, position), its summaries computed as the track computes them, made-up
    intervals and seconds (all distinct, so a swapped cell shows)."""
    rng = np.random.default_rng(seed)
    results = []
    for v in variables:
        for f in featurizers:
            unit = rng.uniform(0.0, 1.0, (len(layers), len(POSITIONS)))
            average, highest = summarize(unit)
            results.append(
                FeaturizerResult(
                    f,
                    v,
                    unit,
                    average,
                    highest,
                    (average - rng.uniform(0.01, 0.1), average + rng.uniform(0.01, 0.1)),
                    (highest - rng.uniform(0.01, 0.1), min(1.0, highest + rng.uniform(0.01, 0.1))),
                    float(rng.uniform(10, 2000)),
                    float(rng.uniform(0, 10)),
                )
            )
    datasets = tuple(
        {"name": f"{v}-cf", "variable": v, "drawn": 80, "kept": 70, "n_train": 32, "n_test": 16} for v in variables
    )
    options = {
        "n_train": 32,
        "n_test": 16,
        "size": 4,
        "epochs": 2,
        "batch_size": 8,
        "n_boot": 50,
        "level": 0.9,
        "seed": seed,
    }
    return CausalRun(model, task, layers, POSITIONS, datasets, tuple(results), options)


def cell(value: float, low: float, high: float) -> str:
    return f"{value:.3f} [{low:.3f}, {high:.3f}]"


def check_table(section: Node, runs: list[CausalRun], labels: list[str]) -> None:
    """One row per run, variable and featurizer (as `causal_table` orders them), its cells the run's numbers."""
    trs = section.find("table", id="causal-table").find("tbody").find_all("tr")
    expected = [
        (i, label, r) for i, (run_, label) in enumerate(zip(runs, labels, strict=True)) for r in causal_table([run_])
    ]
    assert len(trs) == len(expected)
    for tr, (i, label, r) in zip(trs, expected, strict=True):
        assert (tr.attrs["data-run"], tr.attrs["data-variable"], tr.attrs["data-featurizer"]) == (
            f"causal-run-{i}",
            r["variable"],
            r["featurizer"],
        )
        assert [td.text() for td in tr.find_all("td")] == [
            label,
            r["variable"],
            cell(r["average"], r["average_low"], r["average_high"]),
            cell(r["highest"], r["highest_low"], r["highest_high"]),
            f"{r['fit_seconds']:,.2f}",
            f"{r['seconds']:,.2f}",
        ]
        assert tr.find("th").text().strip() == r["featurizer"]
        colour = featurizer_colours([x.featurizer for x in runs[i].results])[r["featurizer"]]
        assert tr.find("span", class_="sw").attrs["style"] == f"background:{colour}"


def charts_of(section: Node, anchor: str) -> list[Node]:
    """The IIA charts between the heading `anchor` and the next heading."""
    found, inside = [], False
    for child in walk(section):
        if child.tag == "h3":
            inside = child.attrs.get("id") == anchor
        elif inside and child.tag == "svg" and "iia" in child.attrs.get("class", "").split():
            found.append(child)
    return found


def walk(node: Node) -> list[Node]:
    out = []
    for c in node.children:
        if isinstance(c, Node):
            out.append(c)
            out += walk(c)
    return out


def check_run(section: Node, i: int, r: CausalRun) -> None:
    """Run i's charts: one per variable (sorted, as in the table), one line per featurizer (in
    CAUSAL_FEATURIZERS order, others after; its colour fixed), each point a layer at its `layer_iia`."""
    charts = charts_of(section, f"causal-run-{i}")
    variables = sorted({x.variable for x in r.results})
    assert [svg.attrs["data-variable"] for svg in charts] == variables
    present = list(dict.fromkeys(x.featurizer for x in r.results))
    featurizers = [f for f in CAUSAL_FEATURIZERS if f in present] + [f for f in present if f not in CAUSAL_FEATURIZERS]
    for svg in charts:
        variable = svg.attrs["data-variable"]
        assert svg.find("title").text().startswith(f"IIA on {variable} of each featurizer")
        figure = next(n for n in walk(section) if n.tag == "figure" and any(c is svg for c in n.children))
        caption = " ".join(figure.find("figcaption").text().split())
        assert caption.startswith("IIA at the best token position of each layer, on held-out pairs")
        base = next(ln for ln in svg.find_all("line", class_="axis") if ln.attrs["y1"] == ln.attrs["y2"])
        zero, one = float(base.attrs["y1"]), float(svg.find("line", class_="target").attrs["y1"])
        ticks = {t.text(): float(t.attrs["x"]) for t in svg.find_all("text")}
        groups = svg.find_all("g", class_="featurizer")
        assert [g.attrs["data-featurizer"] for g in groups] == featurizers
        for g in groups:
            f = g.attrs["data-featurizer"]
            order = np.argsort(r.layers)  # the line runs from the lowest layer to the highest
            unit = r.result(f, variable).unit_iia[order]
            layers = [r.layers[k] for k in order]
            expected = layer_iia(unit)
            points = [tuple(map(float, p.split(","))) for p in g.find("polyline").attrs["points"].split()]
            assert len(points) == len(r.layers)
            np.testing.assert_allclose([(zero - y) / (zero - one) for _, y in points], expected, atol=0.002)
            np.testing.assert_allclose([x for x, _ in points], [ticks[str(layer)] for layer in layers], atol=0.06)
            assert g.find("polyline").attrs["stroke"] == featurizer_colours(featurizers)[f]
            assert [c.find("title").text() for c in g.find_all("circle")] == [
                f"{f}: layer {layer}, IIA {v:.3f} at position {POSITIONS[int(np.argmax(row))]}"
                for layer, v, row in zip(layers, expected, unit, strict=True)
            ]
            legend = [t.text() for t in g.find_all("text")]
            assert legend == [f]


def test_a_run_directory_alone(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    r = make_run("planted", ("x", "a"), ("das", "neurons"))
    write_causal_run(r, tmp_path / "run")
    doc = parse(report.render_report(tmp_path / "run"))
    section = doc.find("section", id="causal")
    assert not doc.find_all("section", class_="layer") and not doc.find_all("section", id="circuits")
    assert [a.attrs["href"] for a in doc.find("nav").find_all("a")] == ["#causal"]
    header = " ".join(doc.find("header").text().split())
    assert "1 causal-variable run (MIB's causal-variable track): planted/planted." in header
    assert section.find("h2").text().startswith("Causal variables")
    check_table(section, [r], ["planted/planted"])
    check_run(section, 0, r)
    assert len(charts_of(section, "causal-run-0")) == 2  # one per variable
    facts = " ".join(section.find("ul", class_="facts").text().split())
    assert "layers 0, 2, 5" in facts and "positions name, last" in facts and "2 variables, 2 featurizers" in facts
    assert "90% bootstrap interval" in section.text()
    code, _, err = run(["report", tmp_path / "run"], capfd)
    assert code == 0 and err == "" and (tmp_path / "run" / "report.html").is_file()


def test_a_results_directory_with_causal_and_circuit_runs(tmp_path: Path) -> None:
    from test_report_circuits import make_run as make_circuit_run

    d = tmp_path / "results"
    d.mkdir()
    pl.DataFrame({"unit": ["u0", "u1"], "concept": ["a", "b"], "correlation": [0.5, 0.2]}).write_parquet(
        d / "scores.parquet"
    )
    assert not parse(report.render_report(d)).find_all("section", id="causal")
    ioi = make_run(
        "ioi", ("output_token",), ("random", "das", "full", "pca"), layers=(3, 1, 7, 9), seed=1, model="smollm2"
    )
    arithmetic = make_run("arithmetic", ("op1", "op2"), ("sae", "dbm-sae", "my-featurizer"), seed=2, model="smollm2")
    write_causal_run(ioi, d / "causal" / "b-ioi")
    write_causal_run(arithmetic, d / "causal" / "a-arithmetic")
    make_circuit_run("ioi", ("eap", "random")).write(d / "circuits")
    doc = parse(report.render_report(d))
    assert len(doc.find_all("section", class_="layer")) == 1
    assert doc.find_all("section", id="circuits")
    section = doc.find("section", id="causal")
    runs = [arithmetic, ioi]  # by directory name
    check_table(section, runs, ["smollm2/arithmetic", "smollm2/ioi"])
    for i, r in enumerate(runs):
        check_run(section, i, r)
    assert "causal/a-arithmetic/" in section.text() and "causal/b-ioi/" in section.text()
    assert [a.attrs["href"] for a in doc.find("nav").find_all("a")][-2:] == ["#circuits", "#causal"]
    # An unknown featurizer comes after the known ones, with a colour of its own.
    g = charts_of(section, "causal-run-0")[0].find_all("g", class_="featurizer")
    assert [x.attrs["data-featurizer"] for x in g] == ["sae", "dbm-sae", "my-featurizer"]
    assert g[2].find("polyline").attrs["stroke"] not in featurizer_colours(list(CAUSAL_FEATURIZERS)).values()


def test_runs_without_scores_are_summed_up_and_runs_of_one_task_told_apart(tmp_path: Path) -> None:
    from test_report_circuits import make_run as make_circuit_run

    a = make_run("planted", ("x",), ("full", "neurons"), seed=3)
    b = make_run("planted", ("x",), ("full", "neurons"), layers=(4,), seed=4)
    write_causal_run(a, tmp_path / "seed3")
    write_causal_run(b, tmp_path / "seed4")
    make_circuit_run("ioi", ("eap",)).write(tmp_path / "circuits" / "c")
    doc = parse(report.render_report(tmp_path))
    header = " ".join(doc.find("header").text().split())
    assert (
        "1 circuit-localization run (MIB's circuit track): digit-pair/ioi. "
        "2 causal-variable runs (MIB's causal-variable track): planted/planted." in header
    )
    section = doc.find("section", id="causal")
    check_table(section, [a, b], ["planted/planted [seed3]", "planted/planted [seed4]"])
    check_run(section, 0, a)
    check_run(section, 1, b)  # a single layer: one point, mid-axis


def test_featurizer_colours_are_fixed_and_distinct() -> None:
    colours = featurizer_colours(list(CAUSAL_FEATURIZERS))
    assert len(set(colours.values())) == len(CAUSAL_FEATURIZERS)
    assert featurizer_colours(["other", *reversed(CAUSAL_FEATURIZERS)]) == {**colours, "other": "#17becf"}


def test_an_undefined_layer_is_left_out_of_its_line() -> None:
    unit = np.array([[0.5, 0.25], [np.nan, np.nan], [0.0, 1.0]])
    chart = iia_chart("x", (0, 1, 2), POSITIONS, [("das", unit)])
    assert chart is not None
    (line,) = chart.lines
    assert [m.title for m in line.markers] == [
        "das: layer 0, IIA 0.500 at position name",
        "das: layer 2, IIA 1.000 at position last",
    ]
    assert iia_chart("x", (), POSITIONS, [("das", np.zeros((0, 2)))]) is None


def test_a_broken_run_is_an_error_naming_the_file(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SourceError, match=re.escape(f"nor a causal-variable run's {CAUSAL_RUN_FILE}")):
        report.render_report(tmp_path)
    write_causal_run(make_run("planted", ("x",), ("das",)), tmp_path / "causal")
    path = tmp_path / "causal" / CAUSAL_RUN_FILE
    good = json.loads(path.read_text())
    path.write_text("{")
    with pytest.raises(SourceError, match=re.escape(str(path))):
        report.render_report(tmp_path)
    code, _, err = run(["report", tmp_path], capfd)
    assert_one_line_error(code, err, 2, str(path))
    for change, message in [
        (lambda doc: doc.update(format="other"), "is not a neuroneval causal run"),
        (lambda doc: doc.pop("layers"), "'layers' is missing"),
        (lambda doc: doc["results"][0].update(unit_iia=[[0.5, 0.5]]), "has IIA of shape (1, 2); expected"),
        (lambda doc: doc["results"][0].update(unit_iia=[[0.5], [0.5, 0.1], [0.2]]), "is malformed"),
        (lambda doc: doc["results"][0].update(highest_interval=["a", 1]), "is malformed"),
        (lambda doc: doc["results"][0].update(average_interval=[0.1]), "an interval that is not two numbers"),
    ]:
        doc = json.loads(json.dumps(good))
        change(doc)
        path.write_text(json.dumps(doc))
        with pytest.raises(SourceError, match="^" + re.escape(str(path)) + "[ :].*" + re.escape(message)) as caught:
            report.render_report(tmp_path)
        assert str(caught.value).count(str(path)) == 1  # named once, not wrapped twice
