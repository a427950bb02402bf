"""`neuroneval.circuits.results`: a circuit run built from synthetic arrays on transformer_graph(2, 2)
(no torch) written and read back exactly; its CPR, CMD and mean faithfulness against SPEC
section 7's formulas written out here; MIB's graph JSON of edge scores, and each way a file can fail
to match the graph as a clear error naming the file; MIB's table of runs with the best of each
column marked."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from neuroneval.circuits import FRACTIONS, cmd, cpr, transformer_graph
from neuroneval.circuits.results import (
    CIRCUIT_RUN_FILE,
    CURVES_FILE,
    SCORES_DIR,
    CircuitRun,
    MethodCurve,
    best_marks,
    circuit_table,
    edge_names,
    find_circuit_runs,
    format_circuit_table,
    read_circuit_run,
    read_edge_scores,
    run_labels,
    write_edge_scores,
)
from neuroneval.errors import OutputError, ParameterError, ShapeError, SourceError

GRAPH = transformer_graph(2, 2)
K = np.asarray(FRACTIONS)


def make_curve(
    name: str, rng: np.random.Generator, *, level: float | None = None, auroc: float | None = None
) -> MethodCurve:
    """Random scores and curves; `level` makes every circuit's metric that value instead."""
    n = len(FRACTIONS)
    signed = rng.uniform(-1.0, 3.0, n) if level is None else np.full(n, level)
    absolute = rng.uniform(-1.0, 3.0, n) if level is None else np.full(n, level)
    return MethodCurve(
        name,
        rng.normal(size=GRAPH.n_edges),
        float(rng.uniform(0, 10)),
        signed_edges=np.sort(rng.integers(0, GRAPH.n_edges + 1, n)),
        signed_metric=signed,
        absolute_edges=np.sort(rng.integers(0, GRAPH.n_edges + 1, n)),
        absolute_metric=absolute,
        auroc=auroc,
    )


def make_run(
    seed: int = 0,
    methods: tuple[str, ...] = ("random", "eap", "exact"),
    *,
    model: str = "digit-pair",
    task: str = "digit-pair",
    ablation: str = "patching",
    full: float = 2.5,
    empty: float = -0.5,
) -> CircuitRun:
    rng = np.random.default_rng(seed)
    curves = tuple(make_curve(m, rng, auroc=0.5 + 0.1 * j) for j, m in enumerate(methods))
    return CircuitRun(model, task, ablation, 2, 2, 64, 192, 5, seed, FRACTIONS, full, empty, curves)


def independent_f(metric: np.ndarray, full: float, empty: float) -> np.ndarray:
    """SPEC section 7: f(C) = (m(C) - m(empty)) / (m(full) - m(empty))."""
    return (np.asarray(metric) - empty) / (full - empty)


def trapezoid(k: np.ndarray, v: np.ndarray) -> float:
    return float(sum((k[j + 1] - k[j]) * (v[j] + v[j + 1]) / 2 for j in range(len(k) - 1)))


# --------------------------------------------------------------------------- the numbers


