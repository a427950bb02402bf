"""The causal-variable track (SPEC section 7): causal models and their counterfactual datasets,
featurizers, batched interchange interventions against a hook on the Hugging Face module, IIA's
aggregation against slow loops, the planted model (DAS finds the planted subspace, a random
rotation does not) and a small SmolLM2 run."""

from __future__ import annotations

import copy
import dataclasses
import itertools

import numpy as np
import pytest
from neuroneval.causal import CausalModel, counterfactual_dataset, ioi_task, mcqa_task, planted_task
from neuroneval.causal.iia import bootstrap_difference, bootstrap_iia, layer_iia, summarize, unit_iia
from neuroneval.errors import EmptyInputError, ParameterError, ShapeError, SourceError

# --------------------------------------------------------------------------- causal models (no torch)


def test_ioi_expected_outputs_follow_the_causal_model_by_hand():
    task = ioi_task()
    for data in task.datasets(40, seed=3):
        for base, source, expected in zip(data.bases, data.sources, data.expected, strict=True):
            io_base = base["n2"] if base["s2"] == base["n1"] else base["n1"]
            io_source = source["n2"] if source["s2"] == source["n1"] else source["n1"]
            if data.variable == "output_token":  # the source's indirect object
                assert expected == io_source != io_base
            else:  # the base's name at the source's position: the base's subject
                assert expected == base["s2"] != io_base
            text, marks = task.prompt(base)
            assert text[: marks["io"]].endswith(io_base) and text[: marks["s2"]].endswith(base["s2"])


def test_planted_and_mcqa_expected_outputs_by_hand():
    for data in planted_task().datasets(30, seed=1):
        for b, s, e in zip(data.bases, data.sources, data.expected, strict=True):
            assert e == s["a"] + s["b"] + b["c"] and s["a"] + s["b"] != b["a"] + b["b"]
    for data in mcqa_task().datasets(30, seed=1):
        for b, s, e in zip(data.bases, data.sources, data.expected, strict=True):
            pointer = s["choices"].index(s["color"])
            want = b["letters"][pointer] if data.variable == "answer_pointer" else s["letters"][pointer]
            assert e == want


def test_datasets_are_seeded():
    a, b = ioi_task().datasets(5, seed=9), ioi_task().datasets(5, seed=9)
    assert [d.sources for d in a] == [d.sources for d in b]
    assert [d.sources for d in a] != [d.sources for d in ioi_task().datasets(5, seed=10)]


def test_a_pair_that_does_not_differ_in_the_variable_is_refused():
    model = planted_task().model
    with pytest.raises(ParameterError, match="pair 1 does not differ in the variable 's'"):
        counterfactual_dataset(
            model, "s", [{"a": 1, "b": 1, "c": 0}] * 2, [{"a": 0, "b": 0, "c": 0}, {"a": 2, "b": 0, "c": 4}], name="x"
        )
    with pytest.raises(ParameterError, match="no variable 'q'"):
        counterfactual_dataset(model, "q", [{"a": 1, "b": 1, "c": 0}], [{"a": 0, "b": 0, "c": 0}], name="x")
    with pytest.raises(ParameterError, match="reads 'z', which is not declared"):
        CausalModel("bad", ("a",), (("out", ("z",), lambda z: z),))


# --------------------------------------------------------------------------- IIA aggregation


def _slow_iia(hits, keep):
    names = list(hits)
    n_layers, n_pos = hits[names[0]].shape[:2]
    unit = np.zeros((n_layers, n_pos))
    for layer, pos in itertools.product(range(n_layers), range(n_pos)):
        per = []
        for name in names:
            kept = [hits[name][layer, pos, i] for i in range(len(keep[name])) if keep[name][i]]
            per.append(sum(kept) / len(kept))
        unit[layer, pos] = sum(per) / len(per)
    best = [max(unit[layer]) for layer in range(n_layers)]
    return unit, sum(best) / len(best), max(best)


