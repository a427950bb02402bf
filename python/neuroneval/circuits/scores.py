"""MIB's circuit scores (SPEC section 7): faithfulness, CPR, CMD, weighted edge count, AUROC.

Examples
--------
>>> f = np.ones(10)
>>> round(cpr(FRACTIONS, f), 6), round(cmd(FRACTIONS, f), 6)
(0.999, 0.0)
>>> faithfulness([2.0, 4.0], full=[4.0, 6.0], empty=[0.0, 2.0])
0.5
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from .._coerce import as_real_array
from ..errors import NonFiniteError, ParameterError, ShapeError
from .graph import Graph, select_edges, select_greedy

__all__ = [
    "AUROC_SELECTIONS",
    "FRACTIONS",
    "auroc",
    "cmd",
    "cpr",
    "faithfulness",
    "mean_faithfulness",
    "weighted_edge_count",
]

#: The ten circuit sizes, as fractions of the graph's edges.
FRACTIONS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
Array = npt.NDArray[np.float64]


def _mean(x: Any, name: str) -> float:
    a = as_real_array(x, name, ndim=(0, 1))
    if a.size == 0:
        raise ShapeError(f"{name} holds no examples")
    if not np.isfinite(a).all():
        raise NonFiniteError(f"{name} holds a non-finite metric value")
    return float(a.mean())


def faithfulness(circuit: Any, *, full: Any, empty: Any) -> float:
    """f(C) = (m(C) - m(empty)) / (m(full) - m(empty)), m the dataset mean of the task metric
    (a ratio of means, not a mean of ratios): each argument is a number (the mean) or the
    per-example metric values. f may be below 0 or above 1.

    Raises
    ------
    ParameterError
        m(full) == m(empty): the circuit-free and full runs agree, so f is undefined.
    """
    m_c, m_full, m_empty = _mean(circuit, "circuit metric"), _mean(full, "full metric"), _mean(empty, "empty metric")
    if m_full == m_empty:
        raise ParameterError("the full and the empty graph have the same mean metric: faithfulness is undefined")
    return (m_c - m_empty) / (m_full - m_empty)


def _curve(fractions: Any, f: Any) -> tuple[Array, Array]:
    k = as_real_array(fractions, "fractions", ndim=1)
    v = as_real_array(f, "faithfulness", ndim=1)
    if k.shape != v.shape or k.size < 2:
        raise ShapeError(f"fractions and faithfulness need the same length, at least 2; got {k.size} and {v.size}")
    if not (np.isfinite(k).all() and np.isfinite(v).all()):
        raise NonFiniteError("fractions and faithfulness must be finite")
    if (np.diff(k) <= 0).any():
        raise ParameterError("fractions must increase")
    return k, v


def cpr(fractions: Any, f: Any) -> float:
    """CPR: the area under the faithfulness curve, trapezoids on the linear axis of the nominal
    fractions (higher is better; f = 1 at MIB's ten fractions gives 0.999)."""
    k, v = _curve(fractions, f)
    return float(np.sum(np.diff(k) * (v[:-1] + v[1:]) / 2))


def cmd(fractions: Any, f: Any) -> float:
    """CMD: the area between the faithfulness curve and 1, ``|1 - f|`` integrated the same way
    (0 is ideal)."""
    k, v = _curve(fractions, f)
    gap = np.abs(1.0 - v)
    return float(np.sum(np.diff(k) * (gap[:-1] + gap[1:]) / 2))


def mean_faithfulness(f: Any) -> float:
    """The mean of f over the fractions, reported beside CPR and CMD."""
    return _mean(f, "faithfulness")


def weighted_edge_count(graph: Graph, edges: Any, *, node_mask: Any = None, neuron_mask: Any = None) -> float:
    """|C| = sum over circuit edges (u, v) of the fraction of u's neurons in the circuit.

    `node_mask` (one bool per node) drops whole senders; `neuron_mask` (nodes x d_model bools)
    keeps a part of each sender's neurons. Without masks it is the number of edges.
    """
    mask = graph.check_mask(edges)
    weight = np.ones(graph.n_nodes)
    if node_mask is not None:
        nodes = np.asarray(node_mask)
        if nodes.shape != (graph.n_nodes,) or nodes.dtype != np.bool_:
            raise ShapeError(f"node_mask must be {graph.n_nodes} bools; got {nodes.dtype} {nodes.shape}")
        weight *= nodes
    if neuron_mask is not None:
        neurons = np.asarray(neuron_mask)
        if neurons.ndim != 2 or neurons.shape[0] != graph.n_nodes or neurons.dtype != np.bool_ or neurons.shape[1] == 0:
            raise ShapeError(
                f"neuron_mask must be {graph.n_nodes} x d_model bools; got {neurons.dtype} {neurons.shape}"
            )
        weight *= neurons.mean(axis=1)
    return float(weight[graph.senders[mask]].sum())


#: How `auroc` makes the circuit at each fraction: MIB's greedy growth from the logits on
#: absolute scores (`select_greedy`, ``fraction * n_edges`` edges), or the signed top
#: ``int(fraction * n_edges)`` edges, pruned (`select_edges`, the circuits CPR scores).
AUROC_SELECTIONS = ("greedy", "top")


def auroc(graph: Graph, scores: Any, truth: Any, fractions: Any = FRACTIONS, *, selection: str = "greedy") -> float:
    """InterpBench's AUROC of edge scores against a ground-truth circuit (a bool edge mask), as
    MIB computes it: at each fraction the circuit of `selection` (`AUROC_SELECTIONS`; MIB's
    greedy one by default) gives a TPR and an FPR; the area is the trapezoid over
    (FPR / last FPR, TPR), with no (0, 0) anchor.

    Raises
    ------
    ShapeError
        A truth mask of another length; no true or no false edge.
    """
    t = graph.check_mask(truth, "ground-truth circuit")
    positives, negatives = int(t.sum()), int((~t).sum())
    if positives == 0 or negatives == 0:
        raise ShapeError("the ground-truth circuit must hold some edges and leave some out")
    if selection not in AUROC_SELECTIONS:
        raise ParameterError(f"selection must be one of {', '.join(AUROC_SELECTIONS)}; got {selection!r}")
    k = as_real_array(fractions, "fractions", ndim=1)
    tpr, fpr = np.empty(k.size), np.empty(k.size)
    for i, fraction in enumerate(k):
        if selection == "greedy":
            chosen = select_greedy(graph, scores, float(fraction) * graph.n_edges)
        else:
            chosen = select_edges(graph, scores, float(fraction))
        tpr[i] = (chosen & t).sum() / positives
        fpr[i] = (chosen & ~t).sum() / negatives
    if fpr[-1] == 0:
        raise ParameterError("no circuit holds a false edge, so the FPR axis cannot be normalised")
    x = fpr / fpr[-1]
    return float(np.sum(np.diff(x) * (tpr[:-1] + tpr[1:]) / 2))