def test_cpr_cmd_and_mean_faithfulness_follow_the_formulas() -> None:
    run = make_run()
    summary = run.summary()
    assert summary.columns == [
        "method",
        "cpr",
        "cmd",
        "mean_faithfulness_signed",
        "mean_faithfulness_absolute",
        "auroc",
        "seconds",
    ]
    for row, m in zip(summary.iter_rows(named=True), run.methods, strict=True):
        f_signed = independent_f(m.signed_metric, run.full, run.empty)
        f_absolute = independent_f(m.absolute_metric, run.full, run.empty)
        np.testing.assert_allclose(m.signed_faithfulness(run.full, run.empty), f_signed, rtol=1e-12)
        np.testing.assert_allclose(m.absolute_faithfulness(run.full, run.empty), f_absolute, rtol=1e-12)
        # CPR from the signed circuits, CMD from the absolute ones, as the library's functions and as written out.
        assert m.cpr(run.full, run.empty) == pytest.approx(cpr(FRACTIONS, f_signed), rel=1e-12)
        assert m.cmd(run.full, run.empty) == pytest.approx(cmd(FRACTIONS, f_absolute), rel=1e-12)
        assert m.cpr(run.full, run.empty) == pytest.approx(trapezoid(K, f_signed), rel=1e-12)
        assert m.cmd(run.full, run.empty) == pytest.approx(trapezoid(K, np.abs(1 - f_absolute)), rel=1e-12)
        assert row["method"] == m.method
        assert row["cpr"] == pytest.approx(trapezoid(K, f_signed), rel=1e-12)
        assert row["cmd"] == pytest.approx(trapezoid(K, np.abs(1 - f_absolute)), rel=1e-12)
        assert row["mean_faithfulness_signed"] == pytest.approx(f_signed.mean(), rel=1e-12)
        assert row["mean_faithfulness_absolute"] == pytest.approx(f_absolute.mean(), rel=1e-12)
        assert (row["auroc"], row["seconds"]) == (m.auroc, m.seconds)
        assert run.cpr(m.method) == m.cpr(run.full, run.empty)
    # A perfect circuit at every size: f = 1, CPR = 0.999, CMD = 0.
    perfect = MethodCurve(
        "exact", np.zeros(GRAPH.n_edges), 1.0, np.ones(10, int), np.full(10, 2.5), np.ones(10, int), np.full(10, 2.5)
    )
    assert perfect.cpr(2.5, -0.5) == pytest.approx(0.999) and perfect.cmd(2.5, -0.5) == 0.0


def test_undefined_faithfulness_is_nan_not_an_error() -> None:
    run = make_run(full=1.0, empty=1.0)
    assert not run.defined
    row = run.summary().row(0, named=True)
    assert all(np.isnan(row[k]) for k in ("cpr", "cmd", "mean_faithfulness_signed", "mean_faithfulness_absolute"))
    assert np.isnan(run.faithfulness("eap")).all()


def test_auroc_is_optional() -> None:
    rng = np.random.default_rng(1)
    curve = make_curve("eap", rng)
    assert curve.auroc is None
    run = CircuitRun("m", "t", "mean", 2, 2, 8, 8, 1, 0, FRACTIONS, 1.0, 0.0, (curve,))
    assert run.summary()["auroc"].to_list() == [None]


# --------------------------------------------------------------------------- the files


def test_write_and_read_back_exactly(tmp_path: Path) -> None:
    run = make_run(3, ("eap-ig-activations", "random", "eap", "my-method.v2"), ablation="mean")
    written = run.write(tmp_path / "run")
    assert sorted(p.relative_to(tmp_path / "run").as_posix() for p in written) == sorted(
        [CIRCUIT_RUN_FILE, CURVES_FILE] + [f"{SCORES_DIR}/{m}.json" for m in run.method_names]
    )
    back = read_circuit_run(tmp_path / "run")
    assert back == run
    for field in ("model", "task", "ablation", "n_layers", "n_heads", "n_score", "n_eval", "steps", "seed"):
        assert getattr(back, field) == getattr(run, field)
    assert back.fractions == FRACTIONS and (back.full, back.empty) == (run.full, run.empty)
    for a, b in zip(back.methods, run.methods, strict=True):
        assert (a.method, a.seconds, a.auroc) == (b.method, b.seconds, b.auroc)
        for name in ("scores", "signed_edges", "signed_metric", "absolute_edges", "absolute_metric"):
            x, y = getattr(a, name), getattr(b, name)
            assert x.dtype == y.dtype and np.array_equal(x, y), name
        assert a.scores.dtype == np.float64 and a.signed_edges.dtype == np.int64
    # A changed number breaks equality (equality is not vacuous).
    other = make_run(4, run.method_names, ablation="mean")
    assert other != run