def test_iia_aggregation_against_a_slow_loop():
    rng = np.random.default_rng(0)
    hits = {"d1": rng.random((5, 3, 17)) < 0.4, "d2": rng.random((5, 3, 9)) < 0.7}
    keep = {"d1": rng.random(17) < 0.6, "d2": np.r_[np.zeros(4, bool), np.ones(5, bool)]}
    unit, average, highest = _slow_iia(hits, keep)
    np.testing.assert_allclose(unit_iia(hits, keep), unit)
    assert summarize(unit_iia(hits, keep)) == pytest.approx((average, highest))
    np.testing.assert_allclose(layer_iia(unit), unit.max(axis=1))
    (a_lo, a_hi), (h_lo, h_hi) = bootstrap_iia(hits, keep, n_boot=300, seed=1)
    # the same replicates by a slow loop: each dataset's kept examples resampled in turn
    rng = np.random.default_rng(1)
    averages, highests = [], []
    for _ in range(300):
        resampled, kept_all = {}, {}
        for name in hits:
            kept = hits[name][:, :, keep[name]]
            resampled[name] = kept[:, :, rng.integers(0, kept.shape[2], kept.shape[2])]
            kept_all[name] = np.ones(kept.shape[2], bool)
        _, a, h = _slow_iia(resampled, kept_all)
        averages.append(a)
        highests.append(h)
    assert (a_lo, a_hi) == pytest.approx(tuple(np.percentile(averages, [2.5, 97.5])))
    assert (h_lo, h_hi) == pytest.approx(tuple(np.percentile(highests, [2.5, 97.5])))
    assert a_lo <= average <= a_hi


def test_paired_iia_difference_against_a_slow_loop():
    rng = np.random.default_rng(3)
    first = {"d1": rng.random((4, 3, 15)) < 0.6, "d2": rng.random((4, 3, 11)) < 0.5}
    # the second featurizer hits where the first does, on most examples: the pairing matters
    second = {n: h & (rng.random(h.shape) < 0.8) for n, h in first.items()}
    keep = {"d1": rng.random(15) < 0.7, "d2": np.ones(11, bool)}
    (avg, avg_ci), (high, high_ci) = bootstrap_difference(first, second, keep, n_boot=200, level=0.9, seed=4)
    _, a1, h1 = _slow_iia(first, keep)
    _, a2, h2 = _slow_iia(second, keep)
    assert (avg, high) == pytest.approx((a1 - a2, h1 - h2))
    rng = np.random.default_rng(4)
    averages, highests = [], []
    for _ in range(200):
        draws = {n: rng.integers(0, int(keep[n].sum()), int(keep[n].sum())) for n in first}
        summaries = []
        for hits in (first, second):
            resampled = {n: hits[n][:, :, keep[n]][:, :, draws[n]] for n in hits}
            summaries.append(_slow_iia(resampled, {n: np.ones(len(draws[n]), bool) for n in hits})[1:])
        averages.append(summaries[0][0] - summaries[1][0])
        highests.append(summaries[0][1] - summaries[1][1])
    assert avg_ci == pytest.approx(tuple(np.percentile(averages, [5, 95])))
    assert high_ci == pytest.approx(tuple(np.percentile(highests, [5, 95])))
    # paired: narrower than the two unpaired intervals' spread would allow
    (lo1, hi1), _ = bootstrap_iia(first, keep, n_boot=200, seed=4)
    assert avg_ci[1] - avg_ci[0] < hi1 - lo1
    with pytest.raises(ShapeError, match="the hits compared differ"):
        bootstrap_difference(first, {n: h[:2] for n, h in second.items()}, keep)


def test_iia_refuses_a_dataset_without_a_kept_example():
    with pytest.raises(EmptyInputError, match="gets none of its examples right"):
        unit_iia({"d": np.ones((1, 1, 3), bool)}, {"d": np.zeros(3, bool)})
    with pytest.raises(ShapeError):
        unit_iia({"d": np.ones((1, 3), bool)}, {"d": np.ones(3, bool)})


