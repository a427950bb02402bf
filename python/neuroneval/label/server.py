"""`JudgeServer`: a local judge model served as an OpenAI-compatible endpoint.

A team can run one judge model on one machine and point every `EndpointJudge` (or any OpenAI
client) at it. It answers

- ``GET /v1/models``: the one model it serves, with its ``fingerprint`` (the weights file's name
  and size and the dtype), which `EndpointJudge` keys its cache on;
- ``POST /v1/chat/completions``: the chat template applied to the messages, and the next token's
  log-probabilities (``logprobs``, ``top_logprobs`` up to 20) with the most likely token as the
  answer. With `max_tokens` above 1 the server also writes answers of up to that many tokens
  (a request's ``max_tokens``), by greedy decoding whatever the ``temperature``, with Hugging
  Face's ``repetition_penalty`` when a request gives one (as vLLM's servers take it), and no
  log-probabilities: enough to serve an explainer, such as the SAE study's endpoint explainer.

The HTTP side is uvicorn (h11) serving a starlette app on one event loop; the model runs one
request at a time on a thread of its own, so a slow or lying client never holds the model or
another client. The edges are closed with a cap or a timeout each:

- `max_waiting`: a request that finds that many already waiting for the model is answered 429
  with ``Retry-After`` (and ``retry-after-ms``), which clients back off on;
- `api_key`: requests must carry it as a bearer token, compared in constant time, and are
  refused (401) before their body is read;
- `max_body_bytes`: a larger body is refused (413) from its ``Content-Length`` or, when it is
  sent in chunks, as soon as it grows past the cap;
- `max_prompt_tokens`: a longer prompt (after the chat template) is refused (400, naming the cap);
- `read_timeout`: a request's head must arrive within it of its first byte, and its body within
  it of the head; a client that stalls or sends fewer bytes than it declared is answered 408 (or,
  mid-head, disconnected);
- `idle_timeout`: a connection with no request in progress is closed after this long;
- a malformed request (a ``Content-Length`` that is not a number, a head over 16 KiB) is answered
  400 by h11, and a body that is not JSON, or nests too deep, 400.

With ``logprobs=False`` it behaves like the servers that do not return log-probabilities (their
answers hold text only). uvicorn and starlette are imported when a server is made, so
``import neuroneval.label`` does not need them.

Examples
--------
>>> from neuroneval.label import smollm2
>>> with JudgeServer(smollm2(), port=0) as server:  # doctest: +SKIP
...     print(server.url)
http://127.0.0.1:...
"""

from __future__ import annotations

import asyncio
import hmac
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from neuroneval.errors import ParameterError, SourceError
from neuroneval.files import parse_json
from neuroneval.options import Option, Options

from .llm import TOP_LOGPROBS, LocalLLMJudge

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["SERVER_OPTIONS", "JudgeServer"]

#: Where a `JudgeServer` listens, and the caps and timeouts that bound every request (a
#: judgement's prompt is a few KB of JSON).
SERVER_OPTIONS = Options(
    Option("host", "text", "127.0.0.1", "the address to listen on"),
    Option("port", "integer", 8000, "the port; 0 picks a free one", low=0, high=65535, metavar="N"),
    Option(
        "max_waiting",
        "integer",
        None,
        "answer 429 (with Retry-After) when this many requests already wait for the model; none is no bound",
        low=0,
        optional=True,
        metavar="N",
    ),
    Option(
        "max_tokens",
        "integer",
        1,
        "the longest answer, in tokens: 1 serves a judge; more also serves explainers (greedy decoding)",
        low=1,
        high=512,
        metavar="N",
    ),
    Option("max_body_bytes", "integer", 256 * 1024, "answer 413 to a larger request body", low=1, metavar="N"),
    Option(
        "max_prompt_tokens",
        "integer",
        2048,
        "answer 400 to a longer prompt, counted after the chat template",
        low=1,
        metavar="N",
    ),
    Option(
        "read_timeout",
        "real",
        10.0,
        "seconds for a request's head after its first byte, and for its body after the head; a client slower "
        "than that is answered 408 or disconnected",
        low=0,
        low_open=True,
        metavar="SECONDS",
    ),
    Option(
        "idle_timeout",
        "real",
        5.0,
        "seconds a connection may stay open with no request in progress",
        low=0,
        low_open=True,
        metavar="SECONDS",
    ),
)
#: Connections the kernel queues before the server accepts them (more with a larger `max_waiting`).
BACKLOG = 2048
#: Seconds `stop` waits for requests in progress before it cancels them.
SHUTDOWN_SECONDS = 5