def test_the_files_hold_the_run(tmp_path: Path) -> None:
    run = make_run(5)
    run.write(tmp_path)
    doc = json.loads((tmp_path / CIRCUIT_RUN_FILE).read_text())
    assert (doc["format"], doc["version"]) == ("neuroneval-circuit-run", 1)
    assert (doc["n_layers"], doc["n_heads"], doc["n_edges"]) == (2, 2, GRAPH.n_edges)
    assert [m["method"] for m in doc["methods"]] == list(run.method_names)
    eap = doc["methods"][1]
    assert eap["signed"]["metric"] == run.curve("eap").signed_metric.tolist()
    assert eap["absolute"]["edges"] == run.curve("eap").absolute_edges.tolist()
    assert eap["cpr"] == pytest.approx(run.cpr("eap"))
    # curves.csv: one row per method, criterion and fraction; the faithfulness column is f's formula.
    with open(tmp_path / CURVES_FILE, newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["method", "criterion", "fraction", "edges", "metric", "faithfulness"]
    assert len(rows) == len(run.methods) * 2 * len(FRACTIONS)
    for r in rows:
        m = run.curve(r["method"])
        j = FRACTIONS.index(float(r["fraction"]))
        metric = m.metric(r["criterion"])[j]
        assert float(r["metric"]) == metric and int(r["edges"]) == m.edges(r["criterion"])[j]
        assert float(r["faithfulness"]) == pytest.approx((metric - run.empty) / (run.full - run.empty), rel=1e-12)
    # scores/<method>.json: MIB's graph JSON.
    mib = json.loads((tmp_path / SCORES_DIR / "eap.json").read_text())
    assert mib["cfg"] == {"n_layers": 2, "n_heads": 2, "parallel_attn_mlp": False}
    assert list(mib["nodes"]) == list(GRAPH.nodes) and all(v == {"in_graph": True} for v in mib["nodes"].values())
    names = [GRAPH.describe(i).replace(" -> ", "->") for i in range(GRAPH.n_edges)]
    assert list(mib["edges"]) == names and names[0] == "input->a0.h0<q>" and names[-1] == "m1->logits"
    assert [mib["edges"][n]["score"] for n in names] == run.curve("eap").scores.tolist()
    assert not list(tmp_path.glob(".*")) and not list((tmp_path / SCORES_DIR).glob(".*"))  # no temporaries


def test_rewriting_a_run_replaces_it(tmp_path: Path) -> None:
    make_run(1).write(tmp_path)
    smaller = make_run(2, ("eap",))
    smaller.write(tmp_path)
    assert read_circuit_run(tmp_path) == smaller
    with pytest.raises(OutputError, match="is a file"):
        smaller.write(tmp_path / CIRCUIT_RUN_FILE)


def test_edge_scores_round_trip_with_a_circuit(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    scores = rng.normal(size=GRAPH.n_edges)
    keep = np.zeros(GRAPH.n_edges, dtype=bool)
    keep[[0, GRAPH.n_edges - 1]] = True  # input -> a0.h0<q>, m1 -> logits
    path = write_edge_scores(tmp_path / "c.json", GRAPH, scores, in_graph=keep, cfg={"d_model": 64})
    assert np.array_equal(read_edge_scores(path, GRAPH), scores)
    doc = json.loads(path.read_text())
    assert doc["cfg"]["d_model"] == 64
    assert [n for n, v in doc["nodes"].items() if v["in_graph"]] == ["input", "a0.h0", "m1", "logits"]
    assert [n for n, v in doc["edges"].items() if v["in_graph"]] == ["input->a0.h0<q>", "m1->logits"]
    assert edge_names(GRAPH) == list(doc["edges"])


def test_a_runs_files_load_in_mibs_loader(tmp_path: Path) -> None:
    """EAP-IG's Graph.from_json, as MIB's evaluation calls it (tests/mib_graph.py, written from
    its code), loads every score file of a run that knows its model's width, with our scores
    under its names; the circuit file written with a mask loads with that mask."""
    from dataclasses import replace

    from mib_graph import mib_from_json

    run = replace(make_run(5), d_model=16)
    run.write(tmp_path / "run")
    assert read_circuit_run(tmp_path / "run").d_model == 16
    for m in run.methods:
        g = mib_from_json(tmp_path / "run" / SCORES_DIR / f"{m.method}.json")
        assert g.cfg["d_model"] == 16 and g.neurons_in_graph.shape == (1 + 2 * 3, 16)
        assert np.array_equal([g.edge_scores[n] for n in edge_names(GRAPH)], m.scores)
        assert all(g.edges_in_graph.values()) and all(g.nodes_in_graph.values())
    keep = np.zeros(GRAPH.n_edges, dtype=bool)
    keep[[3, 40]] = True
    path = write_edge_scores(
        tmp_path / "c.json", GRAPH, np.arange(GRAPH.n_edges) / 7, in_graph=keep, cfg={"d_model": 16}
    )
    g = mib_from_json(path)
    assert [n for n in edge_names(GRAPH) if g.edges_in_graph[n]] == [edge_names(GRAPH)[3], edge_names(GRAPH)[40]]
    # A run that does not know the width writes what MIB cannot load: the loader is not vacuous.
    make_run(5).write(tmp_path / "old")
    with pytest.raises(KeyError, match="d_model"):
        mib_from_json(tmp_path / "old" / SCORES_DIR / "eap.json")
    doc = json.loads(path.read_text())
    doc["edges"]["input->a9.h0<q>"] = {"score": 0.0, "in_graph": False}
    path.write_text(json.dumps(doc))
    with pytest.raises(KeyError, match="a9"):
        mib_from_json(path)


# --------------------------------------------------------------------------- files that do not match


def test_a_node_level_method_round_trips_and_loads_in_mibs_loader(tmp_path: Path) -> None:
    """A node-level method (NAP) keeps one score per node but the logits: written into the
    nodes of its MIB file (edges scored zero, as EAP-IG writes a node-level graph), read back
    exactly, and loaded by MIB's loader with those scores."""
    from dataclasses import replace

    from mib_graph import mib_from_json

    rng = np.random.default_rng(8)
    edge = make_curve("eap", rng)
    nap = replace(make_curve("nap", rng), scores=rng.normal(size=GRAPH.n_nodes - 1), level="node")
    run = CircuitRun(
        "digit-pair", "digit-pair", "patching", 2, 2, 64, 192, 5, 8, FRACTIONS, 2.0, 0.0, (edge, nap), d_model=16
    )
    run.write(tmp_path / "run")
    back = read_circuit_run(tmp_path / "run")
    assert back == run and back.curve("nap").level == "node" and back.curve("eap").level == "edge"
    g = mib_from_json(tmp_path / "run" / SCORES_DIR / "nap.json")
    assert g.node_scores is not None and list(g.node_scores) == list(GRAPH.nodes[:-1])
    assert np.array_equal(list(g.node_scores.values()), nap.scores)
    assert set(g.edge_scores.values()) == {0.0}
    assert mib_from_json(tmp_path / "run" / SCORES_DIR / "eap.json").node_scores is None
    # a node without its score, and an unknown level, are named
    path = tmp_path / "run" / SCORES_DIR / "nap.json"
    doc = json.loads(path.read_text())
    del doc["nodes"]["m1"]["score"]
    path.write_text(json.dumps(doc))
    with pytest.raises(SourceError, match="node 'm1' has score None"):
        read_circuit_run(tmp_path / "run")
    run.write(tmp_path / "run")
    doc = json.loads((tmp_path / "run" / CIRCUIT_RUN_FILE).read_text())
    doc["methods"][1]["level"] = "neuron"
    (tmp_path / "run" / CIRCUIT_RUN_FILE).write_text(json.dumps(doc))
    with pytest.raises(SourceError, match="'level' must be one of edge, node"):
        read_circuit_run(tmp_path / "run")
    with pytest.raises(ParameterError, match="level must be one of edge, node"):
        replace(nap, level="neuron")
    with pytest.raises(ShapeError, match="nap: 10 node scores; the graph of 2 layers of 2 heads has 7 nodes"):
        replace(run, methods=(replace(nap, scores=np.zeros(10)),))


def broken(tmp_path: Path, edit: object) -> Path:
    """A scores file of GRAPH, edited by `edit(document)` (or replaced by the text `edit`)."""
    path = write_edge_scores(tmp_path / "scores.json", GRAPH, np.arange(GRAPH.n_edges, dtype=float))
    if isinstance(edit, str):
        path.write_text(edit)
    else:
        doc = json.loads(path.read_text())
        edit(doc)  # type: ignore[operator]
        path.write_text(json.dumps(doc))
    return path


def test_a_circuit_file_that_does_not_match_the_graph_is_a_clear_error(tmp_path: Path) -> None:
    where = re.escape(str(tmp_path / "scores.json"))
    path = broken(tmp_path, lambda d: d["edges"].pop("a0.h1->m0"))
    with pytest.raises(
        ShapeError,
        match=where
        + r" does not match the graph \(8 nodes, 46 edges\): 1 edge of the graph is missing from it \(a0.h1->m0\)",
    ):
        read_edge_scores(path, GRAPH)

    def extra(d: dict) -> None:
        d["edges"]["a1.h0->a0.h0<q>"] = {"score": 1.0, "in_graph": True}
        d["edges"]["m7->logits"] = {"score": 1.0, "in_graph": True}

    path = broken(tmp_path, extra)
    with pytest.raises(ShapeError, match=where + r".*it has 2 edges the graph lacks \(a1.h0->a0.h0<q>, m7->logits\)"):
        read_edge_scores(path, GRAPH)
    # A file of another graph: its cfg says so; without a cfg, the edges do (counted, a few named).
    bigger = transformer_graph(3, 2)
    path = write_edge_scores(tmp_path / "scores.json", bigger, np.zeros(bigger.n_edges))
    with pytest.raises(
        ShapeError,
        match=where
        + r" is a circuit of a graph of 3 layers of 2 heads \(its cfg\); this graph has 2 layers of 2 heads \(46 edges\)",
    ):
        read_edge_scores(path, GRAPH)
    doc = json.loads(path.read_text())
    del doc["cfg"]
    path.write_text(json.dumps(doc))
    extra_count = bigger.n_edges - GRAPH.n_edges
    with pytest.raises(
        ShapeError,
        match=where
        + rf".*it has {extra_count} edges the graph lacks \(input->a2.h0<q>, a0.h0->a2.h0<q>, a0.h1->a2.h0<q>, \.\.\.\)",
    ):
        read_edge_scores(path, GRAPH)
    with pytest.raises(
        ShapeError,
        match=r"\(10 nodes, 75 edges\): 29 edges of the graph are missing from it \(input->a0.h2<q>, input->a0.h2<k>, input->a0.h2<v>, \.\.\.\); it has 54 edges the graph lacks",
    ):
        read_edge_scores(path, transformer_graph(2, 3))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ("{not json", "is not valid JSON"),
        ("[1, 2]", "has no 'edges' object"),
        (lambda d: d.pop("edges"), "has no 'edges' object"),
        (
            lambda d: d["edges"]["m0->logits"].update(score="high"),
            "edge 'm0->logits' has score 'high'; expected a number",
        ),
        (lambda d: d["edges"]["m0->logits"].update(score=None), "edge 'm0->logits' has score None; expected a number"),
        (lambda d: d["edges"]["m0->logits"].update(score=True), "edge 'm0->logits' has score True; expected a number"),
        (lambda d: d["edges"].update({"m0->logits": 0.5}), "edge 'm0->logits' has score 0.5; expected a number"),
    ],
)
def test_a_broken_circuit_file_is_a_source_error_naming_it(tmp_path: Path, edit: object, message: str) -> None:
    path = broken(tmp_path, edit)
    with pytest.raises(SourceError, match=re.escape(str(path)) + ".*" + re.escape(message)):
        read_edge_scores(path, GRAPH)


