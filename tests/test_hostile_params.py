"""Hostile scoring parameters: every bad value of every parameter (alpha, lam, k, top_alpha,
seed) is refused at the door with `ParameterError` (a ValueError and a NeuronEvalError) whose
message names the parameter, quotes the value and states the rule; never a TypeError, never a
silent cast (True is not 1, 2.0 is not 2, array([0.1]) is not 0.1).

The rules: alpha, lam and top_alpha take real numbers (Python int or float, numpy integer or
floating scalars, any `numbers.Real`); k and seed take integers (Python int, numpy integer
scalars). Bools (Python's and numpy's), strings, complex numbers, arrays of any shape (0-d
included), lists and other objects are refused; None stands for the default. Every entry point
(`ScoreParams`, `ScoreParams.replace`, `compute`, `score`, `evaluate`) takes the same door.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Any

import neuroneval
import numpy as np
import pytest
from neuroneval import ScoreParams, errors
from neuroneval.options import SCORE_OPTIONS

A = np.random.default_rng(0).normal(size=(12, 3))
C = (np.random.default_rng(1).random((12, 2)) < 0.5).astype(np.float64)

PARAMETERS = list(SCORE_OPTIONS)
INTEGER = {name for name, option in SCORE_OPTIONS.items() if option.kind == "integer"}
# How each rule starts: the kind of number it asks for.
RULE_START = {
    "alpha": "alpha must be a real number",
    "lam": "lam (wpmi's lambda) must be a finite real number",
    "k": "k must be an integer",
    "top_alpha": "top_alpha must be a real number",
    "seed": "seed must be an integer",
}

# What each entry point's call looks like with one parameter changed.
ENTRY_POINTS: dict[str, Callable[[dict[str, Any]], object]] = {
    "ScoreParams": lambda kw: ScoreParams(**kw),
    "ScoreParams.replace": lambda kw: ScoreParams().replace(**kw),
    "compute": lambda kw: neuroneval.compute(A, C, ["correlation", "auprc"], **kw),
    "compute(pairs)": lambda kw: neuroneval.compute(A, C, ["wpmi"], pairs=[[0, 1]], **kw),
    "score": lambda kw: neuroneval.score(A, C, ["recall"], **kw),
    "evaluate": lambda kw: neuroneval.evaluate(A, C, ["correlation_top_random"], progress=False, **kw),
}

# Values of the wrong type for every parameter: (label, value, the type the message names).
WRONG_FOR_ALL: list[tuple[str, Any, str]] = [
    ("bool True", True, "bool"),
    ("bool False", False, "bool"),
    ("numpy bool", np.bool_(True), "numpy.bool"),
    ("str number", "0.1", "str"),
    ("str int", "3", "str"),
    ("bytes", b"1", "bytes"),
    ("complex", 0.5j, "complex"),
    ("complex real-valued", complex(0.5, 0), "complex"),
    ("numpy complex", np.complex128(0.5), "numpy.complex128"),
    ("array of two", np.array([0.1, 0.2]), "numpy.ndarray"),
    ("array of one", np.array([1]), "numpy.ndarray"),
    ("0-d array", np.array(1), "numpy.ndarray"),
    ("list", [1], "list"),
    ("tuple", (1,), "tuple"),
    ("dict", {"value": 1}, "dict"),
    ("object", object(), "object"),
    ("Decimal", Decimal("0.5"), "decimal.Decimal"),
]

# Floats, even whole ones, are not integers.
WRONG_FOR_INTEGERS: list[tuple[str, Any, str]] = [
    ("whole float", 2.0, "float"),
    ("fractional float", 2.5, "float"),
    ("numpy whole float", np.float64(3.0), "numpy.float64"),
    ("numpy float32", np.float32(1.0), "numpy.float32"),
    ("Fraction", Fraction(2, 1), "fractions.Fraction"),
    ("nan", float("nan"), "float"),
]

# Numbers of the right type outside the domain: those generated from each declaration (just past
# each end, NaN and the infinities), and numpy scalars and huge ints that must take the same door.
EXTRA_OUT_OF_RANGE: dict[str, list[Any]] = {
    "alpha": [-0.1, 1.5, 2, -float("inf"), 10**400, np.float32(-1)],
    "top_alpha": [-1e-300, np.int64(2)],
    "lam": [-1, float("inf"), -float("inf"), 10**400],
    "k": [-1, -(2**40), 2**70, np.int64(0), np.int8(-3)],
    "seed": [-(2**63), 2**100, np.int64(-5)],
}
OUT_OF_RANGE: dict[str, list[Any]] = {
    name: SCORE_OPTIONS[name].boundaries()[1] + EXTRA_OUT_OF_RANGE[name] for name in PARAMETERS
}

# Values of the right type inside the domain, and what the parameter holds then.
ACCEPTED: dict[str, list[tuple[Any, float | int]]] = {
    "alpha": [
        (1, 1.0),
        (0.25, 0.25),
        (np.float32(0.5), 0.5),
        (np.float16(0.25), 0.25),
        (np.int64(1), 1.0),
        (Fraction(1, 4), 0.25),
        (5e-324, 5e-324),
    ],
    "top_alpha": [(np.float64(0.125), 0.125), (1, 1.0)],
    "lam": [(0, 0.0), (2, 2.0), (np.float32(0.5), 0.5), (np.uint8(3), 3.0), (1e300, 1e300)],
    "k": [(1, 1), (np.int32(7), 7), (np.uint8(3), 3), (2**63, 2**63)],
    "seed": [(0, 0), (2**64 - 1, 2**64 - 1), (np.uint64(2**64 - 1), 2**64 - 1), (np.int16(9), 9)],
}
# and the closed ends of each declared domain, generated
for _name in PARAMETERS:
    ACCEPTED[_name] += [(value, value) for value in SCORE_OPTIONS[_name].boundaries()[0]]


def _wrong_type_cases() -> list[Any]:
    cases = []
    for name in PARAMETERS:
        kinds = WRONG_FOR_ALL + (WRONG_FOR_INTEGERS if name in INTEGER else [])
        cases += [pytest.param(name, value, type_name, id=f"{name}-{label}") for label, value, type_name in kinds]
    return cases


def _out_of_range_cases() -> list[Any]:
    return [
        pytest.param(name, value, id=f"{name}-{value!r}"[:40]) for name in PARAMETERS for value in OUT_OF_RANGE[name]
    ]


def _refused(call: Callable[[], object], name: str) -> str:
    """`call` raises exactly ParameterError, a ValueError and NeuronEvalError, naming `name`."""
    with pytest.raises(errors.ParameterError) as info:
        call()
    err = info.value
    assert type(err) is errors.ParameterError, type(err)
    assert isinstance(err, ValueError)
    assert isinstance(err, neuroneval.NeuronEvalError)
    message = str(err)
    assert message.startswith(f"invalid parameter {name} = "), message
    # the rule, which starts with the name as users pass it
    assert re.search(rf": {name}( \(wpmi's lambda\))? must be ", message), message
    return message


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize(("name", "value", "type_name"), _wrong_type_cases())
def test_wrong_type_is_refused_naming_the_type(entry: str, name: str, value: Any, type_name: str) -> None:
    message = _refused(lambda: ENTRY_POINTS[entry]({name: value}), name)
    article = "an" if type_name[0] in "aeiou" else "a"
    assert message.endswith(f", not {article} {type_name}"), message
    assert RULE_START[name] in message, message


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize(("name", "value"), _out_of_range_cases())
def test_out_of_range_is_refused_stating_the_rule(entry: str, name: str, value: Any) -> None:
    message = _refused(lambda: ENTRY_POINTS[entry]({name: value}), name)
    assert ", not a" not in message  # the type was right: the message states the domain only


def test_messages_read_as_documented() -> None:
    cases = [
        ({"alpha": True}, "alpha = True: alpha must be a real number with 0 < alpha <= 1, not a bool"),
        ({"alpha": 1.5}, "alpha = 1.5: alpha must be a real number with 0 < alpha <= 1"),
        ({"alpha": "0.1"}, "alpha = '0.1': alpha must be a real number with 0 < alpha <= 1, not a str"),
        ({"lam": -1.0}, "lam = -1: lam (wpmi's lambda) must be a finite real number >= 0"),
        ({"k": 2.0}, "k = 2.0: k must be an integer in [1, 2^64), not a float"),
        ({"k": 0}, "k = 0: k must be an integer in [1, 2^64)"),
        ({"top_alpha": 0}, "top_alpha = 0: top_alpha must be a real number with 0 < top_alpha <= 1"),
        ({"seed": -1}, "seed = -1: seed must be an integer in [0, 2^64)"),
        (
            {"seed": np.float64(1.0)},
            "seed = np.float64(1.0): seed must be an integer in [0, 2^64), not a numpy.float64",
        ),
    ]
    for changes, expected in cases:
        with pytest.raises(errors.ParameterError) as info:
            ScoreParams(**changes)
        assert str(info.value) == f"invalid parameter {expected}"


def test_a_long_value_is_quoted_short() -> None:
    with pytest.raises(errors.ParameterError) as info:
        ScoreParams(alpha=np.arange(10_000.0))
    message = str(info.value)
    assert len(message) < 200 and "..." in message and "\n" not in message, message


@pytest.mark.parametrize(
    ("name", "value", "held"),
    [pytest.param(n, v, h, id=f"{n}-{v!r}") for n in PARAMETERS for v, h in ACCEPTED[n]],
)
def test_numbers_of_the_right_type_are_kept_exactly(name: str, value: Any, held: float | int) -> None:
    p = ScoreParams(**{name: value})
    got = getattr(p, name)
    assert got == held and type(got) is type(held), (got, held)
    assert getattr(ScoreParams().replace(**{name: value}), name) == held


@pytest.mark.parametrize("name", PARAMETERS)
def test_none_stands_for_the_default(name: str) -> None:
    default = ScoreParams()
    assert ScoreParams(**{name: None}) == default
    changed = ScoreParams(alpha=0.5, lam=2.0, k=3, top_alpha=0.5, seed=7)
    assert changed.replace(**{name: None}) == changed  # None changes nothing
    got = neuroneval.compute(A, C, ["correlation_top_random", "wpmi"], **{name: None})
    want = neuroneval.compute(A, C, ["correlation_top_random", "wpmi"])
    for m in want:
        assert np.array_equal(got[m], want[m], equal_nan=True), m


def test_a_bool_never_runs_as_a_number() -> None:
    # alpha=True once ran as alpha = 1.0 and seed=False as seed 0, without a word.
    for name in PARAMETERS:
        for value in (True, False, np.bool_(True), np.bool_(False)):
            with pytest.raises(errors.ParameterError, match=rf"invalid parameter {name} = .*not a (numpy\.)?bool"):
                neuroneval.compute(A, C, ["correlation"], **{name: value})


def test_table_scores_lambda_takes_the_same_door() -> None:
    from neuroneval import _core

    one = np.array([10.0])
    args = (one, np.array([2.0]), np.array([1.0]), np.array([1.0]), ["wpmi"])
    assert np.isfinite(_core.table_scores(*args, 0.5)[0][0])
    assert _core.table_scores(*args, None)[0][0] == _core.table_scores(*args, 1.0)[0][0]
    for bad in (True, "1", np.array([1.0]), -1.0):
        with pytest.raises(errors.ParameterError, match=r"invalid parameter lam = "):
            _core.table_scores(*args, bad)
