"""neuroneval.interop.sae: SAELens and sparsify SAE directories, and their encoders.

Encodings are pinned against a slow loop written here (on integer data, where every order of
summation gives the same float32, and on random data with each normalisation), against the
real `sae-lens` and `eai-sparsify` packages reading what our writers wrote (and the other way
round), and through `neuroneval.torch.extract`.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from neuroneval.errors import DTypeError, NonFiniteError, ParameterError, ResumeError, ShapeError, SourceError
from neuroneval.interop.sae import SparseAutoencoder, read_saelens, read_sparsify, write_saelens, write_sparsify
from safetensors.numpy import load_file, save_file

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from neuroneval.sources import open_activations  # noqa: E402
from neuroneval.torch import capture, extract, sae_module  # noqa: E402

ARCHS = ["standard", "topk", "jumprelu"]
FIELDS = ["architecture", "d_in", "d_sae", "k", "apply_b_dec_to_input", "normalize_activations", "hook_name", "source"]
ARRAYS = ["W_enc", "b_enc", "W_dec", "b_dec", "threshold"]


# --------------------------------------------------------------------------- helpers


def random_sae(arch: str, rng: np.random.Generator, d_in: int = 8, d_sae: int = 24, *, integer: bool = False,
               dtype: Any = np.float32, **kw: Any) -> SparseAutoencoder:  # fmt: skip
    """Random weights; `integer`: small integers, so that every pre-activation is exact in float32."""

    def draw(*shape: int) -> np.ndarray:
        a = rng.integers(-2, 3, size=shape) if integer else rng.normal(size=shape)
        return np.asarray(a, dtype=dtype)

    extra: dict[str, Any] = {}
    k = kw.pop("k", 5)
    if arch == "jumprelu":
        extra["threshold"] = draw(d_sae) if integer else np.asarray(rng.normal(size=d_sae) * 0.5, dtype=dtype)
    if arch == "topk":
        extra["k"] = k
    return SparseAutoencoder(arch, d_in, d_sae, draw(d_in, d_sae), draw(d_sae), draw(d_sae, d_in), draw(d_in),
                             **extra, **kw)  # fmt: skip


def reference_encode(sae: SparseAutoencoder, x: np.ndarray) -> np.ndarray:
    """The latents by loops over rows and latents, in float64 with math.fsum."""
    W = sae.W_enc.astype(np.float64).tolist()
    out = np.zeros((len(x), sae.d_sae))
    for r, row in enumerate(np.asarray(x, dtype=np.float64).tolist()):
        v = row
        if sae.normalize_activations == "constant_norm_rescale":
            norm = math.sqrt(math.fsum(a * a for a in v))
            v = [a * math.sqrt(sae.d_in) / norm for a in v]
        elif sae.normalize_activations == "layer_norm":
            mu = math.fsum(v) / len(v)
            c = [a - mu for a in v]
            std = math.sqrt(math.fsum(a * a for a in c) / (len(c) - 1))
            v = [a / (std + 1e-5) for a in c]
        if sae.apply_b_dec_to_input:
            v = [a - float(b) for a, b in zip(v, sae.b_dec, strict=True)]
        h = [math.fsum(v[i] * W[i][j] for i in range(sae.d_in)) + float(sae.b_enc[j]) for j in range(sae.d_sae)]
        if sae.architecture == "topk":
            assert sae.k is not None
            active = set(sorted(range(sae.d_sae), key=lambda j: (-h[j], j))[: sae.k])  # ties: lowest index
        elif sae.architecture == "jumprelu":
            assert sae.threshold is not None
            active = {j for j in range(sae.d_sae) if h[j] > float(sae.threshold[j])}
        else:
            active = set(range(sae.d_sae))
        for j in active:
            out[r, j] = max(h[j], 0.0)
    return out


def pre_activations(sae: SparseAutoencoder, x: np.ndarray) -> np.ndarray:
    """h for unnormalised SAEs, exact for integer data."""
    xb = x.astype(np.float64) - (sae.b_dec if sae.apply_b_dec_to_input else 0)
    return xb @ sae.W_enc.astype(np.float64) + sae.b_enc


def assert_same_sae(a: SparseAutoencoder, b: SparseAutoencoder) -> None:
    for f in FIELDS:
        assert getattr(a, f) == getattr(b, f), f
    for name in ARRAYS:
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.dtype == y.dtype and np.array_equal(x, y), name


def integer_rows(rng: np.random.Generator, n: int, d_in: int) -> np.ndarray:
    return rng.integers(-3, 4, size=(n, d_in)).astype(np.float32)


# --------------------------------------------------------------------------- encode


@pytest.mark.parametrize("apply", [True, False])
@pytest.mark.parametrize("arch", ARCHS)
def test_encode_equals_the_loop_on_exact_data_with_ties_and_thresholds_hit(arch: str, apply: bool) -> None:
    rng = np.random.default_rng(1)
    sae = random_sae(arch, rng, integer=True, apply_b_dec_to_input=apply, k=12)
    x = integer_rows(rng, 60, sae.d_in)
    h = pre_activations(sae, x)
    # The data are adversarial: ties across the k-th place, pre-activations exactly at the threshold, zeros.
    if arch == "topk":
        kth = -np.sort(-h, axis=1)[:, sae.k - 1 : sae.k]
        assert ((h == kth).sum(axis=1) > 1).sum() > 10 and ((h > 0).sum(axis=1) < sae.k).any()
    if arch == "jumprelu":
        assert (h == sae.threshold).sum() > 20 and ((h > sae.threshold) & (h <= 0)).any()
    assert (h == 0).any()
    want = reference_encode(sae, x)
    got = sae.encode(x)
    assert got.dtype == np.float32 and np.array_equal(got, want)
    got64 = sae.encode(x.astype(np.float64))
    assert got64.dtype == np.float64 and np.array_equal(got64, want)
    assert np.array_equal(sae.encode(x.astype(np.float16)), want)
    assert not np.signbit(got).any()  # inactive latents are +0


def test_topk_keeps_the_lowest_indices_among_equal_pre_activations() -> None:
    d_in, d_sae, k = 3, 10, 4
    z = np.zeros
    sae = SparseAutoencoder("topk", d_in, d_sae, z((d_in, d_sae)), np.ones(d_sae), z((d_sae, d_in)), z(d_in), k=k)
    got = sae.encode(np.ones((2, d_in)))
    assert np.array_equal(got != 0, np.arange(d_sae)[None, :].repeat(2, 0) < k)
    b = np.ones(d_sae)
    b[7] = 2.0  # one above the tie: it and the k - 1 lowest of the tied ones
    sae = SparseAutoencoder("topk", d_in, d_sae, z((d_in, d_sae)), b, z((d_sae, d_in)), z(d_in), k=k)
    assert sorted(np.flatnonzero(sae.encode(np.ones((1, d_in)))[0])) == [0, 1, 2, 7]


@pytest.mark.parametrize("norm", ["none", "constant_norm_rescale", "layer_norm"])
@pytest.mark.parametrize("arch", ARCHS)
def test_encode_equals_the_loop_on_random_data_with_each_normalisation(arch: str, norm: str) -> None:
    rng = np.random.default_rng(2)
    sae = random_sae(arch, rng, normalize_activations=norm)
    x = (rng.normal(size=(40, sae.d_in)) * 3 + 1).astype(np.float32)
    want = reference_encode(sae, x)
    got = sae.encode(x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sae.encode(x.astype(np.float64)), want, rtol=1e-12, atol=1e-12)
    assert np.array_equal(got != 0, want != 0)  # the random data have no near-ties at a boundary


@pytest.mark.parametrize("arch", ARCHS)
def test_the_torch_module_computes_what_encode_computes(arch: str) -> None:
    rng = np.random.default_rng(3)
    for source in ["saelens", "sparsify"] if arch == "topk" else ["saelens"]:
        sae = random_sae(arch, rng, integer=True, source=source)
        x = integer_rows(rng, 50, sae.d_in)
        module = sae_module(sae)
        with torch.inference_mode():
            got = module(torch.from_numpy(x))
            got64 = module(torch.from_numpy(x.astype(np.float64)))
        assert got.dtype == torch.float32 and np.array_equal(got.numpy(), sae.encode(x))  # ties broken alike
        assert got64.dtype == torch.float64 and np.array_equal(got64.numpy(), reference_encode(sae, x))
    for norm in ["constant_norm_rescale", "layer_norm"]:
        sae = random_sae(arch, rng, normalize_activations=norm)
        x = rng.normal(size=(30, sae.d_in)).astype(np.float32)
        with torch.inference_mode():
            got = sae_module(sae)(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(got, sae.encode(x), rtol=1e-5, atol=1e-6)
    with pytest.raises(ShapeError, match=r"\(rows, 8\)"):
        sae_module(sae)(torch.zeros(2, 7))
    with pytest.raises(NonFiniteError, match="row 1"):
        sae_module(sae)(torch.tensor([[1.0] * 8, [math.nan] * 8]))
    with pytest.raises(ParameterError, match="SparseAutoencoder"):
        sae_module("sae")  # type: ignore[arg-type]


def bad_input(case: str) -> Any:
    return {
        "1-D": np.zeros(8),
        "width": np.zeros((2, 7)),
        "complex": np.zeros((2, 8), np.complex64),
        "strings": np.full((2, 8), "a"),
        "nan": np.where(np.eye(2, 8) > 0, np.nan, 0.0),
        "inf": np.where(np.eye(2, 8) > 0, np.inf, 0.0),
        "overflow": np.full((2, 8), 3e38, np.float32),
    }[case]


@pytest.mark.parametrize(
    "case, error, match",
    [
        ("1-D", ShapeError, "must be 2-D"),
        ("width", ShapeError, "7 columns; this SAE reads d_in=8"),
        ("complex", DTypeError, "complex"),
        ("strings", DTypeError, "dtype <U1"),
        ("nan", NonFiniteError, "row 0, column 0"),
        ("inf", NonFiniteError, "row 0, column 0"),
        ("overflow", NonFiniteError, "pre-activations are not finite at row 0"),
    ],
)
def test_encode_refuses_bad_input(case: str, error: type, match: str) -> None:
    sae = random_sae("standard", np.random.default_rng(4))
    with pytest.raises(error, match=match):
        sae.encode(bad_input(case))


def test_a_zero_row_under_constant_norm_rescale_is_refused_not_zero() -> None:
    sae = random_sae("topk", np.random.default_rng(5), normalize_activations="constant_norm_rescale")
    with pytest.raises(NonFiniteError, match="constant_norm_rescale of row 1"):
        sae.encode(np.vstack([np.ones(8), np.zeros(8)]))


def construct(**change: Any) -> SparseAutoencoder:
    rng = np.random.default_rng(6)
    d_in, d_sae = 4, 6
    fields: dict[str, Any] = dict(architecture="topk", d_in=d_in, d_sae=d_sae, W_enc=rng.normal(size=(d_in, d_sae)),
                                  b_enc=np.zeros(d_sae), W_dec=np.zeros((d_sae, d_in)), b_dec=np.zeros(d_in), k=2)  # fmt: skip
    fields.update(change)
    return SparseAutoencoder(**fields)


@pytest.mark.parametrize(
    "change, error, match",
    [
        ({"architecture": "gated"}, ParameterError, "gated SAEs are not supported"),
        ({"architecture": "relu"}, ParameterError, "architecture must be one of"),
        ({"k": None}, ParameterError, "needs k"),
        ({"k": 7}, ParameterError, "k must be an integer <= 6"),
        ({"k": 2.0}, ParameterError, "k must be an integer"),
        ({"architecture": "standard"}, ParameterError, "k is given"),
        ({"architecture": "jumprelu", "k": None}, ParameterError, "needs its threshold"),
        ({"threshold": np.zeros(6)}, ParameterError, "threshold is given"),
        ({"W_enc": np.zeros((6, 4))}, ShapeError, r"W_enc has shape \(6, 4\); expected \(4, 6\)"),
        ({"d_sae": 5, "k": 1}, ShapeError, "W_enc has shape"),
        ({"b_dec": np.zeros(4, np.int64)}, DTypeError, "b_dec has dtype int64"),
        (
            {"b_enc": np.array([0, 0, np.nan, 0, 0, 0])},
            NonFiniteError,
            r"b_enc holds 1 non-finite values \(first at index \(2,\)\)",
        ),
        (
            {"normalize_activations": "expected_average_only_in"},
            ParameterError,
            "needs statistics of the training data",
        ),
        ({"normalize_activations": "covariance_whitening"}, ParameterError, "fold_activation_whitening"),
        ({"normalize_activations": "rms"}, ParameterError, "normalize_activations must be one of"),
        ({"apply_b_dec_to_input": "yes"}, ParameterError, "apply_b_dec_to_input must be True or False"),
        ({"source": "dictionary_learning"}, ParameterError, "source must be one of"),
        ({"source": "sparsify", "normalize_activations": "layer_norm"}, ParameterError, "sparsify SAE is a topk SAE"),
    ],
)
def test_construction_refuses_inconsistent_fields(change: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        construct(**change)


def test_weights_are_read_only_and_float16_and_tensors_are_taken() -> None:
    sae = construct(W_enc=np.ones((4, 6), np.float16), b_enc=torch.zeros(6, dtype=torch.bfloat16))
    assert sae.W_enc.dtype == np.float32 and sae.b_enc.dtype == np.float32 and sae.W_dec.dtype == np.float64
    with pytest.raises(ValueError, match="read-only"):
        sae.W_enc[0, 0] = 2.0
    assert "d_sae=6" in repr(sae) and "W_enc" not in repr(sae)


def test_the_library_module_does_not_import_torch_or_the_sae_packages() -> None:
    code = "import sys, neuroneval.interop.sae; print(sorted({'torch', 'sae_lens', 'sparsify'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# --------------------------------------------------------------------------- files


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("arch", ARCHS)
def test_saelens_round_trip(tmp_path: Path, arch: str, dtype: Any) -> None:
    rng = np.random.default_rng(7)
    for i, kw in enumerate([{}, {"apply_b_dec_to_input": False, "normalize_activations": "layer_norm",
                                 "hook_name": "blocks.3.hook_resid_post"}]):  # fmt: skip
        sae = random_sae(arch, rng, dtype=dtype, **kw)
        write_saelens(sae, tmp_path / str(i))
        back = read_saelens(tmp_path / str(i))
        assert_same_sae(sae, back)
        assert back.path == tmp_path / str(i) and back.source == "saelens"
    cfg = json.loads((tmp_path / "1" / "cfg.json").read_text())
    assert cfg["dtype"] == np.dtype(dtype).name and cfg["metadata"]["hook_name"] == "blocks.3.hook_resid_post"
    assert sorted(p.name for p in (tmp_path / "1").iterdir()) == ["cfg.json", "sae_weights.safetensors"]


@pytest.mark.parametrize("apply", [True, False])
def test_sparsify_round_trip(tmp_path: Path, apply: bool) -> None:
    rng = np.random.default_rng(8)
    sae = random_sae("topk", rng, source="sparsify", apply_b_dec_to_input=apply, hook_name="layers.2")
    write_sparsify(sae, tmp_path / "layers.2")
    assert_same_sae(sae, read_sparsify(tmp_path / "layers.2"))
    # Across the layouts: a sparsify SAE written as SAELens's reads back with the same arrays.
    write_saelens(sae, tmp_path / "saelens")
    back = read_saelens(tmp_path / "saelens")
    assert back.source == "saelens" and np.array_equal(back.W_enc, sae.W_enc) and back.k == sae.k
    x = rng.normal(size=(20, 8)).astype(np.float32)
    np.testing.assert_allclose(back.encode(x), sae.encode(x), rtol=1e-6, atol=1e-6)


def test_write_sparsify_refuses_what_sparsify_cannot_hold(tmp_path: Path) -> None:
    for sae in [random_sae("jumprelu", np.random.default_rng(9)),
                random_sae("topk", np.random.default_rng(9), normalize_activations="layer_norm")]:  # fmt: skip
        with pytest.raises(ParameterError, match="sparsify holds topk SAEs"):
            write_sparsify(sae, tmp_path / "x")
    assert not (tmp_path / "x").exists()
    with pytest.raises(ParameterError, match="must be a SparseAutoencoder"):
        write_saelens({"W_enc": 1}, tmp_path / "y")  # type: ignore[arg-type]


def saelens_by_hand(directory: Path, arch: str, rng: np.random.Generator, *, d_in: int = 5, d_sae: int = 7,
                    cfg_change: dict[str, Any] | None = None) -> dict[str, np.ndarray]:  # fmt: skip
    """The layout SAELens 6's SAE.save_model writes, built with json and safetensors only."""
    weights = {"W_dec": rng.normal(size=(d_sae, d_in)), "W_enc": rng.normal(size=(d_in, d_sae)),
               "b_dec": rng.normal(size=d_in), "b_enc": rng.normal(size=d_sae)}  # fmt: skip
    if arch == "jumprelu":
        weights["threshold"] = np.abs(rng.normal(size=d_sae))
    weights = {k: v.astype(np.float32) for k, v in weights.items()}
    cfg: dict[str, Any] = {
        "d_in": d_in, "d_sae": d_sae, "dtype": "float32", "device": "cuda", "apply_b_dec_to_input": True,
        "normalize_activations": "none", "reshape_activations": "none",
        "metadata": {"sae_lens_version": "6.5.1", "sae_lens_training_version": "6.5.1", "model_name": "gpt2",
                     "hook_name": "blocks.8.hook_resid_pre", "hook_head_index": None, "prepend_bos": True},
        "architecture": arch,
    }  # fmt: skip
    if arch == "topk":
        cfg.update(k=3, rescale_acts_by_decoder_norm=False)
    cfg.update(cfg_change or {})
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cfg.json").write_text(json.dumps(cfg))
    save_file(weights, str(directory / "sae_weights.safetensors"))
    return weights


