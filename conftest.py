"""Test collection: the torch-only modules' doctests need torch, which is an optional extra.

Row-major files of several blocks take the scratch copy in every test (the path of a file
too large for memory), unless a test asks for the in-memory read (`whole_file_reads`); and
every `.npy` file is read past the page cache, as large files are."""

import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest

collect_ignore: list[str] = []
if importlib.util.find_spec("torch") is None:
    collect_ignore += ["python/neuroneval/torch.py", "python/neuroneval/demo.py"]


@pytest.fixture(autouse=True)
def _scratch_for_small_files(monkeypatch: pytest.MonkeyPatch) -> None:
    from neuroneval import _direct, _evaluate

    monkeypatch.setattr(_evaluate, "WHOLE_FILE_BYTES", 0)
    monkeypatch.setattr(_direct, "DIRECT_READ_BYTES", 0)


@pytest.fixture
def whole_file_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Row-major files of up to 1 GiB are read whole into memory, as by default."""
    from neuroneval import _evaluate

    monkeypatch.setattr(_evaluate, "WHOLE_FILE_BYTES", 1 << 30)


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """Torch on one thread for a module's tests (`pytestmark = pytest.mark.usefixtures("one_thread")`): on this 2-CPU
    machine two spinning OpenMP threads make each forward pass several times slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def judge_servers() -> Iterator[Any]:
    """`judge_servers(judge, **options)` starts a `JudgeServer` of `judge` on a free port; every server
    started is stopped after the test."""
    servers: list[Any] = []

    def start(judge: Any, **options: Any) -> Any:
        from neuroneval import label as lb

        server = lb.JudgeServer(judge, port=0, **options).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
