"""neuroneval.label's LLM judges: the yes/no protocol against hand computations, the in-process SmolLM2
judge (prefix reuse, batching) against a plain transformers forward pass, and JudgeServer with
EndpointJudge over real HTTP on 127.0.0.1 with the official openai client (agreement, 429 retries, no
logprobs, unreachable endpoints, API keys), plus a real third-party server (`transformers serve`)."""

from __future__ import annotations

import contextlib
import copy
import math
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from neuroneval.errors import ParameterError, SourceError

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")
openai = pytest.importorskip("openai")
pytest.importorskip("scipy")

from judge_helpers import free_port, smollm2_judge  # noqa: E402
from neuroneval import label as lb  # noqa: E402
from neuroneval.label import llm  # noqa: E402
from scipy.special import logsumexp  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.usefixtures("one_thread"),
]  # SmolLM2 loaded and run; torch on one thread: see conftest.py

TEXTS = [
    "The striker scored twice in the final.",
    "\n\nShares fell on Wall Street after the report.",  # its tokens do not begin with the shared prefix's
    " x",
    "Ein Hund bellt 🐕 im Park, während die Sonne scheint und die Kinder spielen, lachen und rennen.",
]
EXPLANATIONS = ["sports", "money {input} and {explanation}"]  # braces are text, not placeholders


@pytest.fixture(scope="module")
def j32() -> lb.LocalLLMJudge:
    return smollm2_judge()


@pytest.fixture(scope="module")
def j64(j32: lb.LocalLLMJudge) -> lb.LocalLLMJudge:
    """`smollm2(dtype="float64")` whose model is the float32 judge's cast to float64, which is what its
    loader does after reading the GGUF (``model.to(dtype=torch.float64)``): the module reads the GGUF
    once, not twice (~30 s each on this machine). Everything after loading is the judge's own code."""
    model, tokenizer = j32._model()
    wide = copy.deepcopy(model).to(torch.float64)
    judge = lb.smollm2(dtype="float64")
    judge._model = lambda: (wide, tokenizer)  # type: ignore[method-assign]
    judge.prepare()
    return judge


def chatml(explanation: str, text: str) -> str:
    """SmolLM2's chat format, written out by hand."""
    user = f"Description: {explanation}\nDoes the description fit this text? Answer Yes or No.\nText:\n{text}"
    return (
        "<|im_start|>system\nYou decide whether a description of a neuron fits a text. Answer Yes or No.<|im_end|>\n"
        f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    )


def reference_log_odds(judge: lb.LocalLLMJudge, explanation: str, text: str) -> tuple[float, int, int]:
    """The log-odds from one plain forward pass of the whole prompt (no key/value cache, no padding), with
    the protocol's top-20 and yes/no sums written out here; also how many yes and no tokens were listed."""
    model, tokenizer = judge._model()
    prompt = chatml(explanation, text)
    ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        logits = model(ids).logits[0, -1]
    values, tokens = torch.log_softmax(logits.double(), dim=-1).topk(20)
    words = [tokenizer.decode([t]).strip().lower() for t in tokens.tolist()]
    v = values.tolist()
    yes = [x for x, w in zip(v, words, strict=True) if w == "yes"]
    no = [x for x, w in zip(v, words, strict=True) if w == "no"]
    floor = min(v)
    return float(logsumexp(yes or [floor]) - logsumexp(no or [floor])), len(yes), len(no)


# ----------------------------------------------------------------------------------------------------------------
# The yes/no protocol
# ----------------------------------------------------------------------------------------------------------------


def lse(*values: float) -> float:
    return math.log(sum(math.exp(v) for v in values))


