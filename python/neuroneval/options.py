"""Declared options: each parameter of the library is declared once, here or in the core.

An `Option` holds a parameter's name, kind, default, domain and help. A group of them
(`Options`) is the one door of a function's keyword arguments (`resolve`: None stands for
the default, every value is checked against its declaration and refused with the same
`ParameterError` wording as the core's) and of a command's flags (`add_arguments`: the flag,
its converter and a help text that shows the declared default and domain). The hostile tests
generate their cases from the same declarations (`Option.boundaries`).

The scoring parameters are the core's (`SCORE_OPTIONS`, from `Params::RULES`); the core checks
them, so their `check` calls it.

>>> SCORE_OPTIONS["k"].default
25
>>> SCORE_OPTIONS["alpha"].domain_text()
'in (0, 1]'
>>> share = Option("share", "real", 0.5, "the share kept", low=0.0, low_open=True, high=1.0)
>>> share.check(0.25)
0.25
>>> share.check(0)
Traceback (most recent call last):
...
neuroneval.errors.ParameterError: invalid parameter share = 0: share must be a real number with 0 < share <= 1
>>> Options(share).resolve(share=None)
{'share': 0.5}
"""

from __future__ import annotations

import argparse
import math
import numbers
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from ._core import ScoreParams, score_param_rules
from .errors import ParameterError

__all__ = ["LEVEL", "SCORE_OPTIONS", "Option", "Options", "value_error"]

Kind = Literal["real", "integer", "choice", "flag", "text"]


def _type_phrase(value: Any) -> str:
    """'a str', 'an int', 'a numpy.float64': as the core says it."""
    t = type(value)
    name = t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _short(value: Any) -> str:
    """repr(value) on one line, at most 60 characters (as the core quotes a value)."""
    try:
        text = " ".join(repr(value).split())
    except Exception:  # noqa: BLE001 - a value whose repr fails is still named
        text = "<unprintable>"
    return text if len(text) <= 60 else text[:60] + "..."


def value_error(name: str, value: Any, rule: str) -> ParameterError:
    """The one wording of a refused parameter: 'invalid parameter NAME = VALUE: RULE'."""
    return ParameterError(f"invalid parameter {name} = {_short(value)}: {rule}")


def _number(x: float) -> str:
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 2.0**64:
        return "2^64"
    return f"{x:g}" if x != int(x) or abs(x) >= 1e16 else str(int(x))


