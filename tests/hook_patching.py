"""One edge of MIB's graph patched with forward hooks on a Hugging Face LLaMA-family model's own
modules: the independent reference the circuit tests check `neuroneval.torch.circuits.run`
against, and the peer of benches/circuit_patching.py (a loop of single-edge hook patches).

`node_outputs` reads every sender's output with hooks (the embedding, each head's slice of
``o_proj``'s input through its columns, each MLP's output); `hook_patch` moves one edge's sender
activation in its receiver's input from the clean to the counterfactual run, `hook_patch_node`
one node's output itself (every receiver downstream sees it).
"""

from __future__ import annotations

import torch


def hf_metric(hf, tokens, answer, foil):
    logits = hf(tokens).logits[:, -1]
    rows = torch.arange(len(answer))
    return logits[rows, answer] - logits[rows, foil]


def node_outputs(hf, tokens):
    """Each sender's output on `tokens` from hooks on the Hugging Face LLaMA modules: the
    embedding, each head's slice of o_proj's input through its columns, each MLP's output."""
    outs: dict[str, torch.Tensor] = {}
    handles = []
    base = hf.model
    handles.append(base.embed_tokens.register_forward_hook(lambda m, i, o: outs.__setitem__("input", o)))
    n_heads = hf.config.num_attention_heads
    for layer, block in enumerate(base.layers):
        o_proj = block.self_attn.o_proj

        def heads(m, args, layer=layer, o_proj=o_proj):
            z = args[0]
            hd = z.shape[-1] // n_heads
            for h in range(n_heads):
                piece = z[..., h * hd : (h + 1) * hd] @ o_proj.weight[:, h * hd : (h + 1) * hd].T
                outs[f"a{layer}.h{h}"] = piece + (0 if o_proj.bias is None else o_proj.bias / n_heads)

        handles.append(o_proj.register_forward_pre_hook(heads))
        handles.append(block.mlp.register_forward_hook(lambda m, i, o, layer=layer: outs.__setitem__(f"m{layer}", o)))
    with torch.no_grad():
        hf(tokens)
    for handle in handles:
        handle.remove()
    return outs


def hook_patch(hf, b, edge: str, *, scale: float = 1.0, outputs=None):
    """The metric with one edge's sender activation in its receiver's input moved from clean to
    counterfactual (by `scale` of the difference), through hooks on the HF modules only.
    `outputs`: the clean and counterfactual `node_outputs`, when the caller holds them."""
    sender, receiver = edge.split("->")
    slot = None
    if "<" in receiver:
        receiver, slot = receiver[:-3], receiver[-2]
    clean, cf = outputs if outputs is not None else (node_outputs(hf, b.clean), node_outputs(hf, b.counterfactual))
    delta = scale * (clean[sender] - cf[sender])  # a single patched edge leaves its sender clean
    base = hf.model
    handles = []
    if receiver == "logits":
        handles.append(base.norm.register_forward_pre_hook(lambda m, args: (args[0] - delta,)))
    elif receiver.startswith("m"):
        block = base.layers[int(receiver[1:])]
        handles.append(block.post_attention_layernorm.register_forward_pre_hook(lambda m, args: (args[0] - delta,)))
    else:
        layer, head = (int(x) for x in receiver[1:].split(".h"))
        block = base.layers[layer]
        seen = {}
        handles.append(
            block.input_layernorm.register_forward_pre_hook(lambda m, args: seen.__setitem__("resid", args[0]))
        )
        proj = {"q": block.self_attn.q_proj, "k": block.self_attn.k_proj, "v": block.self_attn.v_proj}[slot]
        hd = hf.config.hidden_size // hf.config.num_attention_heads

        norm = block.input_layernorm

        def replace(m, args, out):
            x = seen["resid"] - delta  # the norm and projection written out: no hooks re-enter
            x = norm.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon))
            moved = torch.nn.functional.linear(x, proj.weight, proj.bias)
            out = out.clone()
            out[..., head * hd : (head + 1) * hd] = moved[..., head * hd : (head + 1) * hd]
            return out

        handles.append(proj.register_forward_hook(replace))
    with torch.no_grad():
        value = hf_metric(hf, b.clean, b.answer, b.foil)
    for handle in handles:
        handle.remove()
    return value


def hook_patch_node(hf, b, node: str, *, scale: float = 1.0, outputs=None):
    """The metric with one sender's output moved from clean to counterfactual (by `scale` of the
    difference) where the module computes it, through hooks on the HF modules only."""
    clean, cf = outputs if outputs is not None else (node_outputs(hf, b.clean), node_outputs(hf, b.counterfactual))
    delta = scale * (cf[node] - clean[node])
    base = hf.model
    if node == "input":
        module = base.embed_tokens
    elif node.startswith("m"):
        module = base.layers[int(node[1:])].mlp
    else:  # a head's output enters the residual stream through o_proj's output
        module = base.layers[int(node[1:].split(".h")[0])].self_attn.o_proj
    handle = module.register_forward_hook(lambda m, args, out: out + delta)
    with torch.no_grad():
        value = hf_metric(hf, b.clean, b.answer, b.foil)
    handle.remove()
    return value


def edge_index(graph, name: str) -> int:
    names = [graph.describe(e).replace(" -> ", "->") for e in range(graph.n_edges)]
    return names.index(name)