@pytest.mark.parametrize("arch", ARCHS)
def test_the_published_saelens_layout_written_by_hand_reads_back(tmp_path: Path, arch: str) -> None:
    weights = saelens_by_hand(tmp_path, arch, np.random.default_rng(10))
    sae = read_saelens(tmp_path)
    assert (sae.architecture, sae.d_in, sae.d_sae, sae.hook_name) == (arch, 5, 7, "blocks.8.hook_resid_pre")
    assert sae.k == (3 if arch == "topk" else None) and sae.apply_b_dec_to_input
    for key, value in weights.items():
        assert np.array_equal(getattr(sae, key), value), key


def test_pre_6_saelens_configs_are_converted_as_saelens_does(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    old = {"model_name": "gpt2-small", "hook_point": "blocks.2.hook_resid_pre", "hook_point_layer": 2, "d_in": 5,
           "d_sae": 7, "dtype": "torch.float32", "device": "cuda", "activation_fn_str": "topk",
           "activation_fn_kwargs": {"k": 4}, "normalize_activations": False, "sae_lens_training_version": "3.13.0"}  # fmt: skip
    saelens_by_hand(tmp_path, "standard", rng, cfg_change={})
    (tmp_path / "cfg.json").write_text(json.dumps(old))
    sae = read_saelens(tmp_path)
    assert (sae.architecture, sae.k, sae.hook_name, sae.normalize_activations) == (
        "topk",
        4,
        "blocks.2.hook_resid_pre",
        "none",
    )
    assert sae.apply_b_dec_to_input  # the pre-6 default
    (tmp_path / "cfg.json").write_text(json.dumps({**old, "activation_fn_str": "relu", "normalize_activations": True}))
    with pytest.raises(
        SourceError, match="cfg.json: normalize_activations='expected_average_only_in' needs statistics"
    ):
        read_saelens(tmp_path)
    (tmp_path / "cfg.json").write_text(json.dumps({**old, "activation_fn_str": "tanh-relu"}))
    with pytest.raises(SourceError, match="activation_fn 'tanh-relu' is not supported"):
        read_saelens(tmp_path)


def test_log_threshold_bfloat16_and_the_cfg_dtype_are_read_as_saelens_loads_them(tmp_path: Path) -> None:
    from safetensors.torch import save_file as save_torch

    rng = np.random.default_rng(12)
    weights = saelens_by_hand(tmp_path, "jumprelu", rng)
    log_threshold = np.log(weights.pop("threshold"))
    save_file({**weights, "log_threshold": log_threshold}, str(tmp_path / "sae_weights.safetensors"))
    sae = read_saelens(tmp_path)
    np.testing.assert_allclose(sae.threshold, np.exp(log_threshold), rtol=1e-6)
    # bfloat16 tensors (written by torch, numpy has no bfloat16) widen exactly.
    as_bf16 = {k: torch.from_numpy(v).to(torch.bfloat16) for k, v in weights.items()}
    save_torch({**as_bf16, "threshold": as_bf16["b_enc"].abs()}, str(tmp_path / "sae_weights.safetensors"))
    sae = read_saelens(tmp_path)
    assert sae.W_enc.dtype == np.float32 and np.array_equal(sae.W_enc, as_bf16["W_enc"].float().numpy())
    # A cfg dtype narrower than the file's: the weights are rounded as SAELens's cast rounds them.
    saelens_by_hand(tmp_path, "topk", rng, cfg_change={"dtype": "bfloat16"})
    sae, stored = read_saelens(tmp_path), load_file(str(tmp_path / "sae_weights.safetensors"))
    want = torch.from_numpy(stored["W_enc"]).to(torch.bfloat16).float().numpy()
    assert np.array_equal(sae.W_enc, want) and not np.array_equal(want, stored["W_enc"])
    saelens_by_hand(tmp_path, "topk", rng, cfg_change={"dtype": "float16"})
    sae, stored = read_saelens(tmp_path), load_file(str(tmp_path / "sae_weights.safetensors"))
    assert np.array_equal(sae.b_dec, torch.from_numpy(stored["b_dec"]).half().float().numpy())


def sparsify_by_hand(directory: Path, rng: np.random.Generator, *, d_in: int = 4, cfg_change: dict[str, Any] | None = None,
                     weights_change: dict[str, Any] | None = None) -> dict[str, np.ndarray]:  # fmt: skip
    """The layout sparsify's SparseCoder.save_to_disk writes: num_latents 0 means d_in * expansion_factor."""
    cfg = {"activation": "topk", "expansion_factor": 2, "normalize_decoder": True, "num_latents": 0, "k": 3,
           "multi_topk": False, "skip_connection": False, "transcode": False, "d_in": d_in}  # fmt: skip
    cfg.update(cfg_change or {})
    n = int(cfg["num_latents"] or d_in * cfg["expansion_factor"])  # type: ignore[operator]
    weights = {"W_dec": rng.normal(size=(n, d_in)), "b_dec": rng.normal(size=d_in),
               "encoder.bias": rng.normal(size=n), "encoder.weight": rng.normal(size=(n, d_in))}  # fmt: skip
    weights = {k: v.astype(np.float32) for k, v in weights.items()}
    weights.update(weights_change or {})
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cfg.json").write_text(json.dumps(cfg))
    save_file({k: v for k, v in weights.items() if v is not None}, str(directory / "sae.safetensors"))
    return weights


def test_the_published_sparsify_layout_written_by_hand_reads_back(tmp_path: Path) -> None:
    weights = sparsify_by_hand(tmp_path / "layers.5.mlp", np.random.default_rng(13))
    sae = read_sparsify(tmp_path / "layers.5.mlp")
    assert (sae.architecture, sae.d_in, sae.d_sae, sae.k, sae.hook_name) == ("topk", 4, 8, 3, "layers.5.mlp")
    assert np.array_equal(sae.W_enc, weights["encoder.weight"].T) and np.array_equal(sae.b_enc, weights["encoder.bias"])
    assert np.array_equal(sae.W_dec, weights["W_dec"]) and sae.apply_b_dec_to_input
    sparsify_by_hand(tmp_path / "t", np.random.default_rng(13), cfg_change={"transcode": True, "num_latents": 6})
    sae = read_sparsify(tmp_path / "t")
    assert sae.d_sae == 6 and not sae.apply_b_dec_to_input


def break_saelens(directory: Path, case: str) -> None:
    rng = np.random.default_rng(14)
    arch = "jumprelu" if case in ("no threshold",) else "topk"
    cfg_change = {
        "unknown architecture": {"architecture": "gated"},
        "matryoshka": {"architecture": "matryoshka_batchtopk"},
        "hook_z": {"reshape_activations": "hook_z"},
        "rescale": {"rescale_acts_by_decoder_norm": True},
        "data normalisation": {"normalize_activations": "expected_average_only_in"},
        "k too big": {"k": 8},
        "d_in not int": {"d_in": "5"},
        "no d_sae": {"d_sae": None},
        "cfg d_sae": {"d_sae": 8},
        "bad dtype": {"dtype": "int8"},
        "no architecture": {"architecture": None},
    }.get(case, {})
    weights = saelens_by_hand(directory, arch, rng, cfg_change={k: v for k, v in cfg_change.items() if v is not None})
    cfg_path, weights_path = directory / "cfg.json", directory / "sae_weights.safetensors"
    if case in ("no d_sae", "no architecture"):
        cfg = json.loads(cfg_path.read_text())
        del cfg["d_sae" if case == "no d_sae" else "architecture"]
        cfg_path.write_text(json.dumps(cfg))
    data = weights_path.read_bytes()
    if case == "no cfg":
        cfg_path.unlink()
    elif case == "no weights":
        weights_path.unlink()
    elif case == "cfg not json":
        cfg_path.write_text('{"d_in": 5, ')
    elif case == "cfg a list":
        cfg_path.write_text("[1, 2]")
    elif case == "truncated":
        weights_path.write_bytes(data[: len(data) - 9])
    elif case == "header only":
        weights_path.write_bytes(data[:40])
    elif case == "empty":
        weights_path.write_bytes(b"")
    elif case == "garbage":
        weights_path.write_bytes(b"\xff" * 64)
    elif case == "no W_enc":
        save_file({k: v for k, v in weights.items() if k != "W_enc"}, str(weights_path))
    elif case == "no threshold":
        save_file({k: v for k, v in weights.items() if k != "threshold"}, str(weights_path))
    elif case == "W_dec shape":
        save_file({**weights, "W_dec": weights["W_dec"].T.copy()}, str(weights_path))
    elif case == "nan":
        save_file({**weights, "b_enc": np.where(np.arange(7) == 3, np.nan, weights["b_enc"]).astype(np.float32)},
                  str(weights_path))  # fmt: skip
    elif case == "extra tensor":
        save_file({**weights, "W_skip": np.zeros((5, 5), np.float32)}, str(weights_path))
    elif case == "integer tensor":
        save_file({**weights, "b_dec": np.zeros(5, np.int32)}, str(weights_path))
    elif case == "scaling factor":
        save_file({**weights, "scaling_factor": np.full(7, 2.0, np.float32)}, str(weights_path))


SAELENS_BREAKS = [
    ("no cfg", "cfg.json does not exist"),
    ("no weights", "sae_weights.safetensors does not exist"),
    ("cfg not json", "cfg.json is not valid JSON"),
    ("cfg a list", "cfg.json must hold a JSON object"),
    ("truncated", "sae_weights.safetensors is not a readable safetensors file"),
    ("header only", "sae_weights.safetensors is not a readable safetensors file"),
    ("empty", "sae_weights.safetensors is not a readable safetensors file"),
    ("garbage", "sae_weights.safetensors is not a readable safetensors file"),
    ("no W_enc", "sae_weights.safetensors has no 'W_enc' tensor"),
    ("no threshold", "sae_weights.safetensors has no 'threshold' tensor"),
    (
        "W_dec shape",
        r"sae_weights.safetensors: the tensor 'W_dec' has shape \(5, 7\); cfg.json \(d_in=5, d_sae=7\) says \(7, 5\)",
    ),
    ("cfg d_sae", r"the tensor 'W_enc' has shape \(5, 7\); cfg.json \(d_in=5, d_sae=8\) says \(5, 8\)"),
    ("nan", r"sae_weights.safetensors: the tensor 'b_enc' holds 1 NaN or infinite values \(first at \(3,\)\)"),
    ("extra tensor", r"sae_weights.safetensors: unexpected tensors \['W_skip'\]"),
    ("integer tensor", "sae_weights.safetensors: the tensor 'b_dec' has dtype I32"),
    ("scaling factor", "sae_weights.safetensors: a finetuning scaling_factor other than 1"),
    ("unknown architecture", "cfg.json: the architecture 'gated' is not supported"),
    ("matryoshka", "cfg.json: the architecture 'matryoshka_batchtopk' is not supported"),
    ("no architecture", "cfg.json has no 'architecture'"),
    ("hook_z", "cfg.json: reshape_activations='hook_z' is not supported"),
    ("rescale", "cfg.json: rescale_acts_by_decoder_norm is not supported"),
    ("data normalisation", "cfg.json: normalize_activations='expected_average_only_in' needs statistics"),
    ("k too big", "cfg.json: k must be an integer <= 7"),
    ("d_in not int", "cfg.json: 'd_in' must be an integer >= 1; got '5'"),
    ("no d_sae", "cfg.json has no 'd_sae'"),
    ("bad dtype", "cfg.json: dtype 'int8' is not one of"),
]


@pytest.mark.parametrize("case, match", SAELENS_BREAKS, ids=[c for c, _ in SAELENS_BREAKS])
def test_broken_saelens_directories_raise_a_source_error_naming_the_file(tmp_path: Path, case: str, match: str) -> None:
    d = tmp_path / "sae"
    break_saelens(d, case)
    with pytest.raises(SourceError, match=match) as info:
        read_saelens(d)
    assert str(d) in str(info.value)


def test_a_missing_directory_is_a_source_error(tmp_path: Path) -> None:
    for read in (read_saelens, read_sparsify):
        with pytest.raises(SourceError, match="is not a directory"):
            read(tmp_path / "nothing")


SPARSIFY_BREAKS: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    ("groupmax", {"activation": "groupmax"}, {}, "cfg.json: the activation 'groupmax' is not supported"),
    ("skip connection", {"skip_connection": True}, {"W_skip": np.zeros((4, 4), np.float32)}, "skip connections"),
    ("W_skip only", {}, {"W_skip": np.zeros((4, 4), np.float32)}, r"sae.safetensors: skip connections \(W_skip\)"),
    ("no d_in", {"d_in": None}, {}, "cfg.json has no 'd_in'"),
    ("num_latents shape", {"num_latents": 0, "expansion_factor": 2}, {"encoder.bias": np.zeros(9, np.float32)},
     r"the tensor 'encoder.bias' has shape \(9,\); cfg.json \(d_in=4, num_latents=8\) says \(8,\)"),
    ("no encoder.weight", {}, {"encoder.weight": None}, "sae.safetensors has no 'encoder.weight' tensor"),
    ("nan", {}, {"b_dec": np.array([0, np.inf, 0, 0], np.float32)}, "the tensor 'b_dec' holds 1 NaN or infinite"),
    ("k too big", {"k": 9}, {}, "cfg.json: k must be an integer <= 8"),
    ("signed", {"signed": True}, {}, "signed SAEs"),
]  # fmt: skip


