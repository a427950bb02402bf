"""delphi's latent caches, explanations and scorer outputs (neuroneval.interop.delphi).

The fixtures are written here in delphi's exact layout with safetensors and json directly
(as delphi's ``save_splits`` and its pipeline's post-processors do), not by our writer, so a
reader that only understands our writer would fail; the writer is then checked against them.
"""

from __future__ import annotations

import json
from pathlib import Path

import neuroneval
import numpy as np
import polars as pl
import pytest
import scipy.sparse as sp
from neuroneval.errors import SourceError
from neuroneval.interop import delphi
from neuroneval.interop.delphi import (
    delphi_score_summary,
    read_delphi_cache,
    read_delphi_explanations,
    read_delphi_scores,
    write_delphi_cache,
    write_delphi_explanations,
)
from safetensors.numpy import load_file, save_file
from sklearn.metrics import roc_auc_score


def sae_like(n_seq: int, ctx: int, width: int, k: int, seed: int) -> np.ndarray:
    """(n_seq * ctx, width) float16-exact activations with k active latents per token, ties
    and exact zeros included, and a latent that never fires."""
    rng = np.random.default_rng(seed)
    acts = np.zeros((n_seq * ctx, width), dtype=np.float32)
    for r in range(n_seq * ctx):
        cols = rng.choice(width - 1, size=k, replace=False)  # the last latent is dead
        acts[r, cols] = rng.choice([0.5, 1.0, 1.25, rng.random() * 3 + 0.01], size=k)
    return acts.astype(np.float16).astype(np.float32)


def delphi_splits(directory: Path, acts: np.ndarray, tokens: np.ndarray | None, n_splits: int) -> None:
    """What delphi's LatentCache.save_splits writes, step by step, in numpy."""
    n_seq, ctx = tokens.shape if tokens is not None else (acts.shape[0], 1)
    width = acts.shape[1]
    seq, pos, lat = np.nonzero(acts.reshape(n_seq, ctx, width) > 1e-5)  # torch.nonzero order
    values = acts.reshape(n_seq, ctx, width)[seq, pos, lat]
    boundaries = np.linspace(0, width, n_splits + 1).astype(np.int64)
    directory.mkdir(parents=True, exist_ok=True)
    for start, end in zip(boundaries[:-1], boundaries[1:] - 1, strict=True):
        m = (lat >= start) & (lat <= end)
        loc = np.stack([seq[m], pos[m], lat[m] - start], axis=1).astype(np.uint16)
        data = {"locations": loc, "activations": values[m].astype(np.float16)}
        if tokens is not None:
            data["tokens"] = tokens
        save_file(data, str(directory / f"{start}_{end}.safetensors"))