@dataclass(frozen=True)
class Option:
    """One parameter: name, kind, default, domain and help.

    `kind` is "real" (a `numbers.Real`, never a bool), "integer" (a `numbers.Integral`, never
    a bool or a float), "choice" (one of `choices`), "flag" (a bool) or "text" (a non-empty
    str). A number's domain is the interval from `low` to `high`, each end open or closed.
    `optional`: None is a value of its own (e.g. "no limit"), and the default. `word`: a
    number option that also takes this one word. `check_with`
    replaces the generic check when another layer owns the rule (the core's parameters).
    """

    name: str
    kind: Kind
    default: Any
    help: str
    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    choices: tuple[str, ...] = ()
    optional: bool = False
    #: A number option may also take this word, which stands for a rule of its own (crowd's
    #: eta='estimate', prior='model'); its flag takes either.
    word: str = ""
    rule: str = ""
    flag: str = ""
    metavar: str | None = None
    check_with: Callable[[Any], Any] | None = field(default=None, compare=False, repr=False)
    #: The rule as written from the domain; while `rule` is that text, a copy with another
    #: domain (`dataclasses.replace`) writes it again.
    domain_rule: str = field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.flag:
            object.__setattr__(self, "flag", "--" + self.name.replace("_", "-"))
        if not self.rule or self.rule == self.domain_rule:
            object.__setattr__(self, "domain_rule", f"{self.name} must be {self._kind_text()}")
            object.__setattr__(self, "rule", self.domain_rule)
        if self.optional and self.default is not None:
            raise ValueError(f"{self.name}: an option that takes None must default to None")

    # ------------------------------------------------------------------ the domain

    def domain_text(self) -> str:
        """'in (0, 1]', '>= 1', 'one of a, b': the domain in a few words ('' when any value goes)."""
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices)
        if self.kind not in ("real", "integer"):
            return ""
        lo, hi = self.low, self.high
        if math.isinf(lo) and math.isinf(hi):
            return ""
        if math.isinf(hi):
            return f"{'>' if self.low_open else '>='} {_number(lo)}"
        if math.isinf(lo):
            return f"{'<' if self.high_open else '<='} {_number(hi)}"
        return f"in {'(' if self.low_open else '['}{_number(lo)}, {_number(hi)}{')' if self.high_open else ']'}"

    def _kind_text(self) -> str:
        text = self._number_text()
        return f"{text} or {self.word!r}" if self.word else text

    def _number_text(self) -> str:
        if self.kind == "choice":
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.kind == "flag":
            return "a bool"
        if self.kind == "text":
            return "a non-empty str"
        noun = "a real number" if self.kind == "real" else "an integer"
        lo, hi = self.low, self.high
        if not math.isinf(lo) and not math.isinf(hi):
            return (
                f"{noun} with {_number(lo)} {'<' if self.low_open else '<='} {self.name} "
                f"{'<' if self.high_open else '<='} {_number(hi)}"
            )
        noun = "a finite real number" if self.kind == "real" else noun
        return f"{noun} {self.domain_text()}".rstrip()

    def contains(self, value: float) -> bool:
        """Whether a number lies in the domain (NaN and the infinities never do)."""
        if not math.isfinite(value):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return bool(above and below)

    # ------------------------------------------------------------------ checking

    def check(self, value: Any) -> Any:
        """`value` as the parameter holds it, or a `ParameterError` naming it."""
        if value is None and self.optional:
            return None
        if self.word and isinstance(value, str) and value == self.word:
            return value
        if self.check_with is not None:
            return self.check_with(value)
        if self.kind in ("real", "integer"):
            integral = self.kind == "integer"
            abc = numbers.Integral if integral else numbers.Real
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, abc):
                raise value_error(self.name, value, f"{self.rule}, not {_type_phrase(value)}")
            number: Any = value
            held: Any = int(number) if integral else float(number)
            if not self.contains(held):
                raise value_error(self.name, value, self.rule)
            return held
        if self.kind == "flag":
            if not isinstance(value, (bool, np.bool_)):
                raise value_error(self.name, value, f"{self.rule}, not {_type_phrase(value)}")
            return bool(value)
        if not isinstance(value, str):
            raise value_error(self.name, value, f"{self.rule}, not {_type_phrase(value)}")
        if (self.kind == "choice" and value not in self.choices) or (self.kind == "text" and not value.strip()):
            raise value_error(self.name, value, self.rule)
        return value

    def boundaries(self) -> tuple[list[Any], list[Any]]:
        """(accepted, refused): the values at and just past each end of the domain, for the
        hostile tests; the ends themselves where they are closed."""
        if self.kind == "choice":
            return list(self.choices), ["", self.choices[0].upper() + "?"]
        if self.kind not in ("real", "integer"):
            return [], []
        accepted: list[Any] = [self.word] if self.word else []
        refused: list[Any] = [math.nan] if self.kind == "real" else []
        step = (lambda x, d: x + d) if self.kind == "integer" else (lambda x, d: math.nextafter(x, x + d))
        cast = int if self.kind == "integer" else float
        for end, is_open, inward in ((self.low, self.low_open, 1), (self.high, self.high_open, -1)):
            if math.isinf(end):
                if self.kind == "real":
                    refused.append(-inward * math.inf)
                continue
            (refused if is_open else accepted).append(cast(end))
            (accepted if is_open else refused).append(step(cast(end), inward if is_open else -inward))
        return accepted, refused

    # ------------------------------------------------------------------ the command line

    def help_text(self) -> str:
        """The help, then the default and the domain: 'top fraction (default 0.002; in (0, 1])'."""
        default = "none" if self.default is None else self.default
        notes = [f"default {default}"] if self.kind != "flag" else []
        if self.domain_text() and self.kind != "choice":
            notes.append(self.domain_text())
        return f"{self.help} ({'; '.join(notes)})" if notes else self.help

    def converter(self) -> Callable[[str], Any]:
        """A flag's text as a value of the right kind (argparse says when it is not one:
        "invalid int value: '2.5'"); the domain is checked where the API checks it."""
        number: Callable[[str], Any] = {"integer": int, "real": float}.get(self.kind, str)
        if not self.word:
            return number
        word = self.word

        def number_or_word(text: str) -> Any:
            return word if text.strip() == word else number(text)

        number_or_word.__name__ = f"number or {word!r}"  # argparse: "invalid number or 'model' value: 'x'"
        return number_or_word

    def add_argument(self, parser: argparse.ArgumentParser | Any, **overrides: Any) -> None:
        """The flag: default None (the library fills in the declared default, so a value is
        checked in one place and its error reads the same from the API and the CLI)."""
        if self.kind == "flag":
            action = "store_false" if self.default else "store_true"
            parser.add_argument(self.flag, dest=self.name, action=action, help=self.help, **overrides)
            return
        choices = self.choices if self.kind == "choice" else None
        parser.add_argument(
            self.flag,
            dest=self.name,
            type=self.converter(),
            choices=choices,
            default=None,
            metavar=self.metavar or {"integer": "N", "real": "X"}.get(self.kind),
            help=self.help_text(),
            **overrides,
        )


