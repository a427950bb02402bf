"""MIB's circuit loader, written in the tests from its code: EAP-IG's ``Graph.from_json`` and the
``Graph.from_model`` it calls (``src/eap/graph.py`` of hannamw/EAP-IG at commit 7af394a, the
commit hannamw/MIB-circuit-track pins as its ``EAP-IG`` submodule). EAP-IG is not on PyPI and
needs transformer_lens, so the loader is transcribed step by step, without torch; what it checks
is what the original checks or fails on:

- the document has ``cfg``, ``nodes`` and ``edges`` (an ``assert``);
- ``from_model(cfg, neuron_level=True, node_scores=True)`` reads ``cfg['n_layers']``,
  ``cfg['n_heads']``, ``cfg['parallel_attn_mlp']`` and ``cfg['d_model']`` (a neuron mask
  ``[n_forward, d_model]``): a missing key is a ``KeyError``;
- the graph's nodes are ``input``, per layer ``a<l>.h<h>`` then ``m<l>``, and ``logits``; its
  edges are added as ``from_model`` adds them, named ``parent->child<q|k|v>`` into a head and
  ``parent->child`` otherwise;
- every node of the file but ``logits`` and every edge is looked up by name
  (``g.nodes[name]``, ``g.edges[name]``): a name the graph lacks is a ``KeyError``; then
  ``in_graph`` and ``score`` are read from it (a node's ``score`` where it has one: a
  node-level graph's; none at all leaves the graph without node scores).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class MIBGraph:
    cfg: dict[str, Any]
    nodes_in_graph: dict[str, bool]
    edge_scores: dict[str, float]
    edges_in_graph: dict[str, bool]
    neurons_in_graph: np.ndarray
    node_scores: dict[str, float] | None = None


def from_model_names(cfg: dict[str, Any]) -> tuple[list[str], list[str], np.ndarray]:
    """The node and edge names of ``Graph.from_model(cfg, neuron_level=True)`` in its order."""
    n_layers, n_heads = cfg["n_layers"], cfg["n_heads"]
    n_forward = 1 + n_layers * (n_heads + 1)
    neurons = np.zeros((n_forward, cfg["d_model"]), dtype=bool)
    nodes, edges = ["input"], []
    residual = ["input"]

    def add_edge(parent: str, child: str, qkv: str | None = None) -> None:
        edges.append(f"{parent}->{child}" if qkv is None else f"{parent}->{child}<{qkv}>")

    for layer in range(n_layers):
        attention = [f"a{layer}.h{head}" for head in range(n_heads)]
        mlp = f"m{layer}"
        nodes += [*attention, mlp]
        if cfg["parallel_attn_mlp"]:
            for node in residual:
                for head in attention:
                    for letter in "qkv":
                        add_edge(node, head, letter)
                add_edge(node, mlp)
            residual += [*attention, mlp]
        else:
            for node in residual:
                for head in attention:
                    for letter in "qkv":
                        add_edge(node, head, letter)
            residual += attention
            for node in residual:
                add_edge(node, mlp)
            residual.append(mlp)
    for node in residual:
        add_edge(node, "logits")
    nodes.append("logits")
    return nodes, edges, neurons


def mib_from_json(path: Path) -> MIBGraph:
    """Load `path` as EAP-IG's ``Graph.from_json`` does."""
    with open(path) as f:
        d = json.load(f)
        assert all(k in d.keys() for k in ["cfg", "nodes", "edges"]), "Bad input JSON format - Missing keys"
    nodes, edges, neurons = from_model_names(d["cfg"])
    node_set, edge_set = set(nodes), set(edges)
    in_graph = dict.fromkeys(nodes, False)
    in_graph["logits"] = True  # EAP-IG's LogitNode is always in the graph
    node_scores = dict.fromkeys(nodes[:-1], 0.0)  # from_model(node_scores=True) starts at zeros
    any_node_scores = False
    for name, node_dict in d["nodes"].items():
        if name == "logits":
            continue
        if name not in node_set:
            raise KeyError(name)
        in_graph[name] = node_dict["in_graph"]
        if "score" in node_dict:
            any_node_scores = True
            node_scores[name] = float(node_dict["score"])
    scores = dict.fromkeys(edges, 0.0)
    edges_in_graph = dict.fromkeys(edges, False)
    for name, info in d["edges"].items():
        if name not in edge_set:
            raise KeyError(name)
        scores[name] = float(info["score"])
        edges_in_graph[name] = bool(info["in_graph"])
    return MIBGraph(d["cfg"], in_graph, scores, edges_in_graph, neurons, node_scores if any_node_scores else None)