# --------------------------------------------------------------------------- the model side

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from neuroneval.interop.sae import SparseAutoencoder  # noqa: E402
from neuroneval.torch.causal import (  # noqa: E402
    DAS,
    PCA,
    FullVector,
    Neurons,
    Pass,
    SAEFeatures,
    das_trainee,
    dbm_trainee,
    evaluate_featurizers,
    forward,
    intervened_logits,
    planted_tokenize,
    prepare,
    split_pairs,
    stacked_logits,
    train_planted_model,
    train_together,
)
from neuroneval.torch.circuits import decompose  # noqa: E402


@pytest.fixture(scope="module")
def tiny():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)  # fmt: skip
    hf = LlamaForCausalLM(config).eval()
    return hf, decompose(hf)


def _hooked_logits(hf, base, source, layer, base_pos, source_pos):
    """The reference: Hugging Face's own forward with a hook that writes the source's vector."""
    captured = []

    def capture(module, args, out):
        captured.append((out[0] if isinstance(out, tuple) else out).clone())

    with torch.no_grad():
        handle = hf.model.layers[layer].register_forward_hook(capture)
        try:
            hf(source)
        finally:
            handle.remove()
        src = captured[0]

        def hook(module, args, out):
            h = (out[0] if isinstance(out, tuple) else out).clone()
            for i in range(h.shape[0]):
                h[i, base_pos[i]] = src[i, source_pos[i]]
            return (h, *out[1:]) if isinstance(out, tuple) else h

        handle = hf.model.layers[layer].register_forward_hook(hook)
        try:
            return hf(base).logits[:, -1]
        finally:
            handle.remove()


@pytest.mark.parametrize("layer", [0, 1, 2])
def test_full_vector_interchange_equals_a_hook_on_the_module(tiny, layer):
    hf, model = tiny
    g = torch.Generator().manual_seed(layer)
    base, source = torch.randint(0, 50, (5, 9), generator=g), torch.randint(0, 50, (5, 9), generator=g)
    base_pos, source_pos = torch.tensor([2, 8, 5, 3, 0]), torch.tensor([4, 1, 8, 3, 6])
    mine = intervened_logits(
        model, forward(model, base), forward(model, source), layer, base_pos, source_pos, FullVector(32)
    )
    ref = _hooked_logits(hf, base, source, layer, base_pos.tolist(), source_pos.tolist())
    torch.testing.assert_close(mine, ref, atol=2e-5, rtol=1e-5)
    plain = hf(base).logits[:, -1]
    assert (plain - ref).abs().max() > 1e-3  # the intervention did something


def _site_hooked_logits(hf, base, source, layer, site, base_pos, source_pos, selected):
    """The reference for the MLP sites: Hugging Face's forward with a hook on the module whose
    output (``mlp-input``: the post-attention norm) or input (``mlp-neurons``: ``down_proj``)
    is the site, writing the source's values of the `selected` coordinates."""
    block = hf.model.layers[layer]
    module = block.post_attention_layernorm if site == "mlp-input" else block.mlp.down_proj
    pre = site == "mlp-neurons"
    captured = []

    def capture(module, args, *out):
        captured.append((args[0] if pre else out[0]).clone())

    def write(module, args, *out):
        h = (args[0] if pre else out[0]).clone()
        for i in range(h.shape[0]):
            h[i, base_pos[i], selected] = captured[0][i, source_pos[i], selected]
        return (h,) if pre else h

    def hooked(fn, tokens):
        handle = module.register_forward_pre_hook(fn) if pre else module.register_forward_hook(fn)
        try:
            return hf(tokens).logits[:, -1]
        finally:
            handle.remove()

    with torch.no_grad():
        hooked(capture, source)
        return hooked(write, base)