class Options(Mapping[str, Option]):
    """An ordered group of options: a function's keyword door and a command's flags."""

    def __init__(self, *options: Option) -> None:
        self._options = {o.name: o for o in options}
        #: The module that declared the group (for a group derived by `only`, `but`, ...: the
        #: module that derived it).
        frame = sys._getframe(1)
        while frame.f_back is not None and frame.f_code.co_name in _DERIVING:
            frame = frame.f_back
        self.declared_in: str = frame.f_globals.get("__name__", "")

    def __getitem__(self, name: str) -> Option:
        return self._options[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._options)

    def __len__(self) -> int:
        return len(self._options)

    def __add__(self, other: Options) -> Options:
        return Options(*self.values(), *other.values())

    def only(self, *names: str) -> Options:
        return Options(*(self[n] for n in names))

    def but(self, *names: str) -> Options:
        return Options(*(o for o in self.values() if o.name not in names))

    def with_defaults(self, **defaults: Any) -> Options:
        """The same options with other defaults (a command whose task needs its own)."""
        return Options(*(replace(o, default=defaults[o.name]) if o.name in defaults else o for o in self.values()))

    def defaults(self) -> dict[str, Any]:
        return {n: o.default for n, o in self.items()}

    def resolve(self, **given: Any) -> dict[str, Any]:
        """Every option's value: the given one checked, or the default where it is None."""
        unknown = set(given) - set(self)
        if unknown:
            raise TypeError(f"unexpected option {sorted(unknown)[0]!r}; the options are {', '.join(self)}")
        return {
            name: option.default if given.get(name) is None else option.check(given[name])
            for name, option in self.items()
        }

    def add_arguments(self, parser: argparse.ArgumentParser | Any) -> None:
        for option in self.values():
            option.add_argument(parser)

    def from_args(self, args: argparse.Namespace) -> dict[str, Any]:
        """The options' values on a parsed command line (None where the flag was not given)."""
        return {name: getattr(args, name, None) for name in self}


_DERIVING = {"only", "but", "with_defaults", "__add__"}


def _core_option(
    name: str, kind: str, default: float, domain: tuple[float, bool, float, bool], rule: str, help: str
) -> Option:
    low, low_open, high, high_open = domain
    integral = kind == "integer"
    return Option(
        name,
        "integer" if integral else "real",
        int(default) if integral else default,
        help,
        low=low,
        low_open=low_open,
        high=high,
        high_open=high_open,
        rule=rule,
        check_with=lambda value: getattr(ScoreParams(**{name: value}), name),
    )


#: The confidence level of an interval: one declaration for every interval of the library (crowd's
#: estimates, the sanity checks' bootstrap, compare's intervals, which call it `confidence`).
LEVEL = Option("level", "real", 0.95, "confidence level", low=0.0, low_open=True, high=1.0, high_open=True)

#: The five scoring parameters, declared in the core (`Params::RULES`) and checked by it.
SCORE_OPTIONS = Options(*(_core_option(*rule) for rule in score_param_rules()))


def score_params(params: ScoreParams | None = None, **given: Any) -> ScoreParams:
    """`params` (default `ScoreParams()`) with the given keyword values, None meaning unchanged."""
    base = ScoreParams() if params is None else params
    if not isinstance(base, ScoreParams):
        raise ParameterError(f"params must be a ScoreParams; got {_short(base)}")
    return base.replace(**{k: v for k, v in given.items() if v is not None}) if given else base


def names(options: Iterable[Option]) -> list[str]:
    return [o.name for o in options]