def test_a_non_finite_score_is_an_error(tmp_path: Path) -> None:
    path = write_edge_scores(tmp_path / "s.json", GRAPH, np.zeros(GRAPH.n_edges))
    path.write_text(path.read_text().replace('"input->a0.h0<k>": {"score": 0.0', '"input->a0.h0<k>": {"score": NaN', 1))
    with pytest.raises(
        SourceError, match=re.escape(str(path)) + r": edge 'input->a0.h0<k>' has a non-finite score \(nan\)"
    ):
        read_edge_scores(path, GRAPH)
    with pytest.raises(SourceError, match="does not exist"):
        read_edge_scores(tmp_path / "none.json", GRAPH)
    with pytest.raises(ShapeError, match="edge score 3 is not finite"):
        write_edge_scores(tmp_path / "t.json", GRAPH, np.where(np.arange(GRAPH.n_edges) == 3, np.inf, 0.0))
    assert not (tmp_path / "t.json").exists()


def test_a_broken_run_directory_is_an_error_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="does not exist"):
        read_circuit_run(tmp_path / "none")
    with pytest.raises(SourceError, match=re.escape(str(tmp_path)) + " holds no circuit run"):
        read_circuit_run(tmp_path)
    make_run().write(tmp_path)
    path = tmp_path / CIRCUIT_RUN_FILE
    good = json.loads(path.read_text())
    where = re.escape(str(path))

    def edited(change: object) -> None:
        doc = json.loads(json.dumps(good))
        change(doc)  # type: ignore[operator]
        path.write_text(json.dumps(doc))

    path.write_text("{")
    with pytest.raises(SourceError, match=where + " is not valid JSON"):
        read_circuit_run(tmp_path)
    cases = [
        (lambda d: d.update(format="other"), " is not a circuit run"),
        (lambda d: d.update(version=2), " has format version 2; this neuroneval reads version 1"),
        (lambda d: d.pop("version"), " has format version None"),
        (lambda d: d.pop("full"), ": 'full' is missing"),
        (lambda d: d.update(n_heads=0), r": 'n_heads' must be an integer >= 1; it holds 0"),
        (lambda d: d.update(n_edges=47), r": 'n_edges' is 47, but the graph of 2 layers of 2 heads has 46 edges"),
        (lambda d: d.update(empty=d["full"]), None),  # allowed: f is NaN
        (
            lambda d: d["methods"][1]["signed"]["metric"].pop(),
            r": method 'eap': signed metric has 9 entries; the run has 10 fractions",
        ),
        (
            lambda d: d["methods"][0]["absolute"]["edges"].__setitem__(0, 1.5),
            r": method 'random': absolute edges must be integer edge counts",
        ),
        (
            lambda d: d["methods"][0]["absolute"]["edges"].__setitem__(0, 47),
            r"random: a circuit by absolute score has 47 edges, more than the graph's 46",
        ),
        (lambda d: d["methods"][2].update(auroc="x"), r": method 'exact': 'auroc' must be a finite number"),
        (lambda d: d["methods"].append(d["methods"][0]), r"method 'random' appears more than once"),
        (
            lambda d: d.update(fractions=d["fractions"][:9]),
            r"has 9 entries; the run has 9 fractions|has 10 entries; the run has 9 fractions",
        ),
        (lambda d: d.update(ablation="zero"), r"ablation must be one of patching, mean; got 'zero'"),
    ]
    for change, message in cases:
        edited(change)
        if message is None:
            assert not read_circuit_run(tmp_path).defined
            continue
        with pytest.raises(SourceError, match=where + ".*" + message):
            read_circuit_run(tmp_path)
    path.write_text(json.dumps(good))
    (tmp_path / SCORES_DIR / "eap.json").unlink()
    with pytest.raises(SourceError, match=re.escape(str(tmp_path / SCORES_DIR / "eap.json")) + " does not exist"):
        read_circuit_run(tmp_path)


