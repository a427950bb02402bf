"""Edge patching is exact (SPEC section 7), checked against the Hugging Face models themselves:

- the unpatched decomposition, the full circuit and the empty circuit reproduce the model's own
  logits on the clean and on the counterfactual prompt;
- one edge patched by the batched path equals the same edge patched with hooks on the Hugging
  Face modules (an independent implementation written here);
- the methods' scores agree with their definitions: exact patching with the hook patch, EAP with
  a finite difference of the hooked metric, EAP-IG with one step with EAP at the counterfactual.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import hook_patching  # noqa: E402
from neuroneval.circuits import graph_of, select_edges  # noqa: E402
from neuroneval.errors import ParameterError, ShapeError  # noqa: E402
from neuroneval.torch.circuits import (  # noqa: E402
    Batch,
    decompose,
    faithfulness_metrics,
    masked_logits,
    mean_ablation_cache,
    run,
    score_edges,
    score_nodes,
)


def llama(kv_heads: int, *, dtype=torch.float64, seed: int = 0, layers: int = 2):
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=40,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        max_position_embeddings=32,
        attention_bias=True,  # the q/k/v biases of Qwen2-style models take the same path
    )
    model = transformers.LlamaForCausalLM(config).eval().to(dtype)
    with torch.no_grad():  # biases start at zero; make them count
        for p in model.parameters():
            if p.dim() == 1 and p.abs().sum() == 0:
                p.normal_(0, 0.1)
    return model


def gpt2(*, dtype=torch.float64, layers: int = 2):
    torch.manual_seed(1)
    config = transformers.GPT2Config(vocab_size=40, n_embd=32, n_layer=layers, n_head=4, n_positions=32)
    return transformers.GPT2LMHeadModel(config).eval().to(dtype)


def batch(seed: int = 0, n: int = 5, length: int = 7) -> Batch:
    g = torch.Generator().manual_seed(seed)
    return Batch(
        torch.randint(0, 40, (n, length), generator=g),
        torch.randint(0, 40, (n, length), generator=g),
        torch.randint(0, 40, (n,), generator=g),
        torch.randint(0, 40, (n,), generator=g),
    )


def hf_metric(hf, tokens, b: Batch):
    return hook_patching.hf_metric(hf, tokens, b.answer, b.foil)


hook_patch = hook_patching.hook_patch
edge_index = hook_patching.edge_index


EDGES = [
    "input->a0.h1<q>",
    "input->a0.h2<k>",
    "a0.h2->a1.h0<k>",
    "a0.h3->a1.h1<v>",
    "m0->a1.h2<q>",
    "a0.h1->m0",
    "input->m1",
    "a1.h3->logits",
    "m1->logits",
    "input->logits",
]


# ---------------------------------------------------------------- exactness


@pytest.mark.parametrize("make", [lambda dt: llama(2, dtype=dt), lambda dt: gpt2(dtype=dt)], ids=["llama-gqa", "gpt2"])
def test_full_and_empty_circuits_reproduce_the_models_logits_in_float32(make) -> None:
    hf = make(torch.float32)
    model = decompose(hf)
    b = batch()
    e = model.graph.n_edges
    with torch.no_grad():
        clean = run(model, b.clean, b.answer, b.foil, keep=True)
        cor = run(model, b.counterfactual, b.answer, b.foil, keep=True).cache
        full = run(model, b.clean, b.answer, b.foil, circuit=torch.ones(e, dtype=torch.bool), corrupt=cor)
        empty = run(model, b.clean, b.answer, b.foil, circuit=torch.zeros(e, dtype=torch.bool), corrupt=cor)
        hf_clean, hf_cf = hf(b.clean).logits, hf(b.counterfactual).logits
    assert torch.allclose(model.logits(full.logits_input), hf_clean, atol=1e-5, rtol=0)
    assert torch.allclose(model.logits(empty.logits_input), hf_cf, atol=1e-5, rtol=0)
    assert torch.equal(full.metric, clean.metric)  # the same arithmetic, to the bit
    assert torch.equal(empty.metric, cor.metric)
    assert not torch.allclose(hf_clean, hf_cf, atol=1e-3)  # the two prompts do differ


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_one_edge_patched_equals_a_hook_patch_of_that_edge(kv_heads: int) -> None:
    hf = llama(kv_heads)
    model = decompose(hf)
    b = batch(seed=3)
    with torch.no_grad():
        cor = run(model, b.counterfactual, b.answer, b.foil, keep=True).cache
        clean = run(model, b.clean, b.answer, b.foil).metric
    moved = 0
    for name in EDGES:
        if kv_heads != 4 and name.endswith(("<k>", "<v>")):
            continue  # a grouped key/value projection is shared: HF has no per-head input to hook
        circuit = torch.ones(model.graph.n_edges, dtype=torch.bool)
        circuit[edge_index(model.graph, name)] = False
        with torch.no_grad():
            ours = run(model, b.clean, b.answer, b.foil, circuit=circuit, corrupt=cor).metric
        reference = hook_patch(hf, b, name)
        # float64 models, but LLaMA's RMSNorm rounds to float32 inside: agreement to 1e-7
        assert torch.allclose(ours, reference, atol=1e-7, rtol=0), name
        moved += int(not torch.allclose(ours, clean, atol=1e-5))
    assert moved >= 5  # the patches change the metric: the comparison is not of two clean runs


def test_random_circuits_and_sparse_and_dense_mixing_agree_with_a_slow_sum() -> None:
    """A random circuit, by the batched run, equals receivers' inputs summed sender by sender."""
    hf = llama(2)
    model = decompose(hf)
    b = batch(seed=5)
    graph = model.graph
    rng = np.random.default_rng(0)
    with torch.no_grad():
        cor = run(model, b.counterfactual, b.answer, b.foil, keep=True).cache
        for density in (0.05, 0.5, 0.95):  # few senders to add, about half, few to subtract
            mask = rng.random(graph.n_edges) < density
            ours = run(model, b.clean, b.answer, b.foil, circuit=torch.from_numpy(mask), corrupt=cor).metric
            assert torch.allclose(ours, slow_patched_metric(model, b, mask, cor.outputs), atol=1e-10)


