"""MIB's circuit track on a running model (SPEC section 7): edge patching, the methods that
score edges, a model trained with a known circuit, and the track end to end.

- `decompose` takes a Hugging Face causal LM (GPT-2, LLaMA, Mistral, Qwen2) apart into the
  graph's nodes (`models`);
- `run` runs it with a circuit, every other edge patched from a counterfactual `Cache` or the
  means, `masked_logits` with continuous per-example edge weights (`patching`);
- `score_edges` scores every edge by random, EAP, EAP-IG on inputs or activations, UGS, IFR or
  exact patching, `score_nodes` every node by NAP; `faithfulness_metrics` evaluates circuits
  (`methods`);
- `train_known_circuit_model` trains the digit-pair model whose circuit is `KNOWN_CIRCUIT`
  (`known`);
- `circuit_track` and `evaluate_methods` give a `neuroneval.circuits.CircuitRun` (`track`).
"""

from __future__ import annotations

from .known import KNOWN_CIRCUIT, KnownCircuitModel, digit_pair_batches, known_circuit_mask, train_known_circuit_model
from .methods import (
    EXACT_EDGE_LIMIT,
    METHODS,
    Batch,
    faithfulness_metrics,
    mean_ablation_cache,
    score_edges,
    score_nodes,
)
from .models import RUNNABLE_MODEL_TYPES, DecomposedModel, Layout, decompose, layout_of
from .patching import Cache, RunResult, masked_logits, mean_cache, run
from .track import (
    MODELS,
    TASK_NAMES,
    circuit_track,
    correct_examples,
    evaluate_methods,
    language_task_batches,
    load_smollm2,
    task_batches,
)

__all__ = [
    "EXACT_EDGE_LIMIT",
    "KNOWN_CIRCUIT",
    "METHODS",
    "MODELS",
    "RUNNABLE_MODEL_TYPES",
    "TASK_NAMES",
    "Batch",
    "Cache",
    "DecomposedModel",
    "KnownCircuitModel",
    "Layout",
    "RunResult",
    "circuit_track",
    "correct_examples",
    "decompose",
    "digit_pair_batches",
    "evaluate_methods",
    "faithfulness_metrics",
    "known_circuit_mask",
    "language_task_batches",
    "layout_of",
    "load_smollm2",
    "mean_ablation_cache",
    "mean_cache",
    "masked_logits",
    "run",
    "score_edges",
    "score_nodes",
    "task_batches",
    "train_known_circuit_model",
]