@pytest.mark.parametrize(("site", "width"), [("mlp-input", 32), ("mlp-neurons", 64)])
@pytest.mark.parametrize("layer", [0, 2])
def test_mlp_site_interchange_equals_a_hook_on_the_module(tiny, site, width, layer):
    hf, model = tiny
    g = torch.Generator().manual_seed(10 + layer)
    base, source = torch.randint(0, 50, (5, 9), generator=g), torch.randint(0, 50, (5, 9), generator=g)
    base_pos, source_pos = torch.tensor([2, 8, 5, 3, 0]), torch.tensor([4, 1, 8, 3, 6])
    selected = list(range(1, width, 3))
    run_base, run_source = forward(model, base), forward(model, source)
    mine = intervened_logits(
        model, run_base, run_source, layer, base_pos, source_pos, Neurons(width, selected), site=site
    )
    ref = _site_hooked_logits(hf, base, source, layer, site, base_pos.tolist(), source_pos.tolist(), selected)
    torch.testing.assert_close(mine, ref, atol=2e-5, rtol=1e-5)
    assert (hf(base).logits[:, -1] - ref).abs().max() > 1e-3  # the intervention did something
    # the whole MLP input and all its hidden units carry the same information forward
    whole = [
        intervened_logits(model, run_base, run_source, layer, base_pos, source_pos, FullVector(w), site=s)
        for s, w in (("mlp-input", 32), ("mlp-neurons", 64))
    ]
    torch.testing.assert_close(whole[0], whole[1], atol=2e-5, rtol=1e-5)
    with pytest.raises(ShapeError, match="reads hidden vectors of 32 values; the model's have 64"):
        intervened_logits(model, run_base, run_source, layer, base_pos, source_pos, FullVector(32), site="mlp-neurons")
    with pytest.raises(ParameterError, match="site must be one of 'residual', 'mlp-input', 'mlp-neurons'"):
        intervened_logits(model, run_base, run_source, layer, base_pos, source_pos, FullVector(32), site="mlp")


def test_featurizer_identities():
    g = torch.Generator().manual_seed(0)
    base, source = torch.randn(6, 8, generator=g), torch.randn(6, 8, generator=g)
    assert torch.equal(Neurons(8, range(8)).interchange(base, source), FullVector(8).interchange(base, source))
    assert torch.equal(Neurons(8, []).interchange(base, source), base)
    pca = PCA(torch.randn(40, 8, generator=g, dtype=torch.float64)).select([0, 1])
    h = torch.randn(5, 8, generator=g, dtype=torch.float64)
    torch.testing.assert_close(pca.decode(pca.encode(h)), h)
    torch.testing.assert_close(pca.select([]).interchange(h, h.flip(0)), h)
    torch.testing.assert_close(pca.select(range(8)).interchange(h, h.flip(0)), h.flip(0))
    das = DAS(8, 3, seed=0)
    torch.testing.assert_close(das.basis @ das.basis.T, torch.eye(3), atol=1e-5, rtol=0)


def test_sae_featurizer_reconstructs_as_its_weights_say():
    rng = np.random.default_rng(0)
    w_enc, w_dec = rng.normal(size=(8, 12)).astype(np.float32), rng.normal(size=(12, 8)).astype(np.float32)
    b_enc, b_dec = rng.normal(size=12).astype(np.float32), rng.normal(size=8).astype(np.float32)
    sae = SparseAutoencoder("topk", 8, 12, w_enc, b_enc, w_dec, b_dec, k=3)
    feats = SAEFeatures(sae)
    x = rng.normal(size=(7, 8)).astype(np.float32)
    recon = sae.encode(x) @ w_dec + b_dec  # the SAE's own encoder, then its decoder
    h = torch.from_numpy(x)
    torch.testing.assert_close(
        feats.decode(feats.encode(h)), torch.from_numpy(recon.astype(np.float32)), atol=1e-4, rtol=1e-4
    )
    other = torch.from_numpy(rng.normal(size=(7, 8)).astype(np.float32))
    torch.testing.assert_close(feats.select([]).interchange(h, other), h)  # nothing swapped: the base, error kept