def test_masked_logits_with_bool_masks_are_each_examples_circuit_run() -> None:
    """Per-example 0/1 masks give, row by row, the logits of `run` with that row's circuit; a
    mask of halves lies strictly between (the weights are used, not rounded)."""
    hf = llama(2)
    model = decompose(hf)
    b = batch(seed=31, n=3)
    cor = run(model, b.counterfactual, b.answer, b.foil, keep=True).cache
    rng = np.random.default_rng(4)
    circuits = [rng.random(model.graph.n_edges) < p for p in (0.0, 0.3, 1.0)]
    masks = torch.from_numpy(np.stack(circuits)).to(torch.float64)
    got = masked_logits(model, b.clean, masks, cor)
    for i, c in enumerate(circuits):
        one = run(model, b.clean[i : i + 1], b.answer[i : i + 1], b.foil[i : i + 1], circuit=torch.from_numpy(c),
                  corrupt=run(model, b.counterfactual[i : i + 1], b.answer[i : i + 1], b.foil[i : i + 1], keep=True).cache)  # fmt: skip
        expected = model.logits(one.logits_input[:, -1])
        torch.testing.assert_close(got[i : i + 1], expected, atol=1e-10, rtol=1e-10)
    half = masked_logits(model, b.clean, torch.full_like(masks, 0.5), cor)
    full, empty = (
        masked_logits(model, b.clean, torch.ones_like(masks), cor),
        masked_logits(model, b.clean, torch.zeros_like(masks), cor),
    )
    assert not torch.allclose(half, full) and not torch.allclose(half, empty)
    # its gradient in the masks at the full circuit is EAP's score (checked against finite
    # differences of hook patches above): d metric / d m_e = (clean_s - cor_s) . d metric / d input_r
    ones = torch.ones_like(masks).requires_grad_(True)
    logits = masked_logits(model, b.clean, ones, cor)
    rows = torch.arange(len(b))
    (grad,) = torch.autograd.grad((logits[rows, b.answer] - logits[rows, b.foil]).mean(), ones)
    np.testing.assert_allclose(grad.sum(0).numpy(), score_edges(model, [b], "eap"), rtol=1e-5, atol=1e-9)
    with pytest.raises(ShapeError, match="masks must be"):
        masked_logits(model, b.clean, masks[:, :5], cor)


