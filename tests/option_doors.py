"""The tests' one check that a public function takes its declared options through their
declaration (`neuroneval.options`): each keyword defaults to None, and each value the declared
domain refuses (and one of another type) is refused by the function with the declaration's own
message."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from neuroneval import errors
from neuroneval.options import Option, Options


def declared_keywords(function: Callable[..., Any], groups: Sequence[Options]) -> list[Option]:
    """The function's keyword options, each as the first group declares it; each must default to None."""
    merged: dict[str, Option] = {}
    for group in groups:
        for name, option in group.items():
            merged.setdefault(name, option)
    parameters = inspect.signature(function).parameters
    taken = [merged[name] for name in parameters if name in merged]
    for option in taken:
        assert parameters[option.name].default is None, f"{function.__name__}({option.name}=...)"
    return taken


def refused_values(option: Option) -> list[Any]:
    """The values just past the declared domain, and one of another type."""
    wrong_type: Any = 1 if option.kind in ("text", "choice", "flag") else "1"
    return [*option.boundaries()[1], wrong_type]


def assert_refused_as_declared(call: Callable[..., Any], option: Option, value: Any) -> None:
    """`call(option=value)` raises the `ParameterError` that the declaration's own check raises."""
    with pytest.raises(errors.ParameterError) as expected:
        option.check(value)
    with pytest.raises(errors.ParameterError) as info:
        call(**{option.name: value})
    assert str(info.value) == str(expected.value)