def test_bad_units_and_widths_are_named(tiny):
    _, model = tiny
    tokens = torch.randint(0, 50, (2, 6))
    run = forward(model, tokens)
    pos = torch.tensor([1, 2])
    with pytest.raises(ParameterError, match="layer 3 is out of range: the model has layers 0..2"):
        intervened_logits(model, run, run, 3, pos, pos, FullVector(32))
    with pytest.raises(ParameterError, match="token position 6 is out of range"):
        intervened_logits(model, run, run, 0, torch.tensor([1, 6]), pos, FullVector(32))
    with pytest.raises(ShapeError, match="reads hidden vectors of 16 values; the model's have 32"):
        intervened_logits(model, run, run, 0, pos, pos, FullVector(16))


# --------------------------------------------------------------------------- the planted model


@pytest.fixture(scope="module")
def planted():
    return train_planted_model(seed=0)


@pytest.fixture(scope="module")
def planted_run(planted):
    return evaluate_featurizers(
        planted.decomposed, planted_task(), planted_tokenize, model_name="planted",
        featurizers=["full", "neurons", "das", "random"], n_boot=200,
    )  # fmt: skip


@pytest.mark.slow
def test_planted_model_learns_its_task_and_subspace(planted):
    assert planted.accuracy > 0.99 and planted.planted_iia > 0.99


@pytest.mark.slow
def test_das_recovers_the_planted_variable_and_a_random_rotation_does_not(planted_run):
    layer, last = planted_run.layers.index(0), planted_run.positions.index("last")
    das, rand = planted_run.result("das", "s"), planted_run.result("random", "s")
    neurons = planted_run.result("neurons", "s")
    assert das.unit_iia[layer, last] >= 0.95
    assert rand.unit_iia[layer, last] <= 0.6
    assert neurons.unit_iia[layer, last] < das.unit_iia[layer, last]
    # the variable does not live at the digits' own positions before the last token
    assert das.unit_iia[:, : planted_run.positions.index("c")].max() <= 0.2


@pytest.mark.slow
def test_too_few_right_and_wrong_sae_are_named(planted):
    from neuroneval.causal.tasks import CausalTask

    task = planted_task()
    wrong = CausalTask(
        task.name,
        task.model,
        task.sample,
        task.counterfactuals,
        task.show,
        lambda out: str(min(out + 1, 12)),
        task.positions,
    )
    with pytest.raises(EmptyInputError, match="the model gets 0 of .* pairs right"):
        evaluate_featurizers(
            planted.decomposed, wrong, planted_tokenize, model_name="planted", featurizers=["full"], n_train=4, n_test=4
        )
    eye = np.eye(8, 16, dtype=np.float32)
    other = SparseAutoencoder("topk", 8, 16, eye, np.zeros(16, np.float32), eye.T.copy(), np.zeros(8, np.float32), k=2)
    with pytest.raises(ParameterError, match="an SAE of another model"):
        evaluate_featurizers(planted.decomposed, task, planted_tokenize, model_name="planted", featurizers=["sae"],
                             sae={0: other, 1: other}, n_train=4, n_test=4)  # fmt: skip
    with pytest.raises(ParameterError, match="layer 5 is out of range"):
        evaluate_featurizers(
            planted.decomposed, task, planted_tokenize, model_name="planted", featurizers=["full"], layers=[5]
        )


