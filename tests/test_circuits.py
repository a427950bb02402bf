"""MIB's circuit scores as pure functions (neuroneval.circuits, SPEC section 7): CPR and CMD
against hand-computed values, faithfulness as a ratio of means, the graph's edge count against
MIB's GPT-2 constant and a slow enumeration, pruning on hand-built graphs and against a slow
fixed-point loop, weighted edge counts, and AUROC against its definition."""

from __future__ import annotations

import heapq
import itertools

import numpy as np
import pytest
from neuroneval.circuits import (
    FRACTIONS,
    Graph,
    auroc,
    cmd,
    cpr,
    edge_names,
    faithfulness,
    graph_of,
    mean_faithfulness,
    prune,
    select_edges,
    select_greedy,
    select_neurons,
    select_nodes,
    transformer_graph,
    weighted_edge_count,
)
from neuroneval.errors import NonFiniteError, ParameterError, ShapeError

K = list(FRACTIONS)


def trapezoid(k: list[float], v: list[float]) -> float:
    return sum((k[j + 1] - k[j]) * (v[j] + v[j + 1]) / 2 for j in range(len(k) - 1))


def test_cpr_and_cmd_by_hand() -> None:
    assert cpr(K, [1.0] * 10) == pytest.approx(0.999, abs=1e-15)  # 1.0 - 0.001
    assert cmd(K, [1.0] * 10) == 0.0
    assert cpr(K, [0.0] * 10) == 0.0 and cmd(K, [0.0] * 10) == pytest.approx(0.999)
    # one step from 0 to 1 between 0.5 and 1.0: the last trapezoid holds half of its width
    step = [0.0] * 9 + [1.0]
    assert cpr(K, step) == pytest.approx(0.25) and cmd(K, step) == pytest.approx(0.999 - 0.25)
    # f below 0 and above 1: CPR integrates the signed values, CMD the distances to 1
    wild = [-0.5, 1.5, 2.0, -1.0, 0.3, 0.9, 1.2, 1.0, 0.8, 1.1]
    assert cpr(K, wild) == pytest.approx(trapezoid(K, wild), abs=1e-15)
    assert cmd(K, wild) == pytest.approx(trapezoid(K, [abs(1 - f) for f in wild]), abs=1e-15)
    assert cmd(K, [2.0] * 10) == pytest.approx(0.999)  # f = 2 is as far from 1 as f = 0
    assert mean_faithfulness(wild) == pytest.approx(sum(wild) / 10)


def test_curve_checks() -> None:
    with pytest.raises(ShapeError, match="same length"):
        cpr(K, [1.0] * 9)
    with pytest.raises(ParameterError, match="increase"):
        cmd(K[::-1], [1.0] * 10)
    with pytest.raises(NonFiniteError):
        cpr(K, [np.nan] + [1.0] * 9)


def test_faithfulness_is_a_ratio_of_means() -> None:
    rng = np.random.default_rng(0)
    full, empty, circuit = rng.normal(3, 1, 50), rng.normal(-1, 1, 50), rng.normal(1, 1, 50)
    f = faithfulness(circuit, full=full, empty=empty)
    assert f == pytest.approx((circuit.mean() - empty.mean()) / (full.mean() - empty.mean()), rel=1e-12)
    assert f != pytest.approx(np.mean((circuit - empty) / (full - empty)))  # not a mean of ratios
    # m changing sign does not change f (a shift of every metric by a constant)
    assert faithfulness(circuit - 5, full=full - 5, empty=empty - 5) == pytest.approx(f, rel=1e-12)
    assert faithfulness(5.0, full=2.0, empty=1.0) == 4.0 and faithfulness(0.0, full=2.0, empty=1.0) == -1.0
    with pytest.raises(ParameterError, match="undefined"):
        faithfulness(1.0, full=2.0, empty=2.0)
    with pytest.raises(ShapeError, match="no examples"):
        faithfulness([], full=1.0, empty=0.0)


def slow_edges(n_layers: int, n_heads: int) -> set[tuple[str, str, str]]:
    """Every (sender, receiver, input) by the definition: a node reads all nodes before it in the
    residual stream (input; earlier layers' heads and MLPs; for an MLP, its own layer's heads)."""
    order = (
        ["input"]
        + [n for layer in range(n_layers) for n in [*(f"a{layer}.h{h}" for h in range(n_heads)), f"m{layer}"]]
        + ["logits"]
    )

    def layer_of(n: str) -> int:
        return int(n[1:].split(".")[0])

    edges = set()
    for receiver in order[1:]:
        for sender in order:
            if sender == receiver or sender == "logits":
                continue
            if receiver.startswith("a"):
                upstream = sender == "input" or layer_of(sender) < layer_of(receiver)
                edges |= {(sender, receiver, s) for s in "qkv"} if upstream else set()
            elif receiver.startswith("m"):
                if (
                    sender == "input"
                    or layer_of(sender) < layer_of(receiver)
                    or (sender.startswith("a") and layer_of(sender) == layer_of(receiver))
                ):
                    edges.add((sender, receiver, ""))
            else:
                edges.add((sender, receiver, ""))
    return edges


