"""The causal-variable track's tasks: a causal model, how to draw its inputs, how each input
reads as a prompt, and the counterfactual datasets of each variable (MIB's layout).

A `CausalTask` draws seeded base settings (`draw`), builds each counterfactual dataset by drawing
a source for every base (the dataset's own rule) and computing the expected outputs with the
causal model (`datasets`), and renders a setting as a prompt whose marked words give the token
positions the interventions target (`prompt`, `token_positions`).

- `ioi_task`: indirect-object identification. Variables: ``output_position`` (which of the first
  two names is the indirect object) and ``output_token`` (that name). Positions: the indirect
  object's first mention (``io``), the repeated subject (``s2``) and the last token.
- `arithmetic_task`: two-operand addition with a single-digit sum after two solved examples.
  Variables: the operands ``a`` and ``b``. Positions: each operand's token and the last token.
- `mcqa_task`: MIB's synthetic multiple choice (an object's colour, four lettered choices).
  Variables: ``answer_pointer`` (which choice is right) and ``answer`` (its letter). Positions:
  the correct choice's colour word and the last token.
- `planted_task`: ``out = a + b + c`` (digits 0..4) through the planted variable ``s = a + b``,
  on the token prompt ``a b c =`` of the model that `neuroneval.torch.causal` trains.

Examples
--------
>>> task = ioi_task()
>>> base = task.draw(1, seed=0)[0]
>>> task.prompt(base)[0]
'The store Henry and Nancy went to had a ring. Henry gave it to'
>>> task.model.run(base)["output_token"]
'Nancy'
>>> [d.name for d in task.datasets(4, seed=0)]
['output_position/s2-flip', 'output_position/new-names-flipped', 'output_token/new-names', 'output_token/new-names-flipped']
>>> data = task.datasets(4, seed=0)[0]
>>> task.prompt(data.sources[1])[0], data.expected[1]
('Then, Michael and Eric went to the house. Michael gave a drink to', 'Eric')
"""

from __future__ import annotations

import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from .._coerce import check_integer
from ..circuits.tasks import (
    IOI_NAMES,
    IOI_OBJECTS,
    IOI_PLACES,
    IOI_TEMPLATES,
    MCQA_COLORS,
    MCQA_LETTERS,
    MCQA_OBJECTS,
    MCQA_TEMPLATE,
)
from ..errors import ParameterError, ShapeError
from ..options import SCORE_OPTIONS, Options
from .model import CausalModel, CounterfactualDataset, counterfactual_dataset

__all__ = [
    "CAUSAL_TASKS",
    "arithmetic_task",
    "LAST",
    "MCQA_COLORS",
    "MCQA_OBJECTS",
    "CausalTask",
    "ioi_task",
    "mcqa_task",
    "planted_task",
    "render",
]

Setting = dict[str, Any]
#: The name of the last token's position, which every task has.
LAST = "last"
IntArray = npt.NDArray[np.int64]


def render(template: str, values: dict[str, Any]) -> tuple[str, dict[str, list[int]]]:
    """`template` with its ``{fields}`` filled from `values`, and where each field's text ends in the
    result (character offsets, one per occurrence).

    >>> render("{x} and {y}, {x}", {"x": "Ann", "y": "Bo"})
    ('Ann and Bo, Ann', {'x': [3, 15], 'y': [10]})
    """
    out: list[str] = []
    ends: dict[str, list[int]] = {}
    at = 0
    for literal, name, _, _ in string.Formatter().parse(template):
        out.append(literal)
        at += len(literal)
        if name is not None:
            text = str(values[name])
            out.append(text)
            at += len(text)
            ends.setdefault(name, []).append(at)
    return "".join(out), ends


