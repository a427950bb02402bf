"""Every option is declared once (`neuroneval.options`), and everything follows the declaration.

The declarations are found, not listed: every module-level `Options` of the library and the
command line. From each option's declared domain the tests generate the cases that must be
refused (just past each end, NaN and the infinities, values of the wrong type) and those that
must be kept (the closed ends), so an option is tested the day it is declared. A scan of the
code checks that no function's signature and no command-line flag re-types a declared default,
and the help of each command shows the declared defaults and domains.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import neuroneval
import numpy as np
import pytest
from neuroneval import errors
from neuroneval.options import SCORE_OPTIONS, Option, Options

PACKAGE = Path(neuroneval.__file__).parent
# The library and the command line; the experiments and the torch tools are not an API with defaults of their own.
SKIPPED = ("experiments",)


def _module_names() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        if rel.parts[1:2] and rel.parts[1] in SKIPPED:
            continue
        parts = list(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        names.append(".".join(parts))
    return names


def declared() -> dict[str, Options]:
    """Every module-level `Options` of the library and the command line, by 'module.NAME'."""
    found: dict[str, Options] = {}
    seen: set[int] = set()
    for name in _module_names():
        try:
            module = importlib.import_module(name)
        except ImportError:  # a module of an extra that is not installed
            continue
        for attr, value in vars(module).items():
            if isinstance(value, Options) and value.declared_in == name and id(value) not in seen:
                seen.add(id(value))
                found[f"{name}.{attr}"] = value
    return found


DECLARED = declared()
OPTIONS: list[Option] = [o for group in DECLARED.values() for o in group.values()]
UNIQUE = {(o.name, o.kind, repr(o.default), o.low, o.high, o.low_open, o.high_open, o.choices): o for o in OPTIONS}

# Values that are no number at all: refused by every numeric option, naming their type.
NOT_NUMBERS: list[Any] = [
    True,
    np.bool_(False),
    "1",
    b"1",
    0.5j,
    np.array([1]),
    np.array(1),
    [1],
    object(),
    Decimal("1"),
]


def _cases(kind: str) -> Iterator[Any]:
    for option in UNIQUE.values():
        accepted, refused = option.boundaries()
        values = accepted if kind == "accepted" else refused
        if kind == "wrong type":
            values = list(NOT_NUMBERS) if option.kind in ("real", "integer") else [1, 1.5]
            if option.kind == "integer":
                values += [2.0, np.float64(3.0)]
        for i, value in enumerate(values):
            shown = repr(value) if isinstance(value, (int, float, str)) else type(value).__name__
            yield pytest.param(option, value, id=f"{option.name}-{i}-{shown}"[:60])


def test_declarations_are_found() -> None:
    assert "neuroneval.options.SCORE_OPTIONS" in DECLARED
    for option in OPTIONS:
        assert option.help and option.help[0].islower() or option.help[:2].isupper(), option
        assert option.default is None or option.check(option.default) == option.default, option


@pytest.mark.parametrize(("option", "value"), list(_cases("refused")))
def test_values_past_the_domain_are_refused(option: Option, value: Any) -> None:
    with pytest.raises(errors.ParameterError) as info:
        option.check(value)
    message = str(info.value)
    assert message.startswith(f"invalid parameter {option.name} = "), message
    assert message.endswith(option.rule), message


@pytest.mark.parametrize(("option", "value"), list(_cases("wrong type")))
def test_values_of_another_type_are_refused_naming_it(option: Option, value: Any) -> None:
    with pytest.raises(errors.ParameterError) as info:
        option.check(value)
    message = str(info.value)
    assert message.startswith(f"invalid parameter {option.name} = "), message
    assert f"{option.rule}, not a" in message, message


@pytest.mark.parametrize(("option", "value"), list(_cases("accepted")))
def test_values_at_the_closed_ends_are_kept(option: Option, value: Any) -> None:
    held = option.check(value)
    assert held == value and type(held) is type(value), (held, value)


@pytest.mark.parametrize("group", list(DECLARED), ids=list(DECLARED))
def test_resolve_fills_defaults_and_names_unknown_options(group: str) -> None:
    options = DECLARED[group]
    assert options.resolve() == options.defaults()
    assert options.resolve(**{n: None for n in options}) == options.defaults()
    with pytest.raises(TypeError, match="unexpected option 'no_such_option'"):
        options.resolve(no_such_option=1)


def test_score_options_are_the_cores() -> None:
    defaults = neuroneval.ScoreParams().to_dict()
    assert SCORE_OPTIONS.defaults() == defaults
    for option in SCORE_OPTIONS.values():
        assert type(option.default) is type(defaults[option.name])
        # the core's rule and the declared domain agree at every generated value
        accepted, refused = option.boundaries()
        for value in accepted:
            assert getattr(neuroneval.ScoreParams(**{option.name: value}), option.name) == value
        for value in refused:
            with pytest.raises(errors.ParameterError):
                neuroneval.ScoreParams(**{option.name: value})


# --------------------------------------------------------------------------- one home for each default


def _literal(node: ast.expr | None) -> bool:
    """A default typed again: a constant other than None (a number, a str, a bool), or a module
    constant such as DEFAULT_ALPHA (a closure's `alpha=alpha` binds a value, it declares nothing)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    if isinstance(node, ast.Constant):
        return node.value is not None
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return name.isupper()


def _retyped_defaults() -> Iterator[str]:
    names = {o.name for o in OPTIONS}
    flags = {o.flag for o in OPTIONS}
    for module in _module_names():
        path = PACKAGE.parent.joinpath(*module.split("."))
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = f"{path.relative_to(PACKAGE.parent)}"
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                args = node.args
                positional = args.posonlyargs + args.args
                pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True))
                pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
                for arg, default in pairs:
                    if arg.arg in names and _literal(default):
                        yield f"{where}:{node.lineno} {node.name}({arg.arg}={ast.unparse(default)})"
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument" and node.args:
                flag = node.args[0]
                if isinstance(flag, ast.Constant) and flag.value in flags:
                    for kw in node.keywords:
                        if kw.arg == "default" and _literal(kw.value):
                            yield f"{where}:{node.lineno} add_argument({flag.value!r}, default={ast.unparse(kw.value)})"