def test_yes_no_score_hand_computations() -> None:
    assert lb.yes_no_score([(" Yes", -0.5), ("No", -1.5), ("yes", -3.0)]) == pytest.approx(
        lse(-0.5, -3.0) - (-1.5), abs=1e-14
    )
    # every case and surrounding whitespace counts; longer words and punctuation do not
    top = [
        ("YES", -1.0),
        ("\nyes ", -2.0),
        (" Yes.", -0.2),
        ("Yesterday", -0.3),
        (" no", -1.2),
        ("NO\n", -2.5),
        ("Not", -0.1),
        ("None", -0.4),
        ("nope", -0.6),
    ]
    assert lb.yes_no_score(top) == pytest.approx(lse(-1.0, -2.0) - lse(-1.2, -2.5), abs=1e-14)
    # far in the tail, where exp underflows: against scipy's log-sum-exp
    far = [(" Yes", -800.0), ("yes", -801.0), ("No", -805.0), (" no", -805.0), ("x", -900.0)]
    assert lb.yes_no_score(far) == pytest.approx(logsumexp([-800.0, -801.0]) - logsumexp([-805.0, -805.0]), abs=1e-12)
    # a word missing from the list is bounded by the least listed log-probability
    assert lb.yes_no_score([(" Yes", -0.1), ("Maybe", -2.0), ("Sure", -4.0)]) == pytest.approx(-0.1 + 4.0, abs=1e-14)
    assert lb.yes_no_score([("No", -0.3), ("Maybe", -2.0), ("Sure", -7.5), ("no", -1.0)]) == pytest.approx(
        -7.5 - lse(-0.3, -1.0), abs=1e-14
    )
    # ... the least of all listed tokens, the present word's own included
    assert lb.yes_no_score([("Maybe", -1.0), ("yes", -9.0)]) == 0.0
    # the order of the list does not matter
    assert lb.yes_no_score(list(reversed(top))) == pytest.approx(lb.yes_no_score(top), abs=1e-14)


def test_yes_no_score_errors() -> None:
    with pytest.raises(SourceError, match="neither"):
        lb.yes_no_score([("Maybe", -0.1), ("Yesterday", -0.5), ("Not", -1.0)])
    with pytest.raises(SourceError, match="no log-probabilities"):
        lb.yes_no_score([])


def test_llm_judge_parameters(tmp_path: Path) -> None:
    path = tmp_path / "x.gguf"  # the constructor checks the file exists; it loads nothing
    path.touch()
    for bad in ({"dtype": "float16"}, {"batch_size": 0}, {"batch_size": True}, {"template": "{explanation} only"}):
        with pytest.raises(ParameterError):
            lb.LocalLLMJudge(path, **bad)  # type: ignore[arg-type]
    with pytest.raises(SourceError, match="no model"):
        lb.LocalLLMJudge(tmp_path / "missing.gguf")
    for bad in ({"concurrency": 0}, {"max_retries": -1}, {"timeout": 0}, {"price_per_million_tokens": -1.0}):
        with pytest.raises(ParameterError):
            lb.EndpointJudge("m", base_url="http://127.0.0.1:1/v1", **bad)  # type: ignore[arg-type]
    with pytest.raises(ParameterError):
        lb.EndpointJudge("")
    assert lb.messages("e", "t")[1]["content"] == llm.DEFAULT_TEMPLATE.format(explanation="e", input="t")


# ----------------------------------------------------------------------------------------------------------------
# The in-process judge against a plain forward pass
# ----------------------------------------------------------------------------------------------------------------


def test_prompt_is_the_chat_format(j32: lb.LocalLLMJudge) -> None:
    for e in EXPLANATIONS:
        for t in TEXTS:
            assert j32.render(e, t) == chatml(e, t)
    prefix, whole = j32.prompt_tokens(EXPLANATIONS[0], TEXTS)
    shares = [w[: len(prefix)] == prefix for w in whole]
    # both paths of the judge run below: the shared key/value cache and the whole prompt
    assert any(shares) and not all(shares), shares
    assert len({len(w) for w in whole}) == len(whole)  # different lengths: batches are padded


@pytest.mark.parametrize("dtype, tolerance", [("float32", 1e-4), ("float64", 1e-9)])
def test_local_judge_equals_a_plain_forward_pass(
    dtype: str, tolerance: float, j32: lb.LocalLLMJudge, j64: lb.LocalLLMJudge
) -> None:
    judge = j32 if dtype == "float32" else j64
    assert next(judge._model()[0].parameters()).dtype == getattr(torch, dtype)
    got = lb.label(judge, TEXTS, EXPLANATIONS)
    want = np.empty_like(got.scores)
    listed = []
    for i, t in enumerate(TEXTS):
        for c, e in enumerate(EXPLANATIONS):
            want[i, c], n_yes, n_no = reference_log_odds(judge, e, t)
            listed.append(n_yes * n_no)
    assert any(listed), "no prompt listed both yes and no: the floor rule alone would be tested"
    diff = float(np.abs(got.scores - want).max())
    print(f"\n{dtype}: max |log-odds - plain forward pass| = {diff:.3g}")
    assert diff <= tolerance
    # uncalibrated, the probability is P(yes) / (P(yes) + P(no))
    np.testing.assert_allclose(got.probabilities, 1 / (1 + np.exp(-want)), rtol=0, atol=tolerance)
    # every judgement read its prompt and one answer token
    _, whole = judge.prompt_tokens(EXPLANATIONS[0], TEXTS)
    _, whole2 = judge.prompt_tokens(EXPLANATIONS[1], TEXTS)
    assert got.stats.tokens == sum(len(w) + 1 for w in whole + whole2)
    if dtype == "float32":  # a second run reuses the cached prefixes and gives the same numbers
        again = lb.label(judge, TEXTS, EXPLANATIONS)
        assert np.array_equal(again.scores, got.scores)


