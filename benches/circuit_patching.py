"""Edge patching throughput: `neuroneval.torch.circuits.run` against a loop of single-edge hook patches.

MIB's circuit track patches edges: a circuit's edges read their sender's clean activation,
every other edge the sender's activation on the counterfactual prompt. Both sides run in this
process, on the same batch of B examples of T tokens, under `torch.no_grad()`, in float32:

1. **Per-edge patching, like for like.** The metric ``logit(answer) - logit(foil)`` with each
   of K sampled edges patched alone. Ours: `run(model, clean, answer, foil, circuit=every edge
   but that one, corrupt=cache, clean=clean_cache)`, one batched pass per edge from the edge's
   receiver on (the layers before it are the clean run's), the counterfactual and clean `Cache`s
   computed once (timed). The peer: `tests/hook_patching.py`, forward hooks on the Hugging Face modules
   themselves, `hook_patch` per edge with the clean and counterfactual `node_outputs` computed
   once (timed). Throughput = B x K / seconds on each side; both sides' metrics must agree.
2. **Circuit patching.** One `run` with a random (seeded) circuit of 5% of the edges patches every
   other edge at once, the counterfactual cache again timed with it: B x E / seconds (E: all
   the graph's edges), against the peer's single-edge throughput of (1). The hook loop patches
   one edge per pass, so this ratio is what batched patching buys; (1) is the like-for-like one.

Each side's figure is the fastest of `--repeats` rounds (default 2), the rounds of the two sides
alternating, after one untimed warm-up pass of each. Ratios are ours over the peer's, higher
is better, as everywhere in benches/. torch's thread count is left as it is (printed).

Edges are drawn uniformly (seeded) from those the peer can patch: with grouped key/value heads
(SmolLM2: 9 query heads, 3 key/value heads) a head's key and value inputs have no per-head
projection in the Hugging Face model to hook, so receivers are then query inputs, MLPs and
the logits only.

    python benches/circuit_patching.py            # SmolLM2-135M-Instruct, IOI, B = 32, K = 48 (~25 s to load)
    python benches/circuit_patching.py --quick    # a random 4-layer LLaMA, a few seconds
    python benches/circuit_patching.py --batch 16 --edges 24 --repeats 3
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests"  # hook_patching.py, the peer; appended, so that it shadows no module
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
if str(TESTS) not in sys.path:
    sys.path.append(str(TESTS))

import _workload  # noqa: E402


@dataclass(frozen=True)
class CircuitSize:
    name: str
    batch: int  # examples B
    edges: int  # sampled edges K, each patched alone
    fraction: float = 0.05  # of the edges in the circuit of figure 2
    repeats: int = 2  # timed rounds of each side
    seed: int = 0


FULL = CircuitSize("full", batch=32, edges=48)
SMALL = CircuitSize("small", batch=8, edges=12)


def small_model(seed: int = 0) -> Any:
    """A random-weight LLaMA (4 layers, 4 heads, 4 key/value heads, d = 64), float32, eval mode."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
    )
    return transformers.LlamaForCausalLM(config).eval()


def random_batch(vocab: int, n: int, length: int = 12, seed: int = 0) -> Any:
    """Random clean and counterfactual prompts and answers (the small size's workload)."""
    import torch
    from neuroneval.torch.circuits import Batch

    g = torch.Generator().manual_seed(seed)
    return Batch(*(torch.randint(0, vocab, shape, generator=g) for shape in ((n, length), (n, length), (n,), (n,))))


def ioi_batch(tokenizer: Any, n: int, seed: int = 0) -> Any:
    """`n` IOI examples of one prompt length: the first length group of `n` (or the largest)."""
    from neuroneval.circuits.tasks import ioi_examples, tokenize_task
    from neuroneval.torch.circuits import task_batches

    def tokenize(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False).input_ids)

    task = tokenize_task(ioi_examples(20 * n, seed=seed), tokenize, name="ioi")
    batches = task_batches(task, n)
    full = [b for b in batches if len(b) == n]
    return full[0] if full else max(batches, key=len)


def patchable_edges(graph: Any, config: Any) -> np.ndarray:
    """The edges the hook peer can patch: all of them, or with grouped key/value heads those whose
    receiver is a query input, an MLP or the logits."""
    slots = np.asarray(graph.slots)
    if config.num_key_value_heads == config.num_attention_heads:
        return np.arange(graph.n_edges)
    return np.flatnonzero(np.isin(slots, ["q", ""]))


def edge_name(graph: Any, e: int) -> str:
    return str(graph.describe(int(e))).replace(" -> ", "->")


def best_of(rounds: int, sides: dict[str, Callable[[], Any]]) -> dict[str, tuple[Any, float]]:
    """Each side's last result and its fastest wall time over `rounds` rounds, the sides alternating."""
    best = {k: (None, math.inf) for k in sides}
    for _ in range(max(1, rounds)):
        for k, fn in sides.items():
            t0 = time.perf_counter()
            out = fn()
            seconds = time.perf_counter() - t0
            best[k] = (out, min(best[k][1], seconds))
    return best