@dataclass(frozen=True)
class CausalTask:
    """A task of the causal-variable track.

    Attributes
    ----------
    name : str
    model : CausalModel
    sample : callable (numpy.random.Generator) -> dict
        One base setting.
    counterfactuals : tuple of (dataset name, variable, source rule)
        Each rule draws a source for a base: ``rule(rng, base) -> setting``.
    show : callable (setting) -> (text, {position name: end offset})
        The prompt of a setting and where each named position's word ends in it.
    answer_text : callable (output) -> str
        The output as the text of the model's next token (its leading space included).
    positions : tuple of str
        The named positions (the last token's, `LAST`, always among them).
    """

    name: str
    model: CausalModel
    sample: Callable[[np.random.Generator], Setting]
    counterfactuals: tuple[tuple[str, str, Callable[[np.random.Generator, Setting], Setting]], ...]
    show: Callable[[Setting], tuple[str, dict[str, int]]]
    answer_text: Callable[[Any], str]
    positions: tuple[str, ...]

    @property
    def variables(self) -> tuple[str, ...]:
        """The variables with a counterfactual dataset, in order."""
        return tuple(dict.fromkeys(v for _, v, _ in self.counterfactuals))

    def draw(self, n: int, *, seed: int | None = None) -> list[Setting]:
        """`n` base settings (seeded)."""
        count = check_integer(n, "n", minimum=1)
        rng = np.random.default_rng(TASK_SEED.resolve(seed=seed)["seed"])
        return [self.sample(rng) for _ in range(count)]

    def datasets(
        self, n: int, *, seed: int | None = None, variables: Sequence[str] | None = None
    ) -> list[CounterfactualDataset]:
        """One counterfactual dataset of `n` pairs per rule (of `variables`, default all), each on
        its own seeded draw of bases and sources; expected outputs from the causal model."""
        wanted = self.variables if variables is None else tuple(variables)
        for v in wanted:
            if v not in self.variables:
                raise ParameterError(
                    f"task {self.name!r} has counterfactual datasets for {', '.join(self.variables)}; got {v!r}"
                )
        count = check_integer(n, "n", minimum=1)
        base_seed = TASK_SEED.resolve(seed=seed)["seed"]
        out = []
        for j, (name, variable, rule) in enumerate(self.counterfactuals):
            if variable not in wanted:
                continue
            rng = np.random.default_rng([base_seed, j])
            bases = [self.sample(rng) for _ in range(count)]
            sources = [rule(rng, b) for b in bases]
            out.append(counterfactual_dataset(self.model, variable, bases, sources, name=f"{variable}/{name}"))
        return out

    def prompt(self, setting: Setting) -> tuple[str, dict[str, int]]:
        """The prompt of `setting` and the end offset of each named position's word."""
        return self.show(setting)

    def token_positions(
        self, setting: Setting, tokenize: Callable[[str], Sequence[int]]
    ) -> tuple[IntArray, dict[str, int]]:
        """The prompt's token ids through `tokenize` and the token index of each of `positions`
        (a word's position is its last token's).

        Raises
        ------
        ShapeError
            The tokens of the prompt up to a marked word are not a prefix of the prompt's tokens
            (the tokenizer joins the word to what follows), so its position is not defined.
        """
        text, marks = self.show(setting)
        ids = np.asarray(list(tokenize(text)), dtype=np.int64)
        if ids.ndim != 1 or ids.size == 0:
            raise ShapeError(f"task {self.name!r}: the prompt {text!r} tokenizes to no token")
        where = {LAST: int(ids.size - 1)}
        for pos, end in marks.items():
            head = np.asarray(list(tokenize(text[:end])), dtype=np.int64)
            if head.size == 0 or head.size > ids.size or not np.array_equal(head, ids[: head.size]):
                raise ShapeError(
                    f"task {self.name!r}: the tokens of {text[:end]!r} are not a prefix of the prompt's, so "
                    f"position {pos!r} has no token of its own"
                )
            where[pos] = int(head.size - 1)
        return ids, where


TASK_SEED = Options(SCORE_OPTIONS["seed"])


# --------------------------------------------------------------------------- IOI


def _ioi_model() -> CausalModel:
    return CausalModel(
        "ioi",
        inputs=("template", "n1", "n2", "s2", "place", "object"),
        mechanisms=(
            ("output_position", ("n1", "n2", "s2"), lambda n1, n2, s2: 1 if s2 == n1 else 0),
            ("output_token", ("n1", "n2", "output_position"), lambda n1, n2, p: (n1, n2)[p]),
            ("output", ("output_token",), lambda t: t),
        ),
    )


def _ioi_sample(rng: np.random.Generator) -> Setting:
    template = int(rng.integers(len(IOI_TEMPLATES)))
    n1, n2 = (IOI_NAMES[int(i)] for i in rng.choice(len(IOI_NAMES), size=2, replace=False))
    return {
        "template": template,
        "n1": n1,
        "n2": n2,
        "s2": n1 if rng.integers(2) == 0 else n2,
        "place": IOI_PLACES[int(rng.integers(len(IOI_PLACES)))],
        "object": IOI_OBJECTS[int(rng.integers(len(IOI_OBJECTS)))],
    }