@pytest.mark.slow
def test_mlp_sites_run_end_to_end_with_an_sae_of_their_own(planted):
    """A run at each MLP site: the whole MLP input and all its hidden units hit the same pairs;
    an SAE trained on the hidden units reads them, names their hook, and is refused elsewhere."""
    from neuroneval.causal.results import causal_table
    from neuroneval.torch.causal import site_width, train_layer_saes

    model, task = planted.decomposed, planted_task()
    width = site_width(model, 0, "mlp-neurons")
    assert width == model.model.config.intermediate_size != model.d_model
    saes = train_layer_saes(model, task, planted_tokenize, [0], seed=0, site="mlp-neurons",
                            sae_prompts=64, sae_epochs=1, sae_expansion=1)  # fmt: skip
    assert saes[0].d_in == width and saes[0].hook_name == "blocks.0.mlp.hook_post"
    small = dict(model_name="planted", layers=[0], n_train=32, n_test=32, n_boot=50, epochs=1)
    runs = {
        site: evaluate_featurizers(model, task, planted_tokenize, featurizers=names, site=site, sae=saes, **small)
        for site, names in (("mlp-input", ["full", "pca"]), ("mlp-neurons", ["full", "neurons", "sae", "dbm-sae"]))
    }
    inputs, hidden = (runs[s].result("full", "s") for s in ("mlp-input", "mlp-neurons"))
    for name in inputs.hits:
        np.testing.assert_array_equal(inputs.hits[name], hidden.hits[name])
    assert runs["mlp-neurons"].result("dbm-sae", "s").swapped.max() <= width
    assert {r["site"] for r in causal_table([runs["mlp-neurons"]])} == {"mlp-neurons"}
    with pytest.raises(
        ParameterError, match=f"vectors at the mlp-input site have {model.d_model} .an SAE of another model or site"
    ):
        evaluate_featurizers(model, task, planted_tokenize, featurizers=["sae"], site="mlp-input", sae=saes, **small)
    with pytest.raises(ParameterError, match=f"size {width + 1} exceeds the mlp-neurons site's width {width}"):
        evaluate_featurizers(model, task, planted_tokenize, featurizers=["neurons"], site="mlp-neurons",
                             **{**small, "n_test": 4, "n_train": 4}, size=width + 1)  # fmt: skip


@pytest.mark.slow
def test_pairs_run_once_serve_every_site_as_if_each_call_ran_them(planted):
    from neuroneval.torch.causal import run_pairs

    model, task = planted.decomposed, planted_task()
    small = dict(model_name="planted", featurizers=["full", "pca"], layers=[0], n_train=32, n_test=32, n_boot=50)
    pairs = run_pairs(model, task, planted_tokenize, n_train=32, n_test=32)
    for site in ("residual", "mlp-input"):
        shared = evaluate_featurizers(model, task, planted_tokenize, site=site, pairs=pairs, **small)
        alone = evaluate_featurizers(model, task, planted_tokenize, site=site, **small)
        assert shared.datasets == alone.datasets
        for featurizer, variable in ((f, v) for f in ("full", "pca") for v in task.variables):
            a, b = shared.result(featurizer, variable), alone.result(featurizer, variable)
            np.testing.assert_array_equal(a.unit_iia, b.unit_iia)
            assert a.hits.keys() == b.hits.keys()
            for name in a.hits:
                np.testing.assert_array_equal(a.hits[name], b.hits[name])
    with pytest.raises(ParameterError, match=r"other options: n_test 16 \(pairs: 32\)"):
        evaluate_featurizers(model, task, planted_tokenize, pairs=pairs, **{**small, "n_test": 16})
    with pytest.raises(ParameterError, match="other options: seed 1 .pairs: 0."):
        evaluate_featurizers(model, task, planted_tokenize, pairs=pairs, seed=1, **small)
    with pytest.raises(ParameterError, match="another model object"):
        evaluate_featurizers(copy.copy(model), task, planted_tokenize, pairs=pairs, **small)
    with pytest.raises(ParameterError, match="run for task 'planted', not 'renamed'"):
        evaluate_featurizers(model, dataclasses.replace(task, name="renamed"), planted_tokenize, pairs=pairs, **small)


# --------------------------------------------------------------------------- SmolLM2, small


@pytest.mark.slow
def test_smollm2_ioi_small_run_with_full_vector_and_neurons():
    from neuroneval.torch.circuits import load_smollm2

    tokenizer, hf = load_smollm2()
    run = evaluate_featurizers(
        decompose(hf), ioi_task(), lambda s: tokenizer(s, add_special_tokens=False).input_ids, model_name="smollm2",
        featurizers=["full", "neurons"], layers=[2, 29], n_train=4, n_test=6, size=16, n_boot=100, batch_size=16,
    )  # fmt: skip
    full = run.result("full", "output_token")
    # at the last layer's last position the full vector carries the source's answer whole
    assert full.unit_iia[1, run.positions.index("last")] == 1.0
    assert all(0.0 <= r.average <= 1.0 for r in run.results)