class _Refusal(Exception):
    """An answer other than 200: its status, message, OpenAI error type, and whether the connection
    closes after it (when the request's body was not read)."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        *,
        close: bool = False,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.kind, self.close, self.headers = status, kind, close, dict(headers or {})

    def response(self) -> Response:
        headers = {"Retry-After": "1", "retry-after-ms": "50"} if self.status == 429 else {}
        headers.update(self.headers)
        if self.close:
            headers["Connection"] = "close"
        return _json({"error": {"message": str(self), "type": self.kind, "code": self.status}}, self.status, headers)


def _json(payload: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None) -> Response:
    from starlette.responses import JSONResponse

    return JSONResponse(payload, status_code=status, headers=headers)


class _BearerKey:
    """ASGI middleware: a request without the bearer key is answered 401 before its body is read;
    the key is compared in constant time."""

    def __init__(self, app: ASGIApp, key: str | None) -> None:
        self.app = app
        self.expected = None if key is None else b"Bearer " + key.encode("utf-8")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.expected is not None:
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                refusal = _Refusal(401, "a valid API key is needed", "authentication_error", close=True)
                await refusal.response()(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _protocol(read_timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with the two deadlines it lacks: a connection that sends nothing is
    closed after the idle timeout (uvicorn arms that timer only after a response), and a request's
    head must arrive within `read_timeout` of its first byte."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class DeadlineProtocol(H11Protocol):
        _head_deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler
            )

        def data_received(self, data: bytes) -> None:
            cycle = self.cycle
            super().data_received(data)
            if self.cycle is not cycle:  # a request's head arrived
                self._cancel_head_deadline()
            elif self._head_deadline is None and (cycle is None or cycle.response_complete):
                self._head_deadline = self.loop.call_later(read_timeout, self._head_late, cycle)

        def _head_late(self, cycle: object) -> None:
            self._head_deadline = None
            if self.cycle is cycle and not self.transport.is_closing():
                self.transport.close()

        def _cancel_head_deadline(self) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
                self._head_deadline = None

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_head_deadline()
            super().connection_lost(exc)

    return DeadlineProtocol


def _listen(host: str, port: int, backlog: int) -> socket.socket:
    """A socket listening on host:port, or a `ParameterError` naming the address."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(backlog)
        except BaseException:
            sock.close()
            raise
    except OSError as e:
        reason = e.strerror or str(e)
        raise ParameterError(
            f"cannot listen on {where}: {reason}; choose another host or port (port 0 picks a free one)"
        ) from None
    return sock


