"""`JudgeServer`: a local judge model served as an OpenAI-compatible endpoint.

A team can run one judge model on one machine and point every `EndpointJudge` (or any OpenAI
client) at it. It answers

- ``GET /v1/models``: the one model it serves;
- ``POST /v1/chat/completions``: the chat template applied to the messages, and the next token's
  log-probabilities (``logprobs``, ``top_logprobs`` up to 20) with the most likely token as the
  answer; ``max_tokens`` beyond 1 is refused (it is a judge, not a chat server).

Requests are served on threads and the model runs one request at a time; with `max_waiting`,
a request that finds that many already waiting is answered 429 with ``Retry-After``, which
clients back off on. With ``logprobs=False`` it behaves like the servers that do not return
log-probabilities (their answers hold text only). With `api_key`, requests must carry it as a
bearer token.

Examples
--------
>>> from neuroneval.label import smollm2
>>> with JudgeServer(smollm2(), port=0) as server:  # doctest: +SKIP
...     print(server.url)
http://127.0.0.1:...
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from neuroneval.errors import ParameterError

from .llm import TOP_LOGPROBS, LocalLLMJudge

__all__ = ["JudgeServer"]


class _Refusal(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


class JudgeServer:
    """Serve `judge` over HTTP on `host`:`port` (0 picks a free port); see the module's docstring."""

    def __init__(
        self,
        judge: LocalLLMJudge,
        *,
        host: str = "127.0.0.1",
        port: int = 8000,
        model_name: str | None = None,
        logprobs: bool = True,
        max_waiting: int | None = None,
        api_key: str | None = None,
    ) -> None:
        if not isinstance(judge, LocalLLMJudge):
            raise ParameterError(f"a judge server serves a LocalLLMJudge; got {type(judge).__name__}")
        if max_waiting is not None and (
            isinstance(max_waiting, bool) or not isinstance(max_waiting, int) or max_waiting < 0
        ):
            raise ParameterError(f"max_waiting must be a non-negative integer or None; got {max_waiting!r}")
        self.judge = judge
        self.model_name = model_name or judge.name
        self.logprobs = logprobs
        self.max_waiting = max_waiting
        self.api_key = api_key
        self.requests = 0
        self.refused = 0
        self._lock = threading.Lock()
        self._waiting = 0
        self._count = threading.Lock()
        judge.prepare()
        self._http = ThreadingHTTPServer((host, port), self._handler())
        self._http.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The API's root, for `EndpointJudge(base_url=...)`."""
        host, port = self._http.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> JudgeServer:
        """Serve on a background thread."""
        self._thread = threading.Thread(target=self._http.serve_forever, name="judge-server", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve on this thread until interrupted."""
        try:
            self._http.serve_forever()
        finally:
            self._http.server_close()

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> JudgeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the API --------------------------------------------------------------------------------

    def _models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.model_name, "object": "model", "owned_by": "neuroneval"}]}

    def _chat(self, body: Any) -> dict[str, Any]:
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
        max_tokens = body.get("max_tokens", body.get("max_completion_tokens", 1))
        if max_tokens != 1:
            raise _Refusal(400, "this judge server answers one token (max_tokens must be 1)")
        want = bool(body.get("logprobs")) and self.logprobs
        top_n = body.get("top_logprobs") or 0
        if not isinstance(top_n, int) or not 0 <= top_n <= TOP_LOGPROBS:
            raise _Refusal(400, f"top_logprobs must be an integer in 0..{TOP_LOGPROBS}")
        tokenizer = self.judge.tokenizer
        prompt = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        ids = list(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        with self._count:
            if self.max_waiting is not None and self._waiting >= self.max_waiting + 1:
                self.refused += 1
                raise _Refusal(429, "the judge is busy; retry later", "rate_limit_error")
            self._waiting += 1
        try:
            with self._lock:
                top = self.judge.top_tokens([ids])[0]
        finally:
            with self._count:
                self._waiting -= 1
        self.requests += 1
        answer = top[0][0]
        logprobs = None
        if want:

            def entry(token: str, logprob: float) -> dict[str, Any]:
                return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}

            logprobs = {"content": [{**entry(*top[0]), "top_logprobs": [entry(t, v) for t, v in top[:top_n]]}]}
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": answer},
                    "logprobs": logprobs,
                    "finish_reason": "length",
                }
            ],
            "usage": {"prompt_tokens": len(ids), "completion_tokens": 1, "total_tokens": len(ids) + 1},
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Small JSON replies: without TCP_NODELAY each waits ~40 ms for the client's delayed ACK.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _refuse(self, e: _Refusal) -> None:
                headers = {"Retry-After": "0.05"} if e.status == 429 else None
                self._send(e.status, {"error": {"message": str(e), "type": e.kind, "code": e.status}}, headers)

            def _authorised(self) -> bool:
                if server.api_key is None:
                    return True
                if self.headers.get("Authorization") == f"Bearer {server.api_key}":
                    return True
                self._refuse(_Refusal(401, "a valid API key is needed", "authentication_error"))
                return False

            def do_GET(self) -> None:
                if not self._authorised():
                    return
                if self.path.rstrip("/") in ("/v1/models", "/models"):
                    self._send(200, server._models())
                else:
                    self._refuse(_Refusal(404, f"no such route: GET {self.path}", "not_found_error"))

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if not self._authorised():
                    return
                if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                    self._refuse(_Refusal(404, f"no such route: POST {self.path}", "not_found_error"))
                    return
                try:
                    body = json.loads(raw.decode("utf-8") or "null")
                    self._send(200, server._chat(body))
                except _Refusal as e:
                    self._refuse(e)
                except (ValueError, UnicodeDecodeError) as e:
                    self._refuse(_Refusal(400, f"the request body is not JSON: {e}"))
                except Exception as e:  # the model failed: the client sees a 500 and may retry
                    self._refuse(_Refusal(500, f"the judge failed: {e}", "server_error"))

        return Handler