def _new_names(rng: np.random.Generator, base: Setting, *, flip: bool) -> Setting:
    """The base with two names it does not use, the repeated one at the same (or, `flip`, the other) place."""
    pool = [n for n in IOI_NAMES if n not in (base["n1"], base["n2"])]
    n1, n2 = (pool[int(i)] for i in rng.choice(len(pool), size=2, replace=False))
    first = base["s2"] == base["n1"]
    return {**base, "n1": n1, "n2": n2, "s2": n1 if first != flip else n2}


def _s2_flip(rng: np.random.Generator, base: Setting) -> Setting:
    return {**base, "s2": base["n2"] if base["s2"] == base["n1"] else base["n1"]}


def _ioi_show(setting: Setting) -> tuple[str, dict[str, int]]:
    text, ends = render(
        IOI_TEMPLATES[setting["template"]],
        {
            "x": setting["n1"],
            "y": setting["n2"],
            "s2": setting["s2"],
            "place": setting["place"],
            "object": setting["object"],
        },
    )
    io_field = "y" if setting["s2"] == setting["n1"] else "x"
    return text, {"io": ends[io_field][0], "s2": ends["s2"][0]}


def ioi_task() -> CausalTask:
    """Indirect-object identification as a causal model (`IOI_TEMPLATES`' prompts, MIB's variables)."""
    return CausalTask(
        "ioi",
        _ioi_model(),
        _ioi_sample,
        (
            ("s2-flip", "output_position", _s2_flip),
            ("new-names-flipped", "output_position", lambda rng, b: _new_names(rng, b, flip=True)),
            ("new-names", "output_token", lambda rng, b: _new_names(rng, b, flip=False)),
            ("new-names-flipped", "output_token", lambda rng, b: _new_names(rng, b, flip=True)),
        ),
        _ioi_show,
        lambda token: f" {token}",
        ("io", "s2", LAST),
    )


# --------------------------------------------------------------------------- arithmetic


def _arithmetic_model() -> CausalModel:
    return CausalModel(
        "arithmetic",
        inputs=("a", "b", "shots"),
        mechanisms=(("output", ("a", "b"), lambda a, b: a + b),),
    )


def _shot(rng: np.random.Generator) -> tuple[int, int]:
    total = int(rng.integers(10))
    a = int(rng.integers(total + 1))
    return a, total - a


def _arithmetic_sample(rng: np.random.Generator) -> Setting:
    """Operands of a single-digit sum, each at most 8 so that the other operand can change."""
    a, b = _shot(rng)
    while max(a, b) == 9:
        a, b = _shot(rng)
    return {"a": a, "b": b, "shots": (_shot(rng), _shot(rng))}


def _other_operand(rng: np.random.Generator, base: Setting, name: str, *, both: bool) -> Setting:
    """The base with another value of operand `name` (and, `both`, of the other operand too),
    every sum of the pair and of its interchange a single digit."""
    other = "b" if name == "a" else "a"
    while True:
        value = int(rng.integers(10))
        kept = int(rng.integers(10)) if both else base[other]
        if value != base[name] and value + base[other] <= 9 and value + kept <= 9:
            return {**base, name: value, other: kept}


def _arithmetic_show(setting: Setting) -> tuple[str, dict[str, int]]:
    (x1, y1), (x2, y2) = setting["shots"]
    text, ends = render(
        "{x1} + {y1} = {z1}\n{x2} + {y2} = {z2}\n{a} + {b} = ",
        {"x1": x1, "y1": y1, "z1": x1 + y1, "x2": x2, "y2": y2, "z2": x2 + y2, "a": setting["a"], "b": setting["b"]},
    )
    return text, {"a": ends["a"][0], "b": ends["b"][0]}


def arithmetic_task() -> CausalTask:
    """Two-operand addition (single-digit sums) after two solved examples, the answer digit
    without a space (SmolLM2's tokenizer splits a digit from the space before it)."""
    return CausalTask(
        "arithmetic",
        _arithmetic_model(),
        _arithmetic_sample,
        (
            ("other-a", "a", lambda rng, b: _other_operand(rng, b, "a", both=False)),
            ("other-a-and-b", "a", lambda rng, b: _other_operand(rng, b, "a", both=True)),
            ("other-b", "b", lambda rng, b: _other_operand(rng, b, "b", both=False)),
            ("other-a-and-b", "b", lambda rng, b: _other_operand(rng, b, "b", both=True)),
        ),
        _arithmetic_show,
        str,
        ("a", "b", LAST),
    )


# --------------------------------------------------------------------------- MCQA

#: MIB's MCQA builds an object, its colour and four coloured choices; colours that are one token
#: after a space in SmolLM2's tokenizer.