@pytest.mark.parametrize("case, cfg, weights, match", SPARSIFY_BREAKS, ids=[c[0] for c in SPARSIFY_BREAKS])
def test_broken_sparsify_directories_raise_a_source_error_naming_the_file(
    tmp_path: Path, case: str, cfg: dict[str, Any], weights: dict[str, Any], match: str
) -> None:
    d = tmp_path / "layers.1"
    sparsify_by_hand(d, np.random.default_rng(15), cfg_change={k: v for k, v in cfg.items() if v is not None},
                     weights_change=weights)  # fmt: skip
    if None in cfg.values():
        c = json.loads((d / "cfg.json").read_text())
        for k in [k for k, v in cfg.items() if v is None]:
            del c[k]
        (d / "cfg.json").write_text(json.dumps(c))
    with pytest.raises(SourceError, match=match) as info:
        read_sparsify(d)
    assert str(d) in str(info.value)


def test_a_truncated_sparsify_file_is_a_source_error(tmp_path: Path) -> None:
    sparsify_by_hand(tmp_path, np.random.default_rng(16))
    data = (tmp_path / "sae.safetensors").read_bytes()
    (tmp_path / "sae.safetensors").write_bytes(data[:-3])
    with pytest.raises(SourceError, match=r"sae.safetensors is not a readable safetensors file \(truncated"):
        read_sparsify(tmp_path)
    (tmp_path / "sae.safetensors").unlink()
    with pytest.raises(SourceError, match="sae.safetensors does not exist"):
        read_sparsify(tmp_path)