def test_bad_runs_are_refused_when_built() -> None:
    rng = np.random.default_rng(0)
    good = make_curve("eap", rng)
    with pytest.raises(ShapeError, match=r"eap: 46 edge scores; the graph of 3 layers of 2 heads has 100 edges"):
        CircuitRun("m", "t", "patching", 3, 2, 8, 8, 1, 0, FRACTIONS, 1.0, 0.0, (good,))
    with pytest.raises(ShapeError, match="the curves need one entry per fraction"):
        MethodCurve(
            "eap",
            good.scores,
            1.0,
            good.signed_edges[:9],
            good.signed_metric,
            good.absolute_edges,
            good.absolute_metric,
        )
    with pytest.raises(ShapeError, match="signed_metric entry 2 is not finite"):
        MethodCurve(
            "eap",
            good.scores,
            1.0,
            good.signed_edges,
            np.where(np.arange(10) == 2, np.nan, 0.0),
            good.absolute_edges,
            good.absolute_metric,
        )
    with pytest.raises(ParameterError, match="names its scores file"):
        MethodCurve(
            "../x", good.scores, 1.0, good.signed_edges, good.signed_metric, good.absolute_edges, good.absolute_metric
        )
    with pytest.raises(ShapeError, match="must be integer edge counts"):
        MethodCurve(
            "eap",
            good.scores,
            1.0,
            good.signed_edges * 1.0,
            good.signed_metric,
            good.absolute_edges,
            good.absolute_metric,
        )
    with pytest.raises(ShapeError, match="fractions must be at least two increasing"):
        CircuitRun("m", "t", "patching", 2, 2, 8, 8, 1, 0, FRACTIONS[::-1], 1.0, 0.0, (good,))
    with pytest.raises(ShapeError, match="the run has 9 fractions"):
        CircuitRun("m", "t", "patching", 2, 2, 8, 8, 1, 0, FRACTIONS[:9], 1.0, 0.0, (good,))
    with pytest.raises(ParameterError, match="the run has no method 'exact'; it has eap"):
        CircuitRun("m", "t", "patching", 2, 2, 8, 8, 1, 0, FRACTIONS, 1.0, 0.0, (good,)).curve("exact")
    assert good.scores.flags.writeable is False  # a frozen curve's arrays are read-only copies


