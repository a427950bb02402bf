"""Judges by name, as the command line gives them: ``minilm``, ``e5``, ``smollm2``,
``openai:MODEL`` (an OpenAI-compatible endpoint) and ``clip:ARCHITECTURE`` (with a checkpoint).

Examples
--------
>>> make_judge("openai:gpt-4o-mini", base_url="http://127.0.0.1:9/v1").name
'openai:gpt-4o-mini'
>>> make_judge("llama")
Traceback (most recent call last):
...
neuroneval.errors.ParameterError: unknown judge 'llama'; the judges are minilm, e5, smollm2, openai:MODEL, clip:ARCHITECTURE
"""

from __future__ import annotations

import os
from typing import Any

from neuroneval.errors import ParameterError
from neuroneval.options import Options

from .endpoint import ENDPOINT_OPTIONS, EndpointJudge
from .judge import LOCAL_JUDGE_OPTIONS, Calibration, Judge

__all__ = ["JUDGE_OPTIONS", "judge_names", "make_judge"]

_NAMES = ("minilm", "e5", "smollm2", "openai:MODEL", "clip:ARCHITECTURE")

#: The options of a judge named by `make_judge` (an endpoint's; a local model's device).
JUDGE_OPTIONS: Options = (
    ENDPOINT_OPTIONS.only("base_url", "api_key_env", "concurrency", "price_per_million_tokens") + LOCAL_JUDGE_OPTIONS
)


def judge_names() -> tuple[str, ...]:
    """The judge names `make_judge` knows."""
    return _NAMES


def make_judge(
    spec: str,
    *,
    base_url: str | None = None,
    api_key_env: str | None = None,
    concurrency: int | None = None,
    price_per_million_tokens: float | None = None,
    checkpoint: str | os.PathLike[str] | None = None,
    device: str | None = None,
    calibration: Calibration | None = None,
) -> Judge:
    """The judge that `spec` names (see the module's docstring); the options are `JUDGE_OPTIONS`
    (None: the declared default), each checked whichever judge it names."""
    if not isinstance(spec, str):
        raise ParameterError(f"a judge is named by a string; got {spec!r}")
    values = JUDGE_OPTIONS.resolve(
        base_url=base_url,
        api_key_env=api_key_env,
        concurrency=concurrency,
        price_per_million_tokens=price_per_million_tokens,
        device=device,
    )
    device = values["device"]
    kind, _, rest = spec.partition(":")
    if spec == "minilm":
        from .embedding import MiniLMJudge

        return MiniLMJudge(device=device, calibration=calibration)
    if spec == "e5":
        from .embedding import E5Judge

        return E5Judge(calibration=calibration)
    if spec == "smollm2":
        from .llm import smollm2

        return smollm2(device=device, calibration=calibration)
    if kind == "openai" and rest:
        endpoint = {name: values[name] for name in ENDPOINT_OPTIONS if name in values}
        return EndpointJudge(rest, calibration=calibration, **endpoint)
    if kind == "clip" and rest:
        if checkpoint is None:
            raise ParameterError(f"the judge {spec} needs a checkpoint (a path to its weights)")
        from .clip import ClipJudge

        options: dict[str, Any] = {"device": device, "calibration": calibration}
        return ClipJudge(rest, checkpoint, **options)
    raise ParameterError(f"unknown judge {spec!r}; the judges are {', '.join(_NAMES)}")