@pytest.mark.parametrize("n_layers, n_heads", [(1, 1), (2, 3), (4, 2)])
def test_graph_against_the_definition(n_layers: int, n_heads: int) -> None:
    g = transformer_graph(n_layers, n_heads)
    got = {(g.nodes[s], g.nodes[r], slot) for s, r, slot in zip(g.senders, g.receivers, g.slots, strict=True)}
    assert len(got) == g.n_edges and got == slow_edges(n_layers, n_heads)


@pytest.mark.parametrize(
    "n_layers, n_heads, edges",
    [(12, 12, 32_491), (24, 14, 179_749), (26, 8, 74_218), (32, 32, 1_592_881), (6, 4, 1_108)],
    ids=["gpt2-small", "qwen2.5-0.5b", "gemma-2-2b", "llama-3.1-8b", "interpbench"],
)
def test_mibs_edge_counts(n_layers: int, n_heads: int, edges: int) -> None:
    """MIB's published edge counts (SPEC section 7), from each model's layers and query heads."""
    assert transformer_graph(n_layers, n_heads).n_edges == edges


def test_graph_of_real_model_configs() -> None:
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_head=4, n_embd=32, vocab_size=50))
    assert graph_of(gpt2).n_edges == transformer_graph(2, 4).n_edges
    assert graph_of(transformers.GPT2Config()).n_edges == 32_491  # GPT-2 small's configuration
    smollm2 = transformers.LlamaConfig(
        num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, hidden_size=576
    )
    assert graph_of(smollm2).nodes[-2] == "m29" and graph_of(smollm2).n_edges == transformer_graph(30, 9).n_edges
    with pytest.raises(ParameterError, match="got 'bert'"):
        graph_of(transformers.BertConfig())


def slow_prune(g: Graph, mask: np.ndarray) -> np.ndarray:
    mask = mask.copy()
    changed = True
    while changed:
        changed = False
        for node in range(g.n_nodes):
            has_in = node == 0 or any(mask[e] and g.receivers[e] == node for e in range(g.n_edges))
            has_out = node == g.n_nodes - 1 or any(mask[e] and g.senders[e] == node for e in range(g.n_edges))
            if not (has_in and has_out):
                for e in range(g.n_edges):
                    if mask[e] and node in (g.senders[e], g.receivers[e]):
                        mask[e] = False
                        changed = True
    return mask


def test_prune_on_hand_built_graphs() -> None:
    g = transformer_graph(2, 1)  # input, a0.h0, m0, a1.h0, m1, logits
    by_name = {g.describe(e): e for e in range(g.n_edges)}

    def circuit(*names: str) -> np.ndarray:
        mask = np.zeros(g.n_edges, dtype=bool)
        mask[[by_name[n] for n in names]] = True
        return mask

    path = circuit("input -> a0.h0<v>", "a0.h0 -> a1.h0<q>", "a1.h0 -> logits")
    assert (prune(g, path) == path).all()  # a connected path stays whole
    dangling = path | circuit("input -> m0", "a0.h0 -> m1")  # m0 and m1 feed nothing
    assert (prune(g, dangling) == path).all()
    orphan = circuit("m0 -> logits", "a1.h0 -> logits")  # nothing reaches m0 or a1.h0
    assert not prune(g, orphan).any()
    chain = circuit("input -> a0.h0<k>", "a0.h0 -> m0", "m0 -> a1.h0<v>", "a1.h0 -> m1")  # cut before the logits
    assert not prune(g, chain).any()  # pruning repeats until nothing dangles
    rng = np.random.default_rng(1)
    for _ in range(30):
        mask = rng.random(g.n_edges) < 0.4
        assert (prune(g, mask) == slow_prune(g, mask)).all()