# --------------------------------------------------------------------------- the table


def level_run(task: str, levels: dict[str, float], ablation: str = "patching") -> CircuitRun:
    """A run where every circuit of method m has metric levels[m] (full 1, empty 0): f = level."""
    rng = np.random.default_rng(0)
    curves = tuple(make_curve(m, rng, level=v) for m, v in levels.items())
    return CircuitRun("smollm2", task, ablation, 2, 2, 8, 8, 5, 0, FRACTIONS, 1.0, 0.0, curves)


def test_the_table_orders_methods_and_marks_the_best() -> None:
    # ioi: eap has the highest f (best CPR) but exact is closest to 1 (best CMD); arithmetic lacks exact.
    ioi = level_run("ioi", {"exact": 0.95, "random": 0.1, "eap": 1.3, "eap-ig-inputs": 0.5, "mine": 0.2})
    arithmetic = level_run("arithmetic", {"eap": 0.4, "random": 0.4, "eap-ig-activations": 0.9})
    table = circuit_table([ioi, arithmetic])
    assert table["method"].to_list() == ["random", "eap", "eap-ig-inputs", "eap-ig-activations", "exact", "mine"]
    assert table.columns == [
        "method",
        "smollm2/ioi CPR",
        "smollm2/ioi CMD",
        "smollm2/arithmetic CPR",
        "smollm2/arithmetic CMD",
    ]
    by = {r["method"]: r for r in table.iter_rows(named=True)}
    assert by["eap"]["smollm2/ioi CPR"] == pytest.approx(0.999 * 1.3)
    assert by["eap"]["smollm2/ioi CMD"] == pytest.approx(0.999 * 0.3)
    assert by["exact"]["smollm2/ioi CMD"] == pytest.approx(0.999 * 0.05)
    assert by["exact"]["smollm2/arithmetic CPR"] is None and by["mine"]["smollm2/arithmetic CMD"] is None
    assert by["eap-ig-activations"]["smollm2/ioi CPR"] is None
    marks = best_marks(table)
    best = {c: [m for m, b in zip(table["method"], marks[c], strict=True) if b] for c in marks}
    assert best == {
        "smollm2/ioi CPR": ["eap"],
        "smollm2/ioi CMD": ["exact"],
        "smollm2/arithmetic CPR": ["eap-ig-activations"],
        "smollm2/arithmetic CMD": ["eap-ig-activations"],
    }
    text = format_circuit_table([ioi, arithmetic])
    lines = text.splitlines()
    assert "higher is better" in lines[0] and "lower is better" in lines[0]
    assert lines[1].split() == ["method", *" ".join(table.columns[1:]).split()]
    cells = {line.split()[0]: line.split()[1:] for line in lines[2:]}
    assert list(cells) == table["method"].to_list()
    assert cells["eap"][:2] == [f"{0.999 * 1.3:.3f}*", f"{0.999 * 0.3:.3f}"]
    assert cells["exact"] == [f"{0.999 * 0.95:.3f}", f"{0.999 * 0.05:.3f}*", "-", "-"]
    assert cells["eap-ig-activations"] == ["-", "-", f"{0.999 * 0.9:.3f}*", f"{0.999 * 0.1:.3f}*"]
    assert sum(c.endswith("*") for row in cells.values() for c in row) == 4
    # Ties are all marked.
    tied = best_marks(circuit_table([level_run("ioi", {"eap": 0.5, "random": 0.5})]))
    assert tied["smollm2/ioi CPR"] == [True, True]


