"""The endpoint judge: the yes/no log-probability protocol (`neuroneval.label.llm`) through any
OpenAI-compatible chat-completions endpoint, with the official ``openai`` client.

Requests run `concurrency` at a time; the client retries 429 and 5xx answers and dropped
connections with exponential backoff (`max_retries`). Before the first judgement the endpoint is
asked for its model list, so an unreachable URL, or a model it does not serve, fails at once,
naming the URL, before anything is written. A server that returns no log-probabilities is
refused with a clear error: its answers cannot be turned into probabilities without parsing text.

The judge's identity in the cache is the model's name, the template and, where the endpoint
reports one in its model list (as `JudgeServer` does), the model's ``fingerprint``; not the
endpoint's address, so the same model behind another port or host name is the same judge. The
fingerprint is learnt when the endpoint is asked, and recorded in the cache: a run whose
judgements are all cached asks the endpoint nothing.

Examples
--------
>>> judge = EndpointJudge("SmolLM2", base_url="http://127.0.0.1:8000/v1")
>>> judge.name
'openai:SmolLM2'
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

import numpy as np

from neuroneval.errors import ParameterError, SourceError
from neuroneval.options import Option, Options

from .judge import Calibration, Judge, Judgement
from .llm import DEFAULT_TEMPLATE, TOP_LOGPROBS, check_template, json_template, messages, yes_no_score

__all__ = ["ENDPOINT_OPTIONS", "EndpointJudge"]

#: The options of an `EndpointJudge`: where the endpoint is, its key, how requests are sent, its price.
ENDPOINT_OPTIONS = Options(
    Option(
        "base_url",
        "text",
        None,
        "an openai:MODEL judge's endpoint, http://HOST:PORT/v1; none is $OPENAI_BASE_URL, else OpenAI's",
        optional=True,
        metavar="URL",
    ),
    Option(
        "api_key_env",
        "text",
        "OPENAI_API_KEY",
        "the environment variable holding the endpoint's API key; a placeholder is sent when it is unset",
        metavar="NAME",
    ),
    Option("concurrency", "integer", 8, "requests in flight", low=1, metavar="N"),
    Option(
        "max_retries",
        "integer",
        5,
        "retries of a request answered 429 or 5xx, or whose connection failed, with exponential backoff",
        low=0,
        metavar="N",
    ),
    Option("timeout", "real", 60.0, "seconds before a request is abandoned and retried", low=0, low_open=True),
    Option(
        "price_per_million_tokens",
        "real",
        0.0,
        "the endpoint's price per million tokens, for the cost estimate",
        low=0,
        flag="--price",
        metavar="PER_MILLION",
    ),
)


class EndpointJudge(Judge):
    """An LLM behind an OpenAI-compatible endpoint.

    Parameters
    ----------
    model : str
        The model's name at the endpoint.
    base_url, api_key_env, concurrency, max_retries, timeout, price_per_million_tokens
        `ENDPOINT_OPTIONS` (None: the declared default): the API's root (``http://host:port/v1``;
        default ``OPENAI_BASE_URL``, else OpenAI's), the environment variable holding the API key
        (a placeholder is sent when it is unset, as local servers need none), the requests in
        flight at once, the retries of a request answered 429 or 5xx or whose connection failed
        (exponential backoff), the seconds before a request is abandoned (and retried), and the
        price for the cost estimate of a run (`LabelStats.cost`).
    template : str
        The user turn, with ``{explanation}`` and ``{input}``.
    """

    version = "2"
    learns_fingerprint = True

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key_env: str | None = None,
        concurrency: int | None = None,
        max_retries: int | None = None,
        timeout: float | None = None,
        price_per_million_tokens: float | None = None,
        template: str = DEFAULT_TEMPLATE,
        calibration: Calibration | None = None,
    ) -> None:
        super().__init__(calibration=calibration)
        if not isinstance(model, str) or not model:
            raise ParameterError(f"model must be a model name; got {model!r}")
        values = ENDPOINT_OPTIONS.resolve(
            base_url=base_url,
            api_key_env=api_key_env,
            concurrency=concurrency,
            max_retries=max_retries,
            timeout=timeout,
            price_per_million_tokens=price_per_million_tokens,
        )
        self.model = model
        self.name = f"openai:{model}"
        url = values["base_url"] or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        self.base_url = url.rstrip("/")
        self.api_key_env: str = values["api_key_env"]
        self.concurrency: int = values["concurrency"]
        self.max_retries: int = values["max_retries"]
        self.timeout: float = values["timeout"]
        self.price_per_million_tokens: float = values["price_per_million_tokens"]
        self._template = check_template(template)
        self._client: Any = None
        self._checked = False
        self._fingerprint = ""

    @property
    def template(self) -> str:
        return json_template(self._template)

    @property
    def model_fingerprint(self) -> str:
        """The fingerprint the endpoint reported for the model ("" where it reports none)."""
        return self._fingerprint

    def assume_fingerprint(self, fingerprint: str) -> None:
        self._fingerprint = fingerprint

    def _openai(self, *, retries: int | None = None, timeout: float | None = None) -> Any:
        try:
            import openai
        except ImportError as e:
            raise SourceError("the endpoint judge needs the openai package (pip install 'neuroneval[label]')") from e
        return openai.OpenAI(
            base_url=self.base_url,
            api_key=os.environ.get(self.api_key_env) or "none",
            max_retries=self.max_retries if retries is None else retries,
            timeout=self.timeout if timeout is None else timeout,
        )

    def prepare(self) -> None:
        """Fail fast: the endpoint must answer its model list (one try, 10 s) and, where the list
        is not empty, list the model; its fingerprint there, if any, becomes the judge's."""
        if self._checked:
            return
        import openai

        try:
            listed = list(self._openai(retries=0, timeout=min(10.0, self.timeout)).models.list().data)
        except openai.APIConnectionError as e:
            raise SourceError(f"cannot reach the endpoint {self.base_url}: {e.__cause__ or e}") from e
        except openai.AuthenticationError as e:
            raise SourceError(f"the endpoint {self.base_url} refused the API key from ${self.api_key_env}: {e}") from e
        except openai.APIStatusError as e:
            raise SourceError(f"the endpoint {self.base_url} answered its model list with HTTP {e.status_code}") from e
        entry = next((m for m in listed if getattr(m, "id", None) == self.model), None)
        if listed and entry is None:
            names = ", ".join(repr(getattr(m, "id", "?")) for m in listed[:10])
            raise SourceError(
                f"the endpoint {self.base_url} does not serve the model {self.model!r}; it serves {names}"
            )
        fingerprint = getattr(entry, "fingerprint", None)
        self._fingerprint = fingerprint if isinstance(fingerprint, str) else ""
        self._checked = True

    def request(self, explanation: str, text: str) -> tuple[float, int]:
        """One judgement: (log-odds, tokens)."""
        import openai

        if self._client is None:
            self._client = self._openai()
        try:
            reply = self._client.chat.completions.create(
                model=self.model,
                messages=messages(explanation, text, template=self._template),
                max_tokens=1,
                temperature=0.0,
                logprobs=True,
                top_logprobs=TOP_LOGPROBS,
            )
        except openai.APIConnectionError as e:
            raise SourceError(f"lost the endpoint {self.base_url}: {e.__cause__ or e}") from e
        except openai.BadRequestError as e:
            raise SourceError(
                f"the endpoint {self.base_url} refused a yes/no request for {self.model} ({e.message}); "
                "it may not support logprobs"
            ) from e
        except openai.APIStatusError as e:
            raise SourceError(f"the endpoint {self.base_url} answered HTTP {e.status_code}: {e.message}") from e
        choice = reply.choices[0] if reply.choices else None
        content = getattr(getattr(choice, "logprobs", None), "content", None)
        if not content or not content[0].top_logprobs:
            raise SourceError(
                f"the endpoint {self.base_url} returned no logprobs for {self.model}: it cannot serve as a "
                "yes/no judge (it must support logprobs=True and top_logprobs)"
            )
        top = [(t.token, float(t.logprob)) for t in content[0].top_logprobs]
        usage = getattr(reply, "usage", None)
        tokens = int(getattr(usage, "total_tokens", 0) or 0)
        return yes_no_score(top), tokens

    def judge(self, explanation: str, inputs: Sequence[Any]) -> Iterator[Judgement]:
        self.prepare()
        texts = list(inputs)
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            pending: dict[Future[tuple[float, int]], int] = {}
            nxt = 0
            try:
                while nxt < len(texts) or pending:
                    while nxt < len(texts) and len(pending) < self.concurrency:
                        pending[pool.submit(self.request, explanation, texts[nxt])] = nxt
                        nxt += 1
                    done, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for future in done:
                        i = pending.pop(future)
                        score, tokens = future.result()
                        yield Judgement(
                            positions=np.array([i], dtype=np.int64),
                            scores=np.array([score]),
                            tokens=np.array([tokens], dtype=np.int64),
                        )
            finally:
                for future in pending:
                    future.cancel()

    def close(self) -> None:
        self._checked = False  # the next run checks the endpoint again
        if self._client is not None:
            self._client.close()
            self._client = None
