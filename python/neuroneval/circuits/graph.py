"""The computational graph of a decoder-only transformer (MIB's circuit track, SPEC section 7).

Nodes: the input embedding, every attention head, every MLP, the logits. Edges: every upstream
node to every downstream node's input, an attention head having three inputs (query, key,
value). A node is upstream of another when its output is in the residual stream the other
reads: the input and every head and MLP of an earlier layer are upstream of a layer's heads; a
layer's MLP also reads that layer's heads; the logits read everything.

`Graph` holds this as parallel edge arrays; `transformer_graph(n_layers, n_heads)` builds it
(GPT-2 small, 12 layers of 12 heads, has MIB's 32,491 edges); `prune` and `select_edges` make
circuits of it.

Examples
--------
>>> g = transformer_graph(12, 12)
>>> g.n_edges, g.n_nodes, g.nodes[1], g.nodes[-1]
(32491, 158, 'a0.h0', 'logits')
>>> g.describe(0)
'input -> a0.h0<q>'
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from .._coerce import as_real_array, check_between, check_flag, check_integer
from ..errors import ParameterError, ShapeError

__all__ = [
    "INPUT",
    "LOGITS",
    "MAX_EDGES",
    "SUPPORTED_MODEL_TYPES",
    "Graph",
    "graph_of",
    "prune",
    "select_edges",
    "select_greedy",
    "select_neurons",
    "select_nodes",
    "transformer_edge_count",
    "transformer_graph",
]

#: Hugging Face model types whose layers are (attention, MLP) blocks on one residual stream.
SUPPORTED_MODEL_TYPES = ("gpt2", "llama", "mistral", "qwen2", "gemma", "gemma2")

INPUT, LOGITS = "input", "logits"
#: The largest graph `transformer_graph` builds: ten times Llama-3.1-8B's, about 2 GB of edge arrays and
#: names; a file claiming a larger model (3,000 layers) is refused before any memory is taken.
MAX_EDGES = 16_000_000
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Graph:
    """A computational graph: node names and one entry per edge in the parallel arrays.

    Attributes
    ----------
    nodes : tuple of str
        Node names; ``nodes[0]`` is the input embedding and ``nodes[-1]`` the logits.
    senders, receivers : numpy.ndarray of int64, shape (E,)
        Each edge's sending and receiving node.
    slots : tuple of str
        Each edge's input of the receiver: ``"q"``, ``"k"``, ``"v"`` for an attention head, ``""``
        for an MLP or the logits.
    """

    nodes: tuple[str, ...]
    senders: IntArray
    receivers: IntArray
    slots: tuple[str, ...]
    _index: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.nodes) < 2 or self.nodes[0] != INPUT or self.nodes[-1] != LOGITS:
            raise ShapeError(
                f"a graph's nodes run from {INPUT!r} to {LOGITS!r}; got {self.nodes[:1]} ... {self.nodes[-1:]}"
            )
        e = self.senders.shape
        if self.receivers.shape != e or len(self.slots) != e[0] or len(e) != 1:
            raise ShapeError("a graph's senders, receivers and slots must be one entry per edge")
        if e[0] and (
            min(self.senders.min(), self.receivers.min()) < 0
            or max(self.senders.max(), self.receivers.max()) >= self.n_nodes
        ):
            raise ShapeError(f"an edge names a node outside 0..{self.n_nodes - 1}")
        self._index.update({name: i for i, name in enumerate(self.nodes)})

    @property
    def n_nodes(self) -> int:
        return len(self.nodes)

    @property
    def n_edges(self) -> int:
        return int(self.senders.size)

    def node(self, name: str) -> int:
        """The index of the node called `name`."""
        try:
            return self._index[name]
        except KeyError:
            raise ShapeError(f"the graph has no node {name!r}") from None

    def describe(self, edge: int) -> str:
        """An edge in words: ``"a0.h3 -> a2.h1<k>"``."""
        slot = self.slots[edge]
        return f"{self.nodes[self.senders[edge]]} -> {self.nodes[self.receivers[edge]]}" + (f"<{slot}>" if slot else "")

    def check_mask(self, mask: object, name: str = "edge mask") -> BoolArray:
        """`mask` as a bool array of one entry per edge, or a `ShapeError` naming the mismatch."""
        arr = np.asarray(mask)
        if arr.shape != (self.n_edges,):
            raise ShapeError(f"{name} has shape {arr.shape}; the graph has {self.n_edges} edges")
        if arr.dtype != np.bool_:
            raise ShapeError(f"{name} must be a bool array; got {arr.dtype}")
        return arr


def transformer_edge_count(n_layers: int, n_heads: int) -> int:
    """The number of edges of `transformer_graph(n_layers, n_heads)`, without building it.

    >>> transformer_edge_count(12, 12)
    32491
    """
    layers, heads = n_layers, n_heads
    q_k_v = 3 * heads * layers + 3 * heads * (heads + 1) * layers * (layers - 1) // 2
    mlps = (heads + 1) * layers * (layers + 1) // 2
    return q_k_v + mlps + 1 + layers * (heads + 1)


def transformer_graph(n_layers: int, n_heads: int) -> Graph:
    """MIB's graph of a decoder-only transformer with `n_layers` layers of `n_heads` heads.

    Edges are ordered by receiver (layer by layer: each head's q, k, v inputs, then the MLP, then
    the logits) and, within a receiver's input, by sender in node order. With L layers of H
    heads there are ``sum_l 3 H (1 + l (H + 1)) + (l + 1)(H + 1) + 1 + L (H + 1)`` edges: 32,491
    for GPT-2 small (12 x 12).
    """
    n_layers = check_integer(n_layers, "n_layers", minimum=1)
    n_heads = check_integer(n_heads, "n_heads", minimum=1)
    edges = transformer_edge_count(n_layers, n_heads)
    if edges > MAX_EDGES:
        raise ParameterError(
            f"a graph of {n_layers:,} layers of {n_heads:,} heads has {edges:,} edges; neuroneval builds graphs of at "
            f"most {MAX_EDGES:,} edges (Llama-3.1-8B has 1,592,881)"
        )
    nodes = [INPUT]
    for layer in range(n_layers):
        nodes += [f"a{layer}.h{h}" for h in range(n_heads)] + [f"m{layer}"]
    nodes.append(LOGITS)
    senders: list[int] = []
    receivers: list[int] = []
    slots: list[str] = []

    def connect(receiver: int, upstream: int, slot: str) -> None:
        # nodes 0..upstream-1 are upstream of the receiver (node order is residual-stream order)
        senders.extend(range(upstream))
        receivers.extend([receiver] * upstream)
        slots.extend([slot] * upstream)

    per_layer = n_heads + 1
    for layer in range(n_layers):
        first = 1 + layer * per_layer  # the layer's first head
        for h in range(n_heads):
            for slot in ("q", "k", "v"):
                connect(first + h, first, slot)
        connect(first + n_heads, first + n_heads, "")  # the MLP reads the layer's heads too
    connect(len(nodes) - 1, len(nodes) - 1, "")
    return Graph(tuple(nodes), np.asarray(senders, dtype=np.int64), np.asarray(receivers, dtype=np.int64), tuple(slots))


def graph_of(model: object) -> Graph:
    """The graph of a decoder-only transformer: a Hugging Face model or config of a supported
    type (`SUPPORTED_MODEL_TYPES`; GPT-2 and the LLaMA family), or a transformer-lens
    HookedTransformer (its ``cfg``). Grouped-query attention counts one node per query head, as
    MIB counts them.

    Raises
    ------
    ParameterError
        A model of another kind (an encoder, an encoder-decoder, an unknown type), named.
    """
    cfg = getattr(model, "cfg", None)
    if cfg is not None and hasattr(cfg, "n_layers") and hasattr(cfg, "n_heads"):  # transformer-lens
        return transformer_graph(int(cfg.n_layers), int(cfg.n_heads))
    config = getattr(model, "config", model)
    kind = getattr(config, "model_type", None)
    if kind not in SUPPORTED_MODEL_TYPES:
        supported = ", ".join(SUPPORTED_MODEL_TYPES)
        raise ParameterError(f"the circuit graph supports decoder-only models of type {supported}; got {kind!r}")
    layers = getattr(config, "n_layer", None) or getattr(config, "num_hidden_layers", None)
    heads = getattr(config, "n_head", None) or getattr(config, "num_attention_heads", None)
    if layers is None or heads is None:
        raise ParameterError(f"the {kind} config names no layer or head count")
    return transformer_graph(int(layers), int(heads))


def prune(graph: Graph, edges: object) -> BoolArray:
    """The circuit `edges` (a bool mask) with its dangling parts removed, repeatedly until none
    is left: a node other than the input with no incoming circuit edge, or other than the logits
    with no outgoing one, is dropped with all its edges.

    Examples
    --------
    >>> g = transformer_graph(1, 1)   # input, a0.h0, m0, logits
    >>> [g.describe(i) for i in range(g.n_edges)]
    ['input -> a0.h0<q>', 'input -> a0.h0<k>', 'input -> a0.h0<v>', 'input -> m0', 'a0.h0 -> m0', 'input -> logits', 'a0.h0 -> logits', 'm0 -> logits']
    >>> keep = np.zeros(8, bool); keep[[0, 4]] = True   # input -> head -> MLP, but the MLP feeds nothing
    >>> prune(g, keep).nonzero()[0].tolist()
    []
    >>> keep[7] = True                                  # MLP -> logits closes the path
    >>> prune(g, keep).nonzero()[0].tolist()
    [0, 4, 7]
    """
    mask = graph.check_mask(edges).copy()
    n = graph.n_nodes
    sources_ok = np.zeros(n, dtype=bool)
    sources_ok[0] = True
    sinks_ok = np.zeros(n, dtype=bool)
    sinks_ok[-1] = True
    while True:
        incoming = np.bincount(graph.receivers[mask], minlength=n) > 0
        outgoing = np.bincount(graph.senders[mask], minlength=n) > 0
        alive = (incoming | sources_ok) & (outgoing | sinks_ok)
        keep = mask & alive[graph.senders] & alive[graph.receivers]
        if (keep == mask).all():
            return mask
        mask = keep


def select_edges(graph: Graph, scores: object, fraction: float, *, absolute: bool = False) -> BoolArray:
    """The circuit of the top ``int(fraction * n_edges)`` edges by score (by absolute score when
    `absolute`), ties broken by edge order, then `prune`d.

    SPEC section 7: the signed score for CPR, the absolute score for CMD.
    """
    s = _checked_scores(graph, scores)
    fraction = check_between(fraction, "fraction", 0.0, 1.0, closed="right")
    key = np.abs(s) if check_flag(absolute, "absolute") else s
    count = int(fraction * graph.n_edges)
    mask = np.zeros(graph.n_edges, dtype=bool)
    mask[np.argsort(-key, kind="stable")[:count]] = True
    return prune(graph, mask)


def _checked_scores(graph: Graph, scores: object) -> npt.NDArray[np.float64]:
    s = as_real_array(scores, "edge scores", ndim=1)
    if s.size != graph.n_edges:
        raise ShapeError(f"edge scores have {s.size} entries; the graph has {graph.n_edges} edges")
    if not np.isfinite(s).all():
        raise ShapeError(f"edge score {int(np.flatnonzero(~np.isfinite(s))[0])} is not finite")
    return s


def select_greedy(graph: Graph, scores: object, n_edges: float, *, absolute: bool = True) -> BoolArray:
    """MIB's circuit of `n_edges` edges (EAP-IG's ``Graph.apply_greedy``, as MIB's InterpBench
    AUROC calls it): grown from the logits, each step taking the best-scored edge into a node
    already in the circuit (the logits at first), a sender joining the circuit with it; then
    `prune`d. A fractional `n_edges` takes ``ceil`` of it, counted down by one as EAP-IG counts.

    Ties go as EAP-IG's merged sorted lists send them: an edge that became a candidate earlier
    first; among one node's inputs, by sender, then query, key, value (the order EAP-IG adds
    them in; it keeps them in a set, whose order changes from process to process).

    Examples
    --------
    >>> g = transformer_graph(1, 1)   # input, a0.h0, m0, logits
    >>> s = np.array([0.0, 0.0, 0.0, 5.0, 0.0, 0.0, 0.0, 1.0])   # input -> m0 scores high
    >>> select_edges(g, s, 0.125).nonzero()[0].tolist()          # the top edge alone dangles
    []
    >>> select_greedy(g, s, 2).nonzero()[0].tolist()             # m0 -> logits, then input -> m0
    [3, 7]
    """
    s = _checked_scores(graph, scores)
    n = check_between(n_edges, "n_edges", 0.0, float(graph.n_edges), closed="right")
    key = np.abs(s) if check_flag(absolute, "absolute") else s
    into: list[list[int]] = [[] for _ in range(graph.n_nodes)]
    for e in np.lexsort((np.arange(graph.n_edges), graph.senders, -key)).tolist():
        into[graph.receivers[e]].append(e)
    joined = np.zeros(graph.n_nodes, dtype=bool)
    joined[-1] = True
    candidates: list[tuple[float, int, int, int]] = []
    batches = itertools.count()  # the candidates of a node joined earlier come first on ties

    def join(node: int) -> None:
        batch = next(batches)
        for position, e in enumerate(into[node]):
            heapq.heappush(candidates, (-float(key[e]), batch, position, e))

    join(graph.n_nodes - 1)
    mask = np.zeros(graph.n_edges, dtype=bool)
    while n > 0:
        n -= 1
        e = heapq.heappop(candidates)[3]
        mask[e] = True
        sender = int(graph.senders[e])
        if not joined[sender]:
            joined[sender] = True
            join(sender)
    return prune(graph, mask)


def _top_scored(scores: npt.NDArray[np.float64], fraction: float, absolute: bool) -> BoolArray:
    """Kept items: the top ``int(fraction * scored)`` of the scored (finite) items by score, ties
    by position, and every unscored (NaN) item."""
    flat = scores.ravel()
    scored = np.isfinite(flat)
    if np.isinf(flat).any():
        raise ShapeError("scores must be finite, or NaN for an unscored item")
    key = np.where(scored, np.abs(flat) if absolute else flat, -np.inf)
    keep = ~scored
    count = int(fraction * int(scored.sum()))
    keep[np.argsort(-key, kind="stable")[:count]] = True
    return keep.reshape(scores.shape)


def select_nodes(
    graph: Graph, scores: object, fraction: float, *, absolute: bool = False
) -> tuple[BoolArray, BoolArray]:
    """A node-level circuit: the top ``int(fraction * scored)`` scored nodes (NaN: unscored,
    always kept) with all their outgoing edges. Returns (edge mask, node mask)."""
    s = as_real_array(scores, "node scores", ndim=1)
    if s.size != graph.n_nodes:
        raise ShapeError(f"node scores have {s.size} entries; the graph has {graph.n_nodes} nodes")
    fraction = check_between(fraction, "fraction", 0.0, 1.0, closed="right")
    nodes = _top_scored(s, fraction, check_flag(absolute, "absolute"))
    return nodes[graph.senders], nodes


def select_neurons(
    graph: Graph, scores: object, fraction: float, *, absolute: bool = False
) -> tuple[BoolArray, BoolArray]:
    """A neuron-level circuit: the top ``int(fraction * scored)`` of the scored neurons (a
    nodes x d_model array; NaN: unscored, always kept); a node with a kept neuron keeps all its
    outgoing edges. Returns (edge mask, neuron mask), for `weighted_edge_count`."""
    s = as_real_array(scores, "neuron scores", ndim=2)
    if s.shape[0] != graph.n_nodes or s.shape[1] == 0:
        raise ShapeError(f"neuron scores have shape {s.shape}; the graph has {graph.n_nodes} nodes")
    fraction = check_between(fraction, "fraction", 0.0, 1.0, closed="right")
    neurons = _top_scored(s, fraction, check_flag(absolute, "absolute"))
    nodes: BoolArray = np.any(neurons, axis=1)
    return nodes[graph.senders], neurons
