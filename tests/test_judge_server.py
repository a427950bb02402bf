"""`JudgeServer` (`neuroneval judge-server`) at its edges, on 127.0.0.1 with the real SmolLM2 judge: 30
concurrent clients each answered (200, or 429 with Retry-After when bounded), lying and slow clients (raw
sockets: a negative or non-numeric Content-Length, fewer bytes than declared, a stalled head, nothing at all)
answered or dropped after their timeout while another client is served, the caps (413 for a body, 400 for a
prompt's tokens, 401 before a 16 MB body is read), deep JSON, addresses it cannot listen on, and the label
commands against it: a full cache needs no server, a model it does not serve leaves no cache file."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from neuroneval.errors import ParameterError, SourceError

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")
pytest.importorskip("uvicorn")
pytest.importorskip("starlette")
openai = pytest.importorskip("openai")

from cli_helpers import assert_one_line_error, run  # noqa: E402
from judge_helpers import exchange, free_port, header_of, port_of, smollm2_judge, status_of  # noqa: E402
from neuroneval import label as lb  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.usefixtures("one_thread"),
]  # real servers and real judges; torch on one thread: see conftest.py

TEXTS = ["The striker scored twice in the final.", "Shares fell on Wall Street.", "Rain today.", "A late goal."]
KEY = "s3cret-key"


@pytest.fixture(scope="module")
def judge() -> lb.LocalLLMJudge:
    return smollm2_judge()


@pytest.fixture
def serve(judge: lb.LocalLLMJudge, judge_servers: Any) -> Any:
    """`serve(**options)`: a server of this module's judge (`judge_helpers.judge_servers`)."""
    return lambda **options: judge_servers(judge, **options)


def chat_body(text: str = TEXTS[0], **extra: Any) -> bytes:
    payload = {"model": "smollm2", "messages": lb.messages("sports", text), "max_tokens": 1, **extra}
    return json.dumps(payload).encode("utf-8")