def test_batch_size_does_not_change_float64_results(j64: lb.LocalLLMJudge) -> None:
    texts = TEXTS + ["Rain today.", "A very long sentence about the weather, " * 5]
    runs = {}
    for b in (1, 3):
        judge = copy.copy(j64)  # the same model, another batch size
        judge.batch_size = b
        runs[b] = lb.label(judge, texts, EXPLANATIONS[:1], batch_size=4).scores
    base = lb.label(j64, texts, EXPLANATIONS[:1], batch_size=64).scores
    diffs = {b: float(np.abs(scores - base).max()) for b, scores in runs.items()}
    print(f"\nfloat64: max |log-odds(batch size b) - log-odds(one batch)| = {diffs}")
    assert max(diffs.values()) <= 1e-9, diffs


def varied_texts(n: int) -> list[str]:
    """`n` distinct texts of 3 to 16 words (so batches are padded to different widths)."""
    words = "the match ended with a late goal and the crowd cheered while prices fell on the market after news".split()
    return [" ".join(words[(i * 7) % len(words) :][: 3 + (i * 5) % 14]) + f" ({i})" for i in range(n)]


def test_resume_with_any_batch_size_equals_a_fresh_run_bit_for_bit(j32: lb.LocalLLMJudge, tmp_path: Path) -> None:
    """In float32 a score depends on the batch it ran in (a batch of other inputs moves it by ~1e-5); `label`
    hands the judge the same fixed batches of 16 whatever its batch size or the cache holds, so a run with a
    batch size that is not a multiple of 16, and a resumed run, equal a fresh one bit for bit."""
    batch = j32.fixed_batch
    texts = varied_texts(batch + batch // 2)  # one whole fixed batch and a short one
    fresh = lb.label(j32, texts, EXPLANATIONS, batch_size=32)
    # the effect being guarded against: the same inputs judged in another batch score differently
    alone = np.concatenate([d.scores for d in j32.judge(EXPLANATIONS[0], texts[3:10])])
    print(
        f"\nmax |score in another batch - score in its fixed batch| = {np.abs(alone - fresh.scores[3:10, 0]).max():.3g}"
    )
    for b in (1, 7, 20):
        assert np.array_equal(lb.label(j32, texts, EXPLANATIONS, batch_size=b).scores, fresh.scores), b
    path = tmp_path / "c.sqlite"
    lb.label(j32, texts, EXPLANATIONS, cache=path, batch_size=7)
    # (explanation, input) pairs an interrupted run left, in both fixed batches
    gone = [(0, 3), (0, batch + 1), (0, batch + 2), (1, batch + 4), (1, len(texts) - 1)]
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.executemany(
            "DELETE FROM judgements WHERE key = ?",
            [(j32.key(EXPLANATIONS[c], j32.input_digest(texts[i])),) for c, i in gone],
        )
    resumed = lb.label(j32, texts, EXPLANATIONS, cache=path, batch_size=5)
    assert (resumed.stats.calls, resumed.stats.hits) == (len(gone), 2 * len(texts) - len(gone))
    assert np.array_equal(resumed.scores, fresh.scores)


def test_a_full_cache_does_not_load_the_model(j32: lb.LocalLLMJudge, tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    first = lb.label(j32, TEXTS, EXPLANATIONS, cache=path)
    assert first.stats.calls == len(TEXTS) * len(EXPLANATIONS)
    fresh = lb.smollm2()  # the same judge, not loaded yet
    assert not fresh.loaded
    again = lb.label(fresh, TEXTS, EXPLANATIONS, cache=path, batch_size=3)
    assert again.stats.calls == 0 and np.array_equal(again.scores, first.scores)
    assert not fresh.loaded  # everything was cached: the model was never needed
    partly = lb.label(fresh, [*TEXTS, "Rain today."], EXPLANATIONS, cache=path)
    assert partly.stats.calls == len(EXPLANATIONS) and fresh.loaded


# ----------------------------------------------------------------------------------------------------------------
# JudgeServer and EndpointJudge over HTTP
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype, tolerance", [("float64", 1e-6), ("float32", 1e-4)])
def test_endpoint_equals_in_process_judge(
    dtype: str, tolerance: float, j32: lb.LocalLLMJudge, j64: lb.LocalLLMJudge, judge_servers: Any, tmp_path: Path
) -> None:
    judge = j32 if dtype == "float32" else j64
    server = judge_servers(judge)
    assert server.url.startswith("http://127.0.0.1:") and server.model_name == "smollm2"
    endpoint = lb.EndpointJudge(server.model_name, base_url=server.url, concurrency=3, price_per_million_tokens=2.5)
    remote = lb.label(endpoint, TEXTS, EXPLANATIONS, cache=tmp_path / "c.sqlite")
    local = lb.label(judge, TEXTS, EXPLANATIONS)
    diff = float(np.abs(remote.probabilities - local.probabilities).max())
    print(f"\n{dtype}: max |p(endpoint) - p(in process)| = {diff:.3g}")
    assert diff <= tolerance
    np.testing.assert_allclose(remote.scores, local.scores, rtol=0, atol=4 * tolerance)
    n = len(TEXTS) * len(EXPLANATIONS)
    assert server.requests == n and server.refused == 0
    assert remote.stats.calls == n
    assert remote.stats.tokens == local.stats.tokens  # the usage the server reports is the prompt and one token
    assert remote.stats.cost == pytest.approx(remote.stats.tokens * 2.5 / 1e6, rel=1e-12)
    # a rerun is served from the cache: no request reaches the server
    again = lb.label(endpoint, TEXTS, EXPLANATIONS, cache=tmp_path / "c.sqlite")
    assert again.stats.calls == 0 and server.requests == n
    assert np.array_equal(again.scores, remote.scores)


def test_server_answers_what_the_judge_computes(j32: lb.LocalLLMJudge, judge_servers: Any) -> None:
    server = judge_servers(j32)
    client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
    chat = lb.messages("sports", TEXTS[0])
    reply = client.chat.completions.create(
        model=server.model_name, messages=chat, max_tokens=1, temperature=0.0, logprobs=True, top_logprobs=20
    )
    top = reply.choices[0].logprobs.content[0].top_logprobs
    ids = j32.tokenizer(chatml("sports", TEXTS[0]), add_special_tokens=False)["input_ids"]
    want = j32.top_tokens([ids])[0]
    assert [(t.token, t.logprob) for t in top] == want  # exactly, through JSON
    assert reply.choices[0].message.content == want[0][0]
    assert reply.usage.prompt_tokens == len(ids) and reply.usage.total_tokens == len(ids) + 1
    few = client.chat.completions.create(
        model=server.model_name, messages=chat, max_tokens=1, logprobs=True, top_logprobs=5
    )
    assert [(t.token, t.logprob) for t in few.choices[0].logprobs.content[0].top_logprobs] == want[:5]
    assert [m.id for m in client.models.list()] == ["smollm2"]
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4", messages=chat, max_tokens=1)
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        client.chat.completions.create(model=server.model_name, messages=chat, max_tokens=2)
    with pytest.raises(openai.BadRequestError, match="top_logprobs"):
        client.chat.completions.create(
            model=server.model_name, messages=chat, max_tokens=1, logprobs=True, top_logprobs=21
        )
    with pytest.raises(openai.BadRequestError, match="messages"):
        client.chat.completions.create(model=server.model_name, messages=[], max_tokens=1)
    wrong = lb.EndpointJudge("gpt-4", base_url=server.url, max_retries=0)
    with pytest.raises(SourceError, match="does not serve the model 'gpt-4'; it serves 'smollm2'"):
        lb.label(wrong, TEXTS[:1], ["sports"])


def test_endpoint_cache_key_is_the_model_not_the_address(
    j32: lb.LocalLLMJudge, j64: lb.LocalLLMJudge, judge_servers: Any, tmp_path: Path
) -> None:
    """The key is the model's name, the template and the fingerprint the server lists (its weights and dtype):
    another port, or `localhost` for 127.0.0.1, is the same judge; other weights under the same name are not;
    and a run that finds everything cached asks no server at all (the fingerprint last seen is recorded in the
    cache, and trusted until a missing judgement makes the run ask the server)."""
    path = tmp_path / "c.sqlite"
    first_server = judge_servers(j32)
    first = lb.label(lb.EndpointJudge("smollm2", base_url=first_server.url), TEXTS, EXPLANATIONS, cache=path)
    n, t = len(TEXTS) * len(EXPLANATIONS), len(EXPLANATIONS)
    assert first.stats.calls == n
    first_server.stop()
    second_server = judge_servers(j32)
    assert second_server.url != first_server.url
    elsewhere = second_server.url.replace("127.0.0.1", "localhost")
    again = lb.label(lb.EndpointJudge("smollm2", base_url=elsewhere), TEXTS, EXPLANATIONS, cache=path)
    assert again.stats.calls == 0 and np.array_equal(again.scores, first.scores)
    assert second_server.requests == 0
    # a missing judgement reaches the server, which reports the same fingerprint: only that one is made
    more = lb.label(lb.EndpointJudge("smollm2", base_url=elsewhere), [*TEXTS, "Rain."], EXPLANATIONS, cache=path)
    assert more.stats.calls == t and second_server.requests == t
    second_server.stop()
    # the same name over other weights (float64), asked because a judgement is missing: another fingerprint,
    # so every judgement is made anew
    texts = [*TEXTS, "Rain.", "Snow."]
    wide_server = judge_servers(j64)
    wide = lb.label(lb.EndpointJudge("smollm2", base_url=wide_server.url), texts, EXPLANATIONS, cache=path)
    assert wide.stats.calls == len(texts) * t == wide_server.requests
    assert not np.array_equal(wide.scores[: len(TEXTS)], first.scores)
    wide_server.stop()
    # no server at all: the judgements of the fingerprint last seen (float64's) are read from the cache
    nowhere = f"http://127.0.0.1:{free_port()}/v1"
    offline = lb.label(lb.EndpointJudge("smollm2", base_url=nowhere), texts, EXPLANATIONS, cache=path)
    assert offline.stats.calls == 0 and np.array_equal(offline.scores, wide.scores)
    with lb.LabelCache(path) as cache:
        assert len(cache) == n + t + len(texts) * t and cache.repeated_calls() == 0


def test_busy_server_429s_are_retried(j32: lb.LocalLLMJudge, judge_servers: Any) -> None:
    texts = TEXTS + ["Rain today.", "Prices rose.", "The minister resigned.", "A goal in the last minute."]
    server = judge_servers(j32, max_waiting=0)
    endpoint = lb.EndpointJudge(server.model_name, base_url=server.url, concurrency=4, max_retries=100)
    remote = lb.label(endpoint, texts, ["sports"])
    local = lb.label(j32, texts, ["sports"])
    assert server.refused > 0  # some requests were answered 429 ...
    assert server.requests == len(texts)  # ... and every judgement was still answered, once
    assert remote.stats.calls == len(texts)
    np.testing.assert_allclose(remote.probabilities, local.probabilities, rtol=0, atol=1e-4)


def test_server_without_logprobs_is_refused_and_nothing_is_stored(
    j32: lb.LocalLLMJudge, judge_servers: Any, tmp_path: Path
) -> None:
    server = judge_servers(j32, logprobs=False)
    endpoint = lb.EndpointJudge(server.model_name, base_url=server.url, concurrency=2)
    path = tmp_path / "c.sqlite"
    with pytest.raises(SourceError, match="logprobs"):
        lb.label(endpoint, TEXTS, ["sports"], cache=path)
    assert server.requests >= 1  # the server answered; the answer held no log-probabilities
    with lb.LabelCache(path) as cache:
        assert len(cache) == 0 and cache.calls() == 0


def test_unreachable_endpoint_fails_before_the_cache_exists(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    endpoint = lb.EndpointJudge("smollm2", base_url=url, max_retries=5)
    path = tmp_path / "c.sqlite"
    with pytest.raises(SourceError) as info:
        lb.label(endpoint, TEXTS, ["sports"], cache=path)
    assert url in str(info.value)
    assert not path.exists()


def test_dropped_connections_fail_on_the_first_try(tmp_path: Path) -> None:
    """A server that accepts and hangs up: the endpoint is tried once, not retried with backoff."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.2)
    accepted = []
    stop = threading.Event()

    def hang_up() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            accepted.append(1)
            conn.close()

    thread = threading.Thread(target=hang_up, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    path = tmp_path / "c.sqlite"
    try:
        endpoint = lb.EndpointJudge("smollm2", base_url=url, max_retries=5)
        with pytest.raises(SourceError) as info:
            lb.label(endpoint, TEXTS, ["sports"], cache=path)
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()
    assert url in str(info.value)
    assert len(accepted) == 1
    assert not path.exists()


def test_api_key(j32: lb.LocalLLMJudge, judge_servers: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = judge_servers(j32, api_key="s3cret")
    endpoint = lb.EndpointJudge(server.model_name, base_url=server.url, api_key_env="NEURONEVAL_TEST_KEY")
    path = tmp_path / "c.sqlite"
    for key in ("wrong", None):  # a wrong key, and none (a placeholder is sent)
        if key is None:
            monkeypatch.delenv("NEURONEVAL_TEST_KEY", raising=False)
        else:
            monkeypatch.setenv("NEURONEVAL_TEST_KEY", key)
        with pytest.raises(SourceError, match="API key"):
            lb.label(endpoint, TEXTS[:1], ["sports"], cache=path)
        assert not path.exists()
    assert server.requests == 0
    monkeypatch.setenv("NEURONEVAL_TEST_KEY", "s3cret")
    ok = lb.label(endpoint, TEXTS[:1], ["sports"], cache=path)
    np.testing.assert_allclose(ok.probabilities, lb.label(j32, TEXTS[:1], ["sports"]).probabilities, atol=1e-4)
    assert server.requests == 1


# ----------------------------------------------------------------------------------------------------------------
# A third-party server: transformers serve
# ----------------------------------------------------------------------------------------------------------------


def test_transformers_serve_has_no_logprobs(j32: lb.LocalLLMJudge, tmp_path: Path) -> None:
    """`transformers serve` ignores logprobs; the endpoint judge must refuse it with a clear error.

    transformers 5.24's serve cannot start from the GGUF itself (`<dir>:<file>.gguf`): the config it
    reads out of the file has ``architectures=None`` and ModelManager._load_model fails with
    "'NoneType' object is not subscriptable". So the same weights are written as a plain transformers
    directory (safetensors) and served from there, offline."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from safetensors.torch import save_file
    from transformers import LlamaConfig

    exe = Path(sys.executable).with_name("transformers")
    if not exe.exists():
        pytest.skip(f"no transformers command next to {sys.executable}")
    model, tokenizer = j32._model()
    folder = tmp_path / "smollm2"
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    config["architectures"] = ["LlamaForCausalLM"]
    LlamaConfig.from_dict(config).save_pretrained(folder)
    tied = bool(model.config.tie_word_embeddings)
    weights = {
        k: v.detach().contiguous() for k, v in model.state_dict().items() if not (tied and k == "lm_head.weight")
    }
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    tokenizer.save_pretrained(folder)

    port = free_port()
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")
    log = tmp_path / "serve.log"
    with open(log, "w") as sink:
        child = subprocess.Popen(
            [str(exe), "serve", str(folder), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        deadline = time.monotonic() + 300
        while True:
            if child.poll() is not None:
                pytest.skip(f"transformers serve did not start offline: {log.read_text()[-1500:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.skip(f"transformers serve did not answer /health: {log.read_text()[-1500:]}")
            time.sleep(0.25)
        url = f"http://127.0.0.1:{port}/v1"
        # it does serve the model: a plain chat answer comes back ...
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
        plain = client.chat.completions.create(
            model=str(folder), messages=lb.messages("sports", TEXTS[0]), max_tokens=1
        )
        assert plain.choices[0].message.content
        # ... but not with log-probabilities, so it cannot be a yes/no judge
        endpoint = lb.EndpointJudge(str(folder), base_url=url, concurrency=1)
        path = tmp_path / "c.sqlite"
        with pytest.raises(SourceError, match="logprobs"):
            lb.label(endpoint, TEXTS[:2], ["sports"], cache=path)
        with lb.LabelCache(path) as cache:
            assert len(cache) == 0
    finally:
        child.terminate()
        try:
            child.wait(timeout=20)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        shutil.rmtree(folder, ignore_errors=True)  # 0.5 GB of weights
