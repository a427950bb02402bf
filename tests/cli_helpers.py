"""Helpers shared by the command-line tests: run `neuroneval` in-process and check its errors."""

from __future__ import annotations

from typing import Any

import pytest
from neuroneval import cli


def run(argv: list[Any], capfd: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """`neuroneval <argv>` in-process: (exit code, stdout, stderr)."""
    capfd.readouterr()
    code = cli.main([str(x) for x in argv])
    out, err = capfd.readouterr()
    return code, out, err


def assert_one_line_error(code: int, err: str, expected_code: int, *fragments: str) -> None:
    """The command failed with `expected_code` and one line "neuroneval: error: ..." naming every fragment."""
    assert code == expected_code, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert err.endswith("\n")
    assert lines[0].startswith("neuroneval: error: "), lines[0]
    for fragment in fragments:
        assert fragment.lower() in lines[0].lower(), (fragment, lines[0])
