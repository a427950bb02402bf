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

from .judge import Calibration, Judge

__all__ = ["judge_names", "make_judge"]

_NAMES = ("minilm", "e5", "smollm2", "openai:MODEL", "clip:ARCHITECTURE")


def judge_names() -> tuple[str, ...]:
    """The judge names `make_judge` knows."""
    return _NAMES


def make_judge(
    spec: str,
    *,
    base_url: str | None = None,
    api_key_env: str = "OPENAI_API_KEY",
    concurrency: int = 8,
    price_per_million_tokens: float = 0.0,
    checkpoint: str | os.PathLike[str] | None = None,
    device: str = "cpu",
    calibration: Calibration | None = None,
) -> Judge:
    """The judge that `spec` names (see the module's docstring)."""
    if not isinstance(spec, str):
        raise ParameterError(f"a judge is named by a string; got {spec!r}")
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
        from .endpoint import EndpointJudge

        return EndpointJudge(
            rest,
            base_url=base_url,
            api_key_env=api_key_env,
            concurrency=concurrency,
            price_per_million_tokens=price_per_million_tokens,
            calibration=calibration,
        )
    if kind == "clip" and rest:
        if checkpoint is None:
            raise ParameterError(f"the judge {spec} needs a checkpoint (a path to its weights)")
        from .clip import ClipJudge

        options: dict[str, Any] = {"device": device, "calibration": calibration}
        return ClipJudge(rest, checkpoint, **options)
    raise ParameterError(f"unknown judge {spec!r}; the judges are {', '.join(_NAMES)}")
