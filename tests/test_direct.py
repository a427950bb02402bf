"""Direct (page-cache bypassing) reads and writes: the bytes are the file's bytes whatever the
piece sizes, offsets and alignment, with O_DIRECT and without."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from neuroneval import _direct


def _payload(size: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 3 * 4096 + 17, 70_001])
def test_appended_pieces_read_back_equal(tmp_path: Path, direct: bool, size: int) -> None:
    data = _payload(size, size)
    path = tmp_path / "f.bin"
    # pieces of odd sizes, some larger than the writer's buffer, so the buffer moves and grows
    cuts = sorted({0, size, *np.random.default_rng(1).integers(0, size + 1, 9).tolist()})
    with _direct.AppendWriter(path, buffer_bytes=8192, direct=direct) as w:
        for a, b in zip(cuts, cuts[1:], strict=False):
            w.reserve(b - a)[:] = np.frombuffer(data[a:b], dtype=np.uint8)
    assert path.read_bytes() == data
    out = _direct.aligned_bytes(size)
    assert out.ctypes.data % _direct.ALIGN == 0 and len(out) % _direct.ALIGN == 0
    assert _direct.read_file_into(path, out, direct=direct) == size
    assert bytes(out[:size]) == data


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("offset", [0, 128, 4095, 4096, 9000])
def test_sequential_pieces_equal_the_file(tmp_path: Path, direct: bool, offset: int) -> None:
    data = _payload(50_000, offset)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    got = []
    with _direct.SequentialReader(path, offset, direct=direct) as r:
        for n in [1, 4096, 3, 12_000, 7, 4095, 30_000, 30_000]:
            got.append(bytes(r.take(n)))
    joined = b"".join(got)
    assert joined == data[offset:]  # the last pieces stop at the end of the file
    assert len(got[-1]) < 30_000


def test_an_error_inside_the_writer_leaves_the_tail_unwritten(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    with pytest.raises(RuntimeError), _direct.AppendWriter(path, buffer_bytes=4096) as w:
        w.reserve(5000)[:] = 1  # the buffer grows to 8192 bytes
        w.reserve(5000)[:] = 2  # no room: the first whole block goes to the file
        raise RuntimeError("stop")
    # the whole block written stays; the 5,904 bytes after it never are
    assert path.read_bytes() == b"\x01" * 4096
