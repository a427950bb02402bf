"""`ScoreParams`: the five scoring parameters as one frozen object, validated once by the core."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import neuroneval as ne
import numpy as np
import pytest
from neuroneval.errors import ParameterError
from neuroneval.params import DEFAULT_ALPHA, DEFAULT_TOP_RANDOM_ALPHA, ScoreParams


def test_defaults_are_the_library_defaults() -> None:
    p = ScoreParams()
    assert (p.alpha, p.lam, p.k, p.top_alpha, p.seed) == (DEFAULT_ALPHA, 1.0, 25, DEFAULT_TOP_RANDOM_ALPHA, 0)
    assert p.to_dict() == {"alpha": 0.005, "lam": 1.0, "k": 25, "top_alpha": 0.002, "seed": 0}


@pytest.mark.parametrize(
    ("changes", "name"),
    [
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": 1.5}, "alpha"),
        ({"alpha": float("nan")}, "alpha"),
        ({"alpha": True}, "alpha"),
        ({"alpha": "0.1"}, "alpha"),
        ({"lam": -1.0}, "lam"),
        ({"lam": float("inf")}, "lam"),
        ({"k": 0}, "k"),
        ({"k": 2.5}, "k"),
        ({"k": True}, "k"),
        ({"top_alpha": 0.0}, "top_alpha"),
        ({"seed": -1}, "seed"),
        ({"seed": 2**64}, "seed"),
        ({"seed": 1.0}, "seed"),
        ({"seed": False}, "seed"),
    ],
)
def test_bad_values_raise_parameter_error_naming_the_parameter(changes: dict[str, Any], name: str) -> None:
    with pytest.raises(ParameterError, match=rf"invalid parameter {name} = "):
        ScoreParams(**changes)
    with pytest.raises(ParameterError, match=rf"invalid parameter {name} = "):
        ScoreParams().replace(**changes)
    # Every entry point that scores takes the same door.
    a, c = np.eye(4), np.eye(4)[:, :2]
    with pytest.raises(ParameterError, match=rf"invalid parameter {name} = "):
        ne.compute(a, c, ["correlation"], **changes)


def test_largest_values_in_range_are_kept_exactly() -> None:
    p = ScoreParams(alpha=1, seed=2**64 - 1, k=np.int64(3), top_alpha=np.float32(0.5))
    assert (p.alpha, p.seed, p.k, p.top_alpha) == (1.0, 2**64 - 1, 3, 0.5)


def test_unknown_field_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        ScoreParams(beta=1.0)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="beta"):
        ScoreParams().replace(beta=1.0)


def test_frozen_equal_hashable_and_picklable() -> None:
    p = ScoreParams(alpha=0.1, lam=0.5, k=7, top_alpha=0.01, seed=3)
    with pytest.raises(AttributeError):
        p.alpha = 0.2  # type: ignore[misc]
    assert p == ScoreParams(alpha=0.1, lam=0.5, k=7, top_alpha=0.01, seed=3)
    assert p != p.replace(seed=4)
    assert len({p, copy.copy(p), p.replace(seed=3)}) == 1
    q = pickle.loads(pickle.dumps(p))
    assert q == p and q.to_dict() == p.to_dict()
    assert p.replace(seed=4).to_dict() == {**p.to_dict(), "seed": 4}
    assert eval(repr(p), {"ScoreParams": ScoreParams}) == p
