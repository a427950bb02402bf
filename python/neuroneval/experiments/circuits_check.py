"""How close each attribution method's edge scores come to exact patching on SmolLM2 / IOI: the
measurement behind docs/circuits.md's explanation of where the methods' CPR and CMD differ.

On one batch of IOI examples SmolLM2 gets right, every method scores every edge; a sample of
edges (the top ones by EAP-IG on inputs, and a seeded draw from the next few thousand) is then
patched one edge at a time, exactly. Per method: the Pearson correlation of its scores with the
exact drops on the sample, how often the sign agrees on edges whose exact drop matters, and
its correlation with EAP's scores on the sample.

    python -m neuroneval.experiments.circuits_check [--examples 8] [--top 30] [--draw 30]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from neuroneval.torch.circuits import (
    Batch,
    DecomposedModel,
    decompose,
    language_task_batches,
    load_smollm2,
    run,
    score_edges,
)


def exact_drops(model: DecomposedModel, batch: Batch, edges: np.ndarray) -> np.ndarray:
    """The mean metric drop with each of `edges` patched alone."""
    with torch.no_grad():
        clean = run(model, batch.clean, batch.answer, batch.foil).metric.double().mean()
        cor = run(model, batch.counterfactual, batch.answer, batch.foil, keep=True).cache
        out = []
        for e in edges:
            circuit = torch.ones(model.graph.n_edges, dtype=torch.bool)
            circuit[int(e)] = False
            patched = (
                run(model, batch.clean, batch.answer, batch.foil, circuit=circuit, corrupt=cor).metric.double().mean()
            )
            out.append(float(clean - patched))
    return np.asarray(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=8)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--draw", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    tokenizer, hf = load_smollm2()
    for p in hf.parameters():
        p.requires_grad_(False)
    model = decompose(hf)
    # enough examples drawn that `examples` of them share a prompt length: one batch
    score, _ = language_task_batches(
        model,
        tokenizer,
        "ioi",
        n_score=args.examples,
        n_eval=8 * args.examples,
        seed=args.seed,
        batch_size=args.examples,
    )
    batch = score[0]
    methods = {
        "eap": ("eap", 1),
        "eap-ig-inputs (5 steps)": ("eap-ig-inputs", 5),
        "eap-ig-activations (2 steps)": ("eap-ig-activations", 2),
        "eap-ig-activations (5 steps)": ("eap-ig-activations", 5),
    }
    scores, seconds = {}, {}
    for name, (method, steps) in methods.items():
        start = time.perf_counter()
        scores[name] = score_edges(model, [batch], method, steps=steps)
        seconds[name] = time.perf_counter() - start
    reference = np.abs(scores["eap-ig-inputs (5 steps)"])
    order = np.argsort(-reference, kind="stable")
    rng = np.random.default_rng(args.seed)
    sample = np.concatenate(
        [order[: args.top], rng.choice(order[args.top : args.top + 3000], args.draw, replace=False)]
    )
    start = time.perf_counter()
    exact = exact_drops(model, batch, sample)
    exact_seconds = time.perf_counter() - start
    matters = np.abs(exact) > 0.05 * np.abs(exact).max()
    print(
        f"{len(batch)} IOI examples of {batch.clean.shape[1]} tokens; {sample.size} edges patched exactly in {exact_seconds:.0f} s"
    )
    print(f"{'method':30s} {'pearson':>8s} {'sign agrees':>12s} {'pearson with eap':>17s} {'seconds':>8s}")
    for name, s in scores.items():
        r = float(np.corrcoef(s[sample], exact)[0, 1])
        agree = float(np.mean(np.sign(s[sample][matters]) == np.sign(exact[matters])))
        with_eap = float(np.corrcoef(s[sample], scores["eap"][sample])[0, 1])
        print(f"{name:30s} {r:8.3f} {agree:12.2f} {with_eap:17.3f} {seconds[name]:8.1f}")
    print(f"edges whose exact drop is over 5% of the largest: {int(matters.sum())}")


if __name__ == "__main__":
    main()