def measure(hf: Any, batch: Any, size: CircuitSize, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Both figures on `batch` with the Hugging Face model `hf` (float32, eval mode)."""
    import hook_patching
    import torch
    from neuroneval.torch.circuits import decompose, run

    model = decompose(hf)
    graph = model.graph
    n_edges = graph.n_edges
    b, t = (int(x) for x in batch.clean.shape)
    eligible = patchable_edges(graph, hf.config)
    rng = np.random.default_rng(size.seed)
    k = min(size.edges, eligible.size)
    edges = np.sort(rng.choice(eligible, size=k, replace=False))
    names = [edge_name(graph, e) for e in edges]
    circuit_mask = torch.from_numpy(rng.random(n_edges) < size.fraction)
    clean, cf, answer, foil = batch.clean, batch.counterfactual, batch.answer, batch.foil

    def ours_per_edge() -> torch.Tensor:
        # both caches timed, as the peer's node outputs of both runs are
        cache = run(model, cf, answer, foil, keep=True).cache
        clean_cache = run(model, clean, answer, foil, keep=True).cache
        circuit = torch.ones(n_edges, dtype=torch.bool)
        out = []
        for e in edges:
            circuit[e] = False
            out.append(run(model, clean, answer, foil, circuit=circuit, corrupt=cache, clean=clean_cache).metric)
            circuit[e] = True
        return torch.stack(out)

    def peer_per_edge() -> torch.Tensor:
        outputs = (hook_patching.node_outputs(hf, clean), hook_patching.node_outputs(hf, cf))
        return torch.stack([hook_patching.hook_patch(hf, batch, name, outputs=outputs) for name in names])

    def ours_circuit() -> torch.Tensor:
        cache = run(model, cf, answer, foil, keep=True).cache
        return run(model, clean, answer, foil, circuit=circuit_mask, corrupt=cache).metric

    # the track's circuits on this batch: EAP's top edges at each fraction, signed and absolute
    from neuroneval.circuits import FRACTIONS, select_edges
    from neuroneval.torch.circuits import score_edges

    with torch.enable_grad():
        eap = score_edges(model, [batch], "eap")
    track_circuits = [
        (f, a, torch.from_numpy(select_edges(graph, eap, f, absolute=a))) for f in FRACTIONS[:-1] for a in (False, True)
    ]

    def plain_forward() -> torch.Tensor:
        logits = hf(clean, logits_to_keep=1).logits[:, -1]
        rows = torch.arange(len(answer))
        return logits[rows, answer] - logits[rows, foil]

    def patched_passes(cache: Any) -> list[float]:
        seconds = []
        for _, _, circuit in track_circuits:
            t0 = time.perf_counter()
            run(model, clean, answer, foil, circuit=circuit, corrupt=cache)
            seconds.append(time.perf_counter() - t0)
        return seconds

    with torch.no_grad():
        # warm-up: one untimed pass of each side (allocator, thread pools, first-call dispatch)
        cache = run(model, cf, answer, foil, keep=True).cache
        run(model, clean, answer, foil, circuit=circuit_mask, corrupt=cache)
        hook_patching.hf_metric(hf, clean, answer, foil)
        clean_metric = run(model, clean, answer, foil).metric
        log(f"per-edge patching: {k} edges x {b} examples, {size.repeats} rounds of each side ...")
        timed = best_of(size.repeats, {"ours": ours_per_edge, "peer": peer_per_edge})
        log(f"circuit patching: {int(circuit_mask.sum()):,} of {n_edges:,} edges kept ...")
        circuit_out = best_of(size.repeats, {"circuit": ours_circuit})["circuit"]
        log(f"patched passes: {len(track_circuits)} circuits of EAP's top edges, against the model's own forward ...")
        plain_forward()
        forward_s, passes = math.inf, [math.inf] * len(track_circuits)
        for _ in range(max(1, size.repeats)):
            t0 = time.perf_counter()
            plain_forward()
            forward_s = min(forward_s, time.perf_counter() - t0)
            passes = [min(x, y) for x, y in zip(passes, patched_passes(cache), strict=True)]
    ours, ours_s = timed["ours"]
    peer, peer_s = timed["peer"]
    difference = float((ours - peer).abs().max())
    moved = int(((ours - clean_metric).abs() > 1e-4).any(1).sum())
    ours_rate, peer_rate = b * k / ours_s, b * k / peer_s
    circuit_rate = b * n_edges / circuit_out[1]
    kinds = {"q": 0, "k": 0, "v": 0, "mlp": 0, "logits": 0}
    for e in edges:
        slot = graph.slots[int(e)]
        kinds[slot or ("logits" if graph.receivers[int(e)] == graph.n_nodes - 1 else "mlp")] += 1
    return {
        "size": size.name, "examples": b, "tokens": t, "n_edges": n_edges, "sampled_edges": k,
        "eligible_edges": int(eligible.size), "receiver_kinds": kinds,
        "layers": model.n_layers, "heads": model.n_heads, "kv_heads": int(hf.config.num_key_value_heads),
        "circuit_edges": int(circuit_mask.sum()), "repeats": size.repeats, "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "ours_seconds": ours_s, "peer_seconds": peer_s, "circuit_seconds": circuit_out[1],
        "ours_rate": ours_rate, "peer_rate": peer_rate, "circuit_rate": circuit_rate,
        "per_edge_ratio": ours_rate / peer_rate, "circuit_ratio": circuit_rate / peer_rate,
        "max_difference": difference, "edges_that_move": moved,
        "circuit_metric_mean": float(circuit_out[0].mean()),
        "forward_seconds": forward_s,
        "patched_passes": [
            {"fraction": f, "absolute": a, "edges": int(c.sum()), "seconds": t, "ratio": t / forward_s}
            for (f, a, c), t in zip(track_circuits, passes, strict=True)
        ],
        "patched_mean_ratio": sum(passes) / len(passes) / forward_s,
    }  # fmt: skip


def fmt_rate(x: float) -> str:
    return _workload.fmt_rate(x) + "/s"


def table(r: dict[str, Any], model_name: str) -> str:
    b, k, e = r["examples"], r["sampled_edges"], r["n_edges"]
    kinds = ", ".join(f"{v} {n}" for n, v in r["receiver_kinds"].items() if v)
    return "\n".join(
        [
            f"edge patching: {model_name} ({r['layers']} layers, {r['heads']} heads, {r['kv_heads']} key/value heads, "
            f"{e:,} edges), B = {b} examples of T = {r['tokens']} tokens, float32, torch {r['torch']} on "
            f"{r['threads']} threads; fastest of {r['repeats']} rounds",
            "",
            "| what | side | seconds | examples x edges / s | ratio |",
            "|---|---|---:|---:|---:|",
            f"| each of K = {k} edges patched alone ({kinds} receivers) | hook loop (peer) | "
            f"{r['peer_seconds']:.3g} | {fmt_rate(r['peer_rate'])} | 1 |",
            f"| | neuroneval `run`, one pass per edge | {r['ours_seconds']:.3g} | {fmt_rate(r['ours_rate'])} | "
            f"{r['per_edge_ratio']:.2f}x |",
            f"| a {r['circuit_edges']:,}-edge circuit, every other edge of {e:,} patched | neuroneval `run`, one pass | "
            f"{r['circuit_seconds']:.3g} | {fmt_rate(r['circuit_rate'])} | {r['circuit_ratio']:,.0f}x |",
            "",
            f"seconds include the counterfactual cache (ours) and the clean and counterfactual node outputs (peer); "
            f"largest metric difference, ours against the hook patches, {r['max_difference']:.1e}; "
            f"{r['edges_that_move']} of {k} edges move the metric by over 1e-4",
            "",
            f"a patched pass against the model's own forward (`hf(tokens, logits_to_keep=1)`, "
            f"{r['forward_seconds']:.3f} s), the circuits a run evaluates on this batch: EAP's top edges "
            "(signed | absolute) at each fraction; the counterfactual cache computed once, as a run does",
            "",
            "| fraction | edges (signed) | patched / forward | edges (absolute) | patched / forward |",
            "|---:|---:|---:|---:|---:|",
            *(
                f"| {p['fraction']:g} | {p['edges']:,} | {p['ratio']:.2f}x | {q['edges']:,} | {q['ratio']:.2f}x |"
                for p, q in zip(r["patched_passes"][::2], r["patched_passes"][1::2], strict=True)
            ),
            f"| mean | | | | {r['patched_mean_ratio']:.2f}x |",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a random 4-layer LLaMA, a few seconds")
    parser.add_argument("--batch", type=int, help="examples B (default 32; 8 with --quick)")
    parser.add_argument("--edges", type=int, help="sampled edges K (default 48; 12 with --quick)")
    parser.add_argument("--fraction", type=float, default=0.05, help="of the edges in the circuit of figure 2")
    parser.add_argument("--repeats", type=int, default=2, help="timed rounds of each side (the fastest is kept)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    import torch

    base = SMALL if args.quick else FULL
    size = CircuitSize(
        base.name, args.batch or base.batch, args.edges or base.edges, args.fraction, args.repeats, args.seed
    )

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    if args.quick:
        hf, name = small_model(size.seed), "random LLaMA"
        batch = random_batch(hf.config.vocab_size, size.batch, seed=size.seed)
    else:
        from neuroneval.torch.circuits import load_smollm2

        log("loading SmolLM2-135M-Instruct ...")
        tokenizer, hf = load_smollm2()
        name = "SmolLM2-135M-Instruct, IOI"
        batch = ioi_batch(tokenizer, size.batch, seed=size.seed)
    with torch.no_grad():
        r = measure(hf, batch, size, log)
    print(table(r, name))
    tolerance = 1e-4 if args.quick else 1e-3
    if not r["max_difference"] <= tolerance:
        log(f"ours and the hook patches differ by {r['max_difference']:.2e} (over {tolerance})")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