def test_no_public_signature_or_flag_retypes_a_declared_default() -> None:
    retyped = list(_retyped_defaults())
    assert not retyped, "declared defaults typed again:\n" + "\n".join(retyped)


# --------------------------------------------------------------------------- the command line


def test_every_flag_of_a_declared_option_shows_its_default_and_domain() -> None:
    from neuroneval.cli.app import parser

    seen = 0
    stack = [parser()]
    while stack:
        p = stack.pop()
        for action in p._actions:
            if isinstance(getattr(action, "choices", None), dict):
                stack.extend(action.choices.values())
            # the declarations this flag may come from (options of one name in several groups)
            candidates = [
                o for o in OPTIONS if o.flag in action.option_strings and action.dest == o.name and o.kind != "flag"
            ]
            if candidates:
                seen += 1
                assert action.default is None, (p.prog, action.option_strings)
                assert action.help is not None and "default" in action.help, (p.prog, action.help)
                assert any(o.domain_text() in action.help or o.kind == "choice" for o in candidates), (
                    p.prog,
                    action.help,
                )
    assert seen >= len(SCORE_OPTIONS)


def test_a_parameter_error_reads_the_same_from_the_api_and_the_cli(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from neuroneval.cli import main

    a = np.random.default_rng(0).normal(size=(20, 2)).astype(np.float32)
    c = (np.random.default_rng(1).random((20, 2)) < 0.5).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "c.npy", c)
    for option in SCORE_OPTIONS.values():
        value = option.boundaries()[1][-1]
        with pytest.raises(errors.ParameterError) as info:
            neuroneval.score(a, c, ["recall"], **{option.name: value})
        text = str(value) if option.kind == "integer" else repr(float(value))
        code = main(
            [
                "score",
                str(tmp_path / "a.npy"),
                str(tmp_path / "c.npy"),
                "--out",
                str(tmp_path / "s.parquet"),
                option.flag,
                text,
            ]
        )
        err = capsys.readouterr().err
        assert code == 2
        assert str(info.value) in err, (err, str(info.value))
        assert not (tmp_path / "s.parquet").exists()
