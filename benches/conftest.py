"""Fixtures of the benchmark suites: the workload, built once per session and never timed.

Sizes are small unless NEURONEVAL_BENCH_FULL=1 (see _workload.py). The size's name is part
of every benchmark's id ("[auc-small]", "[auc-full]"), so saved baselines of one size are
only ever compared with runs of the same size.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _workload import Size, Workload, bench_size, make_workload, threads_line, time_matmul  # noqa: E402

SIZE = bench_size()


def pytest_report_header(config: Any) -> list[str]:
    return [f"neuroneval benches: {SIZE.name} size, {SIZE.describe()}; {threads_line()}"]


@pytest.fixture(scope="session", params=[SIZE], ids=[SIZE.name])
def size(request: pytest.FixtureRequest) -> Size:
    s: Size = request.param
    return s


@pytest.fixture(scope="session")
def workload(size: Size) -> Workload:
    return make_workload(size)


@pytest.fixture(scope="session")
def matmul_seconds(workload: Workload) -> dict[str, float]:
    """The named peer of the product metrics and of the score call, timed in this run:
    numpy.matmul(A.T, C) of the workload's shapes in float64 and float32."""
    return time_matmul(workload, rounds=workload.size.rounds)
