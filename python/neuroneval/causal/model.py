"""Causal models of a task and their counterfactual datasets (MIB's causal-variable track, SPEC section 7).

A `CausalModel` names its input variables and computes every other variable (the intermediate
ones and the output) from its parents by a function of its own, in the order declared. `run`
evaluates it on a setting of the inputs, with any variable fixed by an intervention: the
counterfactual output of an interchange intervention is `run(base, {variable: value in source})`.

A `CounterfactualDataset` holds (base, source) pairs for one variable and the expected output of
each pair, computed by the causal model (`counterfactual_dataset`), never written by hand; pairs
whose variable takes the same value in base and source are refused, since swapping it could not
change anything.

Examples
--------
>>> sum_mod = CausalModel(
...     "sum-mod-5",
...     inputs=("a", "b", "c"),
...     mechanisms=(("s", ("a", "b"), lambda a, b: (a + b) % 5), ("out", ("s", "c"), lambda s, c: (s + c) % 5)),
... )
>>> sum_mod.run({"a": 1, "b": 2, "c": 4})["out"]
2
>>> sum_mod.run({"a": 1, "b": 2, "c": 4}, {"s": 0})["out"]
4
>>> data = counterfactual_dataset(sum_mod, "s", [{"a": 1, "b": 2, "c": 4}], [{"a": 0, "b": 0, "c": 1}], name="s-swap")
>>> data.expected
(4,)
>>> counterfactual_dataset(sum_mod, "s", [{"a": 1, "b": 2, "c": 4}], [{"a": 3, "b": 0, "c": 1}], name="bad")
Traceback (most recent call last):
...
neuroneval.errors.ParameterError: counterfactual dataset 'bad': pair 0 does not differ in the variable 's' (3 in base and source); an interchange on it changes nothing
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import EmptyInputError, ParameterError

__all__ = ["CausalModel", "CounterfactualDataset", "counterfactual_dataset"]

Setting = Mapping[str, Any]
Mechanism = tuple[str, tuple[str, ...], Callable[..., Any]]


@dataclass(frozen=True)
class CausalModel:
    """A task's causal model: input variables, then mechanisms in topological order.

    Parameters
    ----------
    name : str
    inputs : tuple of str
        The input variables: a setting gives each a value.
    mechanisms : tuple of (variable, parents, function)
        Each computed variable, the variables it reads (inputs or earlier mechanisms) and the
        function of their values, in that order. The last is the output.
    """

    name: str
    inputs: tuple[str, ...]
    mechanisms: tuple[Mechanism, ...]
    parents: dict[str, tuple[str, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        known: list[str] = list(self.inputs)
        if len(set(known)) != len(known) or not known:
            raise ParameterError(f"causal model {self.name!r}: the inputs must be distinct and at least one")
        if not self.mechanisms:
            raise ParameterError(f"causal model {self.name!r} has no mechanism, so no output")
        parents: dict[str, tuple[str, ...]] = {}
        for variable, reads, function in self.mechanisms:
            if variable in known:
                raise ParameterError(f"causal model {self.name!r}: the variable {variable!r} is declared twice")
            missing = [p for p in reads if p not in known]
            if missing:
                raise ParameterError(
                    f"causal model {self.name!r}: {variable!r} reads {missing[0]!r}, which is not declared before it"
                )
            if not callable(function):
                raise ParameterError(f"causal model {self.name!r}: the mechanism of {variable!r} is not callable")
            parents[variable] = tuple(reads)
            known.append(variable)
        object.__setattr__(self, "parents", parents)

    @property
    def output(self) -> str:
        """The output variable (the last mechanism's)."""
        return self.mechanisms[-1][0]

    @property
    def variables(self) -> tuple[str, ...]:
        """Every variable: the inputs, then the computed ones in order."""
        return self.inputs + tuple(m[0] for m in self.mechanisms)

    def run(self, setting: Setting, interventions: Setting | None = None) -> dict[str, Any]:
        """Every variable's value on `setting` (a value for each input), with the variables of
        `interventions` fixed to the values given there (their mechanisms are not run).

        Raises
        ------
        ParameterError
            A missing input, or an intervention on a variable the model does not have.
        """
        fixed = dict(interventions or {})
        unknown = [v for v in fixed if v not in self.variables]
        if unknown:
            raise ParameterError(
                f"causal model {self.name!r} has no variable {unknown[0]!r}; it has {', '.join(self.variables)}"
            )
        missing = [v for v in self.inputs if v not in setting]
        if missing:
            raise ParameterError(f"causal model {self.name!r}: the setting gives no value to the input {missing[0]!r}")
        values = {v: fixed.get(v, setting[v]) for v in self.inputs}
        for variable, reads, function in self.mechanisms:
            values[variable] = fixed[variable] if variable in fixed else function(*(values[p] for p in reads))
        return values

    def check_variable(self, variable: str) -> str:
        """`variable` if the model computes it (an intervention target), else a `ParameterError`."""
        if variable not in self.variables:
            raise ParameterError(
                f"causal model {self.name!r} has no variable {variable!r}; it has {', '.join(self.variables)}"
            )
        return variable


@dataclass(frozen=True)
class CounterfactualDataset:
    """(base, source) settings for one variable with the causal model's counterfactual outputs.

    Attributes
    ----------
    name : str
        E.g. ``"ioi/output_token/random-names"``.
    variable : str
        The variable an interchange intervention swaps.
    bases, sources : tuple of dict
        The input settings of each pair.
    expected : tuple
        The output of each base with `variable` set to its value on the source.
    base_outputs, source_outputs : tuple
        Each base's and source's own output (the runs without intervention).
    """

    name: str
    variable: str
    bases: tuple[dict[str, Any], ...]
    sources: tuple[dict[str, Any], ...]
    expected: tuple[Any, ...]
    base_outputs: tuple[Any, ...]
    source_outputs: tuple[Any, ...]

    def __len__(self) -> int:
        return len(self.bases)

    def subset(self, indices: Sequence[int]) -> CounterfactualDataset:
        """The pairs at `indices`, in that order."""
        pick = [int(i) for i in indices]
        return CounterfactualDataset(
            self.name,
            self.variable,
            tuple(self.bases[i] for i in pick),
            tuple(self.sources[i] for i in pick),
            tuple(self.expected[i] for i in pick),
            tuple(self.base_outputs[i] for i in pick),
            tuple(self.source_outputs[i] for i in pick),
        )


def counterfactual_dataset(
    model: CausalModel, variable: str, bases: Sequence[Setting], sources: Sequence[Setting], *, name: str
) -> CounterfactualDataset:
    """The counterfactual dataset of the pairs ``(bases[i], sources[i])`` for `variable`, the
    expected outputs computed by `model`.

    Raises
    ------
    EmptyInputError
        No pair.
    ParameterError
        Unequal numbers of bases and sources, an unknown variable, or a pair whose `variable`
        takes the same value in base and source (named).
    """
    if not isinstance(model, CausalModel):
        raise ParameterError(f"model must be a CausalModel; got {type(model).__name__}")
    model.check_variable(variable)
    if len(bases) != len(sources):
        raise ParameterError(f"counterfactual dataset {name!r}: {len(bases)} bases and {len(sources)} sources")
    if not bases:
        raise EmptyInputError(f"counterfactual dataset {name!r} holds no pair")
    expected, base_out, source_out = [], [], []
    for i, (base, source) in enumerate(zip(bases, sources, strict=True)):
        b, s = model.run(base), model.run(source)
        if b[variable] == s[variable]:
            raise ParameterError(
                f"counterfactual dataset {name!r}: pair {i} does not differ in the variable {variable!r} "
                f"({b[variable]!r} in base and source); an interchange on it changes nothing"
            )
        expected.append(model.run(base, {variable: s[variable]})[model.output])
        base_out.append(b[model.output])
        source_out.append(s[model.output])
    return CounterfactualDataset(
        name,
        variable,
        tuple(dict(b) for b in bases),
        tuple(dict(s) for s in sources),
        tuple(expected),
        tuple(base_out),
        tuple(source_out),
    )