class JudgeServer:
    """Serve `judge` over HTTP on `host`:`port`; see the module's docstring.

    Parameters
    ----------
    judge : LocalLLMJudge
        The model; loaded when the server is made.
    host, port, max_waiting, max_body_bytes, max_prompt_tokens, read_timeout, idle_timeout
        `SERVER_OPTIONS` (None: the declared default): the address and port to listen on (port 0
        picks a free one, `url` tells which); the requests that may wait for the model (besides
        the one it runs) before more are answered 429 (None: without bound); the largest request
        body (413 beyond); the longest prompt after the chat template (400 beyond); the seconds
        for a request's head after its first byte, and for its body after the head; the seconds
        a connection may stay open with no request in progress.
    model_name : str, optional
        The model's name at the endpoint (default: the judge's name).
    logprobs : bool
        False answers without log-probabilities, as some servers do.
    api_key : str, optional
        The bearer token requests must carry.

    Raises
    ------
    ParameterError
        An option out of its range, or an address it cannot listen on (in use, not this
        machine's), named.
    """

    def __init__(
        self,
        judge: LocalLLMJudge,
        *,
        host: str | None = None,
        port: int | None = None,
        model_name: str | None = None,
        logprobs: bool = True,
        max_waiting: int | None = None,
        api_key: str | None = None,
        max_tokens: int | None = None,
        max_body_bytes: int | None = None,
        max_prompt_tokens: int | None = None,
        read_timeout: float | None = None,
        idle_timeout: float | None = None,
    ) -> None:
        if not isinstance(judge, LocalLLMJudge):
            raise ParameterError(f"a judge server serves a LocalLLMJudge; got {type(judge).__name__}")
        values = SERVER_OPTIONS.resolve(
            host=host,
            port=port,
            max_waiting=max_waiting,
            max_tokens=max_tokens,
            max_body_bytes=max_body_bytes,
            max_prompt_tokens=max_prompt_tokens,
            read_timeout=read_timeout,
            idle_timeout=idle_timeout,
        )
        self.judge = judge
        self.model_name = model_name or judge.name
        self.logprobs = logprobs
        self.max_waiting: int | None = values["max_waiting"]
        self.api_key = api_key
        self.max_tokens: int = values["max_tokens"]
        self.max_body_bytes: int = values["max_body_bytes"]
        self.max_prompt_tokens: int = values["max_prompt_tokens"]
        self.read_timeout: float = values["read_timeout"]
        self.idle_timeout: float = values["idle_timeout"]
        self.requests = 0
        self.refused = 0
        self._pending = 0  # requests past their checks, waiting for or in the model (event loop only)
        self._backlog = max(BACKLOG, 2 * (self.max_waiting or 0))
        address: str = values["host"]
        self._socket = _listen(address, values["port"], self._backlog)
        shown = f"[{address}]" if ":" in address else address  # an IPv6 address, in a URL
        self._url = f"http://{shown}:{self._socket.getsockname()[1]}/v1"
        try:
            self._server = self._uvicorn()
            judge.prepare()
        except BaseException:
            self._socket.close()
            raise
        self._model = ThreadPoolExecutor(max_workers=1, thread_name_prefix="judge-model")
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The API's root, for `EndpointJudge(base_url=...)`."""
        return self._url

    def _uvicorn(self) -> Any:
        try:
            import uvicorn

            app = self._app()
        except ImportError as e:
            raise SourceError("the judge server needs uvicorn and starlette (pip install 'neuroneval[label]')") from e
        config = uvicorn.Config(
            app,
            http=_protocol(self.read_timeout),
            lifespan="off",
            log_config=None,
            log_level="warning",
            access_log=False,
            proxy_headers=False,
            server_header=False,
            # uvicorn hands it to loop.call_later, which takes any number of seconds.
            timeout_keep_alive=self.idle_timeout,  # type: ignore[arg-type]
            timeout_graceful_shutdown=SHUTDOWN_SECONDS,
            backlog=self._backlog,
        )
        return uvicorn.Server(config)

    def start(self) -> JudgeServer:
        """Serve on a background thread (returns once the server accepts requests)."""
        self._thread = threading.Thread(target=self._server.run, args=([self._socket],), name="judge-server")
        self._thread.daemon = True
        self._thread.start()
        deadline = time.monotonic() + 60
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise SourceError(f"the judge server at {self.url} did not start")
            time.sleep(0.01)
        return self

    def serve_forever(self) -> None:
        """Serve on this thread until interrupted (Ctrl-C stops it gracefully, then raises
        KeyboardInterrupt)."""
        try:
            self._server.run([self._socket])
        finally:
            self._close()

    def stop(self) -> None:
        """Stop serving: requests in progress get `SHUTDOWN_SECONDS` to finish."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=SHUTDOWN_SECONDS + 10)
            self._thread = None
        self._close()

    def _close(self) -> None:
        self._socket.close()
        self._model.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> JudgeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the API --------------------------------------------------------------------------------

    def _app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.exceptions import HTTPException
        from starlette.middleware import Middleware
        from starlette.routing import Route

        async def not_routed(request: Request, exc: Exception) -> Response:
            status = exc.status_code if isinstance(exc, HTTPException) else 500
            headers = exc.headers if isinstance(exc, HTTPException) else None
            what = "no such route" if status == 404 else "not allowed"
            kind = "not_found_error" if status == 404 else "invalid_request_error"
            return _Refusal(status, f"{what}: {request.method} {request.url.path}", kind, headers=headers).response()

        routes = [Route(path, self._list_models, methods=["GET"]) for path in ("/v1/models", "/models")]
        routes += [
            Route(path, self._complete, methods=["POST"]) for path in ("/v1/chat/completions", "/chat/completions")
        ]
        return Starlette(
            routes=routes,
            middleware=[Middleware(_BearerKey, key=self.api_key)],
            exception_handlers={HTTPException: not_routed},
        )

    async def _list_models(self, request: Request) -> Response:
        model = {
            "id": self.model_name,
            "object": "model",
            "created": 0,
            "owned_by": "neuroneval",
            "fingerprint": self.judge.model_fingerprint,
        }
        return _json({"object": "list", "data": [model]})

    async def _complete(self, request: Request) -> Response:
        try:
            raw = await self._read_body(request)
            try:
                body = self._checked(parse_json(raw, "the request body"))
            except SourceError as e:
                raise _Refusal(400, str(e)) from None
            return _json(await self._judged(body))
        except _Refusal as refusal:
            return refusal.response()

    async def _read_body(self, request: Request) -> bytes:
        """The body, under the byte cap and the read timeout (413 and 408 close the connection)."""
        from starlette.requests import ClientDisconnect

        cap = self.max_body_bytes
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise _Refusal(413, f"the request body has {int(declared):,} bytes; at most {cap:,} are read", close=True)
        chunks, size = [], 0
        try:
            async with asyncio.timeout(self.read_timeout):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > cap:
                        raise _Refusal(
                            413, f"the request body has over {cap:,} bytes; at most {cap:,} are read", close=True
                        )
                    chunks.append(chunk)
        except TimeoutError:
            raise _Refusal(
                408, f"the request body did not arrive within {self.read_timeout:g} s", "timeout_error", close=True
            ) from None
        except ClientDisconnect:
            raise _Refusal(400, "the client disconnected before its body arrived", close=True) from None
        return b"".join(chunks)

    def _checked(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise _Refusal(400, "the request body must be a JSON object")
        if body.get("model") != self.model_name:
            raise _Refusal(
                404,
                f"the model {body.get('model')!r} does not exist; this server serves {self.model_name!r}",
                "not_found_error",
            )
        chat = body.get("messages")
        if (
            not isinstance(chat, list)
            or not chat
            or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in chat
            )
        ):
            raise _Refusal(400, "messages must be a non-empty list of {role, content} objects with text content")
        wanted = body.get("max_tokens", body.get("max_completion_tokens", 1))
        if isinstance(wanted, bool) or not isinstance(wanted, int) or not 1 <= wanted <= self.max_tokens:
            raise _Refusal(
                400,
                "this judge server answers one token (max_tokens must be 1)"
                if self.max_tokens == 1
                else f"max_tokens must be an integer in 1..{self.max_tokens} on this server",
            )
        penalty = body.get("repetition_penalty", 1.0)
        if isinstance(penalty, bool) or not isinstance(penalty, int | float) or not 0 < penalty <= 10:
            raise _Refusal(400, "repetition_penalty must be a number in (0, 10]")
        top_n = body.get("top_logprobs") or 0
        if isinstance(top_n, bool) or not isinstance(top_n, int) or not 0 <= top_n <= TOP_LOGPROBS:
            raise _Refusal(400, f"top_logprobs must be an integer in 0..{TOP_LOGPROBS}")
        return body

    async def _judged(self, body: dict[str, Any]) -> dict[str, Any]:
        """The answer, from the model's thread; 429 when `max_waiting` requests already wait."""
        if self.max_waiting is not None and self._pending > self.max_waiting:
            self.refused += 1
            raise _Refusal(429, "the judge is busy; retry later", "rate_limit_error")
        self._pending += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._model, self._answer, body)
        finally:
            self._pending -= 1

    def _answer(self, body: dict[str, Any]) -> dict[str, Any]:
        """Runs on the model's thread: the prompt's tokens (under the cap), then the next token."""
        tokenizer = self.judge.tokenizer
        try:
            prompt = tokenizer.apply_chat_template(body["messages"], tokenize=False, add_generation_prompt=True)
            ids = list(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        except Exception as e:  # the template refused the messages
            raise _Refusal(400, f"cannot apply the chat template to the messages: {e}") from None
        if len(ids) > self.max_prompt_tokens:
            raise _Refusal(
                400,
                f"the prompt has {len(ids):,} tokens; this server judges prompts of at most "
                f"{self.max_prompt_tokens:,} tokens (max_prompt_tokens)",
                "context_length_exceeded",
            )
        wanted = body.get("max_tokens", body.get("max_completion_tokens", 1))
        try:
            if wanted > 1:
                written = self.judge.generate(ids, wanted, float(body.get("repetition_penalty", 1.0)))
            else:
                top = self.judge.top_tokens([ids])[0]
        except Exception as e:  # the model failed: the client sees a 500 and may retry
            raise _Refusal(500, f"the judge failed: {e}", "server_error") from None
        self.requests += 1
        return self._written_reply(ids, *written) if wanted > 1 else self._reply(body, ids, top)

    def _written_reply(self, ids: list[int], text: str, n_tokens: int, stopped: bool) -> dict[str, Any]:
        return self._completion(
            {"role": "assistant", "content": text}, None, "stop" if stopped else "length", len(ids), n_tokens
        )

    def _reply(self, body: dict[str, Any], ids: list[int], top: list[tuple[str, float]]) -> dict[str, Any]:
        logprobs = None
        if bool(body.get("logprobs")) and self.logprobs:

            def entry(token: str, logprob: float) -> dict[str, Any]:
                return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}

            top_n = body.get("top_logprobs") or 0
            logprobs = {"content": [{**entry(*top[0]), "top_logprobs": [entry(t, v) for t, v in top[:top_n]]}]}
        return self._completion({"role": "assistant", "content": top[0][0]}, logprobs, "length", len(ids), 1)

    def _completion(
        self, message: dict[str, str], logprobs: Any, finish_reason: str, n_prompt: int, n_answer: int
    ) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "system_fingerprint": self.judge.model_fingerprint,
            "choices": [{"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_answer, "total_tokens": n_prompt + n_answer},
        }