def post_head(length: int | str | None, *, key: str | None = KEY, extra: str = "") -> bytes:
    """The head of a POST to the chat endpoint, with `length` as its Content-Length (None: no header)."""
    lines = ["POST /v1/chat/completions HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    if key is not None:
        lines.append(f"Authorization: Bearer {key}")
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode("latin-1")


def message_of(answer: bytes) -> str:
    return str(json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["message"])


# ----------------------------------------------------------------------------------------------------------------
# Many clients at once
# ----------------------------------------------------------------------------------------------------------------


def thirty_clients(port: int, *, key: str | None = None) -> list[tuple[int, str | None, bytes]]:
    """30 clients connected first, then posting one judgement each at the same moment: (status, Retry-After,
    body) of each answer."""
    n = 30
    start = threading.Barrier(n)
    answers: list[tuple[int, str | None, bytes]] = []
    errors: list[BaseException] = []
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}

    def client(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        try:
            conn.connect()
            start.wait(timeout=60)
            conn.request("POST", "/v1/chat/completions", chat_body(TEXTS[i % len(TEXTS)]), headers)
            reply = conn.getresponse()
            answers.append((reply.status, reply.getheader("Retry-After"), reply.read()))
        except BaseException as e:  # a reset or a timeout: the test reports it
            errors.append(e)
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(answers) == n
    return answers


def test_thirty_concurrent_clients_are_each_answered(judge: lb.LocalLLMJudge, serve: Any) -> None:
    answers_of = {judge.top_tokens([judge.prompt_tokens("sports", [t])[1][0]])[0][0][0] for t in TEXTS}
    # bounded: every request is answered, 200 or 429 with Retry-After
    bounded = serve(max_waiting=2, api_key=KEY)
    answers = thirty_clients(port_of(bounded.url), key=KEY)
    statuses = [status for status, _, _ in answers]
    assert set(statuses) <= {200, 429}, statuses
    assert statuses.count(429) == bounded.refused > 0
    assert statuses.count(200) == bounded.requests > 0
    assert all(retry == "1" for status, retry, _ in answers if status == 429)
    for status, _, body in answers:
        if status == 200:
            reply = json.loads(body)
            assert reply["choices"][0]["message"]["content"] in answers_of
    # unbounded: every one of them is judged
    free = serve()
    answers = thirty_clients(port_of(free.url))
    assert [status for status, _, _ in answers] == [200] * 30
    assert free.requests == 30 and free.refused == 0


# ----------------------------------------------------------------------------------------------------------------
# Lying and slow clients
# ----------------------------------------------------------------------------------------------------------------


def test_malformed_lengths_are_answered_400(serve: Any) -> None:
    port = port_of(serve().url)
    for length in ("-1", "abc", "1e3", "10, 20"):
        answer = exchange(port, post_head(length) + b"{}")
        assert status_of(answer) == 400, (length, answer[:200])


def test_lying_and_slow_clients_do_not_block_another(serve: Any) -> None:
    """While a client that declared 100 bytes and sent 2, one that stalled in its head and one that sent
    nothing hold their connections, another client is judged; the three are still waiting."""
    server = serve(read_timeout=120, idle_timeout=120)
    port = port_of(server.url)
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    try:
        held[0].sendall(post_head(100) + b"{}")
        held[1].sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        answer = exchange(port, post_head(len(chat_body()), extra="Connection: close\r\n") + chat_body())
        assert status_of(answer) == 200, answer[:300]
        assert server.requests == 1
        for conn in held:
            conn.setblocking(False)
            with pytest.raises(BlockingIOError):  # no answer yet, and not closed
                conn.recv(1)
    finally:
        for conn in held:
            conn.close()


def test_lying_and_slow_clients_are_dropped_after_their_timeout(serve: Any) -> None:
    port = port_of(serve(read_timeout=0.5, idle_timeout=0.5).url)
    # 100 declared, 2 sent: 408 once the body is overdue, and the connection is closed
    answer = exchange(port, post_head(100) + b"{}")
    assert status_of(answer) == 408, answer[:300]
    assert header_of(answer, "connection") == "close"
    # a head that stops halfway, a connection that sends nothing, one idle after its answer: closed, unanswered
    assert exchange(port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n") == b""
    assert exchange(port, b"") == b""
    keep_alive = exchange(port, b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert status_of(keep_alive) == 200
    # a slow client that sends its head a byte at a time but never finishes it is dropped as well
    conn = socket.create_connection(("127.0.0.1", port))
    conn.settimeout(60)
    try:
        dropped = False
        for byte in b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 400:
            try:
                conn.sendall(bytes([byte]))
                conn.setblocking(False)
                try:
                    if conn.recv(1) == b"":
                        dropped = True
                        break
                except BlockingIOError:
                    pass
                finally:
                    conn.setblocking(True)
                    conn.settimeout(60)
                threading.Event().wait(0.05)
            except (BrokenPipeError, ConnectionResetError):
                dropped = True
                break
        assert dropped, "a head trickled in forever was never dropped"
    finally:
        conn.close()


# ----------------------------------------------------------------------------------------------------------------
# Caps and the key
# ----------------------------------------------------------------------------------------------------------------


def test_the_key_is_checked_before_the_body_is_read(serve: Any) -> None:
    port = port_of(serve(api_key=KEY).url)
    big = 16 * 1024 * 1024
    for key in (None, "wrong", KEY[:-1], KEY + "x", "s3cret-kez"):
        answer = exchange(port, post_head(big, key=key), body=b"x" * big)
        assert status_of(answer) == 401, (key, answer[:300])  # not 413 (the size) nor 400 (not JSON)
        assert header_of(answer, "connection") == "close"
    # with the key, the same body is refused for its size, from its Content-Length
    answer = exchange(port, post_head(big), body=b"x" * big)
    assert status_of(answer) == 413
    assert "16,777,216 bytes" in message_of(answer)
    listed = exchange(port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert status_of(listed) == 401


def test_bodies_over_the_cap_are_413(serve: Any) -> None:
    port = port_of(serve(max_body_bytes=1000).url)
    answer = exchange(port, post_head(1001) + b"x" * 1001)
    assert status_of(answer) == 413 and "at most 1,000" in message_of(answer)
    # sent in chunks, with no length declared: refused as it grows past the cap
    chunk = b"x" * 600
    chunked = (
        post_head(None, extra="Transfer-Encoding: chunked\r\n") + (b"258\r\n" + chunk + b"\r\n") * 2 + b"0\r\n\r\n"
    )
    answer = exchange(port, chunked)
    assert status_of(answer) == 413 and "over 1,000" in message_of(answer)
    # a body under the cap is judged
    ok = chat_body()
    assert len(ok) < 1000
    assert status_of(exchange(port, post_head(len(ok), extra="Connection: close\r\n") + ok)) == 200


def test_prompts_over_the_token_cap_are_400_naming_it(serve: Any) -> None:
    server = serve(max_prompt_tokens=80)
    client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="max_prompt_tokens") as info:
        client.chat.completions.create(model="smollm2", messages=lb.messages("sports", "word " * 200), max_tokens=1)
    assert "at most 80 tokens" in str(info.value)
    assert server.requests == 0
    reply = client.chat.completions.create(model="smollm2", messages=lb.messages("sports", "Goal!"), max_tokens=1)
    assert reply.choices[0].message.content and server.requests == 1


def test_bodies_that_are_not_json_are_400(serve: Any) -> None:
    port = port_of(serve().url)
    for body, fragment in (
        (b"[" * 100_000, "nests deeper"),
        (b'{"model": "\xff"}', "not UTF-8"),
        (b"{", "not valid JSON"),
        (b"[1, 2]", "JSON object"),
    ):
        answer = exchange(port, post_head(len(body), extra="Connection: close\r\n") + body)
        assert status_of(answer) == 400, (body[:10], answer[:300])
        assert fragment in message_of(answer)


# ----------------------------------------------------------------------------------------------------------------
# Where it listens
# ----------------------------------------------------------------------------------------------------------------


def dummy_judge(tmp_path: Path) -> lb.LocalLLMJudge:
    """A LocalLLMJudge whose file is never read: the checks below come before the model is loaded."""
    path = tmp_path / "never-loaded.gguf"
    path.write_bytes(b"")
    return lb.LocalLLMJudge(path)


def test_addresses_it_cannot_listen_on(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    judge = dummy_judge(tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        taken = busy.getsockname()[1]
        with pytest.raises(ParameterError, match=f"127.0.0.1:{taken}"):
            lb.JudgeServer(judge, port=taken)
        code, _, err = run(["judge-server", "--model", judge.path, "--port", taken], capfd)
        assert_one_line_error(code, err, 2, f"cannot listen on 127.0.0.1:{taken}", "in use")
    code, _, err = run(["judge-server", "--model", judge.path, "--port", "eighty"], capfd)
    assert_one_line_error(code, err, 2, "--port", "eighty")
    code, _, err = run(["judge-server", "--model", judge.path, "--host", "no.such.host.invalid", "--port", "0"], capfd)
    assert_one_line_error(code, err, 2, "cannot listen on no.such.host.invalid:0")
    # Each declared option (SERVER_OPTIONS; its domain is tested in test_declared_options) is checked by
    # the server, and by the command before the model is looked for, in the same words.
    for name, option in lb.SERVER_OPTIONS.items():
        for bad in option.boundaries()[1] or [""]:
            with pytest.raises(ParameterError) as refused:
                lb.JudgeServer(judge, **{"port": 0, name: bad})
            assert str(refused.value).startswith(f"invalid parameter {name} = "), refused.value
            code, _, err = run(["judge-server", "--model", tmp_path / "no-model", option.flag, str(bad)], capfd)
            assert_one_line_error(code, err, 2, str(refused.value))


def test_the_command_serves_until_interrupted(tmp_path: Path) -> None:
    """`neuroneval judge-server` in a process of its own: its options reach the server (a prompt over
    --max-prompt-tokens is 400), a judgement is answered, and Ctrl-C stops it with exit code 130."""
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    argv = [sys.executable, "-m", "neuroneval", "judge-server", "--port", "0", "--max-waiting", "4"]
    argv += ["--max-prompt-tokens", "64", "--read-timeout", "5", "--idle-timeout", "5"]
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # once the model is loaded and the port is listening
        assert line.startswith("serving smollm2"), (line, child.stderr.read() if child.poll() is not None else "")
        url = line.split()[-1]
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120)
        reply = client.chat.completions.create(model="smollm2", messages=lb.messages("sports", "Goal!"), max_tokens=1)
        assert reply.choices[0].message.content
        with pytest.raises(openai.BadRequestError, match="at most 64 tokens"):
            client.chat.completions.create(model="smollm2", messages=lb.messages("sports", "word " * 100), max_tokens=1)
        client.close()
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 130, err
    assert err.splitlines()[-1] == "neuroneval: interrupted"


def test_import_does_not_need_the_server_stack(tmp_path: Path) -> None:
    """`import neuroneval.label` works without uvicorn and starlette; a server then says what it needs."""
    script = (
        "import sys\n"
        "sys.modules['uvicorn'] = None; sys.modules['starlette'] = None\n"  # any import of them fails
        "import neuroneval, neuroneval.label as lb\n"
        "from neuroneval.errors import SourceError\n"
        f"judge = lb.LocalLLMJudge({str(tmp_path / 'x.gguf')!r})\n"
        "try:\n"
        "    lb.JudgeServer(judge, port=0)\n"
        "except SourceError as e:\n"
        "    print('refused:', e)\n"
    )
    (tmp_path / "x.gguf").write_bytes(b"")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused: the judge server needs uvicorn and starlette" in done.stdout


# ----------------------------------------------------------------------------------------------------------------
# The label commands against it
# ----------------------------------------------------------------------------------------------------------------


def test_a_full_cache_needs_no_server_and_a_wrong_model_leaves_no_file(
    judge: lb.LocalLLMJudge, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    explanations = tmp_path / "explanations.txt"
    explanations.write_text("sports\nmoney\n", encoding="utf-8")
    cache, out = tmp_path / "cache.sqlite", tmp_path / "out.csv"
    common = [inputs, explanations, "--cache", cache, "--out", out]
    server = lb.JudgeServer(judge, port=0).start()
    try:
        code, _, err = run(["label", *common, "--judge", "openai:gpt-4", "--base-url", server.url], capfd)
        assert_one_line_error(code, err, 2, "does not serve the model 'gpt-4'", "'smollm2'")
        assert not cache.exists() and not out.exists()
        code, stdout, err = run(["label", *common, "--judge", "openai:smollm2", "--base-url", server.url], capfd)
        assert code == 0, err
        assert "8 model calls, 0 from the cache" in stdout
    finally:
        server.stop()
    first = out.read_bytes()
    out.unlink()
    # the server is gone (and would be at another address): the cache holds every judgement
    gone = f"http://localhost:{free_port()}/v1"
    code, stdout, err = run(["label", *common, "--judge", "openai:smollm2", "--base-url", gone], capfd)
    assert code == 0, err
    assert "0 model calls, 8 from the cache" in stdout
    assert out.read_bytes() == first
    # a judgement missing: now the server is needed, and its absence is one line
    more = tmp_path / "more.txt"
    more.write_text("sports\nweather\n", encoding="utf-8")
    argv = ["label", inputs, more, "--cache", cache, "--out", tmp_path / "more.csv", "--judge", "openai:smollm2"]
    code, _, err = run([*argv, "--base-url", gone], capfd)
    assert_one_line_error(code, err, 2, "cannot reach", gone)


def test_the_default_server_answers_as_before(judge: lb.LocalLLMJudge, serve: Any, tmp_path: Path) -> None:
    """The endpoint judge through the new stack agrees with the judge in process, and the fingerprint the
    server lists is the judge's."""
    server = serve()
    client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
    [model] = list(client.models.list())
    assert model.id == "smollm2" and getattr(model, "fingerprint") == judge.model_fingerprint  # noqa: B009
    endpoint = lb.EndpointJudge("smollm2", base_url=server.url, concurrency=2)
    remote = lb.label(endpoint, TEXTS, ["sports"], cache=tmp_path / "c.sqlite")
    assert endpoint.model_fingerprint == judge.model_fingerprint
    local = lb.label(judge, TEXTS, ["sports"])
    np.testing.assert_allclose(remote.scores, local.scores, rtol=0, atol=4e-4)
    with pytest.raises(SourceError, match="does not serve the model 'gpt-4'"):
        lb.label(lb.EndpointJudge("gpt-4", base_url=server.url), TEXTS, ["sports"], cache=tmp_path / "d.sqlite")
    assert not (tmp_path / "d.sqlite").exists()


def test_answers_of_several_tokens_are_greedy_and_capped(serve: Any) -> None:
    """With max_tokens above 1 the server writes the greedy continuation, whatever the temperature:
    what transformers' `generate` gives in process from the chat template (repetition penalty
    included), with why it stopped; a request over the cap, or with a penalty that is not a number,
    is 400 naming it; the default server answers one token only."""
    from neuroneval.torch.circuits import load_smollm2

    tokenizer, model = load_smollm2()
    server = serve(max_tokens=12)
    client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
    for chat, tokens, penalty in (
        ([{"role": "user", "content": "Name three colours."}], 12, 1.3),
        ([{"role": "user", "content": "Say yes."}], 12, 1.0),
        (lb.messages("sports", TEXTS[0]), 3, 1.0),
    ):
        reply = client.chat.completions.create(
            model="smollm2", messages=chat, max_tokens=tokens, temperature=0.9,
            extra_body={"repetition_penalty": penalty},
        )  # fmt: skip
        ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        with torch.inference_mode():
            gen = model.generate(**ids, max_new_tokens=tokens, do_sample=False, repetition_penalty=penalty,
                                 pad_token_id=tokenizer.eos_token_id)[0, ids["input_ids"].shape[1] :]  # fmt: skip
        assert reply.choices[0].message.content == tokenizer.decode(gen, skip_special_tokens=True)
        assert reply.usage is not None and reply.usage.completion_tokens == len(gen)
        assert reply.choices[0].finish_reason == ("stop" if int(gen[-1]) == tokenizer.eos_token_id else "length")
    chat = [{"role": "user", "content": "Hello"}]
    with pytest.raises(openai.BadRequestError, match=r"max_tokens must be an integer in 1\.\.12"):
        client.chat.completions.create(model="smollm2", messages=chat, max_tokens=13)
    with pytest.raises(openai.BadRequestError, match="repetition_penalty must be a number"):
        client.chat.completions.create(
            model="smollm2",
            messages=chat,
            max_tokens=4,
            extra_body={"repetition_penalty": "high"},
        )
    one = openai.OpenAI(base_url=serve().url, api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="answers one token"):
        one.chat.completions.create(model="smollm2", messages=chat, max_tokens=4)