# --------------------------------------------------------------------------- extract


def test_extract_with_a_read_sae_stores_what_encode_gives(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    x = torch.randn(23, 6)
    rng = np.random.default_rng(17)
    write_saelens(random_sae("topk", rng, d_in=8, d_sae=40, k=2), tmp_path / "topk")
    write_saelens(random_sae("jumprelu", rng, d_in=3, d_sae=5), tmp_path / "jump")
    topk, jump = read_saelens(tmp_path / "topk"), read_saelens(tmp_path / "jump")
    raw = capture(model, x, ["1", "2"], batch_size=23)
    store = extract(model, x, ["1", "2"], tmp_path / "out", sae={"1": topk, model[2]: jump}, dtype="float32",
                    batch_size=5, progress=False)  # fmt: skip
    assert store["1"].layout == "triplets" and store["2"].layout == "dense"
    for layer, sae in [("1", topk), ("2", jump)]:
        got, want = open_activations(store[layer].path).dense(), sae.encode(raw[layer])
        assert np.array_equal(got != 0, want != 0) and (want != 0).any()
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)  # torch's and numpy's products round apart
    manifest = json.loads((store["1"].path / "manifest.json").read_text())
    assert manifest["sae"] == "neuroneval.torch.sae.SAEEncoder"
    # The fingerprint: the same SAE read again resumes (finished: returned as is); another k does not.
    again = extract(model, x, ["1", "2"], tmp_path / "out", sae={"1": read_saelens(tmp_path / "topk"), "2": jump},
                    dtype="float32", batch_size=5, progress=False)  # fmt: skip
    assert again["1"].n_rows == 23
    fields = {f: getattr(topk, f) for f in ["W_enc", "b_enc", "W_dec", "b_dec"]}
    other_k = SparseAutoencoder("topk", 8, 40, **fields, k=3)
    with pytest.raises(ResumeError, match="differs in sae"):
        extract(model, x, ["1", "2"], tmp_path / "out", sae={"1": other_k, "2": jump}, dtype="float32", batch_size=5,
                progress=False)  # fmt: skip


