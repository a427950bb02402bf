"""One method's edge scores as a file in MIB's (EAP-IG's) graph JSON, checked against the graph
when read: `write_edge_scores`, `read_edge_scores`, `edge_names` (`neuroneval.circuits.results`
re-exports them).

The format, as EAP-IG's ``Graph.to_json`` writes it and MIB's leaderboard reads it::

    {"cfg": {"n_layers": 2, "n_heads": 2, "parallel_attn_mlp": false},
     "nodes": {"input": {"in_graph": true}, "a0.h0": {"in_graph": true}, ..., "logits": {"in_graph": true}},
     "edges": {"input->a0.h0<q>": {"score": 0.25, "in_graph": true}, ..., "m1->logits": {...}}}

Examples
--------
>>> import tempfile
>>> from pathlib import Path
>>> from neuroneval.circuits import transformer_graph
>>> g = transformer_graph(1, 1)
>>> edge_names(g)[:2]
['input->a0.h0<q>', 'input->a0.h0<k>']
>>> path = write_edge_scores(Path(tempfile.mkdtemp()) / "eap.json", g, np.arange(g.n_edges) / 10)
>>> read_edge_scores(path, g).tolist()
[0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]
>>> read_edge_scores(path, transformer_graph(1, 2))
Traceback (most recent call last):
...
neuroneval.errors.ShapeError: ...eap.json is a circuit of a graph of 1 layer of 1 head (its cfg); this graph has 1 layer of 2 heads (13 edges)
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .._coerce import as_real_array
from ..errors import ShapeError, SourceError
from ..files import read_json, write_atomic
from .graph import INPUT, LOGITS, Graph

__all__ = ["edge_names", "edge_scores_text", "read_edge_scores", "read_node_scores", "shape_text", "write_edge_scores"]

_EXAMPLES = 3  # edge names quoted in a mismatch message


def shape_text(n_layers: int, n_heads: int) -> str:
    """ "1 layer of 2 heads"."""
    return f"{n_layers} layer{'' if n_layers == 1 else 's'} of {n_heads} head{'' if n_heads == 1 else 's'}"


def edge_names(graph: Graph) -> list[str]:
    """MIB's (EAP-IG's) name of every edge, in edge order: ``input->a0.h0<q>``, ``m0->logits``."""
    return [graph.describe(i).replace(" -> ", "->") for i in range(graph.n_edges)]


def _shape_of(graph: Graph) -> tuple[int, int] | None:
    """(n_layers, n_heads) when `graph`'s nodes are those of `transformer_graph`, else None."""
    layers = sum(1 for n in graph.nodes if re.fullmatch(r"m\d+", n))
    if layers == 0 or (graph.n_nodes - 2) % layers:
        return None
    heads = (graph.n_nodes - 2) // layers - 1
    expected = [INPUT]
    for layer in range(layers):
        expected += [f"a{layer}.h{h}" for h in range(heads)] + [f"m{layer}"]
    return (layers, heads) if heads >= 1 and tuple(expected + [LOGITS]) == graph.nodes else None


def _finite_scores(scores: Any, n: int, what: str) -> npt.NDArray[np.float64]:
    s = as_real_array(scores, f"{what} scores", ndim=1)
    if s.size != n:
        raise ShapeError(f"{what} scores have {s.size:,} entries; the graph has {n:,} {what}s")
    if not np.isfinite(s).all():
        raise ShapeError(f"{what} score {int(np.flatnonzero(~np.isfinite(s))[0])} is not finite")
    return s


def edge_scores_text(
    graph: Graph, scores: Any, in_graph: Any, cfg: Mapping[str, Any] | None, node_scores: Any = None
) -> str:
    """The text of `write_edge_scores`' file."""
    s = _finite_scores(scores, graph.n_edges, "edge")
    nodes = None if node_scores is None else _finite_scores(node_scores, graph.n_nodes - 1, "node")
    mask = np.ones(graph.n_edges, dtype=bool) if in_graph is None else graph.check_mask(in_graph, "in_graph")
    touched = np.zeros(graph.n_nodes, dtype=bool)
    touched[graph.senders[mask]] = True
    touched[graph.receivers[mask]] = True
    config: dict[str, Any] = {}
    shape = _shape_of(graph)
    if shape is not None:
        config = {"n_layers": shape[0], "n_heads": shape[1], "parallel_attn_mlp": False}
    config |= dict(cfg or {})
    document = {
        "cfg": config,
        "nodes": {name: {"in_graph": bool(t)} for name, t in zip(graph.nodes, touched.tolist(), strict=True)},
        "edges": {
            name: {"score": float(v), "in_graph": bool(k)}
            for name, v, k in zip(edge_names(graph), s.tolist(), mask.tolist(), strict=True)
        },
    }
    if nodes is not None:  # every node's score but the logits' (EAP-IG scores the senders)
        for name, v in zip(graph.nodes, nodes.tolist(), strict=False):
            document["nodes"][name]["score"] = float(v)
    return json.dumps(document, allow_nan=False) + "\n"