def test_sae_directories_of_another_model_or_layer_are_refused(tmp_path):
    from neuroneval.interop import write_saelens
    from neuroneval.torch.causal import read_layer_saes

    def sae(d_in, hook):
        eye = np.eye(d_in, 2 * d_in, dtype=np.float32)
        z = np.zeros(2 * d_in, np.float32)
        return SparseAutoencoder(
            "topk", d_in, 2 * d_in, eye, z, eye.T.copy(), np.zeros(d_in, np.float32), k=2, hook_name=hook
        )

    write_saelens(sae(8, "blocks.0.hook_resid_post"), tmp_path / "other" / "layer_0")
    with pytest.raises(
        ParameterError, match="reads 8 values; the model's hidden vectors have 64 .an SAE of another model"
    ):
        read_layer_saes(tmp_path / "other", [0], 64)
    write_saelens(sae(64, "blocks.3.hook_resid_post"), tmp_path / "misplaced" / "layer_1")
    with pytest.raises(ParameterError, match="reads 'blocks.3.hook_resid_post', not layer 1"):
        read_layer_saes(tmp_path / "misplaced", [1], 64)
    with pytest.raises(SourceError, match="has no SAE for layer 2"):
        read_layer_saes(tmp_path / "misplaced", [2], 64)
    write_saelens(sae(64, "blocks.1.ln2.hook_normalized"), tmp_path / "mlp" / "layer_1")
    with pytest.raises(
        ParameterError, match="reads 'blocks.1.ln2.hook_normalized', the mlp-input site, not the run's residual"
    ):
        read_layer_saes(tmp_path / "mlp", [1], 64)
    assert read_layer_saes(tmp_path / "mlp", [1], 64, "mlp-input")[1].hook_name == "blocks.1.ln2.hook_normalized"
    assert read_layer_saes(tmp_path / "other", [0], 8)[0].d_in == 8