def test_runs_of_one_task_need_telling_apart() -> None:
    a, b = level_run("ioi", {"eap": 0.5}), level_run("ioi", {"eap": 0.7})
    with pytest.raises(ParameterError, match="two runs of smollm2/ioi"):
        circuit_table([a, b])
    labels = run_labels([a, b, level_run("ioi", {"eap": 0.7}, "mean")], ["a", "b", "c"])
    assert labels == ["smollm2/ioi [a]", "smollm2/ioi [b]", "smollm2/ioi (mean)"]
    assert circuit_table([a, b], labels[:2]).columns[1:3] == ["smollm2/ioi [a] CPR", "smollm2/ioi [a] CMD"]
    with pytest.raises(ParameterError, match="at least one CircuitRun"):
        circuit_table([])


def test_find_circuit_runs(tmp_path: Path) -> None:
    assert find_circuit_runs(tmp_path) == []
    make_run().write(tmp_path / "b")
    make_run().write(tmp_path / "a")
    (tmp_path / "c").mkdir()
    assert find_circuit_runs(tmp_path) == [tmp_path / "a", tmp_path / "b"]
    assert find_circuit_runs(tmp_path / "a") == [tmp_path / "a"]
    assert find_circuit_runs(tmp_path / "none") == []
    assert isinstance(
        circuit_table([read_circuit_run(p) for p in find_circuit_runs(tmp_path)], ["x", "y"]), pl.DataFrame
    )