def write_edge_scores(
    path: str | os.PathLike[str],
    graph: Graph,
    scores: Any,
    *,
    in_graph: Any = None,
    cfg: Mapping[str, Any] | None = None,
    node_scores: Any = None,
) -> Path:
    """Write one score per edge of `graph` to `path` (written aside and renamed into place) in
    MIB's (EAP-IG's) graph JSON: ``{"cfg": {"n_layers", "n_heads", "parallel_attn_mlp"},
    "nodes": {name: {"in_graph"}}, "edges": {"input->a0.h0<q>": {"score", "in_graph"}, ...}}``.

    `in_graph` (a bool edge mask; default every edge) marks the circuit; a node is in the graph
    when an edge of the circuit touches it. `cfg` adds to (or overrides) the config, e.g.
    ``{"d_model": 576}``. `node_scores` (one per node but the logits, in node order) writes a
    node-level method's scores as EAP-IG does, in each node's ``score`` (the edges' scores are
    then zeros, as EAP-IG's node-level attribution leaves them). Returns the path.
    """
    text = edge_scores_text(graph, scores, in_graph, cfg, node_scores)
    return write_atomic(Path(path), lambda p: p.write_text(text, encoding="utf-8"))


def _edges(n: int) -> str:
    return f"{n:,} edge{'' if n == 1 else 's'}"


def _some(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_EXAMPLES])
    return shown + (", ..." if len(names) > _EXAMPLES else "")


def read_edge_scores(path: str | os.PathLike[str], graph: Graph) -> npt.NDArray[np.float64]:
    """The edge scores of a circuit file in MIB's graph JSON (`write_edge_scores`; EAP-IG's
    ``Graph.to_json``), as a float64 array in `graph`'s edge order.

    Raises
    ------
    SourceError
        A missing file, a file that is not JSON, without an ``edges`` object, or with a score
        that is not a finite number (the message names the file and the edge).
    ShapeError
        A file that does not match the graph: its ``cfg`` names another shape, or edges of the
        graph are missing from it or it has edges the graph lacks (counted, a few named).
    """
    return _read_checked(path, graph)[1]


def _read_checked(path: str | os.PathLike[str], graph: Graph) -> tuple[dict[str, Any], npt.NDArray[np.float64]]:
    """A circuit file's document and edge scores, checked against `graph` (`read_edge_scores`)."""
    path = Path(path)
    if not path.is_file():
        raise SourceError(f"circuit file {path} does not exist")
    document = read_json(path)
    edges = document.get("edges") if isinstance(document, dict) else None
    if not isinstance(edges, dict):
        raise SourceError(f"{path} has no 'edges' object (MIB's circuit JSON holds cfg, nodes and edges)")
    cfg = document.get("cfg")
    shape = _shape_of(graph)
    if isinstance(cfg, dict) and shape is not None:
        layers: Any = cfg.get("n_layers")
        heads: Any = cfg.get("n_heads")
        integers = all(isinstance(v, int) and not isinstance(v, bool) for v in (layers, heads))
        if integers and (layers, heads) != shape:
            raise ShapeError(
                f"{path} is a circuit of a graph of {shape_text(layers, heads)} (its cfg); this graph has "
                f"{shape_text(*shape)} ({graph.n_edges:,} edges)"
            )
    names = edge_names(graph)
    missing = [n for n in names if n not in edges]
    known = set(names)
    extra = [n for n in edges if n not in known]
    if missing or extra:
        parts = []
        if missing:
            are = "is" if len(missing) == 1 else "are"
            parts.append(f"{_edges(len(missing))} of the graph {are} missing from it ({_some(missing)})")
        if extra:
            parts.append(f"it has {_edges(len(extra))} the graph lacks ({_some(extra)})")
        raise ShapeError(
            f"{path} does not match the graph ({graph.n_nodes:,} nodes, {graph.n_edges:,} edges): " + "; ".join(parts)
        )
    out = np.empty(graph.n_edges, dtype=np.float64)
    for i, name in enumerate(names):
        entry = edges[name]
        score = entry.get("score") if isinstance(entry, dict) else None
        if isinstance(score, bool) or not isinstance(score, (int, float)):
            shown = entry if not isinstance(entry, dict) else score
            raise SourceError(f"{path}: edge {name!r} has score {shown!r}; expected a number")
        if not math.isfinite(score):
            raise SourceError(f"{path}: edge {name!r} has a non-finite score ({score})")
        out[i] = score
    return document, out


def read_node_scores(path: str | os.PathLike[str], graph: Graph) -> npt.NDArray[np.float64]:
    """The node scores of a circuit file in MIB's graph JSON (`write_edge_scores` with
    `node_scores`; EAP-IG's ``Graph.to_json`` of a node-level graph): one per node but the
    logits, in `graph`'s node order. The file must also match the graph as `read_edge_scores`
    checks it.

    Raises
    ------
    SourceError
        A file `read_edge_scores` refuses, a ``nodes`` object that is missing, or a node
        without a finite ``score``.
    """
    nodes = _read_checked(path, graph)[0].get("nodes")
    if not isinstance(nodes, dict):
        raise SourceError(f"{path} has no 'nodes' object (MIB's circuit JSON holds cfg, nodes and edges)")
    out = np.empty(graph.n_nodes - 1, dtype=np.float64)
    for i, name in enumerate(graph.nodes[:-1]):
        entry = nodes.get(name)
        score = entry.get("score") if isinstance(entry, dict) else None
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            raise SourceError(f"{path}: node {name!r} has score {score!r}; expected a finite number")
        out[i] = score
    return out