@pytest.mark.parametrize("arch", ["llama-gqa", "gpt2"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
def test_circuits_as_methods_select_them_agree_with_a_slow_sum(arch, dtype, monkeypatch) -> None:
    """The patched pass computes only what a circuit changes (`patched.py`: dead senders, rows
    read from the counterfactual or this run's residual, the MLP's mix begun with its heads',
    the unpatched rest run as the model, LLaMA's norm folded into the projections in float32).
    Circuits as the methods select them (top edges of scores at each fraction, top nodes
    pruned, one edge left out), counterfactual and mean ablation, from the start and from the
    clean cache: each equals the receivers' inputs summed sender by sender, and every shortcut
    is taken at least once."""
    from neuroneval.circuits import prune, select_nodes
    from neuroneval.torch.circuits import patched

    hf = llama(2, dtype=dtype, layers=3) if arch == "llama-gqa" else gpt2(dtype=dtype, layers=3)
    with torch.no_grad():  # norm weights start at one; make them count
        for name, p in hf.named_parameters():
            if "norm" in name or "ln_" in name:
                p.mul_(1 + 0.5 * torch.randn(p.shape, generator=torch.Generator().manual_seed(9), dtype=p.dtype))
    model = decompose(hf)
    graph = model.graph
    b = batch(seed=11, n=4, length=6)
    taken = {"early": 0, "folded": 0}
    mixed, rms = patched._Pass._mixed, patched._rms_scale

    def counted_mixed(*args):
        out = mixed(*args)
        taken["early"] += out[1] is not None
        return out

    def counted_rms(*args):
        out = rms(*args)
        taken["folded"] += out is not None
        return out

    monkeypatch.setattr(patched._Pass, "_mixed", counted_mixed)
    monkeypatch.setattr(patched, "_rms_scale", counted_rms)
    rng = np.random.default_rng(4)
    scores = rng.normal(size=graph.n_edges) * rng.random(graph.n_edges) ** 3  # a few large scores
    circuits = [
        select_edges(graph, scores, f, absolute=a) for f in (0.002, 0.01, 0.05, 0.2, 0.5, 0.9) for a in (False, True)
    ]
    node_scores = np.append(rng.normal(size=graph.n_nodes - 1), np.nan)
    circuits += [prune(graph, select_nodes(graph, node_scores, f, absolute=True)[0]) for f in (0.1, 0.3, 0.6)]
    circuits += [np.arange(graph.n_edges) != e for e in rng.choice(graph.n_edges, 6, replace=False)]
    tolerance = 1e-10 if dtype == torch.float64 else 2e-5
    with torch.no_grad():
        cor = run(model, b.counterfactual, b.answer, b.foil, keep=True).cache
        clean = run(model, b.clean, b.answer, b.foil, keep=True).cache
        means = mean_ablation_cache(model, [b])
        for mask in circuits:
            circuit = torch.from_numpy(mask)
            expected = slow_patched_metric(model, b, mask, cor.outputs)
            scale = float(expected.abs().max()) + 1
            for got in (
                run(model, b.clean, b.answer, b.foil, circuit=circuit, corrupt=cor).metric,
                run(model, b.clean, b.answer, b.foil, circuit=circuit, corrupt=cor, clean=clean).metric,
            ):
                assert float((got - expected).abs().max()) <= tolerance * scale
            got = run(model, b.clean, b.answer, b.foil, circuit=circuit, corrupt=means).metric
            expected = slow_patched_metric(model, b, mask, means.outputs)
            assert float((got - expected).abs().max()) <= tolerance * (float(expected.abs().max()) + 1)
    assert taken["early"] > 0
    assert (taken["folded"] > 0) == (arch == "llama-gqa" and dtype == torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_the_written_out_rms_norm_gradient_is_autograds(dtype) -> None:
    """The gradient methods take each head's input gradient back through its projection and
    LLaMA's RMS norm by a written-out product: autograd's numbers, per head, in each precision
    (the norm computes in float32 inside), to that precision's rounding."""
    from neuroneval.torch.circuits.models import _rms_norm_vjp

    norm = transformers.models.llama.modeling_llama.LlamaRMSNorm(16, eps=1e-5).to(dtype)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        norm.weight.mul_(1 + 0.5 * torch.randn(16, generator=g).to(dtype))
    x = torch.randn(3, 4, 16, generator=g).to(dtype)
    w = torch.randn(5, 8, 16, generator=g).to(dtype)  # five heads' projections, 8 wide
    grads = torch.randn(5, 3, 4, 8, generator=g).to(dtype)
    _, vjp, *_ = torch.func.vjp(norm, x)
    expected = torch.func.vmap(lambda c: vjp(c)[0])(torch.einsum("hbte,hed->hbtd", grads, w)).detach()
    got = _rms_norm_vjp(norm, x)(grads, w)
    tolerance = {torch.float64: 1e-6, torch.float32: 1e-5, torch.bfloat16: 2e-2}[dtype]  # the norm's float32 inside
    assert got.dtype == torch.promote_types(dtype, torch.float32)  # summed in float32 by the methods
    torch.testing.assert_close(got.double(), expected.double(), atol=tolerance * float(expected.abs().max()), rtol=0)
    assert _rms_norm_vjp(torch.nn.LayerNorm(16), x) is None  # another norm goes through autograd


def test_a_run_from_the_clean_cache_is_the_whole_run() -> None:
    """`run(..., clean=)` starts at the first receiver the circuit patches, from the clean run:
    the same metric as the whole patched pass, whether that receiver is a layer's heads, its
    MLP or the logits, or none at all."""
    hf = llama(2)
    model = decompose(hf)
    b = batch(seed=37)
    clean = run(model, b.clean, b.answer, b.foil, keep=True).cache
    cor = run(model, b.counterfactual, b.answer, b.foil, keep=True).cache
    lay = model.layout
    rng = np.random.default_rng(6)
    starts = [lay.heads_start[0], lay.mlp_start[0], lay.heads_start[1] + 5, lay.mlp_start[1], lay.logits_start + 2]
    for first in [*starts, model.graph.n_edges]:
        circuit = torch.from_numpy(np.arange(model.graph.n_edges) < first) | torch.from_numpy(
            rng.random(model.graph.n_edges) < 0.5
        )
        if first < model.graph.n_edges:
            circuit[first] = False
        whole = run(model, b.clean, b.answer, b.foil, circuit=circuit, corrupt=cor).metric
        resumed = run(model, b.clean, b.answer, b.foil, circuit=circuit, corrupt=cor, clean=clean).metric
        torch.testing.assert_close(resumed, whole, atol=1e-12, rtol=1e-12)
    with pytest.raises(ShapeError, match="clean="):
        run(model, b.clean, b.answer, b.foil, clean=clean)


def slow_patched_metric(model, b: Batch, mask: np.ndarray, cor: torch.Tensor) -> torch.Tensor:
    """Edge patching written out: every receiver input is a sum over its senders, one by one."""
    graph = model.graph
    outs: dict[int, torch.Tensor] = {0: model.embed(b.clean)}

    def receiver_input(node: int, slot: str) -> torch.Tensor:
        total = torch.zeros_like(outs[0])
        for e in range(graph.n_edges):
            if graph.receivers[e] == node and graph.slots[e] == slot:
                s = int(graph.senders[e])
                total = total + (outs[s] if mask[e] else cor[s])
        return total

    h = model.n_heads
    for layer in range(model.n_layers):
        first = 1 + layer * (h + 1)
        q = torch.stack([receiver_input(first + i, "q") for i in range(h)])
        k = torch.stack([receiver_input(first + i, "k") for i in range(h)])
        v = torch.stack([receiver_input(first + i, "v") for i in range(h)])
        for i, out in enumerate(model.heads(layer, q, k, v)):
            outs[first + i] = out
        outs[first + h] = model.mlp(layer, receiver_input(first + h, ""))
    x = receiver_input(graph.n_nodes - 1, "")
    return model.logit_difference(x[:, -1], b.answer, b.foil)


# ---------------------------------------------------------------- methods


def test_exact_scores_are_the_hook_patched_drops() -> None:
    hf = llama(4)
    model = decompose(hf)
    b = batch(seed=7)
    scores = score_edges(model, [b], "exact")
    with torch.no_grad():
        clean = hf_metric(hf, b.clean, b)
    for name in EDGES[:6]:
        drop = float((clean - hook_patch(hf, b, name)).mean())
        assert scores[edge_index(model.graph, name)] == pytest.approx(drop, abs=1e-7)


def test_eap_is_the_first_order_drop_of_patching_an_edge() -> None:
    hf = llama(4)
    model = decompose(hf)
    b = batch(seed=9)
    scores = score_edges(model, [b], "eap")
    eps = 1e-3  # central differences: O(eps^2) error, above the float32 rounding inside RMSNorm
    for name in EDGES:
        up, down = hook_patch(hf, b, name, scale=eps), hook_patch(hf, b, name, scale=-eps)
        slope = float((up - down).mean()) / (2 * eps)  # d metric / d (fraction of the edge patched)
        assert scores[edge_index(model.graph, name)] == pytest.approx(-slope, rel=1e-3, abs=1e-5), name


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_nap_is_the_first_order_drop_of_patching_a_node(kv_heads: int) -> None:
    """NAP's score of a node is the slope of the metric's drop as the node's output moves from
    clean to counterfactual where the HF module computes it (central differences)."""
    hf = llama(kv_heads)
    model = decompose(hf)
    b = batch(seed=19)
    scores = score_nodes(model, [b], "nap")
    nodes = model.graph.nodes[:-1]
    assert scores.shape == (len(nodes),)
    outputs = (hook_patching.node_outputs(hf, b.clean), hook_patching.node_outputs(hf, b.counterfactual))
    # HF's attention takes its softmax in float32: below eps = 1e-2 that rounding, not the
    # O(eps^2) truncation, dominates the central difference
    eps = 1e-2
    for i, node in enumerate(nodes):
        up = hook_patching.hook_patch_node(hf, b, node, scale=eps, outputs=outputs)
        down = hook_patching.hook_patch_node(hf, b, node, scale=-eps, outputs=outputs)
        slope = float((up - down).mean()) / (2 * eps)
        assert scores[i] == pytest.approx(-slope, rel=1e-2, abs=2e-7), node
    assert np.abs(scores).max() > 1e-3  # the nodes matter: the comparison is not of zeros
    with pytest.raises(ParameterError, match="unknown node-scoring method 'eap'"):
        score_nodes(model, [b], "eap")
    with pytest.raises(ParameterError, match="unknown edge-scoring method 'nap'"):
        score_edges(model, [b], "nap")


def receiver_inputs(hf, tokens):
    """The residual stream each receiver reads, from pre-hooks on the HF norms: per layer the
    attention's input (``a<l>``) and the MLP's (``m<l>``), and the final norm's (``logits``)."""
    seen = {}
    handles = []
    for layer, block in enumerate(hf.model.layers):
        for name, norm in ((f"a{layer}", block.input_layernorm), (f"m{layer}", block.post_attention_layernorm)):
            handles.append(norm.register_forward_pre_hook(lambda m, args, name=name: seen.__setitem__(name, args[0])))
    handles.append(hf.model.norm.register_forward_pre_hook(lambda m, args: seen.__setitem__("logits", args[0])))
    with torch.no_grad():
        hf(tokens)
    for handle in handles:
        handle.remove()
    return seen


def test_ifr_scores_are_information_flow_routes_by_hand() -> None:
    """IFR by loops over examples, positions and edges, from the HF modules' own sender outputs
    and residual streams: proximity max(0, |x|_1 - |x - out_s|_1), over its sum across the
    receiver's senders, averaged over positions and examples."""
    hf = llama(2)
    model = decompose(hf)
    batches = [batch(seed=23, n=3, length=5), batch(seed=29, n=2, length=8)]
    scores = score_edges(model, batches, "ifr")
    graph = model.graph
    expected = np.zeros(graph.n_edges)
    for b in batches:
        outs, inputs = hook_patching.node_outputs(hf, b.clean), receiver_inputs(hf, b.clean)
        for e in range(graph.n_edges):
            sender, receiver = graph.nodes[graph.senders[e]], graph.nodes[graph.receivers[e]]
            key = receiver.split(".")[0]  # a head reads its layer's attention input
            ups = [
                graph.nodes[graph.senders[f]]
                for f in range(graph.n_edges)
                if graph.receivers[f] == graph.receivers[e] and graph.slots[f] == graph.slots[e]
            ]
            for i in range(len(b)):
                for t in range(b.clean.shape[1]):
                    x = inputs[key][i, t]
                    prox = {u: max(0.0, float(x.abs().sum() - (x - outs[u][i, t]).abs().sum())) for u in ups}
                    expected[e] += prox[sender] / sum(prox.values()) / b.clean.shape[1]
    expected /= sum(len(b) for b in batches)
    np.testing.assert_allclose(scores, expected, rtol=1e-6, atol=1e-9)
    assert scores.min() >= 0 and np.ptp(scores) > 0.1  # shares, and they differ


def test_eap_ig_inputs_with_one_step_is_eap_at_the_counterfactual_run() -> None:
    """With one step the only interpolation point is the counterfactual embedding (alpha = 0);
    EAP with the prompts swapped evaluates the same gradient, the difference negated."""
    model = decompose(llama(2))
    b = batch(seed=11)
    swapped = Batch(b.counterfactual, b.clean, b.answer, b.foil)
    one_step = score_edges(model, [b], "eap-ig-inputs", steps=1)
    assert np.allclose(one_step, -score_edges(model, [swapped], "eap"), atol=1e-10)
    assert not np.allclose(one_step, score_edges(model, [b], "eap"), atol=1e-3)


def test_ig_scores_approach_exact_patching_of_the_input_edges_more_closely_with_more_steps() -> None:
    model = decompose(llama(2))
    b = batch(seed=13)
    exact = score_edges(model, [b], "exact")
    errors = [np.abs(score_edges(model, [b], "eap-ig-inputs", steps=s) - exact).mean() for s in (1, 8)]
    assert errors[1] < errors[0]


def test_random_scores_are_seeded_and_the_methods_average_over_batches() -> None:
    model = decompose(llama(2))
    a, c = batch(seed=1, n=3), batch(seed=2, n=5)
    assert np.array_equal(score_edges(model, [a], "random", seed=4), score_edges(model, [c], "random", seed=4))
    assert not np.array_equal(score_edges(model, [a], "random", seed=4), score_edges(model, [a], "random", seed=5))
    both = score_edges(model, [a, c], "eap")
    assert np.allclose(both, (3 * score_edges(model, [a], "eap") + 5 * score_edges(model, [c], "eap")) / 8, atol=1e-12)


def test_faithfulness_metrics_are_dataset_means_and_mean_ablation_uses_the_means() -> None:
    model = decompose(llama(2))
    batches = [batch(seed=1, n=3), batch(seed=2, n=4, length=5)]
    scores = score_edges(model, batches, "eap")
    circuit = torch.from_numpy(select_edges(model.graph, scores, 0.2))
    metrics, full, empty = faithfulness_metrics(model, batches, [circuit])
    with torch.no_grad():
        per = [
            run(
                model,
                x.clean,
                x.answer,
                x.foil,
                circuit=circuit,
                corrupt=run(model, x.counterfactual, x.answer, x.foil, keep=True).cache,
            ).metric
            for x in batches
        ]
        clean = torch.cat([run(model, x.clean, x.answer, x.foil).metric for x in batches])
    assert metrics[0] == pytest.approx(float(torch.cat(per).mean()), abs=1e-12)
    assert full == pytest.approx(float(clean.mean()), abs=1e-12)
    means = mean_ablation_cache(model, batches)
    with torch.no_grad():
        caches = [run(model, x.clean, x.answer, x.foil, keep=True).cache for x in batches]
    by_hand = sum(c.outputs.sum(dim=(1, 2)) for c in caches) / sum(x.clean.numel() for x in batches)
    assert torch.allclose(means.outputs[:, 0, 0], by_hand, atol=1e-12)
    _, _, empty_mean = faithfulness_metrics(model, batches, [], means=means)
    assert empty_mean != pytest.approx(empty)


# ---------------------------------------------------------------- bad input


def test_models_the_runner_does_not_support_are_named() -> None:
    bert = transformers.BertConfig(
        vocab_size=20, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16
    )
    with pytest.raises(ParameterError, match="bert"):
        decompose(transformers.BertModel(bert))
    gemma = transformers.Gemma2Config(
        vocab_size=20,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=16,
        head_dim=8,
    )
    assert graph_of(gemma).n_edges > 0
    with pytest.raises(ParameterError, match="builds its graph"):
        decompose(transformers.Gemma2ForCausalLM(gemma))


def test_circuits_of_the_wrong_shape_or_without_a_cache_are_refused() -> None:
    model = decompose(llama(2))
    b = batch()
    with torch.no_grad():
        cor = run(model, b.counterfactual, b.answer, b.foil, keep=True).cache
    with pytest.raises(ShapeError, match="edges"):
        run(model, b.clean, b.answer, b.foil, circuit=torch.ones(5, dtype=torch.bool), corrupt=cor)
    with pytest.raises(ShapeError, match="bool"):
        run(model, b.clean, b.answer, b.foil, circuit=torch.ones(model.graph.n_edges), corrupt=cor)
    with pytest.raises(ShapeError, match="counterfactual"):
        run(model, b.clean, b.answer, b.foil, circuit=torch.ones(model.graph.n_edges, dtype=torch.bool))
    with pytest.raises(ShapeError, match="one shape"):
        Batch(b.clean, b.counterfactual[:, :3], b.answer, b.foil)
    with pytest.raises(ParameterError, match="unknown edge-scoring method .attribution.; choose one of random, eap"):
        score_edges(model, [b], "attribution")
