"""Test collection: the torch-only modules' doctests need torch, which is an optional extra.

Row-major files of several blocks take the scratch copy in every test (the path of a file
too large for memory), unless a test asks for the in-memory read (`whole_file_reads`); and
every `.npy` file is read past the page cache, as large files are."""

import importlib.util

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