# --------------------------------------------------------------------------- conformance with the originals


@pytest.fixture(scope="module")
def sae_lens() -> Any:
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    return pytest.importorskip("sae_lens")


@pytest.fixture(scope="module")
def sparsify() -> Any:
    return pytest.importorskip("sparsify")


def assert_same_latents(got: np.ndarray, want: np.ndarray) -> None:
    """Our numpy encoding against a torch one: the same active latents, and values equal to
    float32 rounding. Not bit for bit: numpy's and torch's float32 matmuls add in different
    orders on some CPUs (an AMD EPYC here: 1 ulp apart on a 40 x 12 @ 12 x 30 product)."""
    assert got.shape == want.shape and got.dtype == want.dtype
    assert np.array_equal(got != 0, want != 0)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def saelens_encode(sae_lens: Any, directory: Path, x: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        original = sae_lens.SAE.load_from_disk(str(directory))
    with torch.no_grad():
        return np.asarray(original.encode(torch.from_numpy(x)).numpy())


CONFORMANCE = [(a, n, apply) for a in ARCHS for n, apply in [("none", True), ("none", False), ("layer_norm", True),
                                                             ("constant_norm_rescale", False)]]  # fmt: skip


@pytest.mark.parametrize("arch, norm, apply", CONFORMANCE)
def test_saelens_reads_what_write_saelens_wrote_and_encodes_the_same(
    sae_lens: Any, tmp_path: Path, arch: str, norm: str, apply: bool
) -> None:
    rng = np.random.default_rng(18)
    sae = random_sae(arch, rng, d_in=16, d_sae=48, normalize_activations=norm, apply_b_dec_to_input=apply, k=6)
    write_saelens(sae, tmp_path)
    x = (rng.normal(size=(50, 16)) * 2).astype(np.float32)
    want = saelens_encode(sae_lens, tmp_path, x)
    with torch.no_grad():
        assert np.array_equal(sae_module(read_saelens(tmp_path))(torch.from_numpy(x)).numpy(), want)
    got = read_saelens(tmp_path).encode(x)
    if norm == "none":
        assert_same_latents(got, want)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.array_equal(got != 0, want != 0)


@pytest.mark.parametrize("arch", ARCHS)
def test_what_saelens_saves_reads_back_and_encodes_the_same(sae_lens: Any, tmp_path: Path, arch: str) -> None:
    classes = {"standard": ("StandardSAE", "StandardSAEConfig", {}), "topk": ("TopKSAE", "TopKSAEConfig", {"k": 4}),
               "jumprelu": ("JumpReLUSAE", "JumpReLUSAEConfig", {})}  # fmt: skip
    model, config, kw = classes[arch]
    cfg = getattr(sae_lens, config)(d_in=12, d_sae=30, **kw)
    cfg.metadata.hook_name = "blocks.1.hook_mlp_out"
    torch.manual_seed(1)
    original = getattr(sae_lens, model)(cfg)
    with torch.no_grad():
        for p in original.parameters():
            p.copy_(torch.randn_like(p) * 0.5 + (0.2 if p.ndim == 1 else 0.0))
    original.save_model(str(tmp_path))
    sae = read_saelens(tmp_path)
    assert (sae.architecture, sae.k, sae.hook_name) == (arch, kw.get("k"), "blocks.1.hook_mlp_out")
    x = np.random.default_rng(19).normal(size=(40, 12)).astype(np.float32)
    with torch.no_grad():
        want = original.encode(torch.from_numpy(x)).numpy()
    assert_same_latents(sae.encode(x), want)
    assert (want > 0).any() and (want == 0).any()


def test_saelens_topk_with_ties_differs_at_most_in_which_tied_latent_is_kept(sae_lens: Any, tmp_path: Path) -> None:
    rng = np.random.default_rng(20)
    sae = random_sae("topk", rng, d_in=6, d_sae=64, integer=True, k=7)
    write_saelens(sae, tmp_path)
    x = integer_rows(rng, 80, 6)
    want, got = saelens_encode(sae_lens, tmp_path, x), sae.encode(x)
    h = pre_activations(sae, x)
    kth = -np.sort(-h, axis=1)[:, 6:7]
    assert ((h == kth).sum(axis=1) > 1).sum() > 20  # many rows tie at the k-th place
    assert np.array_equal(np.sort(got, axis=1), np.sort(want, axis=1))  # the same values per row
    assert np.array_equal(np.where(h != kth, got, 0), np.where(h != kth, want, 0))  # the same latents off the tie


@pytest.mark.parametrize("transcode", [False, True])
def test_sparsify_reads_what_write_sparsify_wrote_and_the_other_way_round(
    sparsify: Any, tmp_path: Path, transcode: bool
) -> None:
    rng = np.random.default_rng(21)
    sae = random_sae("topk", rng, d_in=16, d_sae=64, k=8, source="sparsify", apply_b_dec_to_input=not transcode)
    write_sparsify(sae, tmp_path / "layers.0")
    x = rng.normal(size=(50, 16)).astype(np.float32)

    def dense(coder: Any) -> np.ndarray:
        with torch.no_grad():
            out = coder.encode(torch.from_numpy(x))
            return torch.zeros(len(x), coder.num_latents).scatter_(-1, out.top_indices, out.top_acts).numpy()

    want = dense(sparsify.SparseCoder.load_from_disk(tmp_path / "layers.0"))
    assert_same_latents(sae.encode(x), want)
    with torch.no_grad():
        assert np.array_equal(sae_module(sae)(torch.from_numpy(x)).numpy(), want)
    torch.manual_seed(2)
    cfg = sparsify.SparseCoderConfig(num_latents=40, k=5, transcode=transcode)
    coder = sparsify.SparseCoder(16, cfg)
    with torch.no_grad():
        coder.encoder.bias.normal_()
        coder.b_dec.normal_()
    coder.save_to_disk(tmp_path / "saved" / "layers.7")
    back = read_sparsify(tmp_path / "saved" / "layers.7")
    assert (back.d_sae, back.k, back.hook_name, back.apply_b_dec_to_input) == (40, 5, "layers.7", not transcode)
    assert_same_latents(back.encode(x), dense(coder))