def test_select_edges_takes_the_top_fraction() -> None:
    g = transformer_graph(3, 2)
    rng = np.random.default_rng(2)
    scores = rng.normal(size=g.n_edges)
    scores[:6] = 5.0  # ties at the top: the earlier edges win
    for fraction in FRACTIONS:
        count = int(fraction * g.n_edges)
        signed = select_edges(g, scores, fraction)
        top = np.zeros(g.n_edges, dtype=bool)
        top[sorted(range(g.n_edges), key=lambda e: (-scores[e], e))[:count]] = True
        assert (signed == slow_prune(g, top)).all()
        by_size = np.zeros(g.n_edges, dtype=bool)
        by_size[sorted(range(g.n_edges), key=lambda e: (-abs(scores[e]), e))[:count]] = True
        assert (select_edges(g, scores, fraction, absolute=True) == slow_prune(g, by_size)).all()
    assert select_edges(g, scores, 1.0).all()  # the whole graph has nothing dangling
    with pytest.raises(ShapeError, match="the graph has"):
        select_edges(g, scores[:-1], 0.5)
    with pytest.raises(ParameterError):
        select_edges(g, scores, 0.0)
    with pytest.raises(ShapeError, match="not finite"):
        select_edges(g, np.where(np.arange(g.n_edges) == 3, np.nan, scores), 0.5)


def test_weighted_edge_count() -> None:
    g = transformer_graph(2, 2)
    rng = np.random.default_rng(3)
    mask = rng.random(g.n_edges) < 0.5
    assert weighted_edge_count(g, mask) == mask.sum()
    neurons = rng.random((g.n_nodes, 8)) < 0.25
    nodes = rng.random(g.n_nodes) < 0.7
    expected = sum(neurons[g.senders[e]].sum() / 8 * nodes[g.senders[e]] for e in range(g.n_edges) if mask[e])
    assert weighted_edge_count(g, mask, node_mask=nodes, neuron_mask=neurons) == pytest.approx(expected)
    assert weighted_edge_count(g, mask, neuron_mask=np.ones((g.n_nodes, 4), bool)) == mask.sum()
    with pytest.raises(ShapeError, match="neuron_mask"):
        weighted_edge_count(g, mask, neuron_mask=np.ones((3, 4), bool))
    with pytest.raises(ShapeError, match="edge mask"):
        weighted_edge_count(g, mask[:-1])


def mib_apply_greedy(n_layers: int, n_heads: int, scores: dict[str, float], n_edges: float) -> set[str]:
    """EAP-IG's ``Graph.apply_greedy(n_edges)`` (absolute, reset, prune; hannamw/EAP-IG at 7af394a,
    as MIB's ``evaluate_area_under_roc`` calls it), transcribed with its sorted lists merged by
    ``heapq.merge``: the names of the edges in the circuit. EAP-IG keeps a node's incoming edges
    in a set, whose order (by the names' hashes) changes from process to process; here they keep
    the order `Graph.from_model` adds them in (by sender, then q, k, v)."""
    from mib_graph import from_model_names

    node_names, edge_names_, _ = from_model_names({"n_layers": n_layers, "n_heads": n_heads, "parallel_attn_mlp": False,
                                              "d_model": 1})  # fmt: skip
    in_graph = dict.fromkeys(node_names, False)
    in_graph["logits"] = True  # the logits node is always in the graph
    parent_of = {e: e.split("->")[0] for e in edge_names_}
    child_of = {e: e.split("->")[1].split("<")[0] for e in edge_names_}
    parent_edges = {n: [e for e in edge_names_ if child_of[e] == n] for n in node_names}
    chosen = dict.fromkeys(edge_names_, False)

    def key(e: str) -> float:
        return abs(scores[e])

    candidates = sorted([e for e in edge_names_ if in_graph[child_of[e]]], key=key, reverse=True)
    stream = heapq.merge(candidates, key=key, reverse=True)
    while n_edges > 0:
        n_edges -= 1
        top = next(stream)
        chosen[top] = True
        parent = parent_of[top]
        if not in_graph[parent]:
            in_graph[parent] = True
            stream = heapq.merge(stream, sorted(parent_edges[parent], key=key, reverse=True), key=key, reverse=True)
    # prune: nodes without incoming (the input excepted) or outgoing edges go, then their edges
    while True:
        outgoing = {n: any(chosen[e] and parent_of[e] == n for e in edge_names_) for n in node_names}
        incoming = {n: n == "input" or any(chosen[e] and child_of[e] == n for e in edge_names_) for n in node_names}
        new = {n: outgoing[n] and incoming[n] for n in node_names if n != "logits"}
        same = all(new[n] == in_graph[n] for n in new)
        in_graph.update(new)
        for e in edge_names_:
            chosen[e] = chosen[e] and in_graph[parent_of[e]] and (child_of[e] == "logits" or in_graph[child_of[e]])
        if same:
            return {e for e in edge_names_ if chosen[e]}