@pytest.fixture
def cache_dir(tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    acts = sae_like(n_seq=12, ctx=9, width=23, k=4, seed=1)
    tokens = np.random.default_rng(2).integers(0, 50_000, size=(12, 9))
    d = tmp_path / "latents" / "layers.3.mlp"
    delphi_splits(d, acts, tokens, n_splits=4)
    (d / "config.json").write_text(json.dumps({"cache_ctx_len": 9, "n_splits": 4, "model_name": "m"}))
    return d, acts, tokens


def test_published_layout_reads_to_the_matrix(cache_dir: tuple[Path, np.ndarray, np.ndarray]) -> None:
    d, acts, tokens = cache_dir
    cache = read_delphi_cache(d, width=23)
    assert cache.activations.kind == "sparse" and cache.activations.shape == acts.shape
    assert (cache.n_sequences, cache.ctx_len, cache.width, cache.hookpoint) == (12, 9, 23, "layers.3.mlp")
    assert cache.splits == ((0, 4), (5, 10), (11, 16), (17, 22))
    assert cache.config is not None and cache.config["model_name"] == "m"
    np.testing.assert_array_equal(cache.tokens, tokens)
    np.testing.assert_array_equal(cache.activations.dense().astype(np.float32), acts)
    assert cache.row(3, 4) == 3 * 9 + 4
    # the CSC arrays equal scipy's conversion of delphi's triplets
    ref = sp.csc_array(acts)
    _, indptr, indices, values = cache.activations.core
    np.testing.assert_array_equal(indptr, ref.indptr)
    np.testing.assert_array_equal(indices, ref.indices)
    np.testing.assert_array_equal(values.astype(np.float32), ref.data)


def test_scores_equal_the_dense_matrix(cache_dir: tuple[Path, np.ndarray, np.ndarray]) -> None:
    d, acts, _ = cache_dir
    rng = np.random.default_rng(3)
    concepts = (rng.random((acts.shape[0], 5)) < 0.2).astype(np.float64)
    concepts[:, 0] = acts[:, 2] > 0  # a concept that one latent follows
    metrics = ["correlation", "cosine", "auprc", "f1", "iou", "inverse_auc"]
    ours = neuroneval.compute(read_delphi_cache(d).activations, concepts, metrics)
    dense = neuroneval.compute(acts.astype(np.float64), concepts, metrics)
    for m in metrics:
        np.testing.assert_allclose(ours[m], dense[m], rtol=1e-12, atol=1e-12, equal_nan=True, err_msg=m)
    assert ours["inverse_auc"][2, 0] == pytest.approx(1.0)  # the latent ranks its own firing first


def test_chunked_placement_and_unsorted_files(
    cache_dir: tuple[Path, np.ndarray, np.ndarray], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d, acts, _ = cache_dir
    whole = read_delphi_cache(d).activations.core
    monkeypatch.setattr(delphi, "CHUNK_ENTRIES", 7)  # many chunks per file, latents split across chunks
    chunked = read_delphi_cache(d).activations.core
    # a cache whose entries are in another order (not delphi's) reads to the same matrix
    shuffled = tmp_path / "shuffled"
    shuffled.mkdir()
    rng = np.random.default_rng(4)
    for f in sorted(d.glob("*.safetensors")):
        data = load_file(str(f))
        order = rng.permutation(len(data["activations"]))
        data["locations"], data["activations"] = data["locations"][order], data["activations"][order]
        save_file(data, str(shuffled / f.name))
    reordered = read_delphi_cache(shuffled).activations.core
    for core in (chunked, reordered):
        for a, b in zip(whole[1:], core[1:], strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "int32", "int64", "uint32", "uint64"])
def test_every_integer_location_dtype_reads_alike(
    cache_dir: tuple[Path, np.ndarray, np.ndarray], tmp_path: Path, dtype: str
) -> None:
    d, _, _ = cache_dir
    whole = read_delphi_cache(d).activations.core
    other = tmp_path / dtype
    other.mkdir()
    for f in sorted(d.glob("*.safetensors")):
        data = load_file(str(f))
        data["locations"] = data["locations"].astype(dtype)
        save_file(data, str(other / f.name))
    for a, b in zip(whole[1:], read_delphi_cache(other).activations.core[1:], strict=True):
        np.testing.assert_array_equal(a, b)
    if np.dtype(dtype).kind == "i":  # a negative location is named, not wrapped
        first = other / "0_4.safetensors"
        data = load_file(str(first))
        data["locations"][1, 1] = -3
        save_file(data, str(first))
        with pytest.raises(SourceError, match="entry 1 has position -3, outside 0..8"):
            read_delphi_cache(other)


def test_splits_of_two_value_dtypes_read_as_the_wider(
    cache_dir: tuple[Path, np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    d, acts, _ = cache_dir
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for i, f in enumerate(sorted(d.glob("*.safetensors"))):
        data = load_file(str(f))
        if i % 2:
            data["activations"] = data["activations"].astype(np.float32)
        save_file(data, str(mixed / f.name))
    _, _, _, values = read_delphi_cache(mixed).activations.core
    assert values.dtype == np.float32
    np.testing.assert_array_equal(
        read_delphi_cache(mixed).activations.dense(), acts.astype(np.float16).astype(np.float32)
    )


def test_a_file_changed_between_the_passes_is_named(
    cache_dir: tuple[Path, np.ndarray, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    d, _, _ = cache_dir
    chunks = delphi._Split.chunks
    passes: dict[str, int] = {}

    def changed(self: delphi._Split):  # type: ignore[no-untyped-def]
        passes[self.path.name] = passes.get(self.path.name, 0) + 1
        for loc, val in chunks(self):
            if passes[self.path.name] == 2 and self.path.name == "5_10.safetensors":
                loc = loc.copy()
                loc[:, 2] = 0  # every entry now in the split's first latent
            yield loc, val

    monkeypatch.setattr(delphi._Split, "chunks", changed)
    with pytest.raises(SourceError, match=r"5_10.safetensors, entries 0\.\.\d+: .*was the file changed"):
        read_delphi_cache(d)


def test_writer_matches_delphi_layout(cache_dir: tuple[Path, np.ndarray, np.ndarray], tmp_path: Path) -> None:
    d, acts, tokens = cache_dir
    ours = tmp_path / "ours"
    write_delphi_cache(ours, sp.csr_matrix(acts), tokens=tokens, n_splits=4, config={"cache_ctx_len": 9})
    assert sorted(p.name for p in ours.iterdir()) == sorted(p.name for p in d.iterdir())
    for f in sorted(d.glob("*.safetensors")):
        theirs, mine = load_file(str(f)), load_file(str(ours / f.name))
        assert theirs.keys() == mine.keys()
        for key in theirs:
            assert theirs[key].dtype == mine[key].dtype, (f.name, key)
            np.testing.assert_array_equal(theirs[key], mine[key], err_msg=f"{f.name}:{key}")


def test_wide_caches_use_uint32_locations(tmp_path: Path) -> None:
    n_seq = 70_000  # more sequences than uint16 holds
    acts = sp.csr_array((np.ones(3, np.float32), ([0, 5, n_seq - 1], [0, 1, 1])), shape=(n_seq, 2))
    write_delphi_cache(tmp_path / "w", acts, ctx_len=1, n_splits=1)
    assert load_file(str(tmp_path / "w" / "0_1.safetensors"))["locations"].dtype == np.uint32
    cache = read_delphi_cache(tmp_path / "w", n_sequences=n_seq, ctx_len=1)
    np.testing.assert_array_equal(cache.activations.dense([1]).ravel().nonzero()[0], [5, n_seq - 1])


def test_caches_without_tokens_need_their_shape(tmp_path: Path) -> None:
    acts = sae_like(4, 5, 6, 2, seed=5)
    write_delphi_cache(tmp_path / "h", acts, ctx_len=5, n_splits=2)
    with pytest.raises(SourceError, match="saved no tokens"):
        read_delphi_cache(tmp_path / "h")
    # the cache's last sequences may be silent: the shape given is kept, not inferred
    cache = read_delphi_cache(tmp_path / "h", n_sequences=6, ctx_len=5)
    assert cache.activations.shape == (30, 6)
    (tmp_path / "h" / "config.json").write_text(json.dumps({"cache_ctx_len": 5}))
    assert read_delphi_cache(tmp_path / "h", n_sequences=4).ctx_len == 5


def _rewrite(directory: Path, name: str, **changes: np.ndarray | None) -> None:
    data = load_file(str(directory / name))
    for k, v in changes.items():
        if v is None:
            data.pop(k)
        else:
            data[k] = v
    save_file(data, str(directory / name))


@pytest.mark.parametrize(
    "damage, message",
    [
        ("gap", "without a file"),
        ("overlap", "overlaps"),
        ("no_locations", "no 'locations'"),
        ("truncated", "not a readable safetensors|cannot be read"),
        ("sequence", "sequence 12"),
        ("latent", "latent 5"),
        ("tokens", "other tokens"),
        ("no_tokens", "has no tokens"),
        ("nan", "activation nan"),
        ("duplicate", "two entries"),
        ("shape", "must agree"),
        ("float_locations", "must be integers"),
        ("width", "not the width 30"),
        ("empty", "no delphi split files"),
        ("hookpoints", "give one of those"),
    ],
)
def test_broken_caches_are_named(
    cache_dir: tuple[Path, np.ndarray, np.ndarray], tmp_path: Path, damage: str, message: str
) -> None:
    d, _, _ = cache_dir
    target, width = d, None
    first = d / "0_4.safetensors"
    loc = load_file(str(first))["locations"]
    if damage == "gap":
        (d / "5_10.safetensors").unlink()
    elif damage == "overlap":
        (d / "5_10.safetensors").rename(d / "4_10.safetensors")
    elif damage == "no_locations":
        _rewrite(d, first.name, locations=None)
    elif damage == "truncated":
        raw = first.read_bytes()
        first.write_bytes(raw[: len(raw) - 40])
    elif damage == "sequence":
        bad = loc.copy()
        bad[3, 0] = 12
        _rewrite(d, first.name, locations=bad)
    elif damage == "latent":
        bad = loc.copy()
        bad[0, 2] = 5
        _rewrite(d, first.name, locations=bad)
    elif damage == "tokens":
        _rewrite(d, "5_10.safetensors", tokens=np.zeros((12, 9), dtype=np.int64))
    elif damage == "no_tokens":
        _rewrite(d, "5_10.safetensors", tokens=None)
    elif damage == "nan":
        vals = load_file(str(first))["activations"].copy()
        vals[2] = np.nan
        _rewrite(d, first.name, activations=vals)
    elif damage == "duplicate":
        vals = load_file(str(first))["activations"]
        _rewrite(d, first.name, locations=np.concatenate([loc, loc[:1]]), activations=np.concatenate([vals, vals[:1]]))
    elif damage == "shape":
        _rewrite(d, first.name, activations=load_file(str(first))["activations"][:-1])
    elif damage == "float_locations":
        _rewrite(d, first.name, locations=loc.astype(np.float32))
    elif damage == "width":
        width = 30
    elif damage == "empty":
        target = tmp_path / "nothing"
        target.mkdir()
    elif damage == "hookpoints":
        target = d.parent
    with pytest.raises(SourceError, match=message) as err:
        read_delphi_cache(target, width=width)
    if damage not in ("empty", "hookpoints", "width", "gap", "overlap", "tokens", "no_tokens"):
        assert "0_4.safetensors" in str(err.value)


# --------------------------------------------------------------------------- explanations


def test_explanations_read_from_delphi_files(tmp_path: Path) -> None:
    d = tmp_path / "run" / "explanations"
    d.mkdir(parents=True)
    texts = {("layers.6_mlp", 3): "dogs and ünïcode", ("layers.6_mlp", 12): 'quotes "inside"', ("layers.7", 0): "cats"}
    for (module, latent), text in texts.items():
        (d / f"{module}_latent{latent}.txt").write_bytes(
            json.dumps(text, ensure_ascii=False).encode()
        )  # orjson's bytes
    (d / "notes.md").write_text("not an explanation")
    table = read_delphi_explanations(d)
    assert table.columns == ["unit", "module", "explainer", "explanation"]
    assert table.rows() == [
        (3, "layers.6_mlp", "run/explanations", texts[("layers.6_mlp", 3)]),
        (12, "layers.6_mlp", "run/explanations", texts[("layers.6_mlp", 12)]),
        (0, "layers.7", "run/explanations", "cats"),
    ]
    only = read_delphi_explanations(d, module="layers.7", explainer="default")
    assert only.rows() == [(0, "layers.7", "default", "cats")]
    # the writer produces files the reader (and delphi's orjson.loads) reads back
    out = tmp_path / "out"
    write_delphi_explanations(out, table.filter(pl.col("module") == "layers.6_mlp"), module="layers.6_mlp")
    assert json.loads((out / "layers.6_mlp_latent12.txt").read_bytes()) == texts[("layers.6_mlp", 12)]
    assert read_delphi_explanations(out)["explanation"].to_list() == table["explanation"].to_list()[:2]


def test_bad_explanation_files_are_named(tmp_path: Path) -> None:
    (tmp_path / "m_latent1.txt").write_text('{"not": "a string"}')
    with pytest.raises(SourceError, match="m_latent1.txt must hold one JSON string"):
        read_delphi_explanations(tmp_path)
    (tmp_path / "m_latent1.txt").write_text('"cut sho')
    with pytest.raises(SourceError, match="m_latent1.txt is not valid JSON"):
        read_delphi_explanations(tmp_path)
    with pytest.raises(SourceError, match="no delphi explanation files"):
        read_delphi_explanations(tmp_path, module="other")


# --------------------------------------------------------------------------- scores


def test_scores_and_their_summary(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    truth: dict[tuple[str, int], list[dict[str, object]]] = {}
    for scorer in ("detection", "fuzz"):
        (tmp_path / scorer).mkdir()
        for latent in (0, 4):
            examples = []
            for i in range(30):
                activating = bool(i % 3 == 0)
                probability = float(np.clip(rng.normal(0.7 if activating else 0.35, 0.2), 0, 1))
                prediction = None if i == 7 else probability > 0.5
                examples.append(
                    {
                        "str_tokens": ["a", "b"],
                        "activations": [0.0, float(i)],
                        "distance": -1 if not activating else i % 10,
                        "activating": activating,
                        "prediction": prediction,
                        "probability": round(probability, 2),  # ties between examples
                        "correct": None if prediction is None else prediction == activating,
                    }
                )
            truth[(scorer, latent)] = examples
            (tmp_path / scorer / f"layers.2_latent{latent}.txt").write_bytes(json.dumps(examples).encode())
    table = read_delphi_scores(tmp_path)
    assert table.height == 4 * 30
    summary = delphi_score_summary(table)
    assert summary.height == 4
    for row in summary.iter_rows(named=True):
        ex = [e for e in truth[(row["scorer"], row["unit"])] if e["prediction"] is not None]
        act = np.array([e["activating"] for e in ex])
        pred = np.array([e["prediction"] for e in ex])
        tp, fp = int((act & pred).sum()), int((~act & pred).sum())
        tn, pos, neg = int((~act & ~pred).sum()), int(act.sum()), int((~act).sum())
        assert row["examples"] == len(ex) == 29
        assert row["balanced_accuracy"] == pytest.approx((tp / pos + tn / neg) / 2)
        precision, recall = tp / (tp + fp), tp / pos
        assert row["f1"] == pytest.approx(2 * precision * recall / (precision + recall))
        every = truth[(row["scorer"], row["unit"])]
        expected_auc = roc_auc_score([e["activating"] for e in every], [e["probability"] for e in every])
        assert row["auc"] == pytest.approx(expected_auc, abs=1e-12)


def test_bad_score_files_are_named(tmp_path: Path) -> None:
    (tmp_path / "detection").mkdir()
    (tmp_path / "detection" / "m_latent0.txt").write_text('[{"activating": true}]')
    with pytest.raises(SourceError, match="m_latent0.txt: example 0 is not a classifier example"):
        read_delphi_scores(tmp_path)
    (tmp_path / "detection" / "m_latent0.txt").write_text("[{")
    with pytest.raises(SourceError, match="not valid JSON"):
        read_delphi_scores(tmp_path)


# --------------------------------------------------------------------------- where users use them


def test_the_cli_reads_delphi_and_neuronpedia_files_directly(
    cache_dir: tuple[Path, np.ndarray, np.ndarray], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """`neuroneval score` and `neuroneval compare` take a delphi cache directory as ACTIVATIONS
    and a delphi explanations directory or a Neuronpedia export as EXPLANATIONS: the results
    equal those of the arrays read by hand."""
    import gzip

    from cli_helpers import run
    from neuroneval.compare import compare

    d, acts, _ = cache_dir
    rng = np.random.default_rng(11)
    units = [2, 5, 7, 11, 13, 19]
    concepts = np.column_stack([np.clip((acts[:, u] > 0) + 0.3 * rng.normal(size=acts.shape[0]), 0, 1) for u in units])
    np.save(tmp_path / "concepts.npy", concepts)
    explained = tmp_path / "run" / "explanations"
    explained.mkdir(parents=True)
    for u in units:
        (explained / f"layers.3.mlp_latent{u}.txt").write_text(json.dumps(f"latent {u}"))
    expected = compare(
        acts, read_delphi_explanations(explained).select("unit", "explainer", "explanation"), concepts, n_boot=50
    )
    out = tmp_path / "cmp"
    code, stdout, err = run(
        ["compare", d, explained, "--concepts", tmp_path / "concepts.npy", "--n-boot", "50", "--out", out], capfd
    )
    assert code == 0, err
    assert "run/explanations" in stdout
    got = pl.read_csv(out / "summary.csv")
    assert got["correlation_mean"].to_list() == pytest.approx(expected.summary["correlation_mean"].to_list(), rel=1e-12)
    # a Neuronpedia export of the same explanations, by two explainers
    export = tmp_path / "np" / "explanations"
    export.mkdir(parents=True)
    rows = [
        {
            "modelId": "m",
            "layer": "3-mlp",
            "index": str(u),
            "description": f"latent {u}",
            "typeName": t,
            "explanationModelName": "x",
        }
        for t in ("a", "b")
        for u in units
    ]
    with gzip.open(export / "batch-0.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    # the export's table is sorted by unit, then explainer: a's column is the concept above, b's is noise
    noise = rng.random(concepts.shape)
    both = np.column_stack([c for i in range(len(units)) for c in (concepts[:, i], noise[:, i])])
    np.save(tmp_path / "both.npy", both)
    code, stdout, err = run(
        [
            "compare",
            d,
            tmp_path / "np",
            "--concepts",
            tmp_path / "both.npy",
            "--n-boot",
            "50",
            "--out",
            tmp_path / "c2",
        ],
        capfd,
    )
    assert code == 0, err
    assert "a:x" in stdout and "b:x" in stdout
    by_explainer = dict(
        pl.read_csv(tmp_path / "c2" / "summary.csv").select("explainer", "correlation_mean").iter_rows()
    )
    assert by_explainer["a:x"] == pytest.approx(expected.summary["correlation_mean"][0], rel=1e-12)
    assert by_explainer["a:x"] > by_explainer["b:x"] + 0.2
    code, _, err = run(
        ["score", d, tmp_path / "concepts.npy", "--metrics", "correlation", "--out", tmp_path / "s.parquet"], capfd
    )
    assert code == 0, err
    table = pl.read_parquet(tmp_path / "s.parquet")
    dense = neuroneval.compute(acts.astype(np.float64), concepts, ["correlation"])["correlation"]
    assert table["correlation"].to_numpy() == pytest.approx(dense.ravel(), rel=1e-12, nan_ok=True)