def _mcqa_model() -> CausalModel:
    return CausalModel(
        "mcqa",
        inputs=("object", "color", "choices", "letters"),
        mechanisms=(
            ("answer_pointer", ("color", "choices"), lambda color, choices: choices.index(color)),
            ("answer", ("answer_pointer", "letters"), lambda p, letters: letters[p]),
            ("output", ("answer",), lambda a: a),
        ),
    )


def _mcqa_sample(rng: np.random.Generator) -> Setting:
    colors = tuple(MCQA_COLORS[int(i)] for i in rng.choice(len(MCQA_COLORS), size=4, replace=False))
    return {
        "object": MCQA_OBJECTS[int(rng.integers(len(MCQA_OBJECTS)))],
        "color": colors[int(rng.integers(4))],
        "choices": colors,
        "letters": MCQA_LETTERS,
    }


def _mcqa_move(rng: np.random.Generator, base: Setting) -> Setting:
    """The same question with the correct colour moved to another choice (MIB's answer-position change)."""
    choices = list(base["choices"])
    here = choices.index(base["color"])
    there = int(rng.integers(3))
    there += there >= here
    choices[here], choices[there] = choices[there], choices[here]
    return {**base, "choices": tuple(choices)}


def _mcqa_letters(rng: np.random.Generator, base: Setting) -> Setting:
    """The same question with other choice letters and the correct choice moved."""
    moved = _mcqa_move(rng, base)
    pool = [c for c in string.ascii_uppercase if c not in base["letters"]]
    letters = tuple(pool[int(i)] for i in np.sort(rng.choice(len(pool), size=4, replace=False)))
    return {**moved, "letters": letters}


def _mcqa_show(setting: Setting) -> tuple[str, dict[str, int]]:
    values: dict[str, Any] = {"object": setting["object"], "color": setting["color"]}
    for i in range(4):
        values[f"l{i}"] = setting["letters"][i]
        values[f"c{i}"] = setting["choices"][i]
    text, ends = render(MCQA_TEMPLATE, values)
    right = setting["choices"].index(setting["color"])
    return text, {"correct_choice": ends[f"c{right}"][0]}


def mcqa_task() -> CausalTask:
    """MIB's synthetic multiple choice as a causal model: the answer pointer, then its letter."""
    return CausalTask(
        "mcqa",
        _mcqa_model(),
        _mcqa_sample,
        (
            ("answer-moved", "answer_pointer", _mcqa_move),
            ("answer-moved-letters", "answer_pointer", _mcqa_letters),
            ("answer-moved", "answer", _mcqa_move),
            ("other-letters", "answer", _mcqa_letters),
        ),
        _mcqa_show,
        lambda letter: f" {letter}",
        ("correct_choice", LAST),
    )


# --------------------------------------------------------------------------- the planted task

#: The planted task's digits are 0..PLANTED_DIGITS-1.
PLANTED_DIGITS = 5


def _planted_model() -> CausalModel:
    return CausalModel(
        "planted",
        inputs=("a", "b", "c"),
        mechanisms=(("s", ("a", "b"), lambda a, b: a + b), ("output", ("s", "c"), lambda s, c: s + c)),
    )


def _planted_sample(rng: np.random.Generator) -> Setting:
    a, b, c = (int(v) for v in rng.integers(0, PLANTED_DIGITS, 3))
    return {"a": a, "b": b, "c": c}


def _planted_other_s(rng: np.random.Generator, base: Setting) -> Setting:
    """A fresh draw whose s differs from the base's."""
    while True:
        source = _planted_sample(rng)
        if source["a"] + source["b"] != base["a"] + base["b"]:
            return source


def _planted_show(setting: Setting) -> tuple[str, dict[str, int]]:
    text, ends = render("{a} {b} {c} =", setting)
    return text, {"a": ends["a"][0], "b": ends["b"][0], "c": ends["c"][0]}


def planted_task() -> CausalTask:
    """The planted model's task: ``a b c =`` answered by ``a + b + c``, through the variable
    ``s = a + b``."""
    return CausalTask(
        "planted",
        _planted_model(),
        _planted_sample,
        (
            ("other-s", "s", _planted_other_s),
            ("other-s-same-c", "s", lambda rng, b: {**_planted_other_s(rng, b), "c": b["c"]}),
        ),
        _planted_show,
        str,
        ("a", "b", "c", LAST),
    )


#: The tasks by name.
CAUSAL_TASKS: dict[str, Callable[[], CausalTask]] = {
    "ioi": ioi_task,
    "arithmetic": arithmetic_task,
    "mcqa": mcqa_task,
    "planted": planted_task,
}