def test_padded_batches_give_what_each_prompt_gives_alone(tiny):
    """Right-padding is invisible: a batch of prompts of different lengths gives each prompt's
    own plain output and intervened logits (batch size and composition change nothing)."""
    _, model = tiny
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(0, 50, (n,), generator=g) for n in (4, 9, 6)]
    sources = [torch.randint(0, 50, (n,), generator=g) for n in (7, 5, 9)]

    def batch(items):
        width = max(p.numel() for p in items)
        tokens = torch.stack([torch.cat([p, p[-1:].repeat(width - p.numel())]) for p in items])
        return forward(model, tokens, torch.tensor([p.numel() - 1 for p in items]))

    together_b, together_s = batch(prompts), batch(sources)
    base_pos, source_pos = torch.tensor([1, 6, 5]), torch.tensor([3, 0, 8])
    together = intervened_logits(model, together_b, together_s, 1, base_pos, source_pos, Neurons(32, range(0, 32, 3)))
    for i in range(3):
        alone_b, alone_s = forward(model, prompts[i][None]), forward(model, sources[i][None])
        assert int(alone_b.top[0]) == int(together_b.top[i])
        alone = intervened_logits(
            model, alone_b, alone_s, 1, base_pos[i : i + 1], source_pos[i : i + 1], Neurons(32, range(0, 32, 3))
        )
        torch.testing.assert_close(together[i], alone[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("cached", [False, True])
def test_runs_merged_with_zero_padding_give_what_each_gives_alone(tiny, cached):
    """`Pass.concat` pads shorter runs with zeros (keys and values computed before the merge
    are not carried over, but computed anew): the merged batch's intervened logits are each
    run's own."""
    _, model = tiny
    g = torch.Generator().manual_seed(6)
    bases = [forward(model, torch.randint(0, 50, (2, n), generator=g)) for n in (4, 9, 6)]
    sources = [forward(model, torch.randint(0, 50, (2, n), generator=g)) for n in (7, 5, 9)]
    if cached:
        for run in bases:
            run.keys_values(model)
    base_pos, source_pos = torch.tensor([1, 3, 6, 2, 0, 5]), torch.tensor([3, 6, 0, 4, 8, 7])
    featurizer = Neurons(32, range(1, 32, 2))
    merged = intervened_logits(model, Pass.concat(bases), Pass.concat(sources), 0, base_pos, source_pos, featurizer)
    for i in range(3):
        rows = slice(2 * i, 2 * i + 2)
        alone = intervened_logits(model, bases[i], sources[i], 0, base_pos[rows], source_pos[rows], featurizer)
        torch.testing.assert_close(merged[rows], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_iia_does_not_depend_on_the_batch_size(planted):
    """Pairs run in batches of 3 or of 32 (merged after the filter and the split by `regroup`)
    give the same hits."""
    runs = [
        evaluate_featurizers(
            planted.decomposed,
            planted_task(),
            planted_tokenize,
            model_name="planted",
            featurizers=["full", "pca"],
            layers=[0],
            n_train=8,
            n_test=16,
            n_boot=10,
            batch_size=b,
        )  # fmt: skip
        for b in (3, 32)
    ]
    for a, b in zip(runs[0].results, runs[1].results, strict=True):
        assert a.hits.keys() == b.hits.keys()
        for name in a.hits:
            np.testing.assert_array_equal(a.hits[name], b.hits[name])


def test_stacked_interventions_give_each_featurizers_own_logits(tiny):
    """Several featurizers run as one stacked batch give what each gives alone."""
    _, model = tiny
    g = torch.Generator().manual_seed(7)
    base = forward(model, torch.randint(0, 50, (3, 8), generator=g))
    source = forward(model, torch.randint(0, 50, (3, 8), generator=g))
    base_pos, source_pos = torch.tensor([2, 5, 3]), torch.tensor([4, 1, 7])
    featurizers = [Neurons(32, range(0, 32, 4)), DAS(32, 5, seed=1), FullVector(32)]
    stacked = stacked_logits(model, base, source, 1, base_pos, source_pos, featurizers)
    assert stacked.shape == (3, 3, 50)
    for f, got in zip(featurizers, stacked, strict=True):
        alone = intervened_logits(model, base, source, 1, base_pos, source_pos, f)
        torch.testing.assert_close(got, alone, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_featurizers_trained_together_learn_what_each_learns_alone(planted):
    """DAS and two DBMs trained in one stacked run end where each ends trained alone: their
    parameters are disjoint and Adam's update is per parameter."""
    model, task = planted.decomposed, planted_task()
    data = task.datasets(64, seed=3)[0]
    train, _ = split_pairs(prepare(model, task, data, planted_tokenize, batch_size=16), 32, 0, data.name)

    def trainees():
        return [das_trainee(model.d_model, 4, seed=2, lr=0.01), dbm_trainee(FullVector(model.d_model)),
                dbm_trainee(PCA(train[0].base.hidden[1][:, -1].float()))]  # fmt: skip

    together = train_together(model, trainees(), train, 0, "last", epochs=2, seed=4)
    for i, trained in enumerate(together):
        alone = train_together(model, [trainees()[i]], train, 0, "last", epochs=2, seed=4)[0]
        fresh = trainees()[i].featurizer
        assert trained.hard and any(
            float((p - q).detach().abs().max()) > 1e-2
            for p, q in zip(trained.parameters(), fresh.parameters(), strict=True)
        )  # it did learn
        for (name, a), (_, b) in zip(alone.named_parameters(), trained.named_parameters(), strict=True):
            torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-4, msg=name)
        np.testing.assert_array_equal(trained.mask().detach().numpy(), alone.mask().detach().numpy())