@pytest.mark.parametrize("seed", range(6))
def test_greedy_circuits_are_mibs(seed: int) -> None:
    g = transformer_graph(3, 2)
    names = edge_names(g)
    rng = np.random.default_rng(seed)
    # signed scores, and ties (scores rounded to a grid) across nodes
    scores = np.round(rng.normal(size=g.n_edges) * rng.choice([0.1, 1.0, 5.0], g.n_edges), 1)
    for n in [1, 2, 2.5, 0.1 * g.n_edges, 0.2 * g.n_edges, 0.5 * g.n_edges, g.n_edges]:
        mine = select_greedy(g, scores, n)
        assert {names[e] for e in np.flatnonzero(mine)} == mib_apply_greedy(
            3, 2, dict(zip(names, scores, strict=True)), n
        ), n
    assert select_greedy(g, scores, g.n_edges).all()
    with pytest.raises(ParameterError, match="n_edges"):
        select_greedy(g, scores, g.n_edges + 1)


def _area(points: list[tuple[float, float]]) -> float:
    last = points[-1][0]
    return sum((b[0] - a[0]) / last * (a[1] + b[1]) / 2 for a, b in itertools.pairwise(points))


def test_auroc_by_its_definition() -> None:
    g = transformer_graph(3, 3)
    names = edge_names(g)
    rng = np.random.default_rng(4)
    truth = rng.random(g.n_edges) < 0.1
    scores = truth + rng.normal(0, 0.6, g.n_edges)
    greedy, top = [], []
    for fraction in FRACTIONS:
        # MIB's: greedy circuits of fraction * n_edges edges (MIB's evaluate_area_under_roc)
        kept = mib_apply_greedy(3, 3, dict(zip(names, scores, strict=True)), fraction * g.n_edges)
        chosen = np.array([n in kept for n in names])
        greedy.append(((chosen & ~truth).sum() / (~truth).sum(), (chosen & truth).sum() / truth.sum()))
        # ours: the signed top int(fraction * n_edges), pruned
        mask = np.zeros(g.n_edges, dtype=bool)
        mask[np.argsort(-scores, kind="stable")[: int(fraction * g.n_edges)]] = True
        chosen = slow_prune(g, mask)
        top.append(((chosen & ~truth).sum() / (~truth).sum(), (chosen & truth).sum() / truth.sum()))
    assert auroc(g, scores, truth) == pytest.approx(_area(greedy), abs=1e-12)
    assert auroc(g, scores, truth, selection="top") == pytest.approx(_area(top), abs=1e-12)
    assert auroc(g, scores, truth) != pytest.approx(auroc(g, scores, truth, selection="top"))
    assert auroc(g, scores, truth) > auroc(g, rng.normal(size=g.n_edges), truth)
    with pytest.raises(ShapeError, match="must hold some edges"):
        auroc(g, scores, np.zeros(g.n_edges, bool))
    with pytest.raises(ParameterError, match="selection"):
        auroc(g, scores, truth, selection="signed")


def test_node_and_neuron_circuits() -> None:
    g = transformer_graph(2, 2)
    rng = np.random.default_rng(5)
    scores = rng.normal(size=g.n_nodes)
    scores[[0, g.n_nodes - 1]] = np.nan  # the input and the logits are not scored: always kept
    edges, nodes = select_nodes(g, scores, 0.5)
    scored = [i for i in range(g.n_nodes) if not np.isnan(scores[i])]
    top = sorted(scored, key=lambda i: (-scores[i], i))[: int(0.5 * len(scored))]
    assert set(np.flatnonzero(nodes)) == {0, g.n_nodes - 1, *top}
    assert (edges == np.array([nodes[s] for s in g.senders])).all()  # all outgoing edges of kept nodes
    _, by_size = select_nodes(g, scores, 0.5, absolute=True)
    assert set(np.flatnonzero(by_size)) == {0, g.n_nodes - 1, *sorted(scored, key=lambda i: (-abs(scores[i]), i))[:3]}
    neuron_scores = rng.normal(size=(g.n_nodes, 6))
    neuron_scores[0] = np.nan
    edges, neurons = select_neurons(g, neuron_scores, 0.1)
    flat = [
        (neuron_scores[i, j], i, j) for i in range(g.n_nodes) for j in range(6) if not np.isnan(neuron_scores[i, j])
    ]
    kept = {(i, j) for _, i, j in sorted(flat, key=lambda t: (-t[0], t[1] * 6 + t[2]))[: int(0.1 * len(flat))]}
    kept |= {(0, j) for j in range(6)}
    assert {(int(i), int(j)) for i, j in zip(*np.nonzero(neurons), strict=True)} == kept
    assert (edges == neurons.any(axis=1)[g.senders]).all()
    assert weighted_edge_count(g, edges, neuron_mask=neurons) == pytest.approx(
        sum(neurons[s].mean() for s, e in zip(g.senders, edges, strict=True) if e)
    )
    with pytest.raises(ShapeError, match="the graph has"):
        select_nodes(g, scores[:-1], 0.5)
    with pytest.raises(ShapeError, match="finite, or NaN"):
        select_neurons(g, np.full((g.n_nodes, 2), np.inf), 0.5)
